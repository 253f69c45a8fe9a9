"""Shifts this process's wall clock by $JOBCENTER_TEST_CLOCK_SHIFT_SECONDS, as on a machine
whose clock is far off: time.time, time.time_ns and datetime's now/utcnow/today. Python
imports it at start-up when this folder is on PYTHONPATH (the clock-skew tests start
workers so; their rq children inherit it). Monotonic clocks are left alone, as a wrong
wall clock leaves them."""

from __future__ import annotations

import datetime
import os
import time

SHIFT_SECONDS = float(os.environ.get("JOBCENTER_TEST_CLOCK_SHIFT_SECONDS", "0"))

if SHIFT_SECONDS:
    _time, _time_ns = time.time, time.time_ns
    _shift = datetime.timedelta(seconds=SHIFT_SECONDS)

    def _shifted_time() -> float:
        return _time() + SHIFT_SECONDS

    def _shifted_time_ns() -> int:
        return _time_ns() + int(SHIFT_SECONDS * 1e9)

    class _ShiftedDatetime(datetime.datetime):
        @classmethod
        def now(cls, tz: datetime.tzinfo | None = None) -> _ShiftedDatetime:
            return super().now(tz) + _shift

        @classmethod
        def utcnow(cls) -> _ShiftedDatetime:
            return super().utcnow() + _shift

        @classmethod
        def today(cls) -> _ShiftedDatetime:
            return cls.now()

    time.time = _shifted_time
    time.time_ns = _shifted_time_ns
    datetime.datetime = _ShiftedDatetime  # type: ignore[misc]
