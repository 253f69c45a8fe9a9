"""Helpers for driving the Lua transitions by hand: the test plays leader and worker."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import msgpack
import redis

from jobcenter.model.spec import parse_spec
from jobcenter.runtime.leader import Leader
from jobcenter.storage.jobs.base import JobMeta
from jobcenter.storage.lua import Batch
from jobcenter.storage.store import StartedTask, Store

LEADER = "leader-handler"
H1 = "handler-one"
H2 = "handler-two"
NONCE = "5eed"  # the claim nonce of a start or complete call a test makes itself
H3 = "handler-three"
NO_RETRY = -1  # fail's retry delay meaning "do not retry"

Snapshot = dict[str, tuple[str, Any, bool]]


def decode(value: Any) -> Any:
    """A script reply with every bytes value decoded (lists recursively)."""
    if isinstance(value, bytes):
        return value.decode()
    if isinstance(value, list):
        return [decode(v) for v in value]
    return value


def snapshot(store: Store) -> Snapshot:
    """Every key of the store's namespace: type, full content, and whether it has a TTL."""
    r: redis.Redis = store.redis
    out: Snapshot = {}
    for raw_key in r.scan_iter(match=f"jc:{store.settings.namespace}:*", count=1000):
        key = decode(raw_key)
        kind = decode(r.type(raw_key))
        value: Any
        if kind == "hash":
            value = r.hgetall(raw_key)
        elif kind == "list":
            value = r.lrange(raw_key, 0, -1)
        elif kind == "zset":
            value = r.zrange(raw_key, 0, -1, withscores=True)
        elif kind == "set":
            value = r.smembers(raw_key)
        elif kind == "string":
            value = r.get(raw_key)
        else:
            value = r.dump(raw_key)
        out[key] = (kind, value, r.pttl(raw_key) > 0)
    return out


def assert_same(before: Snapshot, after: Snapshot) -> None:
    """Fail naming every key that appeared, vanished or changed."""
    changes = []
    for key in sorted(before.keys() | after.keys()):
        if before.get(key) != after.get(key):
            changes.append(f"{key}:\n  before {before.get(key)!r}\n  after  {after.get(key)!r}")
    assert not changes, "Redis changed:\n" + "\n".join(changes)


@contextmanager
def untouched(store: Store) -> Iterator[None]:
    """Assert that the block leaves every key of the namespace exactly as it was."""
    before = snapshot(store)
    yield
    assert_same(before, snapshot(store))


def submit(store: Store, spec: dict[str, Any]) -> str:
    job_id, created = store.submit(parse_spec(spec))
    assert created
    return job_id


def submit_and_split(store: Store, spec: dict[str, Any]) -> tuple[str, dict[str, int]]:
    """Submit `spec` and split it; returns the job id and each task id's index. A small job
    is split by its submit already (the leader's split then finds nothing to do)."""
    job_id = submit(store, spec)
    Leader(store, LEADER).split(job_id)
    assert job_field(store, job_id, "state") == "running"
    return job_id, {t["id"]: i for i, t in enumerate(spec["tasks"])}


def claim(
    store: Store, handler: str, n: int = 100, queues: Sequence[str] = ("default",)
) -> list[StartedTask]:
    """Claim and start up to n tasks, as a worker would (no leader messages)."""
    return store.claim(handler, queues, max_tasks=n, max_leader=0).tasks


def claim_by_index(store: Store, handler: str, n: int = 100) -> dict[int, StartedTask]:
    return {t.index: t for t in claim(store, handler, n)}


def job_context(
    store: Store,
    job_id: str,
    *,
    queues: Sequence[str] | None = None,
    without_idem: bool = False,
) -> tuple[list[str], list[Any]]:
    """KEYS and first ARGV of a job-scoped script, laid out as _job.lua expects; `queues`
    overrides the queues passed (to leave some out), `without_idem` passes the job hash in
    place of the job's idempotency key."""
    meta = store.job_meta(job_id)
    meta = JobMeta(
        meta.queues if queues is None else tuple(queues), None if without_idem else meta.idem
    )
    return store._context(job_id, meta)


def run_job_script(
    store: Store,
    name: str,
    job_id: str,
    args: Sequence[Any],
    *,
    queues: Sequence[str] | None = None,
    without_idem: bool = False,
    extra_keys: Sequence[str] = (),
    batch: Batch | None = None,
) -> Any:
    """Call a job-scoped script directly (see job_context), or add the call to `batch`."""
    keys, argv = job_context(store, job_id, queues=queues, without_idem=without_idem)
    if name == "complete" and not extra_keys:  # the learned estimates it updates
        extra_keys = [store.keys.estimates(store.keys.job_shard(job_id))]
    keys, argv = keys + list(extra_keys), argv + list(args)
    if batch is not None:
        batch.add(name, keys, argv)
        return None
    reply = store.scripts.run(name, keys, argv)
    if name == "complete":  # a reply per job of the call: this one's
        (reply,) = reply
    tasks_at = TASK_LISTS.get(name)
    if tasks_at is not None and reply[0] == 0:  # its task list comes as one msgpack string
        reply[tasks_at] = msgpack.unpackb(reply[tasks_at], raw=True)
    return decode(reply)


TASK_LISTS = {"start": 1, "complete": 2}  # where a script's reply has its task list


