"""Placeholders in a task's args and kwargs, filled with its job's fire time and schedule.

A placeholder is a mapping of one key, the placeholder's name, anywhere in args or kwargs
(at any depth): `{"$fire_time": null}` or `{"$fire_time": "%Y-%m-%d"}`, `{"$fire_date":
null}`, `{"$schedule": null}`, `{"$schedule_id": null}`. A string is never one, so no
ordinary string can collide with it; the names starting `$fire` and `$schedule` are reserved
in one-key mappings, so a typo (`{"$fire_dat": null}`) is refused rather than passed on.
Filling is pure: the job's submit fills them once, when its fire time is known.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from jobcenter.errors import SpecError

FIRE_TIME = "$fire_time"  # ISO 8601, or formatted with the strftime format given as value
FIRE_DATE = "$fire_date"  # YYYY-MM-DD
SCHEDULE = "$schedule"  # the schedule's name (its id when it has none)
SCHEDULE_ID = "$schedule_id"
NAMES = (FIRE_TIME, FIRE_DATE, SCHEDULE, SCHEDULE_ID)
RESERVED = ("$fire", "$schedule")  # one-key mappings whose key starts so are placeholders


@dataclass(frozen=True)
class FireValues:
    """What placeholders are filled with: the fire time, in the zone its dates are read in
    (a cron schedule's zone; UTC by default), and the schedule that fired, if one did."""

    at: datetime  # aware
    schedule_id: str | None = None
    schedule_name: str | None = None

    def value(self, name: str, argument: Any) -> Any:
        if name == FIRE_TIME:
            return self.at.strftime(argument) if argument else self.at.isoformat()
        if name == FIRE_DATE:
            return self.at.date().isoformat()
        if name == SCHEDULE:
            return self.schedule_name or self.schedule_id
        return self.schedule_id


# The reserved prefixes as msgpack writes them (a str is its UTF-8 bytes): packed args
# without them hold no placeholder, which a byte search says faster than a walk.
_RESERVED_BYTES = tuple(prefix.encode() for prefix in RESERVED)


def may_hold(packed: tuple[bytes, ...]) -> bool:
    """Whether args and kwargs packed with msgpack may hold a placeholder."""
    return any(prefix in data for data in packed for prefix in _RESERVED_BYTES)


def _placeholder(value: Any) -> tuple[str, Any] | None:
    """(name, argument) when `value` is a placeholder (or a reserved name misspelt)."""
    if isinstance(value, dict) and len(value) == 1:
        ((key, argument),) = value.items()
        if isinstance(key, str) and key.startswith(RESERVED):
            return key, argument
    return None


def _walk(value: Any) -> Iterator[tuple[str, Any]]:
    """Every placeholder in `value`, depth first."""
    found = _placeholder(value)
    if found is not None:
        yield found
    elif isinstance(value, dict):
        for item in value.values():
            yield from _walk(item)
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from _walk(item)


def check(args: Any, kwargs: Any) -> bool:
    """Whether args or kwargs hold a placeholder; SpecError naming an unknown one, or a
    `$fire_time` format that is not a string."""
    used = False
    for name, argument in (*_walk(args), *_walk(kwargs)):
        if name not in NAMES:
            known = ", ".join(NAMES)
            raise SpecError(f"unknown placeholder {name!r} (known: {known})")
        if name == FIRE_TIME and argument is not None and not isinstance(argument, str):
            raise SpecError(
                f"placeholder {FIRE_TIME!r} takes null (ISO 8601) or a strftime format such "
                f"as '%Y-%m-%d', got {argument!r}"
            )
        used = True
    return used


def fill(value: Any, values: FireValues) -> Any:
    """`value` with every placeholder replaced by its value."""
    found = _placeholder(value)
    if found is not None:
        return values.value(*found)
    if isinstance(value, dict):
        return {key: fill(item, values) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [fill(item, values) for item in value]
    return value
