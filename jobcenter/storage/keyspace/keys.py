"""The only place a Redis key name is formed.

Layout: ``jc:<namespace>:{<namespace>.<shard>}:<what>``. Every key of one job, and the
queues, leases and leader messages its scripts touch, share one hash tag, so each Lua
script touches a single Redis Cluster slot. A job's shard comes from its id; an
idempotency key picks the shard and the job id is drawn to match it.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass

from jobcenter.model.ids import ulid

PREFIX = "jc"
NODE_QUEUE_PREFIX = "node:"  # queue names cannot contain ':', so no clash with a node queue
# The segment of a shard's leader messages (queue names cannot contain '@': no clash).
LEADER_SEGMENT = "@leader"


def fire_key(schedule_id: str, fire_ms: int, rerun: int = 0) -> str:
    """The idempotency key of a schedule's run at one fire time (ms): the ticker and a
    backfill submit with it, so a fire makes one job whoever submits it; rerun n (1, 2, ...)
    of that fire gets a key of its own."""
    key = f"{schedule_id}:{fire_ms}"
    return f"{key}:rerun:{rerun}" if rerun else key


def node_queue(node: str) -> str:
    """The private queue of a node's workers."""
    return NODE_QUEUE_PREFIX + node


@dataclass(frozen=True)
class JobKeys:
    """The keys of one job, in the order every job-scoped script receives them."""

    job: str  # hash: the job's own fields (state, counters, times, spec until split)
    tasks: str  # hash: per-task fields named "<attr>:<index>"
    history: str  # list: one entry per finished attempt
    frontier: str  # list: tasks still to visit by an unfinished failure cascade
    leases: str  # shard zset: "<job>|<index>" -> lease deadline (ms)
    claims: str  # shard hash: "<job>|<index>" -> handler that reserved it, until it starts
    leader: str  # shard zset: "<kind>|<job>" leader messages -> due time (ms)
    leader_wake: str  # shard list: wake-up tokens for idle workers waiting on leader work
    dlq: str  # shard zset: dead letters "<job>|<index>" -> time they failed for good (ms)
    limits: str  # shard hash: pool totals and parked-task bookkeeping (schema.LimitField)
    slots: str  # shard hash: slots used per limit id, and what each lease holds
    parked: str  # shard zset: tasks waiting for a full limit, in their queue order
    freed: str  # shard set: limit ids that gave a slot back while tasks wait for them
    freed_wake: str  # shard list: wake-up tokens for idle workers when a limit has room again
    # string: a finished job's tasks and history packed into one record (keyspace/packed.py);
    # scripts get it after the per-state indexes (_job.lua), so it is not in as_list
    packed: str = ""

    def as_list(self) -> list[str]:
        return [
            self.job,
            self.tasks,
            self.history,
            self.frontier,
            self.leases,
            self.claims,
            self.leader,
            self.leader_wake,
            self.dlq,
        ]

    def limit_keys(self) -> list[str]:
        """The shard's limit keys, in the order claim.lua and _job.lua receive them."""
        return [self.limits, self.slots, self.parked, self.freed, self.freed_wake]