def complete_argv(handler: str, job_id: str, items: Sequence[Any]) -> list[Any]:
    """complete.lua's own ARGV for one job's tasks, `items` four per task (index, token,
    result, run ms), a 30 s lease, taking nothing (it serves no queue)."""
    return [handler, NONCE, 30_000, 0, 0, 1, job_id, len(items) // 4, *items]


def own_argv(name: str, job_id: str, args: list[Any]) -> list[Any]:
    """A job script's own ARGV as the error-path tables give it: complete's are its tasks'
    items only (an H1 call: complete_argv adds the rest, which names the job)."""
    return complete_argv(H1, job_id, args) if name == "complete" else args


def script_calls(client: redis.Redis) -> dict[str, int]:
    """Script calls the server ran so far: EVALSHA's and FCALL's."""
    stats = client.info("commandstats")
    return {c: stats.get(f"cmdstat_{c}", {"calls": 0})["calls"] for c in ("evalsha", "fcall")}


def submit_call(store: Store, spec: dict[str, Any]) -> tuple[str, list[str], list[Any]]:
    """The submit.lua call Store.submit would make for `spec`, not run: the new job's id,
    and the script's own KEYS and ARGV (after the job context)."""
    prepared = store._prepare_submit([parse_spec(spec)], None)
    (job_id,) = prepared.job_ids
    ((name, keys, argv),) = prepared.batch.calls
    assert name == "submit"
    context_keys, context_argv = store._context(job_id, store.job_meta(job_id))
    return job_id, keys[len(context_keys) :], argv[len(context_argv) :]


def assert_finalized(store: Store, job_id: str, state: str, *, snapshot_check: bool = True) -> None:
    """The job was closed (by the transition that ended its last task): final state, out of
    the active set, its keys on retention, in the expiring set; finalize finds it done (and,
    unless `snapshot_check` is off for a loop's sake, changes nothing)."""
    jk = store.keys.job(job_id)
    shard = store.keys.job_shard(job_id)
    assert job_field(store, job_id, "state") == state
    assert job_field(store, job_id, "finished_at") is not None
    assert job_field(store, job_id, "left") == "0"
    assert store.redis.zscore(store.keys.active(shard), job_id) is None
    assert store.redis.pttl(jk.job) > 0
    for key in (jk.tasks, jk.history, jk.frontier):
        assert store.redis.pttl(key) != -1, f"{key} outlives the job's retention"
    owner = job_field(store, job_id, "owner") or ""
    schedule_id = job_field(store, job_id, "schedule_id") or ""
    member = f"{job_id}\t{owner}\t{schedule_id}"
    assert store.redis.zscore(store.keys.expiring(shard), member) is not None
    assert store.redis.zscore(store.keys.state_jobs(shard, state), job_id) is not None
    assert "finalize" not in leader_messages(store, job_id)
    if not snapshot_check:
        assert store.finalize(job_id) == (1, state)
        return
    with untouched(store):
        assert store.finalize(job_id) == (1, state)


def complete_one(store: Store, handler: str, job_id: str, index: int, token: str) -> int:
    codes, _ = store.complete(handler, [(job_id, index, token)])
    return codes[(job_id, index)]


def heartbeat_one(store: Store, handler: str, job_id: str, index: int, token: str) -> int:
    return store.heartbeat(handler, [(job_id, index, token, "")])[(job_id, index)]


def token_like(
    task: StartedTask, *, attempt_shift: int = 0, handler: str | None = None, nonce: str = ""
) -> str:
    """A fencing token like `task`'s, with another attempt number, handler or nonce."""
    attempt, owner, own = task.token.split(":")  # the tests' handler ids hold no ':'
    return f"{int(attempt) + attempt_shift}:{handler or owner}:{nonce or own}"


def task_states(store: Store, job_id: str) -> dict[str, str]:
    return {tid: t["state"] for tid, t in store.status(job_id)["tasks"].items()}


def task_field(store: Store, job_id: str, attr: str, index: int) -> str | None:
    (raw,) = store.records(job_id).values([f"{attr}:{index}"])
    return None if raw is None else decode(raw)


def job_field(store: Store, job_id: str, name: str) -> str | None:
    raw = store.redis.hget(store.keys.job(job_id).job, name)
    return None if raw is None else decode(raw)


def leader_messages(store: Store, job_id: str) -> set[str]:
    """The kinds of leader message pending for the job ('split', 'finalize', ...)."""
    members = store.redis.zrange(store.keys.job(job_id).leader, 0, -1)
    out = set()
    for member in members:
        kind, _, job = decode(member).partition("|")
        if job == job_id:
            out.add(kind)
    return out


def queue_members(store: Store, queue: str = "default", job_id: str | None = None) -> list[str]:
    members = [decode(m) for m in store.redis.zrange(store.keys.queue(0, queue), 0, -1)]
    if job_id is not None:
        members = [m for m in members if m.split("|")[1] == job_id]
    return members


def queued_indexes(store: Store, job_id: str, queue: str = "default") -> list[int]:
    return [int(m.split("|")[2]) for m in queue_members(store, queue, job_id)]


def lease_deadline_ms(store: Store, job_id: str, index: int) -> float | None:
    return store.redis.zscore(store.keys.leases(0), f"{job_id}|{index}")


def redis_now_ms(store: Store) -> int:
    seconds, micros = store.redis.time()
    return seconds * 1000 + micros // 1000


def lease_expired(store: Store, job_id: str, index: int) -> bool:
    deadline = lease_deadline_ms(store, job_id, index)
    return deadline is not None and deadline < redis_now_ms(store)


def history_of(store: Store, job_id: str, task_id: str) -> list[dict[str, Any]]:
    return [h for h in store.history(job_id) if h["task"] == task_id]
