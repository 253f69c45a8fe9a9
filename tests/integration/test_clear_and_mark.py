"""`jobcenter clear` and `jobcenter mark` with real workers: an on-call person re-runs a
failed branch from its root, settles a stuck task by hand, and neither races a task that
runs meanwhile."""

from __future__ import annotations

from collections import Counter

from harness import Cli
from helpers import wait_until
from integration_harness import JOB_SECONDS, Scratch, Workers

from jobcenter import Client
from jobcenter.model import codec


def _runs(scratch: Scratch) -> Counter[str]:
    return Counter(str(r.get("label") or r["task"]) for r in scratch.events("run"))


def test_clear_downstream_reruns_a_failed_branch_from_its_root(
    cli: Cli, client: Client, workers: Workers, scratch: Scratch
) -> None:
    """extract -> load -> report, load failing once: the failed job (compacted by then) runs
    again from load, keeping extract's result; who and why are in the history."""
    workers.start()
    job_id = client.submit(
        {
            "name": "branch",
            "tasks": [
                {"id": "extract", "task": "tasks_for_tests.record", "args": ["extract"]},
                {
                    "id": "load",
                    "task": "tasks_for_tests.fail_times",
                    "args": [1, "load"],
                    "depends_on": ["extract"],
                },
                {
                    "id": "report",
                    "task": "tasks_for_tests.record",
                    "depends_on": ["load"],
                    "inputs": {"label": "load"},
                },
            ],
        }  # fmt: skip
    )
    assert client.wait(job_id, JOB_SECONDS)["state"] == "failed"
    wait_until(lambda: client.store.records(job_id).packed is not None, JOB_SECONDS)

    result = cli("clear", job_id, "load", "--downstream", "--by", "oncall", "--reason", "creds")

    assert result.code == 0, result.stderr
    assert "2 tasks to run again (load, report)" in result.stdout
    status = client.wait(job_id, JOB_SECONDS)
    assert status["state"] == "succeeded"
    assert client.result(job_id, "report") == 2  # load's second call returned 2
    assert client.result(job_id, "extract") == "extract"
    assert _runs(scratch)["extract"] == 1
    cleared = [h for h in client.history(job_id) if h["handler"] == "oncall"]
    assert [(h["task"], h["error"]) for h in cleared] == [("load", "cleared by oncall: creds")]
    assert client.dead_letters() == []


def test_clear_racing_a_running_downstream_task(
    cli: Cli, client: Client, workers: Workers, scratch: Scratch
) -> None:
    """a succeeded and b, below it, runs: clearing a with its downstream is refused (exit 5,
    nothing changed); clearing a alone runs a again while b runs on, and the job ends
    succeeded once both ended, each counted once."""
    workers.start()
    job_id = client.submit(
        {
            "name": "race",
            "tasks": [
                {"id": "a", "task": "tasks_for_tests.record", "args": ["a"]},
                {"id": "b", "task": "tasks_for_tests.block", "args": ["b"], "depends_on": ["a"]},
            ],
        }
    )
    wait_until(lambda: client.status(job_id)["tasks"]["b"]["state"] == "running", JOB_SECONDS)

    refused = cli("clear", job_id, "a", "--downstream")

    assert refused.code == 5, refused.stderr
    assert "task b is running: clear once it has ended" in refused.stderr
    assert client.status(job_id)["tasks"]["a"]["state"] == "succeeded"
    assert cli("clear", job_id, "a").code == 0
    wait_until(lambda: _runs(scratch)["a"] == 2, JOB_SECONDS, message="a did not run again")
    assert client.status(job_id)["tasks"]["b"]["state"] == "running"
    scratch.open_gate("b")
    status = client.wait(job_id, JOB_SECONDS)
    assert status["state"] == "succeeded"
    assert {t: s["attempts"] for t, s in status["tasks"].items()} == {"a": 2, "b": 1}
    assert len(scratch.events("started", "b")) == 1


