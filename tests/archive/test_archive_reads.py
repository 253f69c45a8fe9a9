"""Reads fall through to the archive: a job whose Redis keys are gone is shown by `status`,
`history`, `result`, `list` (by owner, state, name, schedule, time range), `export`, the HTTP
API and the dashboard as it was while Redis held it, from SQLite and from PostgreSQL; a list
paged across the jobs Redis holds and the archive's shows each job once; a change asked of
an archived job says it is archived."""

from __future__ import annotations

import json
import re
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn
from harness import Cli, WorkerPool
from helpers import wait_until

from jobcenter import Client
from jobcenter.api.app import api_mount
from jobcenter.storage import tokens, views
from jobcenter.storage.archive import engine as archive_engine
from jobcenter.storage.archive import writer
from jobcenter.storage.archive.rows import archived_job
from jobcenter.storage.keyspace.schema import JobField
from jobcenter.web.app import create_app

JOB_SECONDS = 60
HOT = 5  # seconds a job stays in Redis once archived, in the test that lets it expire


class Workers(WorkerPool):
    modules = ("tasks_for_tests", "jobcenter.demo")


@pytest.fixture
def workers(redis_url: str, namespace: str, tmp_path: Path) -> Iterator[Workers]:
    """Worker processes of the test; each must stop on SIGTERM with exit 0 and without a
    traceback in its log."""
    pool = Workers(redis_url, namespace, tmp_path)
    try:
        yield pool
    finally:
        codes = {worker.name: worker.stop() for worker in pool.started}
    assert set(codes.values()) <= {0}, codes
    assert not [w.name for w in pool.started if "Traceback" in w.log()]


def _spec(tmp_path: Path, name: str, owner: str, fail: bool = False) -> Path:
    tasks: list[dict[str, Any]] = [
        {"id": "a", "task": "tasks_for_tests.returns", "args": ["text", 12]},
        {"id": "b", "task": "jobcenter.demo.step", "args": [2], "depends_on": ["a"]},
    ]
    if fail:
        tasks.append({"id": "c", "task": "tasks_for_tests.fatal", "args": ["no luck"]})
    path = tmp_path / f"{name}-{owner}-{fail}.json"
    path.write_text(json.dumps({"name": name, "owner": owner, "tasks": tasks}))
    return path


def _archive(client: Client, engine: Any, job_id: str) -> None:
    """What the archiver does with a finished, compacted job: its hash and packed record
    into the archive."""
    store = client.store
    jk = store.keys.job(job_id)
    wait_until(
        lambda: store.redis.hget(jk.job, JobField.PACKED) is not None,
        JOB_SECONDS,
        message=f"{job_id} was never compacted",
    )
    fields = {k.decode(): v for k, v in store.redis.hgetall(jk.job).items()}
    row = archived_job(job_id, fields, store.redis.get(jk.packed), store.now_ms(), 1 << 20)
    writer.write(engine, [row])


def _expire(client: Client, job_id: str) -> None:
    """Redis lets the job go: its keys gone, its index entries left (as when they expire)."""
    client.store.redis.delete(*client.store.keys.job_own(job_id))


def _web(client: Client, job_id: str) -> dict[str, Any]:
    """What the HTTP API and the dashboard show of the job."""
    app = create_app(client, mounts=[api_mount(client)], api_tokens=True)
    token, _ = tokens.create(client.store, "read", None)
    sock = socket.create_server(("127.0.0.1", 0))
    config = uvicorn.Config(app, log_config=None, lifespan="off", access_log=False)
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        wait_until(lambda: server.started, message="the dashboard did not start")
        base = f"http://127.0.0.1:{sock.getsockname()[1]}"
        with httpx.Client(
            base_url=base, timeout=60, headers={"Authorization": f"Bearer {token}"}
        ) as http:
            got = {
                path: http.get(path)
                for path in (
                    f"/api/v1/jobs/{job_id}",
                    f"/api/v1/jobs/{job_id}/history",
                    f"/api/v1/jobs/{job_id}/tasks/a/result",
                    "/api/v1/jobs?owner=alice&limit=50",
                    "/jobs?owner=alice",
                    f"/api/jobs/{job_id}/graph",
                    f"/api/jobs/{job_id}/live",
                    f"/api/jobs/{job_id}/tasks/0",
                    f"/jobs/{job_id}",
                )
            }
    finally:
        server.should_exit = True
        thread.join(timeout=30)
        sock.close()
    assert all(r.status_code == 200 for r in got.values()), {
        p: r.text[:300] for p, r in got.items() if r.status_code != 200
    }
    # the pages say how long ago things happened: compare them without that
    out: dict[str, Any] = {
        p: r.json() if p.startswith("/api/") else re.sub(r">[^<>]*ago<", "><", r.text)
        for p, r in got.items()
    }
    return out


def _cli_views(cli: Cli, env: dict[str, str], job_id: str, since: str) -> dict[str, Any]:
    def run(*args: str) -> Any:
        result = cli(*args, env=env)
        assert result.code == 0, (args, result.stderr)
        return result.stdout

    until = str(time.time() + 3600)
    return {
        "status": json.loads(run("status", job_id, "--json")),
        "history": json.loads(run("history", job_id, "--json")),
        "result": run("result", job_id, "a"),
        "owner": json.loads(run("list", "--owner", "alice", "--json")),
        "state": json.loads(run("list", "--state", "failed", "--json")),
        "name": json.loads(run("list", "--name", "nightly", "--json")),
        "window": json.loads(run("list", "--since", since, "--until", until, "--json")),
        "export": run("export", "--since", since),
    }


