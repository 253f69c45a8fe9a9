"""A task that reports the wall clock of the worker running it, for the clock-skew tests."""

from __future__ import annotations

import os
import time

import redis
from tasks_for_tests import scratch_key

from jobcenter import task


@task(name="clock_tasks.wall_clock")
def wall_clock() -> None:
    """Records time.time() as this worker sees it."""
    client = redis.Redis.from_url(os.environ["JOBCENTER_REDIS_URL"])
    client.rpush(scratch_key(os.environ["JOBCENTER_NAMESPACE"], "wall-clock"), repr(time.time()))
    client.close()
