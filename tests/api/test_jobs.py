"""Jobs over HTTP, as a client uses them: submit (with an Idempotency-Key), read, page through,
follow (JSON and server-sent events), cancel, retry, delete; every error a problem naming
what is wrong, with the HTTP status the CLI's exit code stands for."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
from api_harness import ApiServer, Workers
from helpers import wait_until

from jobcenter import Client
from jobcenter.errors import SpecError
from jobcenter.model.spec import parse_spec
from jobcenter.storage import tokens
from jobcenter.storage.server.embedded import RedisServer

PROBLEM = "application/problem+json"


def one_task(name: str = "one", **extra: Any) -> dict[str, Any]:
    return {
        "name": name,
        "tasks": [{"id": "a", "task": "jobcenter.demo.step", "args": [1]}],
        **extra,
    }


def chain() -> dict[str, Any]:
    return {
        "name": "chain",
        "tasks": [
            {"id": "a", "task": "jobcenter.demo.step", "args": [1]},
            {"id": "b", "task": "jobcenter.demo.step", "args": [2], "depends_on": ["a"]},
        ],
    }


def problem(reply: httpx.Response, status: int) -> dict[str, Any]:
    assert reply.status_code == status, (reply.status_code, reply.text)
    assert reply.headers["content-type"] == PROBLEM
    body: dict[str, Any] = reply.json()
    assert body["status"] == status and body["type"].startswith("urn:jobcenter:problem:")
    return body


def test_a_submit_answers_201_with_the_id_and_its_location(api: ApiServer) -> None:
    token = api.token("submit")

    reply = api.call("POST", "/jobs", token, json=chain())

    assert reply.status_code == 201
    job_id = reply.json()["id"]
    assert reply.headers["location"] == f"/api/v1/jobs/{job_id}"
    assert api.call("GET", reply.headers["location"].removeprefix("/api/v1"), token).json()[
        "tasks"
    ].keys() == {"a", "b"}


def test_an_idempotency_key_returns_the_first_job_and_refuses_another_spec(
    api: ApiServer,
) -> None:
    token = api.token("submit")
    key = {"Idempotency-Key": "order-42"}

    first = api.call("POST", "/jobs", token, json=one_task(), headers=key)
    again = api.call("POST", "/jobs", token, json=one_task(), headers=key)
    other = api.call("POST", "/jobs", token, json=chain(), headers=key)
    both = api.call("POST", "/jobs", token, json=one_task(idempotency_key="x"), headers=key)

    assert (first.status_code, again.status_code) == (201, 200)
    assert first.json() == again.json()
    assert "different spec" in problem(other, 422)["detail"]
    assert "differ" in problem(both, 422)["detail"]
    assert len(api.call("GET", "/jobs", token).json()["jobs"]) == 1


@pytest.mark.parametrize(
    "spec",
    [
        {"name": "cycle", "tasks": [{"id": "a", "task": "x.y", "depends_on": ["a"]}]},
        {"name": "typo", "taks": []},
        {"name": "dep", "tasks": [{"id": "a", "task": "x.y", "depends_on": ["nope"]}]},
    ],
)
def test_a_bad_spec_is_a_422_naming_the_problem_as_submit_does(
    api: ApiServer, client: Client, spec: dict[str, Any]
) -> None:
    with pytest.raises(SpecError) as expected:
        parse_spec(spec)

    body = problem(api.call("POST", "/jobs", api.token("submit"), json=spec), 422)

    assert body["detail"] == str(expected.value) and body["exit_code"] == 2
    assert client.list() == []  # nothing written


def test_a_body_that_is_not_json_is_a_400(api: ApiServer) -> None:
    reply = api.call(
        "POST", "/jobs", api.token("submit"), content=b"{nope",
        headers={"Content-Type": "application/json"},
    )  # fmt: skip

    assert problem(reply, 400)["title"] == "The request cannot be read"


def test_unknown_jobs_and_tasks_are_404_and_a_result_not_there_yet_is_409(
    api: ApiServer,
) -> None:
    token = api.token("operate")
    job_id = api.submit(token, one_task())

    for method, path in [
        ("GET", "/jobs/01NOSUCHJOB"),
        ("GET", "/jobs/01NOSUCHJOB/history"),
        ("GET", "/jobs/01NOSUCHJOB/events"),
        ("POST", "/jobs/01NOSUCHJOB/cancel"),
        ("DELETE", "/jobs/01NOSUCHJOB"),
        ("GET", f"/jobs/{job_id}/tasks/zz/result"),
    ]:
        assert "no " in problem(api.call(method, path, token), 404)["detail"], path
    not_yet = problem(api.call("GET", f"/jobs/{job_id}/tasks/a/result", token), 409)
    assert "has no result yet" in not_yet["detail"] and not_yet["exit_code"] == 7


def test_a_job_runs_and_reads_back_as_the_cli_shows_it(
    api: ApiServer, workers: Workers, client: Client
) -> None:
    token = api.token("read")
    job_id = api.submit(api.token("submit"), chain())
    workers.start()

    assert api.wait_finished(token, job_id) == "succeeded"
    status = api.call("GET", f"/jobs/{job_id}", token).json()
    history = api.call("GET", f"/jobs/{job_id}/history", token, params={"count": 1}).json()
    rest = api.call(
        "GET", f"/jobs/{job_id}/history", token, params={"start": history["next_start"]}
    ).json()
    result = api.call("GET", f"/jobs/{job_id}/tasks/b/result", token).json()

    assert status == json.loads(json.dumps(client.status(job_id)))
    assert [h["task"] for h in history["attempts"] + rest["attempts"]] == ["a", "b"]
    assert rest["next_start"] is None
    assert result == {"job": job_id, "task": "b", "result": 2}


def test_a_failed_tasks_log_reads_back_by_attempt_and_an_attempt_it_never_had_is_404(
    api: ApiServer, workers: Workers
) -> None:
    token = api.token("read")
    spec = {"name": "fails", "tasks": [{"id": "a", "task": "jobcenter.demo.fail", "args": [1]}]}
    job_id = api.submit(api.token("submit"), spec)
    workers.start()
    assert api.wait_finished(token, job_id) == "failed"

    shown = api.call("GET", f"/jobs/{job_id}/tasks/a/logs", token).json()
    first = api.call("GET", f"/jobs/{job_id}/tasks/a/logs", token, params={"attempt": 1}).json()
    never = api.call("GET", f"/jobs/{job_id}/tasks/a/logs", token, params={"attempt": 9})

    assert shown == first
    assert (shown["attempt"], shown["attempts"], shown["logged_attempts"]) == (1, 1, [1])
    lines = shown["log"].splitlines()
    assert lines[0].endswith("INFO jobcenter.demo: step 1: reading its input")
    assert lines[1] == "step 1: input has no rows"
    assert lines[2].startswith("[jobcenter] attempt 1 failed on worker ")
    assert lines[2].endswith(": RuntimeError: step 1 failed on purpose")
    assert "has no attempt 9" in problem(never, 404)["detail"]


def test_the_list_pages_with_a_cursor_through_every_job_once(api: ApiServer) -> None:
    token = api.token("submit")
    made = [api.submit(token, one_task(f"job-{n}")) for n in range(7)]
    seen: list[str] = []
    cursor = None
    pages = 0
    while True:
        params: dict[str, Any] = {"limit": 3, **({"cursor": cursor} if cursor else {})}
        page = api.call("GET", "/jobs", token, params=params).json()
        seen += [job["id"] for job in page["jobs"]]
        pages += 1
        cursor = page["next_cursor"]
        if cursor is None:
            break
    named = api.call("GET", "/jobs", token, params={"name": "job-3"}).json()["jobs"]

    assert seen == sorted(made, reverse=True) and pages == 3
    assert [job["id"] for job in named] == [made[3]]
    assert problem(api.call("GET", "/jobs", token, params={"cursor": "%%%"}), 422)


def test_events_read_as_json_pages_and_follow_live_as_server_sent_events(
    api: ApiServer, workers: Workers
) -> None:
    token = api.token("submit")
    job_id = api.submit(token, chain())
    kinds: list[str] = []
    ids: list[str] = []

    with api.http.stream(
        "GET",
        f"/jobs/{job_id}/events",
        headers={"Authorization": f"Bearer {token}", "Accept": "text/event-stream"},
    ) as stream:
        assert stream.headers["content-type"].startswith("text/event-stream")
        workers.start()  # the stream is open before anything ran: what follows comes live
        for line in stream.iter_lines():
            if line.startswith("event: "):
                kinds.append(line.removeprefix("event: "))
            elif line.startswith("id: "):
                ids.append(line.removeprefix("id: "))
    first = api.call("GET", f"/jobs/{job_id}/events", token, params={"limit": 1}).json()
    after = api.call(
        "GET", f"/jobs/{job_id}/events", token, params={"after": first["after"]}
    ).json()

    assert kinds[0] == "submitted" and kinds[-1] == "end"
    assert kinds.count("succeeded") == 2 and "finalized" in kinds
    page = [e["kind"] for e in first["events"] + after["events"]]
    streamed = kinds[:-1]  # "end" is the stream's own; the job may log more after it (compacted)
    assert page[: len(streamed)] == streamed


def test_cancel_retry_and_delete_answer_as_the_cli_does(
    api: ApiServer, workers: Workers, client: Client
) -> None:
    token = api.token("operate")
    waiting = api.submit(token, one_task())
    failing = api.submit(
        token, {"name": "fails", "tasks": [{"id": "a", "task": "jobcenter.demo.fail", "args": [1]}]}
    )
    running = api.call("DELETE", f"/jobs/{waiting}", token)
    cancelled = api.call("POST", f"/jobs/{waiting}/cancel", token)
    again = api.call("POST", f"/jobs/{waiting}/cancel", token)
    revive_cancelled = api.call("POST", f"/jobs/{waiting}/retry", token)
    workers.start()
    assert api.wait_finished(token, failing) == "failed"
    retried = api.call("POST", f"/jobs/{failing}/retry", token)
    assert api.wait_finished(token, failing) == "failed"
    deleted = api.call("DELETE", f"/jobs/{failing}", token)

    assert "not finished" in problem(running, 409)["detail"]
    assert cancelled.status_code == 200 and cancelled.json()["state"] == "cancelled"
    assert "cancelled already" in problem(again, 409)["detail"]
    assert "cannot be retried" in problem(revive_cancelled, 409)["detail"]  # as `retry` exits 5
    assert retried.json()["message"] == f"job {failing}: 1 tasks to run again"
    assert deleted.status_code == 204
    assert problem(api.call("GET", f"/jobs/{failing}", token), 404)
    assert len(client.history(waiting)) == 0


def test_redis_unreachable_is_a_503_and_health_says_so(
    redis_url: str, namespace: str, own_redis: RedisServer
) -> None:
    server = ApiServer(own_redis.url, namespace)
    try:
        token = server.token("read")
        assert server.call("GET", "/health").json() == {"status": "ok"}
        own_redis.stop()

        down = server.call("GET", "/jobs", token)
        health = server.call("GET", "/health")

        assert "cannot reach Redis" in problem(down, 503)["detail"]
        assert problem(down, 503)["exit_code"] == 3 and down.headers["retry-after"] == "1"
        assert problem(health, 503)
    finally:
        server.close()


def test_mark_and_clear_a_task_with_an_operate_token_naming_it_in_the_history(
    api: ApiServer, workers: Workers, client: Client
) -> None:
    reader = api.token("read")
    made, _ = tokens.create(client.store, "operate", name="oncall-bot")
    spec = {
        "name": "fails",
        "tasks": [
            {"id": "a", "task": "jobcenter.demo.fail", "args": [1]},
            {"id": "b", "task": "jobcenter.demo.step", "args": [2], "depends_on": ["a"]},
        ],
    }
    job_id = api.submit(made, spec)
    workers.start()
    assert api.wait_finished(made, job_id) == "failed"
    mark = f"/jobs/{job_id}/tasks/a/mark"

    refused = api.call("POST", mark, reader, json={"state": "succeeded"})
    bad = api.call("POST", mark, made, json={"state": "done"})
    marked = api.call("POST", mark, made, json={"state": "succeeded", "result": 1, "reason": "ok"})

    assert refused.status_code == 403, refused.text
    assert problem(bad, 422)
    assert marked.status_code == 200, marked.text
    assert marked.json()["message"] == f"job {job_id}: task a marked succeeded (it was failed)"
    assert api.wait_finished(made, job_id) == "succeeded"
    (line,) = [h for h in client.history(job_id) if h["handler"] == "token:oncall-bot"]
    assert line["error"] == "marked succeeded by token:oncall-bot: ok"
    again = api.call("POST", mark, made, json={"state": "failed"})
    assert "ended succeeded already" in problem(again, 409)["detail"]
    wait_until(lambda: client.store.records(job_id).packed is not None, message="not compacted")
    cleared = api.call("POST", f"/jobs/{job_id}/tasks/b/clear", made)  # compacted: runs again
    assert cleared.status_code == 200, cleared.text
    assert api.wait_finished(made, job_id) == "succeeded"


def test_a_signal_over_http_releases_a_waiting_task_as_the_cli_does(
    api: ApiServer, client: Client
) -> None:
    token, reader = api.token("operate"), api.token("read")
    spec = {"name": "approval", "tasks": [
        {"id": "approve", "wait_for": {"signal": "approve"}},
        {"id": "ship", "task": "jobcenter.demo.step", "args": [0], "depends_on": "approve"},
    ]}  # fmt: skip
    job_id = api.submit(token, spec)
    path = f"/jobs/{job_id}/signals/approve"
    denied = api.call("POST", path, reader, json={"payload": True})
    sent = api.call("POST", path, token, json={"payload": {"ok": True}})
    again = api.call("POST", path, token, json={"payload": {"ok": True}})
    other = api.call("POST", path, token, json={"payload": {"ok": False}})
    unknown = api.call("POST", f"/jobs/{job_id}/signals/nope", token)

    assert denied.status_code == 403
    assert sent.status_code == 200 and sent.json()["released"] == 1, sent.text
    assert again.json()["message"] == f"job {job_id}: sent already"
    assert "another payload" in problem(other, 409)["detail"]
    assert "no task waiting for signal nope" in problem(unknown, 409)["detail"]
    assert client.result(job_id, "approve") == {"ok": True}
