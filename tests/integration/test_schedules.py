"""Schedules against real Redis: tickers run directly in the test (no worker processes), with
`now` injected into tick() where a test needs time to pass, so nothing sleeps."""

from __future__ import annotations

import json
import re
import threading
from collections import Counter
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from click.testing import CliRunner, Result
from dashboard_harness import Dashboard
from harness import Cli

from jobcenter import Client
from jobcenter import schedules as sched
from jobcenter.cli.schedules import schedule_group
from jobcenter.config import Settings
from jobcenter.errors import NotFound, SpecError
from jobcenter.schedules import Fire, Scheduler
from jobcenter.schedules import manage as schedules_manage
from jobcenter.storage.store import Store

SPEC: dict[str, Any] = {"name": "report", "tasks": [{"id": "a", "task": "tasks_for_tests.record"}]}
MINUTE = 60_000
GRACE_MS = 10_000


@pytest.fixture
def store(redis_url: str, namespace: str) -> Iterator[Store]:
    s = Store.from_settings(Settings.from_env(redis_url=redis_url, namespace=namespace))
    yield s
    s.redis.close()


def other_store(store: Store) -> Store:
    """A second connection to the same namespace, as another worker would have."""
    return Store.from_settings(store.settings)


def ticker(store: Store, name: str) -> Scheduler:
    return Scheduler(store, f"handler-{name}", grace_ms=GRACE_MS)


def submitted(fires: list[Fire]) -> list[Fire]:
    return [f for f in fires if f.outcome == sched.SUBMITTED]


def records(store: Store, schedule_id: str) -> list[dict[str, Any]]:
    return sched.show_schedule(store, schedule_id, fires=sched.FIRES_KEPT)["recent"]


def scheduled_jobs(store: Store) -> list[dict[str, Any]]:
    """Every job in the namespace with the schedule fields its hash records."""
    out = []
    for row in store.list_jobs(limit=100_000):
        fields = store.job_fields(row["id"])
        out.append(
            {
                "id": row["id"],
                "schedule_id": fields["schedule_id"].decode(),
                "fire_time": float(fields["fire_time"]),
            }
        )
    return out


def invoke(redis_url: str, namespace: str, *args: str) -> Result:
    return CliRunner().invoke(
        schedule_group, [*args, "--redis-url", redis_url, "--namespace", namespace]
    )


def spec_file(tmp_path: Path, spec: dict[str, Any] = SPEC) -> str:
    path = tmp_path / "spec.json"
    path.write_text(json.dumps(spec))
    return str(path)


# -- no double fire, none lost ---------------------------------------------------------------


def tick_together(tickers: list[Scheduler], nows: list[int]) -> list[Fire]:
    """Every ticker ticks at each `now` at the same instant (a barrier, not a sleep)."""
    barrier = threading.Barrier(len(tickers))
    results: list[list[Fire]] = [[] for _ in tickers]
    errors: list[BaseException] = []

    def run(index: int) -> None:
        try:
            for now in nows:
                barrier.wait(timeout=30)
                results[index] += tickers[index].tick(now)
        except BaseException as exc:  # surfaced in the test thread below
            errors.append(exc)
            barrier.abort()

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(tickers))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not errors, errors
    return [f for r in results for f in r]


def assert_each_fire_once(store: Store, ids: list[str], fires: list[Fire], per: int) -> None:
    done = Counter((f.schedule_id, f.fire_ms) for f in submitted(fires))
    assert len(done) == len(ids) * per
    assert set(done.values()) == {1}, "a fire was reported by two tickers"
    jobs = scheduled_jobs(store)
    assert len(jobs) == len(ids) * per, "a fire made two jobs"
    assert len({(j["schedule_id"], j["fire_time"]) for j in jobs}) == len(jobs)
    for schedule_id in ids:
        view = sched.show_schedule(store, schedule_id, fires=sched.FIRES_KEPT)
        assert view["fires"] == per
        fire_records = [r["fire"] for r in view["recent"] if r["outcome"] == sched.SUBMITTED]
        assert len(fire_records) == len(set(fire_records)) == per


def test_two_tickers_never_fire_a_schedule_twice(store: Store) -> None:
    ids, t0 = [], 0
    for _ in range(10):
        s = sched.add_schedule(store, SPEC, every="PT1S", overlap="allow", catchup="all")
        ids.append(s.id)
        t0 = max(t0, s.created_ms)
    a, b = ticker(store, "a"), ticker(other_store(store), "b")

    fires = tick_together([a, b], [t0 + k * 1000 for k in range(1, 16)])

    assert_each_fire_once(store, ids, fires, per=15)


