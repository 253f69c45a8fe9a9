"""When a schedule fires: trigger parsing (`at`, `every` durations, `cron`
expressions read by croniter in a time zone) and the fire times each trigger yields.
Pure code: every `now` is passed in (Redis TIME, read by the caller)."""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from datetime import UTC, datetime, tzinfo
from decimal import Decimal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import CroniterBadDateError, CroniterError, croniter

from jobcenter.errors import SpecError
from jobcenter.model.durations import Duration, parse_seconds

AT, EVERY, CRON = "at", "every", "cron"
# The ticker runs about once a second; a shorter interval could only fire late, in bursts.
MIN_INTERVAL_MS = 1_000
# Fire times stay exact as zset scores (doubles) and datetimes far below this.
MAX_INTERVAL_MS = 100 * 366 * 86_400_000

_CRON_FIELDS = {
    5: ("minute", "hour", "day-of-month", "month", "day-of-week"),
    6: ("second", "minute", "hour", "day-of-month", "month", "day-of-week"),
    7: ("second", "minute", "hour", "day-of-month", "month", "day-of-week", "year"),
}
_CRON_ALLOWED = {
    "second": "0-59",
    "minute": "0-59",
    "hour": "0-23",
    "day-of-month": "1-31, L or ?",
    "month": "1-12 or jan-dec",
    "day-of-week": "0-7 or sun-sat, n#k, L or ?",
    "year": "1970-2099",
}
_CRON_ALIASES = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}


