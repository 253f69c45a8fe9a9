"""A schedule's runs by fire time: the job each fire made, found through the fire's
idempotency key (keys.fire_key), whoever submitted it (the ticker, a backfill, a rerun)."""

from __future__ import annotations

from collections.abc import Sequence

from jobcenter.model.states import JobState

from ..keyspace.keys import fire_key
from ..keyspace.schema import JobField
from ..server.replies import text
from .base import StoreBase

RERUN_PROBE = 8  # rerun keys read per round trip while looking for a fire's newest rerun


class ScheduleRuns(StoreBase):
    """Which job ran a schedule at a fire time."""

    def schedule_run(self, schedule_id: str, fire_ms: int) -> str | None:
        """The job id of the newest run of `schedule_id` at `fire_ms` (epoch ms): its first
        run, or its latest rerun; None when that fire has no run (or it expired)."""
        return self.schedule_runs(schedule_id, [fire_ms])[fire_ms][0]

    def job_states(self, job_ids: Sequence[str]) -> list[JobState | None]:
        """Each job's state (None: no such job, or it expired), in one round trip."""
        pipe = self.redis.pipeline(transaction=False)
        for job_id in job_ids:
            pipe.hget(self.keys.job(job_id).job, JobField.STATE)
        return [None if raw is None else JobState(text(raw)) for raw in pipe.execute()]

    def schedule_runs(
        self, schedule_id: str, fires: Sequence[int]
    ) -> dict[int, tuple[str | None, int]]:
        """fire ms -> (job id of its newest run or None, number of reruns), for many fires
        in few round trips."""
        found: dict[int, tuple[str | None, int]] = {fire: (None, 0) for fire in fires}
        todo = list(fires)
        rerun = 0
        while todo:
            numbers = [0] if rerun == 0 else list(range(rerun, rerun + RERUN_PROBE))
            pipe = self.redis.pipeline(transaction=False)
            for fire in todo:
                for n in numbers:
                    key = fire_key(schedule_id, fire, n)
                    pipe.get(self.keys.idempotency(self.keys.shard_of(key), key))
            replies = iter(pipe.execute())
            more = []
            for fire in todo:
                values = [next(replies) for _ in numbers]
                for n, value in zip(numbers, values, strict=True):
                    if value is None:
                        break
                    # the key's value is "<job id>\t<spec digest>" (submit.lua)
                    found[fire] = (text(value).split("\t")[0], n)
                else:
                    more.append(fire)
            todo = more
            rerun = numbers[-1] + 1
        return found
