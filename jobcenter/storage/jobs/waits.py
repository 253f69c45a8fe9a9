"""Tasks that wait for the world (spec `wait_for:`): a signal sent to a job; a wait for
another job registered with it and settled when it ends; the leader's step that fails waits
whose timeout passed (signal.lua, await_register.lua, await_settle.lua, await_due.lua,
_await.lua). runtime/waits.py drives the leader's side."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from jobcenter.errors import raise_for_code
from jobcenter.model import codec
from jobcenter.model.spawn import Spawn, unpack_spawn
from jobcenter.model.spec import parse_spec
from jobcenter.model.states import TaskState

from ..keyspace import schema
from ..keyspace.layout import AWAIT_KIND_LETTERS
from ..keyspace.schema import JobField, TaskField
from ..server.replies import text
from .base import StoreBase

ALREADY = schema.code("ALREADY")
WRONG_STATE = schema.code("WRONG_STATE")
JOB_GONE = schema.code("JOB_GONE")
# what a wait's letter (`aw:`) stands for; "k": a child job a task spawned (spawned.lua)
_KINDS = {**{letter: kind for kind, letter in AWAIT_KIND_LETTERS.items()}, "k": "child"}
JOB_STOPPED = schema.code("JOB_STOPPED")
ITEM_WRONG_STATE = schema.code("ITEM_WRONG_STATE")


@dataclass(frozen=True)
class JobWait:
    """An awaiting task: `kind` 'signal' (`name` the signal), 'job' (`name` is its id),
    'schedule' (`name` a schedule; `bound` the run found for it, once found) or 'child' (a job
    it spawned, `name` its id; `bound` the child's task whose result it takes, '' all)."""

    index: int
    kind: str
    name: str
    bound: str | None
    timeout: int = 0  # ms; 0: none


class Waits(StoreBase):
    def signal(self, job_id: str, name: str, payload: Any = None) -> tuple[int, int]:
        """Send signal `name` to job `job_id`: its tasks awaiting it succeed with `payload` as
        their result; those not there yet keep it. Returns (tasks released, tasks keeping
        it); (0, 0) when the same signal and payload were sent already. Raises WrongState
        (nothing waits for it, or it was sent with another payload) or UnknownJob."""
        max_bytes = self.settings.result_max_bytes  # the payload becomes a result
        packed = codec.pack(payload, what="the signal's payload", max_bytes=max_bytes)
        reply = self._job_call("signal", job_id, [name, packed])
        code = int(reply[0])
        if code == ALREADY or (code == WRONG_STATE and self._signalled(job_id, name, packed)):
            return 0, 0
        detail = text(reply[1]) if len(reply) > 1 and code < 0 else f"no job {job_id}"
        raise_for_code(code, detail or "")
        return int(reply[1]), int(reply[2])

    def _signalled(self, job_id: str, name: str, packed: bytes) -> bool:
        """Whether a task of the (finished, maybe compacted) job succeeded by signal `name`
        with this payload: the same signal sent again after the job ended."""
        raw = self.redis.hget(self.keys.job(job_id).job, JobField.AWAITS)
        if not raw:
            return False
        indexes = text(raw).split(",")
        fields = [f.of(i) for i in indexes for f in (TaskField.AWAIT, TaskField.RESULT)]
        values = self.records(job_id).values(fields)  # the tasks hash, or the packed record
        pairs = zip(values[::2], values[1::2], strict=True)
        return any(
            spec is not None and text(spec).split("|", 2)[::2] == ["s", name] and result == packed
            for spec, result in pairs
        )

    def await_due(self, job_id: str, recheck_ms: int | None = None) -> int:
        """The end of the leader's 'await' step: fail the job's waits whose timeout passed,
        and post the message again for the next timeout (or `recheck_ms`)."""
        args = ["" if recheck_ms is None else recheck_ms]
        return int(self._job_call("await_due", job_id, args)[0])

    def job_waits(self, job_id: str) -> list[JobWait]:
        """The job's tasks awaiting another job, a schedule's run or a child job, now."""
        return [w for w in self.awaiting(job_id) if w.kind != "signal"]

    def awaiting(self, job_id: str) -> list[JobWait]:
        """The job's awaiting tasks, whatever they wait for (`timeout` ms, 0: none)."""
        jk = self.keys.job(job_id)
        raw = self.redis.hget(jk.job, JobField.AWAITS)
        indexes = [int(i) for i in text(raw).split(",")] if raw else []
        if not indexes:
            return []
        fields = (TaskField.STATE, TaskField.AWAIT, TaskField.AWAIT_JOB)
        values = self.redis.hmget(jk.tasks, [f.of(i) for i in indexes for f in fields])
        waits = []
        for n, i in enumerate(indexes):
            state, spec, bound = values[3 * n : 3 * n + 3]
            if state != TaskState.AWAITING.value.encode() or spec is None:
                continue
            letter, timeout, name = text(spec).split("|", 2)
            bound_text = text(bound) if bound else None
            waits.append(JobWait(i, _KINDS[letter], name, bound_text, int(timeout)))
        return waits

    def child_jobs(self, job_id: str) -> list[str]:
        """The child jobs the job's tasks spawned (and wait for, or waited for)."""
        raw = self.redis.hget(self.keys.job(job_id).job, JobField.AWAITS)
        if not raw:
            return []
        fields = [TaskField.AWAIT.of(i) for i in text(raw).split(",")]
        specs = self.records(job_id).values(fields)  # the tasks hash, or the packed record
        return [text(s)[4:] for s in specs if s is not None and s.startswith(b"k|0|")]

    def spawn_children(
        self, handler: str, done: Sequence[tuple[str, int, str] | tuple[str, int, str, bytes]]
    ) -> dict[tuple[str, int], int]:
        """Start the child jobs of the completed attempts that returned spawn(spec): each
        task then waits for its child (spawned.lua). Returns a complete.lua code for each."""
        codes = {}
        for job_id, index, token, *result in done:
            child = unpack_spawn(result[0]) if result else None
            if child is not None:
                codes[(job_id, index)] = self._spawn(handler, job_id, index, token, child)
        return codes

    def _spawn(self, handler: str, job_id: str, index: int, token: str, child: Spawn) -> int:
        attempt = token.split(":", 1)[0]
        spec = dict(child.spec)
        # one child per attempt, whatever happens to this call: a repeat finds the same job
        spec["idempotency_key"] = f"spawn:{job_id}:{index}:{attempt}"
        owner = self.redis.hget(self.keys.job(job_id).job, JobField.OWNER)
        if owner is not None:
            spec.setdefault("owner", text(owner))
        child_id, _ = self.submit(parse_spec(spec))  # type: ignore[attr-defined]
        args = [handler, index, token, child_id, child.result or ""]
        code = int(self._job_call("spawned", job_id, args)[0])
        if code == JOB_STOPPED:  # its job is being cancelled: so is the child
            self.stop_job(child_id, "cancel")  # type: ignore[attr-defined]
        if code == ALREADY:
            return 0
        return code if code in (0, -2, -3, -9) else ITEM_WRONG_STATE

    def leader_message_due(self, job_id: str, kind: str) -> float | None:
        """When the job's leader message `kind` is due (ms), or None when none is pending."""
        return self.redis.zscore(self.keys.job(job_id).leader, f"{kind}|{job_id}")

    def fire_ms(self, job_id: str) -> int | None:
        """When the schedule that fired the job fired it (ms); None: no schedule did."""
        raw = self.redis.hget(self.keys.job(job_id).job, JobField.FIRE_TIME)
        return None if raw is None else round(float(raw) * 1000)

    def await_register(self, target: str, waiter: str) -> str:
        """Register job `waiter` with job `target`, which tells it when it ends. Returns
        target's state: '' when it is gone, a final state when it ended (nothing registered:
        settle the wait now)."""
        keys = [self.keys.job(target).job, self.keys.job_awaiters(target)]
        return text(self.scripts.run("await_register", keys, [waiter])[1])

    def await_settle(self, job_id: str, mode: str, args: Sequence[Any]) -> int:
        """await_settle.lua on `job_id`'s waits: 'bind', 'end' or 'fail' (its header); returns
        the tasks ended, 0 when the job is gone."""
        reply = self._job_call("await_settle", job_id, [mode, *args])
        if int(reply[0]) == JOB_GONE:
            return 0
        raise_for_code(int(reply[0]), f"job {job_id}")
        return int(reply[1])

    def job_awaiters(self, job_id: str) -> list[str]:
        """The jobs registered as waiting for `job_id`."""
        return sorted(text(m) for m in self.redis.smembers(self.keys.job_awaiters(job_id)))

    def awaiters_told(self, job_id: str, told: Sequence[str]) -> None:
        """Forget the waiting jobs told of `job_id`'s end (the set goes with its last one)."""
        if told:
            self.redis.srem(self.keys.job_awaiters(job_id), *told)
