"""Redis replies as Python values: the clients here never decode responses, so every
reply arrives as bytes (or None for a missing field)."""

from __future__ import annotations

from typing import Any, overload


@overload
def text(value: None) -> None: ...
@overload
def text(value: bytes | str) -> str: ...
def text(value: Any) -> str | None:
    """A reply as str; None stays None (a missing hash field, a nil reply)."""
    if value is None:
        return None
    return value.decode() if isinstance(value, bytes) else str(value)


def seconds(ms: bytes | str | int | None) -> float | None:
    """A time stored in milliseconds (Redis TIME) as epoch seconds; None stays None."""
    return None if ms is None else int(ms) / 1000.0
