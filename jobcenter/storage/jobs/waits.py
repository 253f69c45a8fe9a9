"""Tasks that wait for the world (spec `wait_for:`): a signal sent to a job, and the leader's
step that fails waits whose timeout passed (signal.lua, await_due.lua, _await.lua)."""

from __future__ import annotations

from typing import Any

from jobcenter.errors import raise_for_code
from jobcenter.model import codec

from ..keyspace import schema
from ..server.replies import text
from .base import StoreBase

ALREADY = schema.code("ALREADY")


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
        if code == ALREADY:
            return 0, 0
        detail = text(reply[1]) if len(reply) > 1 and code < 0 else f"no job {job_id}"
        raise_for_code(code, detail or "")
        return int(reply[1]), int(reply[2])

    def await_due(self, job_id: str) -> int:
        """The leader's 'await' message: fail the job's waits whose timeout passed."""
        return int(self._job_call("await_due", job_id, [])[0])