def test_tickers_racing_without_the_lease_still_never_double_fire(store: Store) -> None:
    """As if a stalled lease holder woke up while another ticker had taken over: the
    transactions and the per-fire idempotency key alone keep every fire single."""
    ids, t0 = [], 0
    for _ in range(10):
        s = sched.add_schedule(store, SPEC, every="PT1S", overlap="allow", catchup="all")
        ids.append(s.id)
        t0 = max(t0, s.created_ms)
    tickers = []
    for name in ("a", "b", "c"):
        connection = other_store(store)
        connection.singleton = lambda *args, **kwargs: 0  # type: ignore[method-assign]
        tickers.append(ticker(connection, name))

    fires = tick_together(tickers, [t0 + k * 1000 for k in range(1, 11)])

    assert_each_fire_once(store, ids, fires, per=10)


def test_a_fire_decided_by_a_ticker_that_died_is_submitted_by_the_next(store: Store) -> None:
    s = sched.add_schedule(store, SPEC, every="PT1M")
    dying = other_store(store)

    def die(*args: Any, **kwargs: Any) -> Any:
        raise SystemExit("ticker killed between deciding and submitting")

    dying.submit_many = die  # type: ignore[method-assign]
    with pytest.raises(SystemExit):
        ticker(dying, "dead").tick(s.created_ms + MINUTE)
    assert sched.show_schedule(store, s.id)["pending_fire"] == (s.created_ms + MINUTE) / 1000
    store.singleton(sched.SINGLETON, "release", "handler-dead", 1)  # its lease would expire

    fires = ticker(store, "next").tick(s.created_ms + MINUTE + 500)

    assert [(f.outcome, f.fire_ms, f.created) for f in fires] == [
        (sched.SUBMITTED, s.created_ms + MINUTE, True)
    ]
    assert len(scheduled_jobs(store)) == 1
    assert sched.show_schedule(store, s.id)["pending_fire"] is None


def test_a_fire_submitted_by_a_ticker_that_died_before_confirming_is_not_repeated(
    store: Store,
) -> None:
    s = sched.add_schedule(store, SPEC, every="PT1M")
    dying = ticker(other_store(store), "dead")

    def die(*args: Any, **kwargs: Any) -> bool:
        raise SystemExit("ticker killed after submitting")

    dying._confirm = die  # type: ignore[method-assign]
    with pytest.raises(SystemExit):
        dying.tick(s.created_ms + MINUTE)
    assert len(scheduled_jobs(store)) == 1
    store.singleton(sched.SINGLETON, "release", "handler-dead", 1)

    fires = ticker(store, "next").tick(s.created_ms + MINUTE + 500)

    assert [(f.outcome, f.created) for f in fires] == [(sched.SUBMITTED, False)]
    assert len(scheduled_jobs(store)) == 1
    view = sched.show_schedule(store, s.id)
    assert view["fires"] == 1 and view["last_job"] == fires[0].job_id


def test_a_tick_that_finds_the_lease_held_does_nothing(store: Store) -> None:
    s = sched.add_schedule(store, SPEC, every="PT1M")
    store.singleton(sched.SINGLETON, "acquire", "someone-else", 60_000)

    assert ticker(store, "a").tick(s.created_ms + MINUTE) == []
    store.singleton(sched.SINGLETON, "release", "someone-else", 1)
    assert len(submitted(ticker(store, "a").tick(s.created_ms + MINUTE))) == 1


def test_the_job_records_its_schedule_and_fire_time(store: Store) -> None:
    s = sched.add_schedule(store, SPEC, every="PT1M")

    (fire,) = ticker(store, "a").tick(s.created_ms + MINUTE)

    assert fire.job_id is not None
    fields = store.job_fields(fire.job_id)
    assert fields["schedule_id"].decode() == s.id
    assert float(fields["fire_time"]) == (s.created_ms + MINUTE) / 1000
    assert fields["name"].decode() == "report"
    assert fields["idem"].decode() == f"{s.id}:{s.created_ms + MINUTE}"