def test_a_job_redis_let_go_reads_the_same_from_the_archive(
    archive_url: str, cli: Cli, workers: Workers, redis_url: str, namespace: str, tmp_path: Path
) -> None:
    engine = archive_engine.connect(archive_url)
    client = Client.from_url(redis_url, namespace, archive_url=archive_url)
    env = {"JOBCENTER_ARCHIVE_URL": archive_url}
    workers.start()
    since = str(time.time() - 60)
    ids = []
    for name, owner, fail in [("nightly", "alice", False), ("weekly", "alice", True)]:
        submitted = cli("submit", str(_spec(tmp_path, name, owner, fail)), "--wait", "--json")
        assert submitted.code in (0, 1), submitted.stderr
        ids.append(submitted.json()["id"])
    ok_id, failed_id = ids
    for job_id in ids:
        _archive(client, engine, job_id)
    before = {j: (_cli_views(cli, env, j, since), _web(client, j)) for j in ids}
    assert before[ok_id][0]["owner"] == before[ok_id][0]["window"]  # both jobs, once each
    assert [r["id"] for r in before[ok_id][0]["owner"]] == [failed_id, ok_id]
    assert [r["id"] for r in before[ok_id][0]["name"]] == [ok_id]
    assert [r["id"] for r in before[ok_id][0]["state"]] == [failed_id]

    for job_id in ids:
        _expire(client, job_id)
    assert cli("status", ok_id).code != 0  # without the archive: Redis has no such job

    after = {j: (_cli_views(cli, env, j, since), _web(client, j)) for j in ids}
    for job_id in ids:
        assert after[job_id][0] == before[job_id][0]
        assert after[job_id][1] == before[job_id][1]
    retry = cli("retry", failed_id, env=env)
    assert retry.code != 0 and f"job {failed_id} is archived" in retry.stderr
    delete = cli("delete", failed_id, env=env)
    assert delete.code != 0 and f"job {failed_id} is archived" in delete.stderr


def test_pages_across_redis_and_the_archive_show_each_job_once(
    archive_url: str, cli: Cli, workers: Workers, redis_url: str, namespace: str, tmp_path: Path
) -> None:
    engine = archive_engine.connect(archive_url)
    client = Client.from_url(redis_url, namespace, archive_url=archive_url)
    workers.start()
    ids = []
    for k in range(6):
        spec = _spec(tmp_path, f"job{k}", "bob")
        submitted = cli("submit", str(spec), "--wait", "--json")
        assert submitted.code == 0, submitted.stderr
        ids.append(submitted.json()["id"])
    for job_id in ids[:4]:  # the older four archived, two of them still hot in Redis
        _archive(client, engine, job_id)
    for job_id in ids[:2]:
        _expire(client, job_id)
    newest_first = list(reversed(ids))
    assert [r["id"] for r in client.list(owner="bob")] == newest_first
    for size in (1, 2, 4):
        seen: list[str] = []
        before = None
        while True:
            page = client.list(owner="bob", limit=size, before=before)
            seen += [r["id"] for r in page]
            if len(page) < size:
                break
            before = (round(page[-1]["created_at"] * 1000), page[-1]["id"])
        assert seen == newest_first, size
        # the dashboard's list, by its own cursor; a name filter only the page applies
        for filters, want in (
            (views.JobFilter(owner="bob"), newest_first),
            (views.JobFilter(name="JOB1"), [ids[1]]),
        ):
            shown: list[str] = []
            cursor = None
            while True:
                got = views.jobs_page(client.store, filters, before=cursor, size=size)
                shown += [job.id for job in got.jobs]
                if got.older is None:
                    break
                cursor = got.older
            assert shown == want, (filters, size)


def test_a_job_archived_by_its_workers_reads_the_same_once_its_hot_retention_expired(
    archive_url: str, cli: Cli, workers: Workers, redis_url: str, namespace: str, tmp_path: Path
) -> None:
    """The whole way: workers archive the job and Redis's keys expire after a short hot
    retention; the command line then shows it as the client did while Redis held it."""
    client = Client.from_url(redis_url, namespace, archive_url=archive_url)
    env = {"JOBCENTER_ARCHIVE_URL": archive_url, "JOBCENTER_ARCHIVE_HOT_SECONDS": str(HOT)}
    workers.start(env=env)
    submitted = cli("submit", str(_spec(tmp_path, "nightly", "alice")), "--wait", "--json")
    assert submitted.code == 0, submitted.stderr
    job_id = submitted.json()["id"]
    jk = client.store.keys.job(job_id)
    # compacted: what Redis shows of it from now on, and what the archive gets
    wait_until(lambda: client.store.redis.hget(jk.job, JobField.PACKED), JOB_SECONDS)
    held = (client.status(job_id), client.history(job_id), client.list(owner="alice"))
    assert not client.store.redis.ttl(jk.job) > HOT  # the hot retention, not the job's own
    wait_until(
        lambda: not client.store.redis.exists(jk.job),
        JOB_SECONDS,
        message=f"{job_id} stayed in Redis past its hot retention",
    )
    shown = [cli(*args, env=env) for args in (
        ("status", job_id, "--json"), ("history", job_id, "--json"),
        ("list", "--owner", "alice", "--json"),
    )]  # fmt: skip
    assert [r.code for r in shown] == [0, 0, 0], [r.stderr for r in shown]
    assert tuple(r.json() for r in shown) == held
