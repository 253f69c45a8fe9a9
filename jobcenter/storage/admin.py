"""Operations on failed and finished work: dead letters, re-running failed tasks, deleting
jobs, and trimming the list indexes of expired jobs."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from jobcenter.errors import NotFound, Refused
from jobcenter.model.dag import topological_order
from jobcenter.model.states import JobState, TaskState

from .keyspace.schema import JobField, TaskField
from .server.replies import seconds, text
from .store import Store

REVIVE_ARGS_MAX = 2_000  # task and parent indexes per revive call: each call is short
TRIM_BATCH = 1_000  # expired jobs trimmed from the indexes per read
FINISHED_JOB_STATES = [state for state in JobState if state.terminal]
# what a task below a retried one may have ended as, to run again (cancelled: only in a
# cancelled job, which is never retried)
RESET_STATES = {TaskState.SUCCEEDED, TaskState.FAILED, TaskState.UPSTREAM_FAILED, TaskState.SKIPPED}


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
    task_id, state, attempts, error, failed_at, handler = store.records(job_id).values(fields)
    if state is None or text(state) != TaskState.FAILED:
        return None  # the job expired, or the task was requeued since
    return {
        "job": job_id,
        "job_name": text(store.redis.hget(jk.job, JobField.NAME)),
        "task": text(task_id),
        "attempts": int(attempts or 0),
        "handler": text(handler),
        "failed_at": seconds(failed_at),
        "error": text(error),
    }


def _index_of(store: Store, job_id: str, task_id: str) -> int:
    return store.task_index(job_id, task_id)


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
    """Re-run a job's failed tasks and everything downstream of them (its upstream_failed
    tasks, and the cleanups and error handlers that ran after the failure); the other
    succeeded tasks are kept."""
    state = store.job_state(job_id)
    if state is None:
        raise store.not_found(job_id)  # an archived job says so
    if state == JobState.CANCELLED:  # as revive.lua says, before "no failed task"
        raise Refused(f"job {job_id} was cancelled: it cannot be retried")
    return _revive(store, job_id, None)


def _revive(store: Store, job_id: str, roots: list[int] | None) -> int:
    """Run `roots` (None: every failed task) again, and put back to waiting every task that
    must be decided again: each task downstream of a root that ended (a cleanup or error
    handler that ran after the failure: it runs again after the roots' new attempts) and
    every upstream_failed task. In bounded calls: the roots first, then the others, parents
    before children. Each call leaves the job consistent, so a retry that dies half way
    leaves a job that ends, and that the next retry takes up where it stopped."""
    if store.job_state(job_id) is None:  # the reads below would find an archived job
        raise store.not_found(job_id)
    _finish_cascade(store, job_id)  # the states read next must not be changing under us
    fields = store.task_fields(
        job_id, TaskField.ID, TaskField.STATE, TaskField.CHILDREN,
        TaskField.MAP_INSTANCES, TaskField.MAP_OF,
    )  # fmt: skip
    states = {int(i): s for i, s in fields[TaskField.STATE].items()}
    if roots is None:
        roots = sorted(i for i, s in states.items() if s == TaskState.FAILED)
    children = {
        int(i): [int(c) for c in csv.split(",")] for i, csv in fields[TaskField.CHILDREN].items()
    }
    parents: dict[int, list[int]] = defaultdict(list)
    for parent, kids in children.items():
        for kid in kids:
            parents[kid].append(parent)
    downstream = _downstream(roots, children)
    # a failed task below another one (an error handler that failed) waits for it again
    roots = [root for root in roots if root not in downstream]
    names = {int(i): name for i, name in fields[TaskField.ID].items()}
    _check_downstream(job_id, downstream, states, names)
    expanded = {int(i) for i in fields[TaskField.MAP_INSTANCES]}
    instances = {int(i) for i in fields[TaskField.MAP_OF]}
    for mapped in expanded & downstream:
        again = [p for p in parents[mapped] if p not in instances and p in downstream | {*roots}]
        if again:
            raise Refused(
                f"job {job_id}: task {names.get(mapped, mapped)} was expanded from a map before "
                f"its parent {names.get(again[0], again[0])} is to run again; retry cannot "
                "expand a map twice: submit the job again"
            )
    # parents first: revive.lua decides from its parents' states (the revived ones count as
    # not ended) whether its trigger rule may yet run it
    resets = [
        (index, parents[index])
        for index in topological_order(states, children)
        if index not in roots
        and (
            states[index] == TaskState.UPSTREAM_FAILED
            or (index in downstream and states[index] in RESET_STATES)
        )
    ]
    if not roots and not resets:
        raise Refused(f"job {job_id} has no failed task to retry")
    # The last roots and the first resets go in one call: a job that fits one call (most)
    # is retried at once, so no root's new attempt ends before the tasks below it are reset.
    root_calls = [roots[k : k + REVIVE_ARGS_MAX] for k in range(0, len(roots), REVIVE_ARGS_MAX)]
    chunk_roots = root_calls.pop() if root_calls else []
    revived = sum(_revive_call(store, job_id, part, []) for part in root_calls)
    chunk: list[tuple[int, list[int]]] = []
    size = len(chunk_roots)
    for reset in resets:
        chunk.append(reset)
        size += 2 + len(reset[1])
        if size >= REVIVE_ARGS_MAX:
            revived += _revive_call(store, job_id, chunk_roots, chunk)
            chunk_roots, chunk, size = [], [], 0
    if chunk_roots or chunk:
        revived += _revive_call(store, job_id, chunk_roots, chunk)
    return revived


def _downstream(roots: list[int], children: dict[int, list[int]]) -> set[int]:
    """Every task below `roots` (not the roots themselves, unless below another root)."""
    seen: set[int] = set()
    todo = [kid for root in roots for kid in children.get(root, ())]
    while todo:
        index = todo.pop()
        if index not in seen:
            seen.add(index)
            todo += children.get(index, ())
    return seen


def _check_downstream(
    job_id: str, downstream: set[int], states: dict[int, str], names: dict[int, str]
) -> None:
    """Refused while a task below the ones to run again is queued or running (an error
    handler its failure started): it must end before it can be run again."""
    for index in sorted(downstream):
        state = states.get(index)
        if state is not None and state != TaskState.WAITING and not TaskState(state).terminal:
            raise Refused(
                f"job {job_id}: task {names.get(index, index)}, downstream of the tasks to "
                f"retry, is {state}: retry once it has ended"
            )


def _revive_call(
    store: Store, job_id: str, roots: list[int], resets: list[tuple[int, list[int]]]
) -> int:
    while True:
        revived = store.revive(job_id, roots, resets)
        if revived is not None:
            return revived
        _finish_cascade(store, job_id)  # a task revived by an earlier call failed again


def _finish_cascade(store: Store, job_id: str) -> None:
    """Run the job's pending releases and failure cascades to the end (bounded steps, the
    same a leader runs on a 'continue' message)."""
    while store.continue_frontier(job_id):
        pass


def delete_job(store: Store, job_id: str) -> None:
    """Delete a finished job (cancel a running one first)."""
    state = store.redis.hget(store.keys.job(job_id).job, JobField.STATE)
    if state is None:
        raise store.not_found(job_id)  # an archived job says so
    states = store.task_field(job_id, TaskField.STATE)
    failed = [int(i) for i, s in states.items() if s == TaskState.FAILED]
    store.delete(job_id, failed)


def trim_expired(store: Store) -> int:
    """Drop expired jobs from the list indexes (their keys expired by TTL); returns how
    many. Keeps `list` and Redis memory flat under a steady load."""
    now_ms = store.now_ms()
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
                job_id, owner, schedule_id, tags = (member.decode().split("\t") + ["", ""])[:4]
                pipe.zrem(store.keys.jobs(shard), job_id)
                for state in FINISHED_JOB_STATES:  # it expired in one of them
                    pipe.zrem(store.keys.state_jobs(shard, state), job_id)
                if owner:
                    pipe.zrem(store.keys.owner_jobs(shard, owner), job_id)
                if schedule_id:
                    pipe.zrem(store.keys.schedule_jobs(shard, schedule_id), job_id)
                for tag in filter(None, tags.split(",")):
                    pipe.zrem(store.keys.tag_jobs(shard, tag), job_id)
                # a notice told while the job ran (late, task_failed) left records with no TTL
                pipe.delete(store.keys.notifications(job_id))
                pipe.delete(store.keys.deliveries(job_id))
                pipe.zrem(expiring, member)
            pipe.execute()
            trimmed += len(members)
        # dead letters older than the retention belong to jobs gone or going
        store.redis.zremrangebyscore(store.keys.dlq(shard), "-inf", now_ms - retention_ms)
    return trimmed
