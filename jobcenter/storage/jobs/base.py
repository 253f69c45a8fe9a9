"""The base every part of the store builds on: the client, keys and scripts of one namespace,
and the keys and arguments every job-scoped script starts with."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from redis import Redis

from jobcenter.config import Settings
from jobcenter.errors import (
    NotFound,
    Refused,
    SettingsMismatch,
)
from jobcenter.model.states import JobState
from jobcenter.model.webhook_targets import TargetRules, parse_allow, redis_text

from ..keyspace.keys import Keys
from ..keyspace.packed import JobRecords, Stamp
from ..keyspace.schema import JobField
from ..lua import Batch, Scripts
from ..server.connection import is_cluster, server_addresses, time_ms
from ..server.replies import text

META_CACHE_MAX = 10_000  # jobs whose queues and idempotency key a store remembers


class ArchivedOnly(Refused):
    """A change asked of a job that only the archive holds now (Redis let it go)."""


def webhook_rules(settings: Settings, client: Any) -> TargetRules:
    """What a webhook's target is checked by: the settings' allow-list, and the Redis
    servers of the deployment, which no webhook may reach unless named exactly."""
    redis = server_addresses(settings.redis_url, client)
    return TargetRules(
        parse_allow(settings.webhook_allow),
        frozenset((redis_text(host), port) for host, port in redis),
    )


@dataclass(frozen=True)
class JobMeta:
    """What every script call of a job needs to know, fixed at submit: its queues and its
    idempotency key."""

    queues: tuple[str, ...]
    idem: str | None

    @classmethod
    def stored(cls, queues: bytes | str | None, idem: bytes | str | None) -> JobMeta:
        """From the job hash's fields: the queues joined by ',', the key (or none)."""
        joined = text(queues)
        return cls(tuple(joined.split(",")) if joined else (), text(idem) or None)


