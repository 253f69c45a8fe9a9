"""The worker protocol over HTTP, on the Python worker's own transitions: a claim long-polls,
hands out attempts with their inputs; a heartbeat renews the lease and answers 409 once the
attempt was cancelled, taken over or ran past its timeout; a late or fenced-off report is a
409 and changes nothing; tasks an executor cannot run go to a worker that can; an executor
shows among the workers."""

from __future__ import annotations

import threading
import time
from typing import Any

import httpx
from api_harness import LEASE_SECONDS, ApiServer, Workers
from helpers import wait_until

from jobcenter import Client
from jobcenter.storage import views

STEP = "jobcenter.demo.step"


def claim(api: ApiServer, token: str, **body: Any) -> dict[str, Any]:
    reply = api.call("POST", "/worker/claim", token, json={"tasks": [STEP], **body})
    assert reply.status_code == 200, reply.text
    answer: dict[str, Any] = reply.json()
    return answer


def report(
    api: ApiServer, token: str, attempt: dict[str, Any], kind: str, **body: Any
) -> httpx.Response:
    return api.call("POST", f"/worker/attempts/{attempt['token']}/{kind}", token, json=body)


def test_a_claim_waits_for_work_and_wakes_when_a_job_comes(api: ApiServer) -> None:
    work, submit = api.token("work"), api.token("submit")
    empty = claim(api, work, wait=0.3)
    answers: list[dict[str, Any]] = []
    waiter = threading.Thread(target=lambda: answers.append(claim(api, work, wait=30)))
    started = time.monotonic()
    waiter.start()
    job_id = api.submit(submit, {"name": "late", "tasks": [{"id": "a", "task": STEP, "args": [7]}]})
    waiter.join(60)

    assert empty["attempts"] == [] and empty["worker"]
    (attempt,) = answers[0]["attempts"]
    assert time.monotonic() - started < 30  # woke for the job, not at the end of the wait
    assert (attempt["job_id"], attempt["task_id"], attempt["attempt"]) == (job_id, "a", 1)
    assert (attempt["task"], attempt["args"], attempt["lease_seconds"]) == (
        STEP,
        [7],
        LEASE_SECONDS,
    )


def test_a_child_gets_its_parents_result_as_input_and_the_job_succeeds(
    api: ApiServer, client: Client
) -> None:
    work = api.token("work")
    job_id = api.submit(
        api.token("submit"),
        {
            "name": "flow",
            "tasks": [
                {"id": "a", "task": STEP},
                {
                    "id": "b",
                    "task": STEP,
                    "kwargs": {"x": 1},
                    "inputs": {"n": "a"},
                    "depends_on": ["a"],
                },
            ],
        },
    )
    (first,) = claim(api, work, wait=10)["attempts"]
    progress = api.call(
        "POST", f"/worker/attempts/{first['token']}/heartbeat", work, json={"progress": "half"}
    )
    shown = client.status(job_id)["tasks"]["a"]["progress"]
    done = report(api, work, first, "complete", result={"rows": [1, 2]})
    repeat = report(api, work, first, "complete", result={"rows": [1, 2]})
    (second,) = claim(api, work, wait=10)["attempts"]
    report(api, work, second, "complete", result="ok")

    assert progress.status_code == 200 and shown == "half"
    assert done.json() == {"state": "succeeded", "repeated": False}
    assert repeat.json() == {"state": "succeeded", "repeated": True}
    assert second["inputs"] == {"n": {"rows": [1, 2]}}
    assert second["kwargs"] == {"x": 1, "n": {"rows": [1, 2]}}
    assert client.wait(job_id, timeout=10)["state"] == "succeeded"
    assert client.result(job_id, "b") == "ok"


def test_a_cancelled_attempts_heartbeat_and_report_are_409_and_change_nothing(
    api: ApiServer, client: Client
) -> None:
    work, operate = api.token("work"), api.token("operate")
    job_id = api.submit(operate, {"name": "c", "tasks": [{"id": "a", "task": STEP}]})
    (attempt,) = claim(api, work, wait=10)["attempts"]
    api.call("POST", f"/jobs/{job_id}/cancel", operate)
    before = client.status(job_id)

    beat = report(api, work, attempt, "heartbeat")
    late = report(api, work, attempt, "complete", result=1)
    failed = report(api, work, attempt, "fail", error="x")

    assert beat.status_code == 409 and "cancelled" in beat.json()["detail"]
    assert (late.status_code, failed.status_code) == (409, 409)
    assert client.status(job_id) == before and before["state"] == "cancelled"