class Keys:
    """Key names for one namespace."""

    def __init__(self, namespace: str, shards: int = 1) -> None:
        if shards < 1:
            raise ValueError("shards must be >= 1")
        self.namespace = namespace
        self.shards = shards
        self._base = f"{PREFIX}:{namespace}"

    # -- shards and ids -------------------------------------------------------------------

    def shard_of(self, routing: str) -> int:
        return zlib.crc32(routing.encode()) % self.shards

    def new_job_id(self, shard: int | None = None) -> str:
        """A fresh ULID; when `shard` is given, one that lands in that shard."""
        while True:
            job_id = ulid()
            if shard is None or self.shard_of(job_id) == shard:
                return job_id

    def _tagged(self, shard: int) -> str:
        return f"{self._base}:{{{self.namespace}.{shard}}}"

    # -- per shard ------------------------------------------------------------------------

    def queue(self, shard: int, queue: str) -> str:
        """Ready zset: score -priority, member "<seq>|<job>|<index>" (FIFO within a priority)."""
        return f"{self._tagged(shard)}:q:{queue}"

    def delayed(self, shard: int, queue: str) -> str:
        """Retry zset: score due time (ms), member "<priority>|<queue member>"."""
        return f"{self._tagged(shard)}:delayed:{queue}"

    def wake(self, shard: int, queue: str) -> str:
        """List of wake-up tokens; idle workers BLPOP it instead of polling."""
        return f"{self._tagged(shard)}:wake:{queue}"

    def worker_wake(self, shard: int, handler: str) -> str:
        """A worker's own wake-up list: its signal handler pokes it to stop waiting."""
        return f"{self._tagged(shard)}:wake:@worker:{handler}"

    def leases(self, shard: int) -> str:

        return f"{self._tagged(shard)}:leases"

    def claims(self, shard: int) -> str:
        return f"{self._tagged(shard)}:claims"

    def leader(self, shard: int) -> str:
        return f"{self._tagged(shard)}:leader"

    def leader_wake(self, shard: int) -> str:
        return f"{self._tagged(shard)}:wake:@leader"

    def dlq(self, shard: int) -> str:
        return f"{self._tagged(shard)}:dlq"

    def limits(self, shard: int) -> str:
        """Hash (schema.LimitField): each pool's slot count, and for the tasks parked waiting
        for a full limit their entry in `parked`, how many wait per limit and its cap."""
        return f"{self._tagged(shard)}:limits"

    def slots(self, shard: int) -> str:
        """Hash: slots in use per limit id (`p:<pool>`, `j:<job>`, `k:<key>`), and per lease
        member "<job>|<index>" the slots that reservation holds ("<limit>*<n>;..."): taken by
        claim.lua, given back once by whatever ends the reservation or attempt."""
        return f"{self._tagged(shard)}:slots"

    def parked(self, shard: int) -> str:
        """Zset (score 0, read by lex): "<queue>|<limit>|<order>|<queue member>" for each task
        whose limit was full when claimed: out of its queue, so claims skip it, until a slot
        of that limit is given back. <order> keeps its queue's priority order."""
        return f"{self._tagged(shard)}:parked"

    def freed(self, shard: int) -> str:
        """Set of limit ids that gave a slot back while tasks were parked for them: what the
        next claim checks to put parked tasks back in their queues."""
        return f"{self._tagged(shard)}:freed"

    def limit_keys(self, shard: int) -> list[str]:
        """limits, slots, parked, freed, freed_wake: in the order claim.lua and _job.lua
        receive them."""
        return [
            self.limits(shard),
            self.slots(shard),
            self.parked(shard),
            self.freed(shard),
            self.freed_wake(shard),
        ]

    def freed_wake(self, shard: int) -> str:
        """List of wake-up tokens pushed when a limit that tasks wait for gets room again:
        idle workers BLPOP it beside their queues' lists, since the parked tasks are in no
        queue to wake them."""
        return f"{self._tagged(shard)}:wake:@freed"

    def segment_owners(self, shard: int, segment: str) -> str:
        """Zset of the leases on one segment of the shard (its tasks of one queue, or its
        leader messages, LEADER_SEGMENT): "<handler>|<token>" -> lease deadline (ms)."""
        return f"{self._tagged(shard)}:owners:{segment}"

    def segment_epoch(self, shard: int) -> str:
        """Counter: the last fencing token a lease on one of the shard's segments got."""
        return f"{self._tagged(shard)}:owners-epoch"

    def archive_pending(self, shard: int) -> str:
        """Zset of finished jobs waiting for the archive (JOBCENTER_ARCHIVE_URL) -> when they
        finished (ms): their keys get no TTL until the archive has confirmed them."""
        return f"{self._tagged(shard)}:archive:pending"

    def expiring(self, shard: int) -> str:
        """Zset of finished jobs "<job>\t<owner>\t<schedule id>" -> when their retention ends
        (ms): what recovery trims from the list indexes once the job's own keys have expired."""
        return f"{self._tagged(shard)}:expiring"

    def estimates(self, shard: int) -> str:
        """Hash of learned run times (ms, a moving average of succeeded attempts) per job name
        and task id and per task name (jobcenter.model.ordering): what critical_path ranks by."""
        return f"{self._tagged(shard)}:estimates"

    def events(self, shard: int) -> str:
        """Stream of the shard's events, one per transition (EventField, EventKind), capped
        near JOBCENTER_EVENTS_MAXLEN entries: what `jobcenter events` and the dashboard read."""
        return f"{self._tagged(shard)}:events"

    def metrics(self, shard: int) -> str:
        """Hash of the shard's metric counters (MetricField), kept by the transitions: what
        /metrics sums over the shards."""
        return f"{self._tagged(shard)}:metrics"

    def seq(self, shard: int) -> str:
        """Counter giving each job its submission sequence number."""
        return f"{self._tagged(shard)}:seq"

    def jobs(self, shard: int) -> str:
        """Zset of every kept job id by creation time (ms)."""
        return f"{self._tagged(shard)}:jobs"

    def active(self, shard: int) -> str:
        """Zset of unfinished job ids by creation time: what recovery walks."""
        return f"{self._tagged(shard)}:active"

    def owner_jobs(self, shard: int, owner: str) -> str:
        return f"{self._tagged(shard)}:owner:{owner}"

    def state_jobs(self, shard: int, state: str) -> str:
        """Zset of the kept jobs in one job state, by creation time (ms): what `list --state`
        reads. The transition that changes a job's state moves it between these."""
        return f"{self._tagged(shard)}:jobs:state:{state}"

    def schedule_jobs(self, shard: int, schedule_id: str) -> str:
        """Zset of the kept jobs a schedule fired, by creation time (ms): `list --schedule`."""
        return f"{self._tagged(shard)}:jobs:schedule:{schedule_id}"

    def tag_jobs(self, shard: int, tag: str) -> str:
        """Zset of the kept jobs carrying one tag (`key=value`), by creation time (ms):
        `list --tag`."""
        return f"{self._tagged(shard)}:jobs:tag:{tag}"

    def idempotency(self, shard: int, key: str) -> str:
        return f"{self._tagged(shard)}:idem:{key}"

    def notify_due(self, shard: int) -> str:
        """Zset of notifications to deliver "<channel>|<job>" -> when the next attempt is due
        (ms); an attempt under way holds it one lease ahead, so a dead deliverer's comes back."""
        return f"{self._tagged(shard)}:notify"

    # -- per job --------------------------------------------------------------------------

    def job_shard(self, job_id: str) -> int:
        return self.shard_of(job_id)

    def job_own(self, job_id: str) -> tuple[str, str, str, str, str]:
        """The job's own keys: hash, tasks hash, history, frontier, packed record."""
        base = f"{self._tagged(self.job_shard(job_id))}:job:{job_id}"
        return base, f"{base}:tasks", f"{base}:history", f"{base}:frontier", f"{base}:packed"

    def job_awaiters(self, job_id: str) -> str:
        """Set: the jobs with a task waiting for this one (`wait_for: {job: ...}`), told by
        the leader when it ends (its `waiters` leader message), in this job's shard."""
        return f"{self.job_own(job_id)[0]}:awaiters"

    def job(self, job_id: str) -> JobKeys:
        shard = self.job_shard(job_id)
        job, tasks, history, frontier, packed = self.job_own(job_id)
        return JobKeys(
            job=job,
            tasks=tasks,
            history=history,
            frontier=frontier,
            leases=self.leases(shard),
            claims=self.claims(shard),
            leader=self.leader(shard),
            leader_wake=self.leader_wake(shard),
            dlq=self.dlq(shard),
            limits=self.limits(shard),
            slots=self.slots(shard),
            parked=self.parked(shard),
            freed=self.freed(shard),
            freed_wake=self.freed_wake(shard),
            packed=packed,
        )

    def notifications(self, job_id: str) -> str:
        """Hash: the state of each of the job's deliveries (schema.DeliveryField + channel)."""
        return f"{self.job(job_id).job}:notify"

    def deliveries(self, job_id: str) -> str:
        """Capped list: one entry per delivery attempt of the job, oldest first."""
        return f"{self.job(job_id).job}:deliveries"

    def task_logs(self, job_id: str) -> str:
        """Hash: the job's attempts' logs, `<index>:<attempt>` (and `<index>:<attempt>:live`
        for a running attempt's log so far); expires with the job."""
        return f"{self.job(job_id).job}:logs"

    def notify_keys(self, job_id: str) -> list[str]:
        """The KEYS of notify_attempt and notify_done: the shard's due zset, the job hash,
        its notifications hash and deliveries list."""
        shard = self.job_shard(job_id)
        return [
            self.notify_due(shard),
            self.job(job_id).job,
            self.notifications(job_id),
            self.deliveries(job_id),
        ]

    def queue_keys(self, shard: int, queue: str) -> list[str]:
        """The three keys a script needs to enqueue into `queue`: ready, delayed, wake."""
        return [self.queue(shard, queue), self.delayed(shard, queue), self.wake(shard, queue)]

    # -- singletons (both keys of one in shard 0's slot, so one script may touch them) --

    def singleton(self, name: str) -> str:
        """The lease of a singleton role (recovery, scheduler): holder id, with a TTL."""
        return f"{self._tagged(0)}:singleton:{name}"

    def singleton_round(self, name: str) -> str:
        """The last round a singleton ran (one recovery per interval)."""
        return f"{self._tagged(0)}:singleton:{name}:round"

    # -- namespace-wide (never touched by a script) ---------------------------------------

    def shard_count(self) -> str:
        """String: the shard count the namespace was first used with; every process must
        use the same, or a job's keys are looked for in the wrong shard."""
        return f"{self._base}:shards"

    def schema_version(self) -> str:
        """String: the schema version of the namespace's data (storage/keyspace/upgrade.py), written
        at its first use; a process that reads an older one upgrades it, a newer one is
        refused."""
        return f"{self._base}:schema"

    def workers(self) -> str:
        """Zset of live handler ids -> last heartbeat (ms, Redis TIME)."""
        return f"{self._base}:workers"

    def worker_info(self, handler: str) -> str:
        return f"{self._base}:worker:{handler}"

    def fsync_mark(self) -> str:
        """String written just before each group WAITAOF: WAITAOF waits only for the writes
        of its own connection, so this write stands for every submit acknowledged before it."""
        return f"{self._base}:fsync-mark"

    def served_tasks(self) -> str:
        """Zset of "<queue>|<task name>" -> last time a live worker serving that queue said it
        has that task registered (ms, Redis TIME): how recovery tells a task no live worker
        can run."""
        return f"{self._base}:served"

    def segment_members(self) -> str:
        """Zset of "<segment>|<handler>" -> last time that worker said it serves the segment
        (ms, Redis TIME): the live-worker list each segment's shards are shared out by."""
        return f"{self._base}:segment-members"

    def segments_wake(self) -> str:
        """List of tokens a worker giving its segments back pushes, so the others share them
        out at once instead of at their next renewal."""
        return f"{self._base}:segments-wake"

    def archive_status(self) -> str:
        """Hash: the archive's last failed write, until a write seen later works, and when
        the last one that worked was seen (ArchiveStatusField, archive_status.lua): what the
        dashboard warns of."""
        return f"{self._base}:archive:status"

    def nodes(self) -> str:
        """Zset of node names -> last heartbeat of any worker serving that node."""
        return f"{self._base}:nodes"

    # -- the HTTP API (storage/tokens.py) --------------------------------------------------

    def api_tokens(self) -> str:
        """Hash: SHA-256 of each API token (hex) -> its record (id, name, scope, owner,
        created): the tokens themselves are never stored."""
        return f"{self._base}:api-tokens"

    def api_secret(self) -> str:
        """String: the key that signs the attempt tokens the worker protocol hands out, so
        an executor cannot forge one for an attempt it was not given."""
        return f"{self._base}:api-secret"

    # -- schedules (all in shard 0's slot, so one script may touch several) ----------------

    def schedules(self) -> str:
        """Zset of every schedule id -> creation time (ms): what `schedule list` walks."""
        return f"{self._tagged(0)}:schedules"

    def schedules_due(self) -> str:
        """Zset of schedule ids that need the ticker -> when (ms): next fire, buffered fire,
        or an unfinished fire to complete."""
        return f"{self._tagged(0)}:schedules:due"

    def schedule_name(self, name: str) -> str:
        """String: the id of the schedule called `name` (names are unique per namespace); it
        expires with its schedule, so a finished one-time schedule frees its name."""
        return f"{self._tagged(0)}:schedules:name:{name}"

    def schedule(self, schedule_id: str) -> str:
        """Hash: the schedule's definition (msgpack), its firing state and its revision."""
        return f"{self._tagged(0)}:schedule:{schedule_id}"

    def schedule_fires(self, schedule_id: str) -> str:
        """Capped list of the schedule's recent fires, skips and misses (msgpack), newest first."""
        return f"{self._tagged(0)}:schedule:{schedule_id}:fires"

    def schedule_keys(self, schedule_id: str, name: str | None) -> list[str]:
        """The KEYS of every schedule script, in order: hash, fires, the schedule index, the due
        index, and the name key (the hash again for a schedule without a name)."""
        key = self.schedule(schedule_id)
        return [
            key,
            self.schedule_fires(schedule_id),
            self.schedules(),
            self.schedules_due(),
            key if name is None else self.schedule_name(name),
        ]
