"""The schema version of a namespace's data, and the steps that bring older data up to it.

Every process checks the version when it opens a namespace (Store): a namespace without one
gets this release's version written at its first use (after the upgrade steps, when it
holds data of the release before versions); a namespace of a newer version is refused with
a message that says what to do. The versions:

1. the layout before versions (releases up to the one that added the per-state job indexes,
   e.g. cf59a69): no version key, jobs missing from the per-state and per-schedule indexes,
   finished jobs kept as a tasks hash and a history list;
2. this one: every transition keeps the per-state and per-schedule indexes; a finished job
   is compacted into one packed record (storage/keyspace/packed.py) once its cascades are done;
   the shards' event streams, metrics hashes and segment leases are created by their first
   write, so they need no step (docs/operations/upgrades.md).

A release that reads the previous layout as it is (2 reads 1's jobs: a job without a
packed record is read from its hash) only adds steps here; one that cannot says so in its
notes (docs/operations/upgrades.md).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from redis.exceptions import ResponseError

from jobcenter.errors import Refused

from .schema import JobField

if TYPE_CHECKING:
    from ..jobs.base import StoreBase

log = logging.getLogger(__name__)

SCHEMA_VERSION = 2  # the version this release writes and reads
UNVERSIONED = 1  # the version of data written before versions
BACKFILL_PAGE = 500  # job ids read per index page while backfilling


class SchemaTooNew(Refused):
    """The namespace holds data written by a newer jobcenter than this one (CLI exit 5)."""


def stored_version(store: StoreBase) -> int | None:
    """The namespace's schema version; None for a namespace with no data yet."""
    raw = store.redis.get(store.keys.schema_version())
    if raw is not None:
        return int(raw)
    has_jobs = any(store.redis.exists(store.keys.jobs(s)) for s in range(store.keys.shards))
    return UNVERSIONED if has_jobs else None


def ensure_schema(store: StoreBase) -> None:
    """Refuse a namespace of a newer version; bring an older one up to SCHEMA_VERSION (each
    step safe to run twice, or by two processes at once); write the version on first use.
    A Redis that refuses writes (full, read-only) is left as it is: reads still work."""
    version = stored_version(store)
    if version is not None and version > SCHEMA_VERSION:
        raise SchemaTooNew(
            f"namespace {store.settings.namespace!r} holds data of schema version {version}, "
            f"written by a newer jobcenter; this one reads versions up to {SCHEMA_VERSION}: "
            f"run the release the rest of the fleet runs (docs/operations/upgrades.md)"
        )
    if version == SCHEMA_VERSION:
        return
    try:
        if version is not None:
            for step in range(version, SCHEMA_VERSION):
                log.warning(
                    "namespace %r: upgrading its data from schema version %d to %d",
                    store.settings.namespace,
                    step,
                    step + 1,
                )
                UPGRADES[step](store)
        store.redis.set(store.keys.schema_version(), SCHEMA_VERSION)
    except ResponseError as exc:
        log.warning("namespace %r: schema version not written (%s)", store.settings.namespace, exc)


def _index_jobs(store: StoreBase) -> None:
    """1 -> 2: put every kept job in the index of its state, and a fired job in its
    schedule's, as the transitions of version 2 do. A job whose state changed while it was
    being indexed (a version-2 transition moves it too) is read again and indexed anew."""
    redis = store.redis
    for shard in range(store.keys.shards):
        offset = 0
        while True:
            page = redis.zrange(store.keys.jobs(shard), offset, offset + BACKFILL_PAGE - 1)
            if not page:
                break
            offset += len(page)
            job_ids = [raw.decode() for raw in page]
            pipe = redis.pipeline(transaction=False)
            for job_id in job_ids:
                pipe.hmget(
                    store.keys.job(job_id).job,
                    JobField.STATE,
                    JobField.CREATED_AT,
                    JobField.SCHEDULE_ID,
                )
            fields = pipe.execute()
            pipe = redis.pipeline(transaction=False)
            for job_id, (state, created, schedule_id) in zip(job_ids, fields, strict=True):
                if state is None:
                    continue  # expired since the index was read
                score = int(created or 0)
                pipe.zadd(store.keys.state_jobs(shard, state.decode()), {job_id: score})
                if schedule_id:
                    pipe.zadd(
                        store.keys.schedule_jobs(shard, schedule_id.decode()), {job_id: score}
                    )
            pipe.execute()
            _recheck(store, shard, job_ids, fields)


def _recheck(
    store: StoreBase, shard: int, job_ids: list[str], fields: list[list[bytes | None]]
) -> None:
    """Move a job whose state changed between the read and the index write."""
    pipe = store.redis.pipeline(transaction=False)
    for job_id in job_ids:
        pipe.hget(store.keys.job(job_id).job, JobField.STATE)
    for job_id, (before, created, _), now in zip(job_ids, fields, pipe.execute(), strict=True):
        if before is not None and now is not None and now != before:
            move = store.redis.pipeline(transaction=True)
            move.zrem(store.keys.state_jobs(shard, before.decode()), job_id)
            move.zadd(store.keys.state_jobs(shard, now.decode()), {job_id: int(created or 0)})
            move.execute()


UPGRADES = {1: _index_jobs}  # from version k to k + 1