def test_schedule_run_names_the_job_a_fire_made_and_none_for_a_fire_not_run(
    store: Store,
) -> None:
    s = sched.add_schedule(store, SPEC, every="PT1M")
    (fire,) = ticker(store, "a").tick(s.created_ms + MINUTE)

    assert store.schedule_run(s.id, s.created_ms + MINUTE) == fire.job_id
    assert store.schedule_run(s.id, s.created_ms + 2 * MINUTE) is None
    assert store.schedule_run("no-such-schedule", s.created_ms + MINUTE) is None


def test_jobs_a_schedule_fired_are_listed_by_it_and_schedules_are_listed_in_pages(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(schedules_manage, "LIST_PAGE", 2)
    schedules = [sched.add_schedule(store, SPEC, every="PT1M") for _ in range(5)]
    fires = ticker(store, "a").tick(max(s.created_ms for s in schedules) + MINUTE)

    assert sorted(v["id"] for v in sched.list_schedules(store)) == sorted(s.id for s in schedules)
    for s in schedules:
        (fire,) = [f for f in fires if f.schedule_id == s.id]
        listed = store.list_jobs(schedule_id=s.id)
        assert [(j["id"], j["fire_time"]) for j in listed] == [(fire.job_id, fire.fire_ms / 1000)]


def test_list_and_the_dashboard_filter_jobs_by_a_schedules_name_as_by_its_id(
    store: Store, cli: Cli, client: Client
) -> None:
    dashboard = Dashboard(client)
    named = sched.add_schedule(store, SPEC, every="PT1M", name="nightly")
    other = sched.add_schedule(store, SPEC, every="PT1M", name="other")
    fires = ticker(store, "a").tick(max(named.created_ms, other.created_ms) + MINUTE)
    (fired,) = [f.job_id for f in fires if f.schedule_id == named.id]

    for ref in (named.id, "nightly"):
        listed = cli("list", "--schedule", ref, "--json")
        assert listed.code == 0, listed.stderr
        assert [row["id"] for row in listed.json()] == [fired]
        page = dashboard.get(f"/jobs?schedule={ref}")
        assert page.status_code == 200, page.text
        assert re.findall(r'data-job="([^"]+)"', page.text) == [fired]
    assert cli("list", "--schedule", "no-such-schedule", "--json").json() == []
    dashboard.close()


# -- catch-up after the scheduler was down ---------------------------------------------------


def test_catchup_all_submits_every_fire_missed_while_down(store: Store) -> None:
    s = sched.add_schedule(store, SPEC, every="PT1M", overlap="allow", catchup="all")

    fires = ticker(store, "a").tick(s.created_ms + 10 * MINUTE + 5_000)

    assert [f.fire_ms for f in submitted(fires)] == [
        s.created_ms + k * MINUTE for k in range(1, 11)
    ]
    assert sched.show_schedule(store, s.id)["next_fire"] == (s.created_ms + 11 * MINUTE) / 1000


def test_catchup_one_submits_the_latest_missed_fire_and_records_the_rest(store: Store) -> None:
    s = sched.add_schedule(store, SPEC, every="PT1M", catchup="one")

    fires = ticker(store, "a").tick(s.created_ms + 10 * MINUTE + 5_000)

    assert [f.fire_ms for f in submitted(fires)] == [s.created_ms + 10 * MINUTE]
    (missed,) = [f for f in fires if f.outcome == sched.MISSED]
    assert (missed.fire_ms, missed.until_ms, missed.count) == (
        s.created_ms + MINUTE,
        s.created_ms + 9 * MINUTE,
        9,
    )
    view = sched.show_schedule(store, s.id)
    assert (view["fires"], view["missed"]) == (1, 9)
    assert [r["outcome"] for r in view["recent"]] == [sched.SUBMITTED, sched.MISSED]


def test_catchup_none_submits_nothing_missed_and_resumes_on_time(store: Store) -> None:
    s = sched.add_schedule(store, SPEC, every="PT1M", catchup="none")
    a = ticker(store, "a")

    late = a.tick(s.created_ms + 10 * MINUTE + GRACE_MS + 1)

    assert submitted(late) == []
    assert [(f.outcome, f.count) for f in late] == [(sched.MISSED, 10)]
    on_time = a.tick(s.created_ms + 11 * MINUTE + 1_000)
    assert [f.fire_ms for f in submitted(on_time)] == [s.created_ms + 11 * MINUTE]


def test_catchup_none_still_runs_a_fire_that_is_only_a_tick_late(store: Store) -> None:
    s = sched.add_schedule(store, SPEC, every="PT1M", catchup="none")

    fires = ticker(store, "a").tick(s.created_ms + MINUTE + 2_000)

    assert [f.fire_ms for f in submitted(fires)] == [s.created_ms + MINUTE]


# -- overlap ---------------------------------------------------------------------------------


def test_overlap_skip_skips_a_fire_while_the_previous_run_is_going_and_records_it(
    store: Store, client: Client
) -> None:
    s = sched.add_schedule(store, SPEC, every="PT1M", overlap="skip")
    a = ticker(store, "a")
    (first,) = a.tick(s.created_ms + MINUTE)  # no worker: the job stays pending, i.e. going

    (skip,) = a.tick(s.created_ms + 2 * MINUTE)

    assert (skip.outcome, skip.fire_ms) == (sched.SKIPPED, s.created_ms + 2 * MINUTE)
    assert first.job_id is not None and first.job_id in (skip.reason or "")
    view = sched.show_schedule(store, s.id)
    assert (view["fires"], view["skipped"]) == (1, 1)
    assert view["recent"][0]["outcome"] == sched.SKIPPED
    assert first.job_id in view["recent"][0]["reason"]
    assert len(scheduled_jobs(store)) == 1

    client.cancel(first.job_id)  # type: ignore[arg-type]
    (third,) = a.tick(s.created_ms + 3 * MINUTE)
    assert (third.outcome, third.fire_ms) == (sched.SUBMITTED, s.created_ms + 3 * MINUTE)


def test_overlap_allow_runs_fires_side_by_side(store: Store) -> None:
    s = sched.add_schedule(store, SPEC, every="PT1M", overlap="allow")
    a = ticker(store, "a")
    a.tick(s.created_ms + MINUTE)

    assert [f.outcome for f in a.tick(s.created_ms + 2 * MINUTE)] == [sched.SUBMITTED]
    assert len(scheduled_jobs(store)) == 2


def test_overlap_buffer_one_runs_one_buffered_fire_when_the_previous_run_ends(
    store: Store, client: Client
) -> None:
    s = sched.add_schedule(store, SPEC, every="PT1M", overlap="buffer-one")
    a = ticker(store, "a")
    (first,) = a.tick(s.created_ms + MINUTE)

    assert [f.outcome for f in a.tick(s.created_ms + 2 * MINUTE)] == [sched.BUFFERED]
    assert [f.outcome for f in a.tick(s.created_ms + 3 * MINUTE)] == [sched.SKIPPED]
    assert a.tick(s.created_ms + 3 * MINUTE + 1_000) == []  # still going: the buffer waits

    client.cancel(first.job_id)  # type: ignore[arg-type]
    (buffered,) = a.tick(s.created_ms + 3 * MINUTE + 2_000)
    assert (buffered.outcome, buffered.fire_ms) == (sched.SUBMITTED, s.created_ms + 2 * MINUTE)
    assert sched.show_schedule(store, s.id)["buffered_fire"] is None


# -- one-time, pause, resume, remove ---------------------------------------------------------


def test_at_fires_once_then_the_schedule_is_done(store: Store) -> None:
    now = sched.now_ms(store)
    at = datetime.fromtimestamp((now + MINUTE) / 1000, ZoneInfo("UTC")).isoformat()
    s = sched.add_schedule(store, SPEC, at=at, name="launch")
    a = ticker(store, "a")
    assert a.tick(s.trigger.at_ms - 1) == []  # type: ignore[operator]

    fires = a.tick(s.trigger.at_ms + 1_000)  # type: ignore[operator]

    assert [(f.outcome, f.fire_ms) for f in fires] == [(sched.SUBMITTED, s.trigger.at_ms)]
    view = sched.show_schedule(store, s.id)
    assert (view["state"], view["next_fire"]) == ("done", None)
    assert a.tick(s.trigger.at_ms + 10 * MINUTE) == []  # type: ignore[operator]
    assert store.redis.zscore(store.keys.schedules_due(), s.id) is None
    assert store.redis.pttl(store.keys.schedule(s.id)) > 0  # kept like a finished job
    assert store.redis.pttl(store.keys.schedule_name("launch")) > 0  # then the name is free
    assert len(scheduled_jobs(store)) == 1


def test_a_paused_schedule_does_not_fire_and_resumes_from_now(store: Store) -> None:
    s = sched.add_schedule(store, SPEC, every="PT1M", catchup="all")
    a = ticker(store, "a")
    assert sched.pause_schedule(store, s.id)["state"] == "paused"

    assert a.tick(s.created_ms + 5 * MINUTE + 1_000) == []
    # paused, it has no next fire: not one in the past, where the ticker left it
    assert sched.show_schedule(store, s.id)["next_fire"] is None
    (listed,) = sched.list_schedules(store)
    assert (listed["state"], listed["next_fire"]) == ("paused", None)

    view = sched.resume_schedule(store, s.id, now=s.created_ms + 5 * MINUTE + 1_000)
    assert view["state"] == "active"
    assert view["next_fire"] == (s.created_ms + 6 * MINUTE) / 1000  # the paused fires are gone
    assert a.tick(s.created_ms + 5 * MINUTE + 2_000) == []
    fires = a.tick(s.created_ms + 6 * MINUTE)
    assert [f.fire_ms for f in submitted(fires)] == [s.created_ms + 6 * MINUTE]


def test_removed_schedule_is_gone_and_never_fires(store: Store) -> None:
    s = sched.add_schedule(store, SPEC, every="PT1M", name="hourly-report")

    assert sched.remove_schedule(store, "hourly-report") == s.id

    assert ticker(store, "a").tick(s.created_ms + 5 * MINUTE) == []
    assert sched.list_schedules(store) == []
    with pytest.raises(NotFound, match="no schedule"):
        sched.show_schedule(store, s.id)
    assert not store.redis.exists(store.keys.schedule(s.id), store.keys.schedule_fires(s.id))
    assert not store.redis.exists(store.keys.schedule_name("hourly-report"))
    sched.add_schedule(store, SPEC, every="PT1M", name="hourly-report")  # the name is free


def test_a_pause_landing_while_a_tick_decides_wins_over_the_stale_decision(store: Store) -> None:
    s = sched.add_schedule(store, SPEC, every="PT1M")
    a = ticker(store, "a")
    decide = a._apply

    def pause_then_decide(
        schedule: sched.Schedule, state: sched.ScheduleState, now: int
    ) -> tuple[sched.ScheduleState, Any]:
        if sched.show_schedule(store, s.id)["state"] != "paused":
            sched.pause_schedule(other_store(store), s.id)
        return decide(schedule, state, now)

    a._apply = pause_then_decide  # type: ignore[method-assign]

    assert a.tick(s.created_ms + MINUTE) == []

    view = sched.show_schedule(store, s.id)
    assert (view["state"], view["pending_fire"]) == ("paused", None)
    read = sched.read_schedule(store, s.id)
    assert read is not None and read[1].next == s.created_ms + MINUTE  # not advanced
    assert view["next_fire"] is None  # paused: it fires nothing
    assert view["recent"] == [] and scheduled_jobs(store) == []
    assert store.redis.zscore(store.keys.schedules_due(), s.id) is None


def test_a_schedule_removed_while_its_fire_is_submitted_stays_removed(store: Store) -> None:
    s = sched.add_schedule(store, SPEC, every="PT1M", name="etl")
    racing = other_store(store)
    submit = racing.submit_many

    def submit_then_remove(*args: Any, **kwargs: Any) -> Any:
        submitted_job = submit(*args, **kwargs)
        sched.remove_schedule(store, "etl")
        return submitted_job

    racing.submit_many = submit_then_remove  # type: ignore[method-assign]

    assert ticker(racing, "a").tick(s.created_ms + MINUTE) == []  # its confirm found nothing

    assert len(scheduled_jobs(store)) == 1  # the job it submitted stays
    keys = store.keys.schedule_keys(s.id, "etl")
    assert not store.redis.exists(*keys[:2], keys[4])  # no half schedule written back
    assert store.redis.zscore(store.keys.schedules_due(), s.id) is None


def test_names_are_unique_and_usable_in_place_of_ids(store: Store) -> None:
    s = sched.add_schedule(store, SPEC, every="PT1M", name="etl")
    with pytest.raises(SpecError, match=f"a schedule named 'etl' exists already \\({s.id}\\)"):
        sched.add_schedule(store, SPEC, every="PT1M", name="etl")
    assert sched.pause_schedule(store, "etl")["id"] == s.id


def test_a_spec_with_its_own_idempotency_key_is_refused(store: Store) -> None:
    with pytest.raises(SpecError, match="cannot set 'idempotency_key'"):
        sched.add_schedule(store, {**SPEC, "idempotency_key": "k"}, every="PT1M")


# -- the CLI ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("flags", "problem"),
    [
        (["--cron", "0 0 31 2 *"], "can never fire: day(s) [31] can never occur in month(s) [2]"),
        (["--cron", "0 25 * * *"], "the hour field '25' is not valid"),
        (["--cron", "* * * *"], "it has 4 fields"),
        (["--every", "garbage"], "--every must be a duration (seconds, or 90s, 15m, 3d, PT1H)"),
        (["--every", "P1M"], "months and years have none"),
        (["--every", "500ms"], "--every must be a duration >= 1s and at most 36600d, got '500ms'"),
        (["--at", "soon"], "'soon' is not an ISO-8601 date-time"),
        (["--cron", "0 9 * * *", "--tz", "Mars/Olympus"], "unknown time zone 'Mars/Olympus'"),
        (["--every", "PT1M", "--cron", "* * * * *"], "give exactly one of"),
    ],
)
def test_cli_refuses_bad_schedules_with_exit_2_naming_the_problem(
    redis_url: str, namespace: str, tmp_path: Path, flags: list[str], problem: str
) -> None:
    result = invoke(redis_url, namespace, "add", spec_file(tmp_path), *flags)

    assert result.exit_code == 2, result.output
    assert problem in result.stderr
    assert invoke(redis_url, namespace, "list", "--json").stdout.strip() == "[]"