def test_mark_a_task_whose_retry_is_due_succeeded(
    cli: Cli, client: Client, workers: Workers, scratch: Scratch
) -> None:
    """A task waits for a retry that is due (no worker claimed it yet): marked succeeded with
    a result, it never runs again and its child gets that result."""
    worker = workers.start()
    job_id = client.submit(
        {
            "name": "due",
            "tasks": [
                {
                    "id": "vendor",
                    "task": "tasks_for_tests.retry_later",
                    "args": [0.5],
                    "retries": 5,
                },
                {
                    "id": "after",
                    "task": "tasks_for_tests.record",
                    "depends_on": ["vendor"],
                    "inputs": {"label": "vendor"},
                },
            ],
        }  # fmt: skip
    )
    wait_until(
        lambda: client.status(job_id)["tasks"]["vendor"]["state"] == "retry_wait", JOB_SECONDS
    )
    assert worker.stop() == 0  # nothing claims the retry now
    keys = client.store.keys
    delayed = keys.delayed(keys.job_shard(job_id), "default")

    def due() -> bool:
        seconds, micros = workers.redis.time()
        now_ms = seconds * 1000 + micros // 1000
        return bool(workers.redis.zrangebyscore(delayed, "-inf", now_ms))

    wait_until(due, JOB_SECONDS, message="the retry never came due")

    marked = cli("mark", job_id, "vendor", "--succeeded", "--result", '"by hand"',
                 "--by", "oncall", "--reason", "vendor confirmed")  # fmt: skip

    assert marked.code == 0, marked.stderr
    assert "marked succeeded (it was retry_wait)" in marked.stdout
    assert not workers.redis.zcard(delayed)
    workers.start()
    assert client.wait(job_id, JOB_SECONDS)["state"] == "succeeded"
    assert client.result(job_id, "after") == "by hand"
    assert len(scratch.events("run", "vendor")) == 1
    (line,) = [h for h in client.history(job_id) if h["handler"] == "oncall"]
    assert (line["task"], line["state"]) == ("vendor", "succeeded")
    assert line["error"] == "marked succeeded by oncall: vendor confirmed"


def test_mark_a_stuck_task_succeeded_lets_the_job_go_on(
    cli: Cli, client: Client, workers: Workers, scratch: Scratch
) -> None:
    """A task no worker has the code of waits in its queue: marked succeeded, its child
    runs and the job ends; marking it again is refused (exit 5)."""
    workers.start()
    job_id = client.submit(
        {
            "name": "stuck",
            "tasks": [
                {"id": "legacy", "task": "nobody.has_this"},
                {
                    "id": "after",
                    "task": "tasks_for_tests.record",
                    "args": ["after"],
                    "depends_on": ["legacy"],
                },
            ],
        }  # fmt: skip
    )
    wait_until(lambda: client.status(job_id)["tasks"]["legacy"]["waiting_for"], JOB_SECONDS)

    marked = cli("mark", job_id, "legacy", "--succeeded", "--reason", "ran it by hand")

    assert marked.code == 0, marked.stderr
    assert client.wait(job_id, JOB_SECONDS)["state"] == "succeeded"
    assert _runs(scratch)["after"] == 1
    again = cli("mark", job_id, "legacy", "--failed")
    assert again.code == 5
    assert "legacy ended succeeded already" in again.stderr


def _packed(client: Client, job_id: str) -> bool:
    return client.store.records(job_id).packed is not None


def test_clear_reruns_tasks_of_a_succeeded_job_after_it_was_compacted(
    cli: Cli, client: Client, workers: Workers, scratch: Scratch
) -> None:
    """A job that succeeded and was compacted runs a branch again (`--downstream`), with the
    inputs, limits, timeout and trigger rule it was submitted with, and later one task
    alone; it succeeds each time, the tasks kept run no more."""
    workers.start()
    job_id = client.submit(
        {
            "name": "succeeded-then-cleared",
            "tasks": [
                {"id": "extract", "task": "tasks_for_tests.record", "args": ["extract"]},
                {
                    "id": "load",
                    "task": "tasks_for_tests.record",
                    "args": ["loaded"],
                    "depends_on": ["extract"],
                    "timeout": 30,
                    "concurrency_key": "warehouse",
                    "concurrency_limit": 1,
                },
                {
                    "id": "report",
                    "task": "tasks_for_tests.record",
                    "depends_on": ["load"],
                    "inputs": {"label": "load"},
                    "trigger_rule": "all_done",
                },
            ],
        }  # fmt: skip
    )
    assert client.wait(job_id, JOB_SECONDS)["state"] == "succeeded"
    wait_until(lambda: _packed(client, job_id), JOB_SECONDS, message="not compacted")

    result = cli("clear", job_id, "load", "--downstream", "--by", "oncall")

    assert result.code == 0, result.stderr
    assert "2 tasks to run again (load, report)" in result.stdout
    assert client.wait(job_id, JOB_SECONDS)["state"] == "succeeded"
    assert client.result(job_id, "report") == "loaded"  # its input, load's result, came again
    assert _runs(scratch) == Counter({"extract": 1, "loaded": 4})  # load and report twice
    wait_until(lambda: _packed(client, job_id), JOB_SECONDS, message="not compacted again")
    payload, limits, rule = client.store.records(job_id).values(["p:1", "l:1", "tr:2"])
    assert codec.unpack(payload or b"")["to"] == 30  # type: ignore[index]
    assert limits is not None and rule == b"all_done"

    alone = cli("clear", job_id, "extract", "--by", "oncall")

    assert alone.code == 0, alone.stderr
    assert "tasks to run again (extract)" in alone.stdout
    assert client.wait(job_id, JOB_SECONDS)["state"] == "succeeded"
    assert _runs(scratch) == Counter({"extract": 2, "loaded": 4})
    assert {t: s["state"] for t, s in client.status(job_id)["tasks"].items()} == {
        "extract": "succeeded",
        "load": "succeeded",
        "report": "succeeded",
    }