class StoreBase:
    """The client, keys and scripts of one namespace, and the KEYS and ARGV every job
    script starts with."""

    def __init__(self, client: Redis, settings: Settings) -> None:
        # Any: redis-py types each reply as a union of raw, decoded and awaitable forms; this
        # client always returns raw bytes (decode_responses off), which the code relies on.
        self.redis: Any = client
        self.settings = settings
        self.keys = Keys(settings.namespace, settings.shards)
        self.scripts = Scripts(client)
        self.cluster = is_cluster(client)  # a Redis Cluster: one call, one hash slot
        self.webhook_rules = webhook_rules(settings, client)  # where a `notify:` may post
        self._meta: OrderedDict[str, JobMeta] = OrderedDict()
        self._contexts: OrderedDict[tuple[str, bool], tuple[list[str], list[Any]]] = OrderedDict()
        # the keys a job script gets from its shard and queues, formed once (hot paths)
        self._shard_keys: dict[int, tuple[list[str], list[str], list[str], list[str]]] = {}
        self._queue_keys: dict[tuple[int, str], list[str]] = {}
        self._archive: Any = None  # its ArchiveReader, made at the first read that needs it
        self._check_shard_count()

    def now_ms(self) -> int:
        """Redis TIME in ms: the one clock every lease, heartbeat and fire is measured by."""
        return time_ms(self.redis)

    @property
    def connection(self) -> Redis:
        """The Redis client itself, for rq (the recovery executor needs a connection)."""
        return self.redis

    def _check_shard_count(self) -> None:
        """The first process to use a namespace stores its shard count; any other count is
        refused, since a job's keys would then be looked for in the wrong shard."""
        key, mine = self.keys.shard_count(), self.settings.shards
        stored = self.redis.get(key)
        if stored is None:  # read first: a full or read-only Redis must still serve reads
            pipe = self.redis.pipeline(transaction=False)
            pipe.set(key, mine, nx=True)
            pipe.get(key)
            _, stored = pipe.execute()
        if int(stored) != mine:
            raise SettingsMismatch(
                f"namespace {self.settings.namespace!r} has shard count {int(stored)} (fixed "
                f"at its first use), but this process has JOBCENTER_SHARDS={mine}: give every "
                f"client and worker of the namespace JOBCENTER_SHARDS={int(stored)}"
            )

    # -- helpers -------------------------------------------------------------------------

    def records(self, job_id: str, stamp: Stamp | None = None) -> JobRecords:
        """The job's task fields and history, packed or not (storage/keyspace/packed.py); `stamp`:
        its STAMP_FIELDS when the caller read them with other fields of the job. A job Redis
        no longer has: its record in the archive, when there is one."""
        jk = self.keys.job(job_id)
        if self.archive_url() and not self.redis.exists(jk.job):
            archived = self.archived(job_id)
            if archived is not None:
                return JobRecords.archived(jk, archived.packed)
        return JobRecords.read(self.redis, jk, stamp)

    # -- the archive: what every read of a job falls back to once Redis let it go ----------

    def archive_url(self) -> str | None:
        return self.settings.archive_url

    def archive_reader(self) -> Any:
        """The ArchiveReader of the settings' archive (made at the first read that needs it;
        SQLAlchemy is the `archive` extra, imported only here); None without an archive."""
        url = self.archive_url()
        if url and self._archive is None:
            from ..archive.engine import connect
            from ..archive.reader import ArchiveReader

            # migrated first: a reader may come before any worker made the tables
            self._archive = ArchiveReader(connect(url))
        return self._archive

    def archived(self, job_id: str) -> Any:
        """The archive's ArchivedRecord of the job; None when there is no archive or it
        holds no such job."""
        reader = self.archive_reader()
        return None if reader is None else reader.job(job_id)

    def job_hash(self, job_id: str) -> dict[str, bytes]:
        """Every field of the job hash ({} when there is no such job), the archive's copy
        when Redis no longer has the job."""
        raw = self.redis.hgetall(self.keys.job(job_id).job)
        if not raw:
            archived = self.archived(job_id)
            return dict(archived.fields) if archived is not None else {}
        return {k.decode(): v for k, v in raw.items()}

    def job_values(self, job_id: str, names: Sequence[str]) -> list[bytes | None]:
        """HMGET of the job hash's fields `names`, from the archive's copy when Redis no
        longer has the job (all None: no such job)."""
        *values, state = self.redis.hmget(self.keys.job(job_id).job, [*names, JobField.STATE])
        if state is None:
            archived = self.archived(job_id)
            if archived is not None:
                return [archived.fields.get(str(name)) for name in names]
        return list(values)

    def not_found(self, job_id: str) -> Exception:
        """The error for a change asked of a job Redis does not have: ArchivedOnly when the
        archive holds it, else NotFound."""
        if self.archived(job_id) is not None:
            return ArchivedOnly(
                f"job {job_id} is archived (Redis no longer holds it): status, history "
                "and result read it from the archive, but it cannot be changed"
            )
        return NotFound.job(job_id, self.settings.namespace)

    def _remember(self, job_id: str, meta: JobMeta) -> JobMeta:
        self._meta[job_id] = meta
        if len(self._meta) > META_CACHE_MAX:
            self._meta.popitem(last=False)
        return meta

    def job_meta(self, job_id: str) -> JobMeta:
        """A job's queues and idempotency key: read once, then cached (they never change)."""
        meta = self._meta.get(job_id)
        if meta is None:
            queues, idem = self.redis.hmget(
                self.keys.job(job_id).job, JobField.QUEUES, JobField.IDEMPOTENCY_KEY
            )
            meta = self._remember(job_id, JobMeta.stored(queues, idem))
        return meta

    def _cached_context(self, job_id: str, with_meta: bool) -> tuple[list[str], list[Any]]:
        """_context, built once per job (and with or without its meta): it never changes,
        and building its KEYS costs more than a small batch's own arguments."""
        context = self._contexts.get((job_id, with_meta))
        if context is None:
            context = self._context(job_id, self.job_meta(job_id) if with_meta else None)
            self._contexts[(job_id, with_meta)] = context
            if len(self._contexts) > META_CACHE_MAX:
                self._contexts.popitem(last=False)
        return context

    def _context(self, job_id: str, meta: JobMeta | None) -> tuple[list[str], list[Any]]:
        """KEYS and first ARGV of a job-scoped script (the layout in _job.lua)."""
        shard = self.keys.job_shard(job_id)
        job, tasks, history, frontier, packed = self.keys.job_own(job_id)
        idem = meta.idem if meta else None
        before_idem, before_packed, after_packed, archive = self._shard_context(shard)
        keys = [
            job,
            tasks,
            history,
            frontier,
            *before_idem,
            self.keys.idempotency(shard, idem) if idem else job,
            *before_packed,
            packed,
            *after_packed,
            *(archive or [job]),
        ]
        queues = meta.queues if meta else ()
        for queue in queues:
            keys += self._queue_context(shard, queue)
        settings = self.settings
        retention_ms = int(settings.retention_seconds * 1000)
        observe = [settings.events_maxlen, 1 if settings.metrics else 0]
        return keys, [job_id, retention_ms, *observe, len(queues), *queues]

    def _bound_keys(self, job_id: str, idem: str | None) -> list[str]:
        """The five keys `bind_job` (_job.lua) points a script at for a further job of its
        call: its hash, tasks hash, history, frontier and idempotency key (its hash again
        when it has none)."""
        job, tasks, history, frontier, _ = self.keys.job_own(job_id)
        idem_key = self.keys.idempotency(self.keys.job_shard(job_id), idem) if idem else job
        return [job, tasks, history, frontier, idem_key]

    def _shard_context(self, shard: int) -> tuple[list[str], list[str], list[str], list[str]]:
        """A job script's shard keys around its idempotency key and packed record
        (_job.lua's layout), formed once per shard."""
        parts = self._shard_keys.get(shard)
        if parts is None:
            keys = self.keys
            parts = (
                [
                    keys.leases(shard),
                    keys.claims(shard),
                    keys.leader(shard),
                    keys.leader_wake(shard),
                    keys.dlq(shard),
                    keys.active(shard),
                    keys.expiring(shard),
                ],
                [keys.notify_due(shard), *(keys.state_jobs(shard, state) for state in JobState)],
                [*keys.limit_keys(shard), keys.events(shard), keys.metrics(shard)],
                # _job.lua's KEYS[27]: the job hash again when there is no archive
                [keys.archive_pending(shard)] if self.settings.archive_url else [],
            )
            self._shard_keys[shard] = parts
        return parts

    def _queue_context(self, shard: int, queue: str) -> list[str]:
        keys = self._queue_keys.get((shard, queue))
        if keys is None:
            keys = self._queue_keys[(shard, queue)] = self.keys.queue_keys(shard, queue)
        return keys

    def _job_call(
        self,
        name: str,
        job_id: str,
        args: Sequence[Any],
        *,
        with_meta: bool = True,
        extra_keys: Sequence[str] = (),
        batch: Batch | None = None,
    ) -> Any:
        """Call a job-scoped script now, or add the call to `batch`. Without meta the script
        sees no queues and no idempotency key (start, heartbeat: they need neither)."""
        keys, argv = self._cached_context(job_id, with_meta)
        if batch is not None:
            batch.add(name, keys + list(extra_keys), argv + list(args))
            return None
        return self.scripts.run(name, keys + list(extra_keys), argv + list(args))
