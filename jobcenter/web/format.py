"""How the pages show times and durations (Jinja filters)."""

from __future__ import annotations

from datetime import UTC, datetime


def when(seconds: float | None) -> str:
    """An epoch time as UTC, to the millisecond."""
    if seconds is None:
        return "-"
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + "Z"


def duration(seconds: float | None) -> str:
    """A span as a person reads it: 850 ms, 4.2 s, 3 min 5 s, 2 h 10 min, 3 d 4 h."""
    if seconds is None:
        return "-"
    if seconds < 1:
        return f"{seconds * 1000:.0f} ms"
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, secs = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes} min {secs} s"
    hours, minutes = divmod(minutes, 60)
    if hours < 48:
        return f"{hours} h {minutes} min"
    days, hours = divmod(hours, 24)
    return f"{days} d {hours} h"


def ago(seconds: float | None, now: float) -> str:
    if seconds is None:
        return "-"
    span = now - seconds
    return f"in {duration(-span)}" if span < 0 else f"{duration(span)} ago"


def first_line(text: str | None, limit: int = 120) -> str:
    line = (text or "").strip().splitlines()
    return line[0][:limit] if line else ""