def test_cli_cron_with_tz_fires_at_local_time(
    redis_url: str, namespace: str, tmp_path: Path
) -> None:
    result = invoke(
        redis_url, namespace, "add", spec_file(tmp_path), "--cron", "0 9 * * *",
        "--tz", "Europe/Paris", "--name", "morning",
    )  # fmt: skip
    assert result.exit_code == 0, result.stderr
    schedule_id = result.stdout.strip()

    shown = invoke(redis_url, namespace, "show", "morning", "--json")

    view = json.loads(shown.stdout)
    assert view["id"] == schedule_id and view["tz"] == "Europe/Paris"
    local = datetime.fromtimestamp(view["next_fire"], ZoneInfo("Europe/Paris"))
    assert (local.hour, local.minute, local.second) == (9, 0, 0)


def test_cli_add_list_pause_resume_remove(redis_url: str, namespace: str, tmp_path: Path) -> None:
    added = invoke(redis_url, namespace, "add", spec_file(tmp_path), "--every", "PT1H30M")
    assert added.exit_code == 0, added.stderr
    schedule_id = added.stdout.strip()

    rows = json.loads(invoke(redis_url, namespace, "list", "--json").stdout)
    assert [(r["id"], r["kind"], r["expr"], r["state"]) for r in rows] == [
        (schedule_id, "every", "PT1H30M", "active")
    ]
    assert (rows[0]["overlap"], rows[0]["catchup"]) == ("skip", "one")
    assert rows[0]["next_fire"] - rows[0]["created_at"] == pytest.approx(5400)

    assert invoke(redis_url, namespace, "pause", schedule_id).stdout.strip().endswith("paused")
    assert json.loads(invoke(redis_url, namespace, "list", "--json").stdout)[0]["state"] == (
        "paused"
    )
    resumed = invoke(redis_url, namespace, "resume", schedule_id)
    assert resumed.exit_code == 0 and "active" in resumed.stdout
    assert invoke(redis_url, namespace, "show", schedule_id).exit_code == 0
    assert invoke(redis_url, namespace, "list").exit_code == 0

    assert invoke(redis_url, namespace, "remove", schedule_id).exit_code == 0
    gone = invoke(redis_url, namespace, "show", schedule_id)
    assert gone.exit_code == 2 and "no schedule" in gone.stderr
    assert invoke(redis_url, namespace, "remove", schedule_id).exit_code == 2


# -- the Python client -----------------------------------------------------------------------


def test_client_schedule_list_and_remove(client: Client) -> None:
    if not hasattr(Client, "schedule"):
        pytest.skip("Client.schedule/schedules/remove_schedule are not wired into client.py yet")
    schedule_id = client.schedule(SPEC, cron="0 9 * * *", tz="Europe/Paris", name="daily")
    with pytest.raises(SpecError, match="can never fire"):
        client.schedule(SPEC, cron="0 0 31 2 *")

    (row,) = client.schedules()
    assert (row["id"], row["name"], row["overlap"], row["catchup"]) == (
        schedule_id, "daily", "skip", "one",
    )  # fmt: skip
    client.remove_schedule(schedule_id)
    assert client.schedules() == []