@dataclass(frozen=True)
class Trigger:
    """When a schedule fires: once `at`, `every` fixed interval, or on a `cron` expression."""

    kind: str  # AT | EVERY | CRON
    expr: str  # at: ISO time in UTC; every: the interval as written; cron: the expression
    tz: str | None = None  # cron and naive `at` times are read in this zone; None: UTC
    at_ms: int | None = None
    interval_ms: int | None = None

    @property
    def zone(self) -> tzinfo:
        return ZoneInfo(self.tz) if self.tz else UTC

    def next_after(self, t_ms: int, anchor_ms: int) -> int | None:
        """The first fire strictly after `t_ms`; None when there is none (a past `at`)."""
        if self.kind == AT:
            assert self.at_ms is not None
            return self.at_ms if self.at_ms > t_ms else None
        if self.kind == EVERY:
            assert self.interval_ms is not None
            k = max(1, (t_ms - anchor_ms) // self.interval_ms + 1)
            return anchor_ms + k * self.interval_ms
        return self._cron_step(t_ms, forward=True)

    def latest_at_or_before(self, t_ms: int, anchor_ms: int) -> int | None:
        """The last fire at or before `t_ms`; None when there is none."""
        if self.kind == AT:
            assert self.at_ms is not None
            return self.at_ms if self.at_ms <= t_ms else None
        if self.kind == EVERY:
            assert self.interval_ms is not None
            k = (t_ms - anchor_ms) // self.interval_ms
            return anchor_ms + k * self.interval_ms if k >= 1 else None
        # get_prev is strict, and cron fires fall on whole seconds: t + 1 ms includes t.
        return self._cron_step(t_ms + 1, forward=False)

    def count_between(self, first_ms: int, last_ms: int) -> int | None:
        """How many fires lie in [first, last]; None for cron (that would mean walking them)."""
        if self.kind == AT:
            return 1
        if self.kind == EVERY:
            assert self.interval_ms is not None
            return (last_ms - first_ms) // self.interval_ms + 1
        return None

    def fires_in(self, start_ms: int, end_ms: int, anchor_ms: int, most: int) -> list[int]:
        """The fires in [start, end), oldest first, at most `most` of them. Unlike the
        ticker's, an `every` fire may lie before the schedule was made (a backfill of
        dates before it existed): every anchor + k * interval counts."""
        if self.kind == AT:
            assert self.at_ms is not None
            return [self.at_ms] if start_ms <= self.at_ms < end_ms else []
        fires: list[int] = []
        if self.kind == EVERY:
            assert self.interval_ms is not None
            k = -((anchor_ms - start_ms) // self.interval_ms)  # ceil((start - anchor) / interval)
            fire = anchor_ms + k * self.interval_ms
            while fire < end_ms and len(fires) < most:
                fires.append(fire)
                fire += self.interval_ms
            return fires
        step = self._cron_step(start_ms - 1, forward=True)
        while step is not None and step < end_ms and len(fires) < most:
            fires.append(step)
            step = self._cron_step(step, forward=True)
        return fires

    def _cron_step(self, t_ms: int, *, forward: bool) -> int | None:
        zone = self.zone
        it = croniter(
            self.expr, datetime.fromtimestamp(t_ms / 1000, zone), second_at_beginning=True
        )
        fixed_hour = _cron_hour_is_fixed(self.expr)
        try:
            while True:
                fire: datetime = it.get_next(datetime) if forward else it.get_prev(datetime)
                # Fall-back DST repeats an hour; like Vixie cron, a job at a fixed hour runs at
                # the first of the two occurrences only (an every-N-minutes job runs in both).
                if not (fixed_hour and _second_occurrence(fire)):
                    return round(fire.timestamp() * 1000)
        except CroniterBadDateError:
            return None


def _second_occurrence(dt: datetime) -> bool:
    """True when `dt`'s wall-clock time happens twice (DST fall-back) and this is the later."""
    return dt.fold == 1 and dt.replace(fold=0).utcoffset() != dt.utcoffset()


def _cron_hour_is_fixed(expr: str) -> bool:
    fields = _CRON_ALIASES.get(expr.strip().lower(), expr).split()
    hour = fields[1] if len(fields) == 5 else fields[2]
    return not hour.startswith("*")


def parse_zone(tz: str | None) -> str | None:
    """Check an IANA zone name (Europe/Paris); SpecError names an unknown one."""
    if tz is None:
        return None
    try:
        ZoneInfo(tz)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        raise SpecError(
            f"unknown time zone {tz!r} (give an IANA name such as 'Europe/Paris' or 'UTC')"
        ) from None
    return tz


def parse_at(value: str | datetime, tz: str | None = None) -> int:
    """An ISO-8601 time (or a datetime) as ms since the epoch; naive times are in `tz`/UTC."""
    if isinstance(value, datetime):
        moment = value
    else:
        try:
            moment = datetime.fromisoformat(str(value).strip())
        except ValueError:
            raise SpecError(
                f"time {value!r} is not an ISO-8601 date-time "
                "(e.g. 2026-11-22T09:00:00+01:00, or 2026-11-22 09:00 read in --tz)"
            ) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=ZoneInfo(tz) if tz else UTC)
    return round(moment.timestamp() * 1000)


def parse_duration(value: Duration) -> int:
    """An `every` interval as ms: a duration (model.durations: 90s, 15m, PT1H, a number of
    seconds, a timedelta) from 1 second to 100 years. Months and years are refused: they
    have no fixed length (cron says "monthly")."""
    seconds = parse_seconds(
        value, "--every", low=MIN_INTERVAL_MS / 1000, high=MAX_INTERVAL_MS / 1000
    )
    return round(seconds * 1000)


def _cron_problem(expr: str) -> str:
    """What is wrong with a cron expression croniter rejects, naming the field."""
    if expr.startswith("@"):
        known = ", ".join(_CRON_ALIASES)
        return f"unknown shorthand {expr!r} (known: {known})"
    fields = expr.split()
    names = _CRON_FIELDS.get(len(fields))
    if names is None:
        return (
            f"it has {len(fields)} fields; give 5 (minute hour day-of-month month day-of-week), "
            "6 (a second field first) or 7 (second first, year last)"
        )
    for index, (name, value) in enumerate(zip(names, fields, strict=True)):
        probe = ["*"] * len(fields)
        probe[index] = value
        try:
            croniter.expand(" ".join(probe), second_at_beginning=True)
        except CroniterError:
            return f"the {name} field {value!r} is not valid (allowed: {_CRON_ALLOWED[name]})"
    return "croniter rejects the combination of its fields"


def parse_cron(expr: str, tz: str | None = None, now_ms: int | None = None) -> str:
    """Check a cron expression: 5 fields, or 6/7 with seconds first (and a year last), or an
    @alias. SpecError names the bad field, or says the expression can never fire."""
    expr = " ".join(str(expr).split())
    if not expr:
        raise SpecError("cron expression is empty")
    try:
        croniter.expand(expr, second_at_beginning=True)
    except CroniterError:
        raise SpecError(f"bad cron expression {expr!r}: {_cron_problem(expr)}") from None
    now = int(time.time() * 1000) if now_ms is None else now_ms
    if Trigger(CRON, expr, tz).next_after(now, now) is None:
        detail = "no time matches it from now on"
        try:
            croniter.expand(expr, second_at_beginning=True, strict=True)
        except CroniterError as exc:  # e.g. "Day(s) [31] can never occur in month(s) [2]"
            reason = str(exc).split("is not acceptable.", 1)[-1].strip()
            detail = reason[:1].lower() + reason[1:] if reason else detail
        raise SpecError(f"cron expression {expr!r} can never fire: {detail}")
    return expr


def parse_trigger(
    *,
    at: str | datetime | None = None,
    every: Duration | None = None,
    cron: str | None = None,
    tz: str | None = None,
    now_ms: int | None = None,
) -> Trigger:
    """Exactly one of at/every/cron, checked; SpecError names whatever is wrong."""
    given = [name for name, v in ((AT, at), (EVERY, every), (CRON, cron)) if v is not None]
    if len(given) != 1:
        which = ", ".join(f"--{g}" for g in given) if given else "none"
        raise SpecError(f"give exactly one of --at, --every, --cron (got {which})")
    tz = parse_zone(tz)
    if at is not None:
        at_ms = parse_at(at, tz)
        iso = datetime.fromtimestamp(at_ms / 1000, UTC).isoformat(timespec="milliseconds")
        return Trigger(AT, iso, tz, at_ms=at_ms)
    if every is not None:
        if tz is not None:
            raise SpecError("--tz applies to --cron and --at; an --every interval is fixed")
        interval_ms = parse_duration(every)
        return Trigger(EVERY, _every_text(every, interval_ms), interval_ms=interval_ms)
    assert cron is not None
    return Trigger(CRON, parse_cron(cron, tz, now_ms), tz)


def _every_text(every: Duration, interval_ms: int) -> str:
    """How an interval is shown: as written (ISO upper case, units lower case), a number of
    seconds or a timedelta as an ISO duration."""
    if isinstance(every, str) and re.search("[A-Za-z]", every):
        text = every.strip()
        return text.upper() if text[0] in "pP" else text.lower()
    return _iso_duration(interval_ms)


def _iso_duration(ms: int) -> str:
    seconds = Decimal(ms) / 1000
    return f"PT{seconds.normalize():f}S"