def test_an_attempt_taken_over_is_fenced_off(api: ApiServer, client: Client) -> None:
    work = api.token("work")
    spec = {"name": "t", "tasks": [{"id": "a", "task": STEP, "retries": 1, "retry_backoff": 0}]}
    job_id = api.submit(api.token("submit"), spec)
    (stale,) = claim(api, work, worker="slow")["attempts"]
    # no heartbeat: its lease runs out (its attempt counts: a retry is left for the next),
    # and another executor's claim takes the task again
    (fresh,) = claim(api, work, worker="quick", wait=30)["attempts"]

    beat = report(api, work, stale, "heartbeat")
    late = report(api, work, stale, "complete", result="stale")
    done = report(api, work, fresh, "complete", result="fresh")

    assert (stale["attempt"], fresh["attempt"]) == (1, 2)
    assert (
        beat.status_code == 409
        and "attempt 2 (handler quick) took the task over" in beat.json()["detail"]
    )
    assert late.status_code == 409 and done.status_code == 200
    assert client.result(job_id, "a") == "fresh"
    assert [h["handler"] for h in client.history(job_id)] == ["slow", "quick"]


def test_an_attempt_past_its_timeout_is_stopped_and_failed_by_the_server(
    api: ApiServer, client: Client
) -> None:
    work = api.token("work")
    spec = {"name": "slow", "tasks": [{"id": "a", "task": STEP, "timeout": 0.5}]}
    job_id = api.submit(api.token("submit"), spec)
    (attempt,) = claim(api, work, wait=10)["attempts"]

    stopped = wait_until(
        lambda: (r := report(api, work, attempt, "heartbeat")).status_code == 409 and r,
        timeout=10,
        interval=0.1,
    )

    assert attempt["timeout"] == 0.5 and "ran past its timeout" in stopped.json()["detail"]
    assert client.wait(job_id, timeout=10)["state"] == "failed"
    assert "TimeoutError" in client.history(job_id)[0]["error"]


def test_a_failure_retries_while_attempts_remain_then_dead_letters(
    api: ApiServer, client: Client
) -> None:
    work = api.token("work")
    spec = {"name": "f", "tasks": [{"id": "a", "task": STEP, "retries": 1, "retry_backoff": 0}]}
    job_id = api.submit(api.token("submit"), spec)
    (first,) = claim(api, work, wait=10)["attempts"]
    retried = report(api, work, first, "fail", error="boom 1")
    (second,) = claim(api, work, wait=10)["attempts"]
    final = report(api, work, second, "fail", error="boom 2", retryable=False)

    assert retried.json()["state"] in ("retry_wait", "queued")
    assert final.json() == {"state": "failed", "repeated": False}
    assert client.wait(job_id, timeout=10)["state"] == "failed"
    assert client.dead_letters()[0]["error"] == "boom 2"


def test_tasks_an_executor_cannot_run_go_to_a_worker_that_can_and_it_shows_among_workers(
    api: ApiServer, workers: Workers, client: Client
) -> None:
    work = api.token("work")
    job_id = api.submit(
        api.token("submit"), {"name": "m", "tasks": [{"id": "a", "task": STEP, "args": [3]}]}
    )
    got = claim(api, work, worker="shell-1", tasks=["other.task"], max=4, node="edge")
    shown = {w.handler: w for w in views.workers(client.store).workers}
    workers.start()

    assert got["attempts"] == [] and got["worker"] == "shell-1"
    assert client.wait(job_id, timeout=60)["state"] == "succeeded"
    assert shown["shell-1"].queues == ["node:edge", "default"] and shown["shell-1"].slots == 4
    assert [h["handler"] for h in client.history(job_id)][-1] != "shell-1"


def test_an_executor_sends_its_output_with_heartbeats_and_reports_and_logs_shows_it(
    api: ApiServer, client: Client
) -> None:
    work = api.token("work")
    job_id = api.submit(api.token("submit"), {"name": "remote-log", "tasks": [
        {"id": "a", "task": STEP, "retries": 1, "retry_backoff": 0},
    ]})  # fmt: skip
    (first,) = claim(api, work, wait=10)["attempts"]
    beat = report(api, work, first, "heartbeat", log="step 1 of 2\n")
    so_far = client.task_log(job_id, "a")
    failed = report(api, work, first, "fail", error="ValueError: no rows", log="x" * 100_000)
    (second,) = claim(api, work, wait=10)["attempts"]
    done = report(api, work, second, "complete", result=2, log="all rows read\n")

    assert (beat.status_code, failed.status_code, done.status_code) == (200, 200, 200)
    assert (so_far["running"], so_far["log"]) == (True, "step 1 of 2\n")
    cut = client.task_log(job_id, "a", attempt=1)["log"].splitlines()
    assert cut[0].startswith("[jobcenter] ... ") and "bytes dropped" in cut[0]
    assert cut[-1].startswith("[jobcenter] attempt 1 failed on worker ")
    assert cut[-1].endswith(": ValueError: no rows")
    last = client.task_log(job_id, "a")
    assert (last["attempt"], last["running"], last["logged_attempts"]) == (2, False, [1, 2])
    assert last["log"].splitlines()[0] == "all rows read"
