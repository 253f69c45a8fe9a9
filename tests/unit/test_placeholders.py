"""Fire times and the placeholders a spec fills with them: pure code, no Redis."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from jobcenter.errors import SpecError
from jobcenter.model.fire_times import fill_spec, parse_instant, unfilled
from jobcenter.model.placeholders import FireValues
from jobcenter.model.spec import parse_spec
from jobcenter.schedules import Schedule, parse_trigger

NIGHT = datetime(2026, 11, 2, 0, 30, tzinfo=UTC)


def spec_with(args: list[Any] | None = None, kwargs: dict[str, Any] | None = None) -> Any:
    task: dict[str, Any] = {"id": "load", "task": "t.load"}
    if args is not None:
        task["args"] = args
    if kwargs is not None:
        task["kwargs"] = kwargs
    return parse_spec({"name": "nightly", "tasks": [task]})


def test_placeholders_in_args_and_kwargs_at_any_depth_are_filled() -> None:
    spec = spec_with(
        args=[{"$fire_date": None}, "plain", {"$fire_time": "%Y%m%d-%H"}],
        kwargs={
            "when": {"$fire_time": None},
            "nested": {"list": [{"$schedule": None}], "id": {"$schedule_id": None}},
        },
    )

    filled = fill_spec(spec, FireValues(NIGHT, "01SCHED", "nightly-load")).tasks[0]

    assert filled.args == ("2026-11-02", "plain", "20261102-00")
    assert filled.kwargs == {
        "when": "2026-11-02T00:30:00+00:00",
        "nested": {"list": ["nightly-load"], "id": "01SCHED"},
    }


def test_strings_and_other_mappings_are_never_placeholders() -> None:
    args = ["$fire_time", "{$fire_date}", {"$gt": 5}, {"$fire_time": None, "other": 1}]
    spec = spec_with(args=args)

    assert not spec.uses_placeholders
    assert fill_spec(spec, FireValues(NIGHT)).tasks[0].args == tuple(args)


def test_an_unknown_placeholder_is_refused_at_parse_naming_it_and_its_task() -> None:
    with pytest.raises(SpecError, match=r"task 'load': unknown placeholder '\$fire_dat'"):
        spec_with(kwargs={"day": {"$fire_dat": None}})
    with pytest.raises(SpecError, match=r"task 'load': .*'\$fire_time' takes null .* got 3"):
        spec_with(args=[{"$fire_time": 3}])


def test_a_schedule_fills_its_spec_in_its_own_zone_with_its_name() -> None:
    spec = spec_with(args=[{"$fire_date": None}, {"$fire_time": None}, {"$schedule": None}])
    trigger = parse_trigger(cron="30 0 * * *", tz="Europe/Paris")
    schedule = Schedule("01SCHED", trigger, spec, name="nightly")
    fire = datetime(2026, 11, 2, 0, 30, tzinfo=ZoneInfo("Europe/Paris"))  # 23:30 UTC the day before
    fire_ms = round(fire.timestamp() * 1000)

    job = schedule.fire_spec(fire_ms)

    assert job.tasks[0].args == ("2026-11-02", "2026-11-02T00:30:00+01:00", "nightly")
    assert job.idempotency_key == f"01SCHED:{fire_ms}"
    assert schedule.fire_spec(fire_ms, rerun=2).idempotency_key == f"01SCHED:{fire_ms}:rerun:2"


def test_a_spec_with_placeholders_and_no_fire_time_is_named() -> None:
    error = unfilled(spec_with(args=[{"$fire_date": None}]))

    assert error is not None and "task 'load' uses a placeholder" in str(error)
    assert "--fire-time" in str(error)
    assert unfilled(spec_with(args=["$fire_date"])) is None


def test_fire_times_are_iso_dates_or_datetimes_utc_when_no_zone() -> None:
    assert parse_instant("2026-11-02", "--from") == datetime(2026, 11, 2, tzinfo=UTC)
    assert parse_instant("2026-11-02T01:00", "--from") == datetime(2026, 11, 2, 1, tzinfo=UTC)
    plus_one = timezone(timedelta(hours=1))
    assert parse_instant("2026-11-02T01:00+01:00", "--to") == datetime(
        2026, 11, 2, 1, tzinfo=plus_one
    )
    with pytest.raises(SpecError, match=r"--to: 'yesterday' is not an ISO-8601 date"):
        parse_instant("yesterday", "--to")


# -- the fire times of a window (backfill) ---------------------------------------------------


def ms(moment: datetime) -> int:
    return round(moment.timestamp() * 1000)


def test_a_window_holds_its_start_not_its_end_and_cron_fires_in_its_zone() -> None:
    paris = ZoneInfo("Europe/Paris")
    trigger = parse_trigger(cron="0 2 * * *", tz="Europe/Paris")
    start, end = datetime(2026, 10, 24, 2, tzinfo=paris), datetime(2026, 10, 27, 2, tzinfo=paris)

    fires = trigger.fires_in(ms(start), ms(end), 0, 100)

    # 02:00 in Paris each night, across the end of summer time (Oct 25th, when 02:00 comes
    # twice: the first one, as the ticker fires it)
    assert [datetime.fromtimestamp(f / 1000, paris).isoformat() for f in fires] == [
        "2026-10-24T02:00:00+02:00",
        "2026-10-25T02:00:00+02:00",
        "2026-10-26T02:00:00+01:00",
    ]
    assert trigger.fires_in(ms(start), ms(end), 0, 2) == fires[:2]


def test_an_every_window_may_reach_before_the_schedule_was_made() -> None:
    trigger = parse_trigger(every="1h")
    anchor = ms(datetime(2026, 11, 1, 12, 30, tzinfo=UTC))
    start = ms(datetime(2026, 11, 1, 10, tzinfo=UTC))

    fires = trigger.fires_in(start, anchor + 1, anchor, 100)

    assert [datetime.fromtimestamp(f / 1000, UTC).strftime("%H:%M") for f in fires] == [
        "10:30",
        "11:30",
        "12:30",
    ]
