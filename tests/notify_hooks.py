"""A job-finished hook that worker processes of the notification tests import
(`jobcenter worker tasks_for_tests notify_hooks`): it records each notice it gets under
``jctest:<namespace>:notices``; for a job named `hook-fails-once` its first call raises."""

from __future__ import annotations

import json
import os
from functools import cache
from typing import Any

import redis

from jobcenter import on_job_finished

FAILS_ONCE = "hook-fails-once"


@cache
def _redis() -> redis.Redis:
    return redis.Redis.from_url(os.environ["JOBCENTER_REDIS_URL"])


def notices_key(namespace: str) -> str:
    return f"jctest:{namespace}:notices"


@on_job_finished
def record_notice(notice: dict[str, Any]) -> None:
    namespace = os.environ["JOBCENTER_NAMESPACE"]
    calls = _redis().incr(f"jctest:{namespace}:hook-calls:{notice['job_id']}")
    if notice["name"] == FAILS_ONCE and calls == 1:
        raise RuntimeError("the hook fails its first call on purpose")
    _redis().rpush(notices_key(namespace), json.dumps(notice))
