"""A job's `tags:` (`{team: data, customer: acme}`): labels an operator selects jobs by.

Each tag has an index of its own in Redis (`tag:<key>=<value>`), so a tag's name and value
end up inside key names: they follow the rule of owner and queue names. The stored form is
one text, `key=value` pairs sorted by key and joined by commas.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from jobcenter.errors import SpecError

# A tag is an index a submit writes and a trim removes: a few per job keeps both cheap.
MAX_TAGS = 16
# Keys and values end up in Redis key names and in the list's columns.
MAX_TAG_LENGTH = 64
TAG_RE = re.compile(rf"[A-Za-z0-9][A-Za-z0-9_.-]{{0,{MAX_TAG_LENGTH - 1}}}")
_RULE = f"1-{MAX_TAG_LENGTH} letters, digits, '_', '.' or '-', starting with a letter or digit"

Tags = tuple[tuple[str, str], ...]


def _part(value: object, what: str) -> str:
    if isinstance(value, bool) or not isinstance(value, str | int):
        raise SpecError(f"{what} must be {_RULE}, got {value!r}")
    text = str(value)
    if not TAG_RE.fullmatch(text):
        raise SpecError(f"{what} must be {_RULE}, got {text!r}")
    return text


def parse_tags(raw: object) -> Tags:
    """A spec's `tags:` mapping, checked, sorted by key."""
    if not isinstance(raw, Mapping):
        raise SpecError(f"job: 'tags' must be a mapping of names to values, got {raw!r}")
    if len(raw) > MAX_TAGS:
        raise SpecError(f"job: 'tags' has {len(raw)} tags; the limit is {MAX_TAGS}")
    pairs = {
        _part(key, "job: a tag's name"): _part(value, f"job: tag {key!r}'s value")
        for key, value in raw.items()
    }
    return tuple(sorted(pairs.items()))


def parse_tag_filter(text: str) -> tuple[str, str]:
    """`key=value`, as `list --tag` and the API's `tag` take it."""
    key, sep, value = text.partition("=")
    if not sep:
        raise SpecError(f"a tag filter is key=value, got {text!r}")
    return _part(key, "a tag's name"), _part(value, f"tag {key!r}'s value")


def format_tags(tags: Tags) -> str:
    """The stored form: `k=v,k2=v2` (what a tag index is named by, per pair)."""
    return ",".join(f"{k}={v}" for k, v in tags)


def read_tags(stored: str | None) -> dict[str, str]:
    """The stored form back as a mapping."""
    if not stored:
        return {}
    return dict(pair.split("=", 1) for pair in stored.split(","))


def has_tag(tags: Mapping[str, str], tag: str) -> bool:
    """Whether a job's tags hold the filter `key=value`."""
    key, _, value = tag.partition("=")
    return tags.get(key) == value
