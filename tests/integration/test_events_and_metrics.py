"""The event stream and the metrics, as a person reads them: `jobcenter events` of seed 000's
failure run shows the cascade in order, `--follow` sees a running job, and /metrics (parsed
with Prometheus's own parser) agrees with runs whose outcome is known."""

from __future__ import annotations

import json
import queue
import signal
import subprocess
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from dashboard_harness import Dashboard
from harness import Cli
from helpers import wait_until
from integration_harness import EXAMPLES, JOB_SECONDS, Scratch, Workers
from prometheus_client.parser import text_string_to_metric_families

from jobcenter import Client

FOLLOW_SECONDS = 30.0  # for `events --follow` to print an event it has been sent


def _events(cli: Cli, *args: str) -> list[dict[str, Any]]:
    result = cli("events", "--json", *args)
    assert result.code == 0, result.stderr
    return [json.loads(line) for line in result.stdout.splitlines()]


def test_events_of_the_seed000_failure_run_show_the_cascade_in_order(
    cli: Cli, workers: Workers
) -> None:
    workers.start()
    result = cli(
        "submit", str(EXAMPLES / "seed000_fail.yaml"), "--wait", "--json",
        "--timeout", str(JOB_SECONDS),
    )  # fmt: skip
    assert result.code == 1, result.stderr
    job_id = result.json()["id"]

    # a leader packs the finished job afterwards (compact.lua): its own event, last
    events = wait_until(
        lambda: (e := _events(cli, "--job", job_id)) and e[-1]["kind"] == "compacted" and e,
        timeout=JOB_SECONDS,
        message="no 'compacted' event",
    )
    events = events[:-1]
    kinds = [(e["kind"], e["task"]) for e in events]
    assert kinds[0] == ("submitted", None)
    assert kinds[-1] == ("finalized", None) and events[-1]["detail"] == "failed"
    assert all(e["job"] == job_id for e in events)
    assert [e["time"] for e in events] == sorted(e["time"] for e in events)

    failed = kinds.index(("failed", "t4"))
    assert "step 4 failed on purpose" in events[failed]["error"]
    for child in ("t7", "t9"):
        cascade = kinds.index(("upstream_failed", child))
        assert cascade > failed
        assert events[cascade]["error"] == "upstream task t4 failed"
        assert ("started", child) not in kinds
    for ok in ("t1", "t2", "t3", "t5", "t6", "t8"):
        mine = [k for k, task in kinds if task == ok]
        # a child its parent's worker takes at once starts without going through a queue
        assert mine in (["queued", "started", "succeeded"], ["started", "succeeded"]), (ok, mine)
    started_t4 = events[kinds.index(("started", "t4"))]
    assert started_t4["attempt"] == 1 and started_t4["handler"]

    lines = cli("events", "--job", job_id)
    assert lines.code == 0, lines.stderr
    assert "upstream_failed" in lines.stdout and "t9" in lines.stdout

    # a retry unpacks the record first (restore.lua), then revives the failed tasks
    assert cli("retry", job_id).code == 0
    after = [(e["kind"], e["task"]) for e in _events(cli, "--job", job_id)][len(events) + 1 :]
    assert after[0] == ("restored", None) and after[1][0] == "revived", after


def _reader(proc: subprocess.Popen[str]) -> queue.Queue[str]:
    lines: queue.Queue[str] = queue.Queue()

    def pump() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.put(line)

    threading.Thread(target=pump, daemon=True).start()
    return lines


def _until(lines: queue.Queue[str], kind: str, task: str | None) -> list[dict[str, Any]]:
    """Events read from a follower until one of `kind` for `task` (or the deadline)."""
    seen: list[dict[str, Any]] = []

    def arrived() -> bool:
        while not lines.empty():
            seen.append(json.loads(lines.get()))
        return any(e["kind"] == kind and e["task"] == task for e in seen)

    wait_until(arrived, FOLLOW_SECONDS, message=f"no {kind} {task} event; got {seen}")
    return seen


def test_events_follow_of_a_job_sees_it_run_and_stops_when_it_ends(
    cli: Cli, workers: Workers, client: Client, scratch: Scratch
) -> None:
    workers.start()
    job_id = client.submit(
        {
            "name": "followed",
            "tasks": [
                {"id": "slow", "task": "tasks_for_tests.block", "args": ["follow"]},
                {"id": "after", "task": "tasks_for_tests.record", "depends_on": ["slow"]},
            ],
        }
    )
    follower = cli.start("events", "--job", job_id, "--follow", "--json")
    lines = _reader(follower)
    seen = _until(lines, "started", "slow")
    assert ("submitted", None) in [(e["kind"], e["task"]) for e in seen]

    scratch.open_gate("follow")
    seen = _until(lines, "finalized", None)
    ended = [
        (e["kind"], e["task"]) for e in seen if e["kind"] != "compacted"
    ]  # the leader's, after
    assert ended[-3:] == [
        ("started", "after"),
        ("succeeded", "after"),
        ("finalized", None),
    ]
    assert cli.finish(follower).code == 0  # it stops by itself once the job ended
    again = cli("events", "--job", job_id, "--follow", timeout=FOLLOW_SECONDS)
    assert again.code == 0 and "finalized" in again.stdout  # an ended job: no wait at all


