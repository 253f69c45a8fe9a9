"""Schedule parsing and fire-time arithmetic: pure code, no Redis."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from jobcenter.errors import SpecError
from jobcenter.model.spec import parse_spec
from jobcenter.schedules import (
    AT,
    CRON,
    EVERY,
    Schedule,
    ScheduleState,
    Trigger,
    parse_at,
    parse_cron,
    parse_duration,
    parse_trigger,
    plan_fires,
)

PARIS = ZoneInfo("Europe/Paris")
SPEC = parse_spec({"name": "nightly", "tasks": [{"id": "a", "task": "t.a"}]})


def ms(dt: datetime) -> int:
    return round(dt.timestamp() * 1000)


def paris(ms_: int) -> datetime:
    return datetime.fromtimestamp(ms_ / 1000, PARIS)


# -- intervals (every form of model.durations; its own tests: test_durations.py) --------------


@pytest.mark.parametrize(
    ("text", "expected_ms"),
    [
        ("PT30S", 30_000),
        ("P1D", 86_400_000),
        ("PT1H30M", 5_400_000),
        ("P1DT12H", 129_600_000),
        ("P1W", 7 * 86_400_000),
        ("PT1.5S", 1_500),
        ("PT0,5M", 30_000),
        ("pt2m", 120_000),
        ("30s", 30_000),
        ("1h30m", 5_400_000),
        ("90", 90_000),
    ],
)
def test_intervals_parse_to_milliseconds(text: str, expected_ms: int) -> None:
    assert parse_duration(text) == expected_ms


def test_a_timedelta_is_accepted_as_an_interval() -> None:
    assert parse_duration(timedelta(minutes=5)) == 300_000


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("garbage", "must be a duration (seconds, or 90s, 15m, 3d, PT1H)"),
        ("P", "must be a duration (seconds, or 90s, 15m, 3d, PT1H)"),
        ("PT", "must be a duration (seconds, or 90s, 15m, 3d, PT1H)"),
        ("P1DT", "must be a duration (seconds, or 90s, 15m, 3d, PT1H)"),
        ("-PT30S", "must be a duration (seconds, or 90s, 15m, 3d, PT1H)"),
        ("PT30", "must be a duration (seconds, or 90s, 15m, 3d, PT1H)"),
        ("", "must be a duration (seconds, or 90s, 15m, 3d, PT1H)"),
        ("PT0S", "must be a duration >= 1s and at most 36600d"),
        ("PT0.5S", "must be a duration >= 1s and at most 36600d"),
        ("P1M", "months and years have none"),
        ("P1Y", "months and years have none"),
    ],
)
def test_bad_intervals_are_refused_naming_the_problem(text: str, problem: str) -> None:
    with pytest.raises(SpecError) as err:
        parse_duration(text)
    assert problem in str(err.value)
    assert str(err.value).startswith("--every must be a duration")
    assert str(err.value).endswith(f"got {text!r}")


# -- cron ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "expr", ["0 9 * * *", "*/15 * * * * *", "@daily", "0 0 31 2 mon", "0 0 L * *", "0 0 ? * *"]
)
def test_valid_cron_expressions_pass(expr: str) -> None:
    assert parse_cron(expr) == expr


@pytest.mark.parametrize(
    ("expr", "problem"),
    [
        ("0 25 * * *", "the hour field '25' is not valid (allowed: 0-23)"),
        ("61 * * * *", "the minute field '61' is not valid"),
        ("* * * * 8", "the day-of-week field '8' is not valid"),
        ("0 0 0 * 13 *", "the month field '13' is not valid"),
        ("*/0 * * * *", "the minute field '*/0' is not valid"),
        ("a b c d e", "the minute field 'a' is not valid"),
        ("* * * *", "it has 4 fields; give 5"),
        ("@often", "unknown shorthand '@often'"),
    ],
)
def test_bad_cron_is_refused_naming_the_field(expr: str, problem: str) -> None:
    with pytest.raises(SpecError, match="bad cron expression") as err:
        parse_cron(expr)
    assert problem in str(err.value)


@pytest.mark.parametrize(
    ("expr", "problem"),
    [
        ("0 0 31 2 *", "day(s) [31] can never occur in month(s) [2]"),
        ("0 0 30 2 *", "day(s) [30] can never occur in month(s) [2]"),
        ("0 0 0 1 1 * 2020", "no time matches it from now on"),
    ],
)
def test_cron_that_can_never_fire_is_refused(expr: str, problem: str) -> None:
    with pytest.raises(SpecError, match="can never fire") as err:
        parse_cron(expr)
    assert problem in str(err.value)


def test_a_sixth_field_is_seconds_and_comes_first() -> None:
    trigger = parse_trigger(cron="*/15 * * * * *")
    start = ms(datetime(2026, 1, 1, 0, 0, 0, tzinfo=UTC))
    fires = [trigger.next_after(start, 0)]
    for _ in range(3):
        fires.append(trigger.next_after(fires[-1], 0))  # type: ignore[arg-type]
    assert [f - start for f in fires] == [15_000, 30_000, 45_000, 60_000]  # type: ignore[operator]


def test_cron_next_after_is_strict_and_latest_is_inclusive() -> None:
    trigger = Trigger(CRON, "0 * * * *")
    hour = ms(datetime(2026, 1, 1, 5, 0, tzinfo=UTC))
    assert trigger.next_after(hour, 0) == hour + 3_600_000
    assert trigger.latest_at_or_before(hour, 0) == hour
    assert trigger.latest_at_or_before(hour - 1, 0) == hour - 3_600_000


# -- time zones ------------------------------------------------------------------------------


def test_cron_in_a_zone_fires_at_local_time_in_winter_and_summer() -> None:
    trigger = parse_trigger(cron="0 9 * * *", tz="Europe/Paris")
    winter = trigger.next_after(ms(datetime(2026, 1, 10, 0, 0, tzinfo=UTC)), 0)
    summer = trigger.next_after(ms(datetime(2026, 7, 10, 0, 0, tzinfo=UTC)), 0)
    assert winter == ms(datetime(2026, 1, 10, 8, 0, tzinfo=UTC))  # CET, UTC+1
    assert summer == ms(datetime(2026, 7, 10, 7, 0, tzinfo=UTC))  # CEST, UTC+2


def test_cron_without_a_zone_is_utc() -> None:
    trigger = parse_trigger(cron="0 9 * * *")
    assert trigger.next_after(ms(datetime(2026, 7, 10, tzinfo=UTC)), 0) == ms(
        datetime(2026, 7, 10, 9, 0, tzinfo=UTC)
    )


def test_fixed_hour_cron_fires_once_when_dst_repeats_the_hour() -> None:
    trigger = parse_trigger(cron="30 2 * * *", tz="Europe/Paris")
    first = trigger.next_after(ms(datetime(2026, 10, 24, 12, 0, tzinfo=PARIS)), 0)
    assert first is not None
    second = trigger.next_after(first, 0)
    assert second is not None
    assert paris(first).isoformat() == "2026-10-25T02:30:00+02:00"
    assert paris(second).isoformat() == "2026-10-26T02:30:00+01:00"  # not 02:30+01:00 on the 25th
    assert trigger.latest_at_or_before(second - 1, 0) == first


def test_interval_cron_keeps_firing_through_the_repeated_hour() -> None:
    trigger = parse_trigger(cron="*/30 * * * *", tz="Europe/Paris")
    t = ms(datetime(2026, 10, 25, 1, 50, tzinfo=PARIS))
    fires = []
    for _ in range(6):
        t = trigger.next_after(t, 0)  # type: ignore[assignment]
        fires.append(t)
    assert [b - a for a, b in zip(fires, fires[1:], strict=False)] == [1_800_000] * 5


def test_fixed_hour_cron_skipped_by_spring_forward_fires_after_the_gap() -> None:
    trigger = parse_trigger(cron="30 2 * * *", tz="Europe/Paris")
    fire = trigger.next_after(ms(datetime(2026, 3, 28, 12, 0, tzinfo=PARIS)), 0)
    assert fire is not None
    assert paris(fire).isoformat() == "2026-03-29T03:00:00+02:00"


@pytest.mark.parametrize("tz", ["Europe/Pari", "Nowhere/Zone", "Europe", "../etc/passwd", ""])
def test_unknown_time_zone_is_refused(tz: str) -> None:
    with pytest.raises(SpecError, match="unknown time zone"):
        parse_trigger(cron="0 9 * * *", tz=tz)


# -- at --------------------------------------------------------------------------------------


def test_at_accepts_offsets_z_and_naive_times_in_the_zone_or_utc() -> None:
    utc9 = ms(datetime(2026, 11, 22, 9, 0, tzinfo=UTC))
    assert parse_at("2026-11-22T09:00:00Z") == utc9
    assert parse_at("2026-11-22T10:00:00+01:00") == utc9
    assert parse_at("2026-11-22 09:00") == utc9
    assert parse_at("2026-11-22T10:00", "Europe/Paris") == utc9
    assert parse_at(datetime(2026, 11, 22, 9, 0, tzinfo=UTC)) == utc9


def test_at_garbage_is_refused() -> None:
    with pytest.raises(SpecError, match="'tomorrow' is not an ISO-8601 date-time"):
        parse_trigger(at="tomorrow")


def test_at_trigger_fires_once() -> None:
    trigger = parse_trigger(at="2026-11-22T09:00:00Z")
    at = ms(datetime(2026, 11, 22, 9, 0, tzinfo=UTC))
    assert trigger.kind == AT and trigger.at_ms == at
    assert trigger.next_after(at - 1, 0) == at
    assert trigger.next_after(at, 0) is None


# -- choosing a trigger ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs",
    [{}, {"at": "2026-01-01T00:00:00Z", "every": "PT1M"}, {"every": "PT1M", "cron": "* * * * *"}],
)
def test_exactly_one_trigger_is_required(kwargs: dict[str, str]) -> None:
    with pytest.raises(SpecError, match="give exactly one of --at, --every, --cron"):
        parse_trigger(**kwargs)  # type: ignore[arg-type]


def test_tz_with_every_is_refused() -> None:
    with pytest.raises(SpecError, match="--tz applies to --cron and --at"):
        parse_trigger(every="PT1M", tz="Europe/Paris")


def test_every_fires_on_multiples_of_the_interval_from_its_anchor() -> None:
    trigger = parse_trigger(every="PT1M")
    assert trigger.kind == EVERY
    anchor = 1_000_000
    assert trigger.next_after(anchor, anchor) == anchor + 60_000
    assert trigger.next_after(anchor + 60_000, anchor) == anchor + 120_000
    assert trigger.next_after(anchor + 61_000, anchor) == anchor + 120_000
    assert trigger.latest_at_or_before(anchor + 59_999, anchor) is None
    assert trigger.latest_at_or_before(anchor + 180_000, anchor) == anchor + 180_000


# -- catch-up plans --------------------------------------------------------------------------

T0 = 1_800_000_000_000
MINUTE = 60_000
GRACE = 10_000


def every_minute(catchup: str) -> Schedule:
    return Schedule("S1", parse_trigger(every="PT1M"), SPEC, catchup=catchup, created_ms=T0)


def test_catchup_all_runs_every_missed_fire_oldest_first() -> None:
    plan = plan_fires(every_minute("all"), T0 + MINUTE, T0 + 10 * MINUTE + 5_000, GRACE)
    assert (plan.fire, plan.next, plan.missed_from) == (T0 + MINUTE, T0 + 2 * MINUTE, None)


def test_catchup_one_runs_the_latest_and_records_the_rest_missed() -> None:
    plan = plan_fires(every_minute("one"), T0 + MINUTE, T0 + 10 * MINUTE + 5_000, GRACE)
    assert plan.fire == T0 + 10 * MINUTE
    assert (plan.missed_from, plan.missed_until) == (T0 + MINUTE, T0 + 9 * MINUTE)
    assert plan.missed_count == 9
    assert plan.next == T0 + 11 * MINUTE


def test_catchup_none_runs_an_on_time_fire_but_not_a_late_one() -> None:
    on_time = plan_fires(every_minute("none"), T0 + MINUTE, T0 + MINUTE + 2_000, GRACE)
    assert (on_time.fire, on_time.missed_from) == (T0 + MINUTE, None)
    late = plan_fires(every_minute("none"), T0 + MINUTE, T0 + 10 * MINUTE + 30_000, GRACE)
    assert late.fire is None
    assert (late.missed_from, late.missed_until, late.missed_count) == (
        T0 + MINUTE,
        T0 + 10 * MINUTE,
        10,
    )
    assert late.next == T0 + 11 * MINUTE


def test_catchup_one_with_nothing_missed_just_fires() -> None:
    plan = plan_fires(every_minute("one"), T0 + MINUTE, T0 + MINUTE + 3_000, GRACE)
    assert (plan.fire, plan.missed_from, plan.next) == (T0 + MINUTE, None, T0 + 2 * MINUTE)


def test_catchup_on_a_cron_schedule_leaves_the_missed_count_unknown() -> None:
    sched = Schedule("S2", Trigger(CRON, "0 * * * *"), SPEC, catchup="one", created_ms=0)
    hour = ms(datetime(2026, 1, 1, 0, 0, tzinfo=UTC))
    plan = plan_fires(sched, hour, hour + 5 * 3_600_000 + 1_000, GRACE)
    assert plan.fire == hour + 5 * 3_600_000
    assert (plan.missed_from, plan.missed_until, plan.missed_count) == (
        hour,
        hour + 4 * 3_600_000,
        None,
    )


# -- the stored shape ------------------------------------------------------------------------


def test_schedule_round_trips_through_its_dict() -> None:
    sched = Schedule(
        "S3", parse_trigger(cron="0 9 * * *", tz="Europe/Paris"), SPEC, "etl", "allow", "all", 5
    )
    assert Schedule.from_dict(sched.to_dict()) == sched


@pytest.mark.parametrize(
    "state",
    [
        ScheduleState(),
        ScheduleState(paused=True, next=5, pending=4, buffered=3, last_fire=2, last_job="J"),
        ScheduleState(next=5, fires=7, skipped=1, missed=2, failed=3),
    ],
)
def test_a_state_survives_the_scripts_field_pairs(state: ScheduleState) -> None:
    """What fields() hands the scripts ('' for an absent field) reads back as the same state."""
    pairs = state.fields()
    stored = {k: str(v).encode() for k, v in zip(pairs[::2], pairs[1::2], strict=True) if v != ""}
    assert ScheduleState.from_hash(stored) == state


def test_due_score_follows_pending_then_pause_then_the_earliest_fire() -> None:
    assert ScheduleState(next=5).due_score() == 5
    assert ScheduleState(next=5, buffered=3).due_score() == 3
    assert ScheduleState(next=5, paused=True).due_score() is None
    assert ScheduleState(next=5, paused=True, pending=4).due_score() == 4
    assert ScheduleState().done and ScheduleState().due_score() is None
