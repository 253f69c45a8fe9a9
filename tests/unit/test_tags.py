"""A spec's `tags:` are checked before anything reaches Redis, with errors naming the tag."""

from __future__ import annotations

import pytest

from jobcenter.errors import SpecError
from jobcenter.model.spec import parse_spec
from jobcenter.model.tags import MAX_TAGS, parse_tag_filter

ONE = {"name": "one", "tasks": [{"id": "a", "task": "t.a"}]}


def test_tags_are_kept_sorted_and_round_trip() -> None:
    spec = parse_spec({**ONE, "tags": {"team": "data", "customer": "acme", "year": 2026}})
    assert spec.tags == (("customer", "acme"), ("team", "data"), ("year", "2026"))
    assert parse_spec(spec.to_dict()).tags == spec.tags


@pytest.mark.parametrize(
    ("tags", "says"),
    [
        ("acme", "'tags' must be a mapping"),
        ({"cust omer": "acme"}, "a tag's name must be"),
        ({"customer": "ac,me"}, "tag 'customer''s value must be"),
        ({"customer": ""}, "tag 'customer''s value must be"),
        ({"customer": None}, "tag 'customer''s value must be"),
        ({"k": "x" * 65}, "must be 1-64"),
        ({f"k{i}": "v" for i in range(MAX_TAGS + 1)}, f"the limit is {MAX_TAGS}"),
    ],
)
def test_a_bad_tag_is_refused_naming_it(tags: object, says: str) -> None:
    with pytest.raises(SpecError, match=None) as caught:
        parse_spec({**ONE, "tags": tags})
    assert says in str(caught.value)


def test_a_tag_filter_is_key_equals_value() -> None:
    assert parse_tag_filter("customer=acme") == ("customer", "acme")
    with pytest.raises(SpecError, match="key=value"):
        parse_tag_filter("customer")
