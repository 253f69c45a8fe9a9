"""The rq queue recovery runs on, as Redis holds it: its name, the id of each round's job,
and rq's handles on them (rq needs the Redis connection itself; storage hands it over).
Jobs use rq's JSON serializer, never pickle."""

from __future__ import annotations

import re
from typing import Any

from rq import Queue
from rq.exceptions import NoSuchJobError
from rq.job import Job
from rq.serializers import JSONSerializer

from ..store import Store


def _safe(namespace: str) -> str:
    return re.sub(r"[^A-Za-z0-9_-]", "_", namespace)


def system_queue_name(namespace: str) -> str:
    return f"jobcenter-system-{_safe(namespace)}"


def recovery_job_id(namespace: str, round_no: int) -> str:
    return f"jobcenter-recovery-{_safe(namespace)}-{round_no}"


def current_round(store: Store) -> int:
    """Recovery rounds are numbered by Redis TIME / interval: the same for every worker."""
    return int(store.now_ms() // 1000 // store.settings.recovery_interval_seconds)


def system_queue(connection: Any, namespace: str) -> Queue:
    """The namespace's system queue on `connection` (a Store's, or a fresh one)."""
    return Queue(system_queue_name(namespace), connection=connection, serializer=JSONSerializer)


def fetch_recovery_job(store: Store, round_no: int) -> Job | None:
    """Round `round_no`'s rq job; None once rq no longer keeps it."""
    job_id = recovery_job_id(store.settings.namespace, round_no)
    try:
        return Job.fetch(job_id, connection=store.connection, serializer=JSONSerializer)
    except NoSuchJobError:
        return None
