"""save_logs in Lua: an attempt's final log replaces its log so far and a late log so far
never replaces a final one; the logs hash expires with the job (its retention while it
runs, the job's own TTL once it ended); a job gone takes nothing; delete removes the hash."""

from __future__ import annotations

from lua_helpers import H1, NO_RETRY, claim, submit, untouched

from jobcenter.storage import admin, task_logs
from jobcenter.storage.keyspace.schema import code
from jobcenter.storage.store import Store
from jobcenter.storage.task_logs import LogEntry

SPEC = {"name": "logged", "retention": "1h", "tasks": [{"id": "a", "task": "t.a"}]}


def test_a_final_log_replaces_the_log_so_far_and_a_late_one_so_far_changes_nothing(
    store: Store,
) -> None:
    job_id = submit(store, SPEC)
    task_logs.save(store, [LogEntry(job_id, 0, 1, b"so far\n", final=False)])
    running = task_logs.read(store, job_id, 0, 1)
    task_logs.save(store, [LogEntry(job_id, 0, 1, b"so far\nall\n")])
    with untouched(store):
        task_logs.save(store, [LogEntry(job_id, 0, 1, b"so far\n", final=False)])
    final = task_logs.read(store, job_id, 0, 1)

    assert running is not None and (running.data, running.running) == (b"so far\n", True)
    assert final is not None and (final.data, final.running) == (b"so far\nall\n", False)
    assert store.redis.hkeys(store.keys.task_logs(job_id)) == [b"0:1"]  # the live one gone
    assert task_logs.attempts(store, job_id, 0, 2) == [1]


def test_the_logs_expire_with_the_job(store: Store) -> None:
    job_id = submit(store, SPEC)
    logs_key, job_key = store.keys.task_logs(job_id), store.keys.job(job_id).job
    task_logs.save(store, [LogEntry(job_id, 0, 1, b"running\n", final=False)])
    while_running = store.redis.pttl(logs_key)
    (t,) = claim(store, H1)
    store.fail(H1, t.job_id, t.index, t.token, "boom", NO_RETRY)
    task_logs.save(store, [LogEntry(job_id, 0, 1, b"ended\n")])

    assert 3_500_000 < while_running <= 3_600_000  # the job's retention: 1 h
    assert abs(store.redis.pttl(logs_key) - store.redis.pttl(job_key)) < 1_000


def test_a_job_gone_takes_no_log_and_delete_removes_them(store: Store) -> None:
    job_id = submit(store, SPEC)
    (t,) = claim(store, H1)
    task_logs.save(store, [LogEntry(job_id, 0, 1, b"output\n")])
    store.fail(H1, t.job_id, t.index, t.token, "boom", NO_RETRY)
    admin.delete_job(store, job_id)
    deleted = store.redis.exists(store.keys.task_logs(job_id))
    with untouched(store):
        reply = store.scripts.run(
            "save_logs",
            [store.keys.job(job_id).job, store.keys.task_logs(job_id)],
            [1000, "0:1", "0:1:live", 1, b"late"],
        )

    assert deleted == 0
    assert reply == [code("JOB_GONE")]