def test_events_follow_without_a_job_ends_on_ctrl_c_with_0(cli: Cli, client: Client) -> None:
    client.submit({"name": "waits", "tasks": [{"id": "a", "task": "t.nobody"}]})
    follower = cli.start("events", "--follow", "--json")
    _until(_reader(follower), "queued", "a")  # it follows now
    follower.send_signal(signal.SIGINT)
    assert cli.finish(follower).code == 0


@pytest.fixture
def dashboard(client: Client) -> Iterator[Dashboard]:
    d = Dashboard(client, token=None)
    yield d
    d.close()


def _samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def test_metrics_count_known_runs(
    cli: Cli, workers: Workers, client: Client, dashboard: Dashboard
) -> None:
    workers.start()
    for spec in ("seed000.yaml", "seed000_fail.yaml"):
        result = cli("submit", str(EXAMPLES / spec), "--wait", "--timeout", str(JOB_SECONDS))
        assert result.code in (0, 1), result.stderr

    reply = dashboard.get("/metrics")
    assert reply.status_code == 200
    assert reply.headers["content-type"].startswith("text/plain")
    samples = _samples(reply.text)

    def finished(task: str, state: str) -> float:
        key = (("queue", "default"), ("state", state), ("task", task))
        return samples.get(("jobcenter_tasks_finished_total", key), 0.0)

    # seed000: 9 steps succeed; seed000_fail: 5 steps + t8 succeed, t4 fails, t7 t9 cascade
    assert finished("jobcenter.demo.step", "succeeded") == 9 + 6
    assert finished("jobcenter.demo.fail", "failed") == 1
    assert finished("jobcenter.demo.step", "upstream_failed") == 2
    assert samples[("jobcenter_jobs_finished_total", (("state", "succeeded"),))] == 1
    assert samples[("jobcenter_jobs_finished_total", (("state", "failed"),))] == 1
    started = 9 + 7  # every task that ran
    wait = (("queue", "default"),)
    assert samples[("jobcenter_queue_wait_seconds_count", wait)] == started
    assert samples[("jobcenter_queue_wait_seconds_bucket", (("le", "+Inf"), *wait))] == started
    step = (("queue", "default"), ("task", "jobcenter.demo.step"))
    assert samples[("jobcenter_task_run_seconds_count", step)] == 15
    assert samples[("jobcenter_task_run_seconds_sum", step)] > 0
    assert samples[("jobcenter_dead_letters", ())] == 1
    assert samples[("jobcenter_workers_alive", ())] == 1
    assert samples[("jobcenter_tasks_running", ())] == 0
    assert samples[("jobcenter_queue_ready", wait)] == 0

    # the CLI prints the same figures
    printed = cli("metrics")
    assert printed.code == 0, printed.stderr
    again = _samples(printed.stdout)
    assert again[("jobcenter_queue_wait_seconds_count", wait)] == started


def test_the_live_view_reads_only_the_changes_after_its_cursor(
    workers: Workers, client: Client, scratch: Scratch, dashboard: Dashboard
) -> None:
    job_id = client.submit(
        {
            "name": "watched",
            "tasks": [
                {"id": "slow", "task": "tasks_for_tests.block", "args": ["live"]},
                {"id": "after", "task": "tasks_for_tests.record", "depends_on": ["slow"]},
            ],
        }
    )
    first: Any = dashboard.json(f"/api/jobs/{job_id}/live")
    assert first["states"] == ["queued", "waiting"] and first["after"]
    cursor = first["after"]
    seen: dict[str, str] = {}

    def news(until: dict[str, str]) -> bool:
        nonlocal cursor
        reply: Any = dashboard.json(f"/api/jobs/{job_id}/live?after={cursor}")
        assert "states" not in reply  # only what changed
        seen.update(reply["changes"])
        cursor = reply["after"]
        return all(seen.get(k) == v for k, v in until.items())

    workers.start()
    wait_until(lambda: news({"0": "running"}), JOB_SECONDS, message=f"saw {seen}")
    assert "1" not in seen
    scratch.open_gate("live")
    wait_until(lambda: news({"0": "succeeded", "1": "succeeded"}), JOB_SECONDS, message=f"{seen}")
    assert client.state(job_id) == "succeeded"
