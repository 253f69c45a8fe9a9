"""Operations on failed and finished work: dead letters, re-running failed tasks, deleting
jobs, and trimming the list indexes of expired jobs."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from .errors import NotFound, SpecError
from .states import JobState, TaskState
from .store import Store, _s, _seconds

REVIVE_MAX = 10_000  # tasks one retry may touch: it is a single script call (DESIGN 5)
TRIM_BATCH = 1_000  # expired jobs trimmed from the indexes per read
FINISHED_JOB_STATES = [state for state in JobState if state.terminal]


def dead_letters(store: Store, limit: int = 100) -> list[dict[str, Any]]:
    """The newest dead letters: tasks that failed for good (attempts exhausted or Fatal)."""
    rows: list[tuple[float, str]] = []
    for shard in range(store.keys.shards):
        for member, score in store.redis.zrevrange(
            store.keys.dlq(shard), 0, limit - 1, withscores=True
        ):
            rows.append((score, member.decode()))
    rows.sort(reverse=True)
    out = []
    for _, member in rows[:limit]:
        job_id, index = member.split("|")
        entry = _dead_letter(store, job_id, int(index))
        if entry is not None:
            out.append(entry)
    return out


def _dead_letter(store: Store, job_id: str, index: int) -> dict[str, Any] | None:
    jk = store.keys.job(job_id)
    fields = [f"{a}:{index}" for a in ("id", "s", "a", "e", "tf", "h")]
    task_id, state, attempts, error, failed_at, handler = store.redis.hmget(jk.tasks, fields)
    if state is None or _s(state) != TaskState.FAILED:
        return None  # the job expired, or the task was requeued since
    return {
        "job": job_id,
        "job_name": _s(store.redis.hget(jk.job, "name")),
        "task": _s(task_id),
        "attempts": int(attempts or 0),
        "handler": _s(handler),
        "failed_at": _seconds(failed_at),
        "error": _s(error),
    }


def _index_of(store: Store, job_id: str, task_id: str) -> int:
    ids = store.task_fields(job_id, "id")["id"]
    for index, tid in ids.items():
        if tid == task_id:
            return int(index)
    raise NotFound(f"job {job_id} has no task {task_id!r}")


def dead_letter(store: Store, job_id: str, task_id: str) -> dict[str, Any]:
    """One dead letter with every attempt of its task (the list leaves history out)."""
    entry = _dead_letter(store, job_id, _index_of(store, job_id, task_id))
    if entry is None:
        raise NotFound(f"task {task_id!r} of job {job_id} is not a dead letter")
    entry["history"] = [h for h in store.history(job_id) if h["task"] == task_id]
    return entry


def requeue(store: Store, job_id: str, task_id: str) -> int:
    """Run a dead-lettered task again; on success its children are released as usual."""
    return _revive(store, job_id, [_index_of(store, job_id, task_id)])


def retry_job(store: Store, job_id: str) -> int:
    """Re-run a job's failed and upstream_failed tasks; its succeeded tasks are kept."""
    states = store.task_fields(job_id, "s")["s"]
    if not states and not store.redis.exists(store.keys.job(job_id).job):
        raise NotFound(f"no job {job_id}")
    failed = [int(i) for i, s in states.items() if s == TaskState.FAILED]
    if not failed:
        raise SpecError(f"job {job_id} has no failed task to retry")
    return _revive(store, job_id, failed)


def _revive(store: Store, job_id: str, roots: list[int]) -> int:
    """Plan which upstream_failed tasks the roots' re-run unblocks, then revive them all
    in one script call (so nothing is half-done if this process dies)."""
    fields = store.task_fields(job_id, "s", "c")
    states = {int(i): s for i, s in fields["s"].items()}
    children = {int(i): [int(c) for c in csv.split(",")] for i, csv in fields["c"].items()}
    parents: dict[int, list[int]] = defaultdict(list)
    for parent, kids in children.items():
        for kid in kids:
            parents[kid].append(parent)
    reviving = set(roots)
    resets: list[int] = []
    for index in _topological(states, children):
        if states[index] != TaskState.UPSTREAM_FAILED:
            continue
        if all(states[p] == TaskState.SUCCEEDED or p in reviving for p in parents[index]):
            reviving.add(index)
            resets.append(index)
    if len(roots) + len(resets) > REVIVE_MAX:
        raise SpecError(
            f"retrying would revive {len(roots) + len(resets)} tasks; the limit "
            f"for one retry is {REVIVE_MAX}"
        )
    return store.revive(job_id, roots, resets)


def _topological(states: dict[int, str], children: dict[int, list[int]]) -> list[int]:
    indegree = dict.fromkeys(states, 0)
    for kids in children.values():
        for kid in kids:
            indegree[kid] += 1
    order = [i for i, d in indegree.items() if d == 0]
    for index in order:  # the list grows while we walk it: Kahn's algorithm
        for kid in children.get(index, ()):
            indegree[kid] -= 1
            if indegree[kid] == 0:
                order.append(kid)
    return order


def delete_job(store: Store, job_id: str) -> None:
    """Delete a finished job (cancel a running one first)."""
    state = store.redis.hget(store.keys.job(job_id).job, "state")
    if state is None:
        raise NotFound(f"no job {job_id}")
    states = store.task_fields(job_id, "s")["s"]
    failed = [int(i) for i, s in states.items() if s == TaskState.FAILED]
    store.delete(job_id, failed)


def trim_expired(store: Store) -> int:
    """Drop expired jobs from the list indexes (their keys expired by TTL); returns how
    many. Keeps `list` and Redis memory flat under a steady load."""
    seconds, micros = store.redis.time()
    now_ms = seconds * 1000 + micros // 1000
    retention_ms = int(store.settings.retention_seconds * 1000)
    trimmed = 0
    for shard in range(store.keys.shards):
        expiring = store.keys.expiring(shard)
        while True:
            members = store.redis.zrangebyscore(expiring, "-inf", now_ms, 0, TRIM_BATCH)
            if not members:
                break
            pipe = store.redis.pipeline(transaction=False)
            for member in members:
                job_id, owner, schedule_id = (member.decode().split("\t") + [""])[:3]
                pipe.zrem(store.keys.jobs(shard), job_id)
                for state in FINISHED_JOB_STATES:  # it expired in one of them
                    pipe.zrem(store.keys.state_jobs(shard, state), job_id)
                if owner:
                    pipe.zrem(store.keys.owner_jobs(shard, owner), job_id)
                if schedule_id:
                    pipe.zrem(store.keys.schedule_jobs(shard, schedule_id), job_id)
                pipe.zrem(expiring, member)
            pipe.execute()
            trimmed += len(members)
        # dead letters older than the retention belong to jobs gone or going
        store.redis.zremrangebyscore(store.keys.dlq(shard), "-inf", now_ms - retention_ms)
    return trimmed
