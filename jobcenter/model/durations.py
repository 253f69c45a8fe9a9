"""Durations as people write them: one parser for every spec key, CLI option and setting
that takes one, so `timeout: 10m`, `--timeout 10m` and `JOBCENTER_LEASE_SECONDS=10m` mean
the same thing and a bad one fails with the same message everywhere.

The forms: a number of seconds (`90`, `1.5`); numbers with units, largest first (`90s`,
`15m`, `1h30m`, `3d`, `2w`, `500ms`); an ISO-8601 duration (`PT1H`, `P1DT12H`, `P2W`).
Units and ISO letters may be upper or lower case. Months and years are refused: they have
no fixed length.
"""

from __future__ import annotations

import re
import reprlib
from datetime import timedelta
from decimal import Decimal

from jobcenter.errors import SpecError

# Durations (timeout, backoff, retention) past a year are typos; the bound also keeps them
# inside what a thread wait (threading.TIMEOUT_MAX) and a Redis expire accept.
MAX_SECONDS = 366 * 24 * 3600
# What a duration may be given as (in Python; a spec file gives a number or a text).
Duration = float | str | timedelta
# What every message says a duration may look like.
FORMS = "seconds, or 90s, 15m, 3d, PT1H"

# The short form's units, largest first (the order they must be written in).
UNIT_SECONDS = {
    "w": Decimal(7 * 86_400),
    "d": Decimal(86_400),
    "h": Decimal(3_600),
    "m": Decimal(60),
    "s": Decimal(1),
    "ms": Decimal("0.001"),
}
_NUMBER = r"(\d+(?:\.\d+)?|\.\d+)"
_SECONDS_RE = re.compile(_NUMBER)
_UNITS_RE = re.compile("".join(rf"(?:{_NUMBER}{unit})?" for unit in UNIT_SECONDS))
# ISO-8601 (PnYnMnWnDTnHnMnS); a fraction may use a comma, as the standard allows.
_ISO_NUMBER = r"(\d+(?:[.,]\d+)?)"
_ISO_RE = re.compile(
    rf"P(?:{_ISO_NUMBER}Y)?(?:{_ISO_NUMBER}M)?(?:{_ISO_NUMBER}W)?(?:{_ISO_NUMBER}D)?"
    rf"(?:T(?:{_ISO_NUMBER}H)?(?:{_ISO_NUMBER}M)?(?:{_ISO_NUMBER}S)?)?"
)
_ISO_SECONDS = (UNIT_SECONDS["w"], UNIT_SECONDS["d"], *(UNIT_SECONDS[u] for u in "hms"))

# Shows a bad value cut short, so one huge value cannot flood the message.
_SHORT_REPR = reprlib.Repr()
_SHORT_REPR.maxstring = _SHORT_REPR.maxother = 60


class _Calendar(Exception):
    """An ISO-8601 duration with months or years."""


def parse_seconds(
    value: object,
    what: str,
    *,
    low: float = 0.0,
    low_open: bool = False,
    high: float = MAX_SECONDS,
) -> float:
    """A duration in seconds, from a number, a timedelta or a text in one of the forms.

    `what` names it in errors ("'timeout'", "--timeout", "JOBCENTER_LEASE_SECONDS"); it must
    lie in [low, high], or (low, high] when `low_open`. SpecError otherwise, in one form:
    "<what> must be a duration (seconds, or 90s, 15m, 3d, PT1H), got 'x'".
    """
    try:
        seconds = _seconds_of(value)
    except _Calendar:
        raise SpecError(
            f"{what} must be a duration of fixed length (give days or weeks: months and "
            f"years have none), got {_show(value)}"
        ) from None
    if seconds is None:
        raise SpecError(f"{what} must be a duration ({FORMS}), got {_show(value)}")
    # Compared, never converted first: float() of a 400-digit int raises. NaN fails both.
    if (seconds > low or (seconds == low and not low_open)) and seconds <= high:
        return float(seconds)
    bound = f"{'>' if low_open else '>='} {format_seconds(low)}"
    raise SpecError(
        f"{what} must be a duration {bound} and at most {format_seconds(high)}, got {_show(value)}"
    )


def _seconds_of(value: object) -> int | float | Decimal | None:
    """The seconds `value` says, unchecked against bounds; None if it is no duration."""
    if isinstance(value, bool):  # an int to Python, never a duration to a person
        return None
    if isinstance(value, int | float):
        return value
    if isinstance(value, timedelta):
        return value.total_seconds()
    if not isinstance(value, str):
        return None
    text = value.strip().lower()
    if _SECONDS_RE.fullmatch(text):
        return Decimal(text)
    if text.startswith("p"):
        return _iso_seconds(text.upper())
    match = _UNITS_RE.fullmatch(text)
    if match is None or not any(match.groups()):
        return None
    return sum(
        (Decimal(n) * unit for n, unit in zip(match.groups(), UNIT_SECONDS.values(), strict=True)
         if n is not None),
        Decimal(0),
    )  # fmt: skip


def _iso_seconds(text: str) -> Decimal | None:
    match = _ISO_RE.fullmatch(text)
    if match is None or text.endswith("T") or not any(match.groups()):
        return None
    years, months, *rest = match.groups()
    if years is not None or months is not None:
        raise _Calendar()
    return sum(
        (Decimal(n.replace(",", ".")) * unit for n, unit in zip(rest, _ISO_SECONDS, strict=True)
         if n is not None),
        Decimal(0),
    )  # fmt: skip


def format_seconds(seconds: float) -> str:
    """A bound as people write it: 366d, 1d12h, 1s, 1ms; 0 for none."""
    ms = round(Decimal(seconds) * 1000)
    if ms == 0:
        return "0"
    parts = []
    for unit in ("d", "h", "m", "s", "ms"):
        count, ms = divmod(ms, int(UNIT_SECONDS[unit] * 1000))
        if count:
            parts.append(f"{count}{unit}")
    return "".join(parts)


def _show(value: object) -> str:
    try:
        text = _SHORT_REPR.repr(value)
    except Exception:  # a repr that raises, an int too long to print
        text = f"<{type(value).__name__}>"
    return text if len(text) <= 60 else text[:57] + "..."
