"""The Redis schema named once: the fields of a job's tasks hash (a prefix and the task's
index: `s:3` is task 3's state), the job hash's fields, the keys of a task's packed payload,
a schedule hash's fields, and every code a Lua script returns. `lua_prelude()` generates
them, with the state names, into the text prepended to every script, so Python and Lua use
the same names; the stored bytes are the literals below."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from jobcenter.model import notify, trigger_rules
from jobcenter.model.notify import DeliveryState
from jobcenter.model.states import lua_constants


class TaskField(StrEnum):
    """A field of the tasks hash is one of these prefixes followed by the task's index."""

    ID = "id:"  # the task's id in the spec
    STATE = "s:"  # its TaskState
    PAYLOAD = "p:"  # what a worker needs to run it, packed (PayloadKey)
    QUEUE = "q:"  # its queue, when not the job's
    PRIORITY = "pr:"  # its priority, when not the job's
    MAX_ATTEMPTS = "m:"  # 1 + retries, when it retries
    DEPS_LEFT = "d:"  # dependencies not succeeded yet
    CHILDREN = "c:"  # the indexes of the tasks that depend on it, comma-separated
    RANK = "o:"  # its claim rank within the job (jobcenter.model.ordering), unless fifo
    ATTEMPTS = "a:"  # attempts started
    HANDLER = "h:"  # the handler running the current attempt
    NONCE = "k:"  # the random nonce its worker drew for the claim that started it (the token's)
    CREATED_AT = "tc:"  # ms, Redis TIME (as every time below)
    QUEUED_AT = "tq:"
    STARTED_AT = "ts:"
    FINISHED_AT = "tf:"
    UPDATED_AT = "tu:"
    ERROR = "e:"  # the last attempt's error
    PROGRESS = "pg:"  # the running attempt's last progress report
    WAITING_FOR = "wf:"  # "<since ms>|<task name>": given back for want of a worker with it
    LIMITS = "l:"  # the slots it takes while it runs (limit_spec, layout.py); absent: none
    GATE_WAIT = "gw:"  # "<since ms>|<gate>": a gate it requires said no; queued until it says yes
    RESULT = "r:"  # the succeeded attempt's return value, msgpack (kept with the job)
    INPUTS = "in:"  # "<kwarg>=<parent index>,...": parents' results it receives as kwargs
    MAP_ARG = "ma:"  # a mapped task: "<kwarg>=<source index>", each element goes to kwarg
    MAP_INSTANCES = "mx:"  # a mapped task, once expanded: "<first index>|<count>" (kept)
    MAP_OF = "mo:"  # an instance: the index of its mapped task
    MAP_ELEMENT = "me:"  # an instance: its element of the source's list, msgpack
    # Trigger rules (model.trigger_rules, the counters rule_verdict reads in _job.lua):
    TRIGGER_RULE = "tr:"  # its rule, when not all_success and it has parents
    PARENTS = "np:"  # how many parents it has, with a trigger rule
    PARENTS_LEFT = "u:"  # parents not ended yet; absent until one ends other than succeeded
    PARENTS_FAILED = "nf:"  # parents ended failed or upstream_failed
    PARENTS_SKIPPED = "nk:"  # parents ended skipped
    # A task that waits for the world (`wait_for:`, _await.lua): what it waits for,
    # "<kind>|<timeout ms or 0>|<name>" (kind s: a signal, j: a job, c: a schedule's run), a
    # signal sent before it reached its wait (the payload, msgpack), taken when it gets
    # there, and the job a schedule's run was found to be (kept: what it waited for).
    AWAIT = "aw:"
    SIGNAL = "sg:"
    AWAIT_JOB = "aj:"

    def of(self, index: int | str) -> str:
        """The field of task `index`: TaskField.STATE.of(3) == "s:3"."""
        return f"{self._value_}{index}"  # not .value: a property, and this runs per field

    @property
    def lua_name(self) -> str:
        return f"TF_{self.name}"


# What a task's working fields are: what only a run of it needs. A finished job's packed
# record keeps them all, whatever it ended as: a retry, or a `clear` of a succeeded job, runs
# its tasks again from them.
WORKING_FIELDS = (
    TaskField.PAYLOAD,
    TaskField.NONCE,
    TaskField.CHILDREN,
    TaskField.DEPS_LEFT,
    TaskField.QUEUE,
    TaskField.PRIORITY,
    TaskField.MAX_ATTEMPTS,
    TaskField.RANK,
    TaskField.LIMITS,
    TaskField.INPUTS,
    TaskField.MAP_ARG,
    TaskField.MAP_OF,
    TaskField.MAP_ELEMENT,
    TaskField.TRIGGER_RULE,
    TaskField.PARENTS,
    TaskField.PARENTS_LEFT,
    TaskField.PARENTS_FAILED,
    TaskField.PARENTS_SKIPPED,
    TaskField.SIGNAL,
)
# The protocol this release speaks: the form of the queue entries and job hashes its scripts
# write and understand. A release that changes either (a new part in a queue entry, a field
# a transition must not ignore) raises it; an entry or a job of a higher protocol was written
# by a newer release, and this one leaves it alone rather than run it half understood:
# claim.lua never pops such an entry (it passes over it, and says so), and every job script
# refuses such a job before any write (NEWER_PROTOCOL). ARCHITECTURE.md, Version skew.
PROTOCOL = 1
# An entry of protocol N >= 2 ends with this and N ("...|<index>|v2"); one of protocol 1 (every
# entry before protocols existed) has no mark. A job of protocol N >= 2 has JobField.PROTOCOL.
PROTOCOL_MARK = "|v"


# A hash of at most hash-max-listpack-entries fields (512 by default; "ziplist" before Redis 7),
# none longer than hash-max-listpack-value (64 bytes), is a listpack, where every field read is a
# scan of the whole hash: a missing one (most tasks have no error, progress, limits ...) walks all
# of it. On a 9-task job's tasks hash (~10 fields a task) that was a third of Redis's instructions.
# So the hashes read on the task path that grow are made hash tables: a job's tasks hash from its
# first start (start.lua, while none of its tasks ended; a retry's restore and a map's expansion
# too), once the job has TASKS_HASHTABLE_MIN_TASKS tasks (a smaller job keeps the compact form: its
# scans are short, a hash table costs ~550 bytes a task more; a job waiting to run keeps it too, so
# a backlog stays compact), and a shard's metrics and estimates hashes by the task path when it adds
# a field to one of at most LISTPACK_ENTRIES_MAX fields (a new hash, or one loaded from disk) and by
# each recovery pass (hashtables.lua). A value longer than hash-max-listpack-value converts a hash
# at once, and a running Redis never converts one back, so the field (HASHTABLE_FIELD) is deleted
# again in the same script. Only speed depends on it: a server whose hash-max-listpack-value was
# raised past HASHTABLE_VALUE, or that loaded the hash from disk since, keeps the listpack.
HASHTABLE_FIELD = "~"  # no hash it goes into has a field so named
HASHTABLE_VALUE = "." * 65  # longer than hash-max-listpack-value's default
TASKS_HASHTABLE_MIN_TASKS = 4
LISTPACK_ENTRIES_MAX = 512  # hash-max-listpack-entries' default: past it, Redis converts a hash


class JobField(StrEnum):
    """The fields of a job hash."""

    ID = "id"
    NAME = "name"
    OWNER = "owner"
    STATE = "state"  # its JobState
    SPEC = "spec"  # the packed spec, until the leader has written the tasks
    RANKS = "ranks"  # the tasks' ranks, packed, with the spec (the leader writes them too)
    TASKS = "n"  # number of tasks
    LEFT = "left"  # tasks not finished yet
    FAILED = "nfailed"  # tasks failed for good
    CANCELLED = "ncancelled"
    SKIPPED = "nskipped"  # tasks skipped by a trigger rule (they do not fail the job)
    PRIORITY = "priority"
    QUEUE = "queue"  # the default queue of its tasks
    QUEUES = "queues"  # every queue its tasks may enter, comma-separated
    SEQ = "seq"  # submission order, the tie-break of equal priorities
    IDEMPOTENCY_KEY = "idem"
    DIGEST = "spec_digest"  # of the spec, compared on a resubmit with the same idempotency key
    CREATED_AT = "created_at"  # ms, Redis TIME (as every time below)
    STARTED_AT = "started_at"
    FINISHED_AT = "finished_at"
    UPDATED_AT = "updated_at"
    SCHEDULE_ID = "schedule_id"  # the schedule that fired it
    FIRE_TIME = "fire_time"
    ERROR = "error"
    STOP = "stop"  # "cancel" (or why it stops): no more tasks start
    WRITTEN = "written"  # tasks the leader has written so far
    QUEUED = "queued"  # roots queued so far
    LEADER = "leader"  # the handler of the last leader step
    UNWRITTEN_STOPPED = "unwritten_stopped"  # a cancel counted the tasks never written
    CANCEL_CURSOR = "cancel_cursor"  # tasks a cancel has visited
    COMPACT_CURSOR = "compact_cursor"  # bytes of the packed record a compaction wrote
    RETENTION = "retention"  # ms a finished job is kept
    PACKED = "packed"  # PACKED_FORMAT once its tasks and history are one packed record
    PROTOCOL = "protocol"  # the protocol of a job a newer release wrote (absent: 1, PROTOCOL)
    RESTORE_CURSOR = "restore_cursor"  # tasks fields + history entries a restore wrote
    # times compact or restore swapped the tasks hash and history for the packed record or
    # back: a reader that sees the same count after reading one form read it whole
    SWAPS = "swaps"
    TRIGGER_RULES = "rules"  # 1 when a task with parents has a trigger rule other than the default
    NOTIFY_ON = "notify_on"  # final states and events to tell of, comma-separated (`notify:`)
    NOTIFY_TO = "notify_to"  # the channels told (jobcenter.model.notify.Channel), comma-separated
    TASK_FAILED_NOTICES = "task_failed_notices"  # its tasks failed for good, counted for notices
    WEBHOOK = "webhook"  # the URL the webhook channel posts to
    TAGS = "tags"  # spec `tags:`, `key=value` pairs sorted by key, comma-separated
    PAUSED = "paused"  # ms it was paused at, while it is (`pause JOB`)
    TIMEOUT = "timeout"  # ms it may run (spec `timeout:`), from its start
    SLA = "sla"  # ms after its fire time (or creation) it should be done by (spec `sla:`)
    LATE = "late"  # ms recovery found it unfinished past its sla (mark_late.lua)
    AWAITS = "awaits"  # the indexes of its tasks with `wait_for:`, comma-separated
    AWAITED = "awaited"  # 1 once a task of another job waits for it: its end tells them


class DeliveryField(StrEnum):
    """A field of a job's notifications hash is one of these prefixes followed by the
    delivery's name: `s:webhook` is the state of the webhook delivery of the job's end,
    `s:webhook:late` of its late notice (jobcenter.model.notify.parse_delivery)."""

    STATE = "s:"  # its DeliveryState
    ATTEMPTS = "a:"  # attempts started for the job's current outcome
    HANDLER = "h:"  # the worker that made the last attempt
    ERROR = "e:"  # why the last attempt failed
    TRIED_AT = "tt:"  # ms, Redis TIME (as every time below): the last attempt's start
    NEXT_AT = "tn:"  # when the next attempt is due (retrying)
    DONE_AT = "td:"  # delivered, or given up

    def of(self, channel: str) -> str:
        return f"{self.value}{channel}"


class ArchiveStatusField(StrEnum):
    """The fields of the archive's status hash (Keys.archive_status): its last failure, while
    no write seen later worked (archive_status.lua)."""

    ERROR = "error"
    AT = "at"  # ms, Redis TIME: when the failure was seen
    WORKED_AT = "worked_at"  # when the last write that worked was seen


# The format of a packed record (JobField.PACKED's value): storage/keyspace/packed.py
# writes and reads it.
PACKED_FORMAT = 1


class PackedKey(StrEnum):
    """The keys of a packed record's parts (msgpack maps, one after another in one string):
    a part holds a chunk of tasks or of history entries, column by column."""

    KIND = "k"  # TASKS or HISTORY
    TASKS = "t"
    HISTORY = "h"
    FIRST = "i"  # the index of a tasks part's first task
    COUNT = "n"  # tasks or entries in the part
    COLUMNS = "c"  # column name (a task field's prefix without ':', a HistoryColumn) -> column
    BASE = "b"  # a column of integers: the smallest, and VALUES the others less it
    VALUES = "v"
    DICT = "d"  # a column of few distinct values: them, and INDEXES into them
    INDEXES = "x"


# Task fields that hold non-negative integers (times in ms, counters): the packed record
# stores each such column as a base and small offsets (storage/keyspace/packed.py).
INTEGER_FIELDS = (
    TaskField.ATTEMPTS,
    TaskField.MAX_ATTEMPTS,
    TaskField.DEPS_LEFT,
    TaskField.RANK,
    TaskField.CREATED_AT,
    TaskField.QUEUED_AT,
    TaskField.STARTED_AT,
    TaskField.FINISHED_AT,
    TaskField.UPDATED_AT,
)


class HistoryColumn(StrEnum):
    """The tab-separated fields of a history entry, in order (the packed record's columns)."""

    INDEX = "i"
    ATTEMPT = "a"
    STATE = "s"
    HANDLER = "h"
    STARTED_AT = "ts"
    FINISHED_AT = "tf"
    ERROR = "e"


INTEGER_HISTORY_COLUMNS = (
    HistoryColumn.INDEX,
    HistoryColumn.ATTEMPT,
    HistoryColumn.STARTED_AT,
    HistoryColumn.FINISHED_AT,
)


class LimitField(StrEnum):
    """Field prefixes of a shard's limits hash (Keys.limits), each followed by a limit id
    (`p:<pool>`, `j:<job>`, `k:<concurrency key>`) or a lease member `<job>|<index>`."""

    POOL_TOTAL = "t:"  # + pool name: the pool's slot count (`pool set`), the same in every shard
    PARKED = "w:"  # + limit id: tasks parked waiting for it in this shard
    CAP = "c:"  # + limit id (job and key limits): its cap, kept while tasks wait for it
    PARKED_AT = "pk:"  # + lease member: the task's entry in the parked zset
    RATE = "r:"  # + queue name or "p:<pool>": "<starts>/<period ms>" (`rate set`)
    RATE_WINDOW = "rw:"  # + the same: "<window start ms>|<starts in it>" in this shard
    PAUSED_QUEUE = "pq:"  # + queue name: paused since (ms), the same in every shard
    PAUSED_JOB = "pj:"  # + job id: paused since (ms); its tasks a claim meets are parked
    PAUSED_JOBS = "pjn:"  # (alone) how many jobs of the shard are paused: 0, claims look no further


class LimitKind(StrEnum):
    """The kinds of limit id, each followed by a name: what a slot is counted against."""

    POOL = "p:"  # + pool name
    JOB = "j:"  # + job id: the job's max_running
    KEY = "k:"  # + concurrency key (escaped, layout.py)
    PAUSED = "z:"  # + job id: not a slot, the job's pause: its tasks wait parked until resumed


class PayloadKey(StrEnum):
    """The keys of a task's packed payload (TaskField.PAYLOAD), short: one per task."""

    TASK = "t"  # the registered task name
    ARGS = "a"
    KWARGS = "k"
    ID = "id"
    TIMEOUT = "to"
    RETRY_BACKOFF = "rb"
    RETRY_BACKOFF_MAX = "rm"
    GATES = "g"  # the gates it requires (`requires:`), only when it has some
    FIRE_TIME = "ft"  # its job's fire time (epoch seconds), only when it has one
    SCHEDULE = "sc"  # the schedule that fired its job, only when one did


class ScheduleField(StrEnum):
    """The fields of a schedule hash: its definition, revision and firing state (its names
    are ScheduleState's attributes, jobcenter/storage/schedules.py)."""

    DEFINITION = "def"  # the packed definition
    REVISION = "rev"  # every script bumps it: what schedule_save compares
    PAUSED = "paused"
    NEXT = "next"
    PENDING = "pending"
    BUFFERED = "buffered"
    LAST_FIRE = "last_fire"
    LAST_JOB = "last_job"
    FIRES = "fires"
    SKIPPED = "skipped"
    MISSED = "missed"
    FAILED = "failed"


class EventField(StrEnum):
    """The fields of an event in a shard's event stream (its id is the Redis time it
    happened). A task event names the task by index: readers look its id up in the job."""

    KIND = "k"  # an EventKind
    JOB = "j"
    INDEX = "i"  # the task's index; absent on a job's own events
    ATTEMPT = "a"
    HANDLER = "h"
    ERROR = "e"  # short: the first EVENT_ERROR_MAX characters
    DETAIL = "x"  # the job's final state (finalized), a repair's rule, a retry's delay ms


class EventKind(StrEnum):
    """What an event says happened: one per transition (ARCHITECTURE.md, Events)."""

    SUBMITTED = "submitted"
    QUEUED = "queued"
    STARTED = "started"
    RESUMED = "resumed"  # timed_out -> running: the same attempt heartbeated again
    SUCCEEDED = "succeeded"
    RETRIED = "retried"  # a failed or timed-out attempt; another one follows
    FAILED = "failed"
    UPSTREAM_FAILED = "upstream_failed"
    SKIPPED = "skipped"  # its trigger rule will never hold
    TIMED_OUT = "timed_out"
    GIVEN_BACK = "given_back"  # by a worker without the task's code
    RELEASED = "released"  # by a stopping worker
    GATE_WAIT = "gate_wait"  # a gate said no: the unused attempt waits its backoff (DETAIL)
    CANCEL = "cancel"  # a cancel (or abandon: DETAIL) of the job was asked
    CANCELLED = "cancelled"
    REVIVED = "revived"  # retry / dlq requeue
    CLEARED = "cleared"  # clear: put back to run again by hand
    REPAIRED = "repaired"  # by recovery: DETAIL is the rule
    FINALIZED = "finalized"
    DELETED = "deleted"
    COMPACTED = "compacted"  # a finished job's tasks and history packed into one record
    RESTORED = "restored"  # unpacked again (before a retry or dlq requeue)
    PAUSED = "paused"  # the job was paused: none of its tasks starts until it is resumed
    UNPAUSED = "unpaused"  # the job was resumed: its parked tasks are back in their queues
    LATE = "late"  # the job was not finished by its sla: it goes on
    AWAITING = "awaiting"  # its dependencies met, a `wait_for:` task waits (DETAIL: for what)
    SIGNALLED = "signalled"  # a signal reached the job (DETAIL: its name)


EVENT_ERROR_MAX = 200  # characters of an error kept in its event: the history has it whole


class MetricField(StrEnum):
    """The counters of a shard's metrics hash: a prefix, then tab-separated labels."""

    FINISHED = "fin"  # \t queue \t task name \t final state: tasks that ended
    JOBS = "jobs"  # \t final state: jobs finalized
    RETRIES = "retry"  # \t queue \t task name: attempts that will be retried
    REPAIRS = "repair"  # \t rule: what recovery repaired
    EXPIRED = "expired"  # \t outcome: leases acted on when they expired
    GATE_WAITS = "gate"  # \t gate: attempts sent back unused because the gate said no
    # \t report (result, failure, heartbeat, ...): reports of attempts Redis does not know, as
    # it lost writes (refusals.py counts them: the script refusing one writes nothing)
    UNKNOWN_ATTEMPTS = "unknown"
    WAIT = "wait"  # \t queue \t bucket: queue wait (queued -> started), a histogram
    WAIT_SUM = "wait_sum"  # \t queue: its total, ms
    RUN = "run"  # \t queue \t task name \t bucket: run time of ended attempts
    RUN_SUM = "run_sum"  # \t queue \t task name: its total, ms
    # counted by the workers, not the transitions (storage/metrics.py count()):
    STOPPED = "stopped"  # \t reason \t runner: attempts stopped before they returned
    STOP_OVERDUE = "stop_overdue"  # \t reason \t runner: of those, ones still running later
    ARCHIVED = "archived"  # jobs written to the archive (runtime/archiver.py)
    ARCHIVE_FAILURES = "archive_failed"  # archive writes that failed (the database down)

    def of(self, *labels: str) -> str:
        """The field of a counter: MetricField.STOPPED.of("cancelled", "thread")."""
        return "\t".join((self.value, *labels))


# The histograms' upper bounds (ms; a last bucket holds the rest): fixed, so each
# observation is one HINCRBY of its bucket and one of the sum.
HISTOGRAM_BUCKETS_MS = (
    5,
    10,
    25,
    50,
    100,
    250,
    500,
    1_000,
    2_500,
    5_000,
    10_000,
    30_000,
    60_000,
    300_000,
    1_800_000,
    3_600_000,
)


# The Lua table naming each hash's fields (a table, not one local per field: Lua allows
# at most 200 locals per function, and the prelude and scripts share them).
LUA_TABLES: dict[str, type[StrEnum]] = {
    "JOB_FIELD": JobField,
    "PAYLOAD_KEY": PayloadKey,
    "SCHEDULE_FIELD": ScheduleField,
    "LIMIT_FIELD": LimitField,
    "LIMIT_KIND": LimitKind,
    "EVENT_FIELD": EventField,
    "EVENT_KIND": EventKind,
    "METRIC_FIELD": MetricField,
    "DELIVERY_FIELD": DeliveryField,
    "DELIVERY_STATE": DeliveryState,
    "ARCHIVE_STATUS_FIELD": ArchiveStatusField,
}


@dataclass(frozen=True)
class ReturnCode:
    """A code some scripts return first in their reply; `scripts` says which return it."""

    name: str
    value: int
    scripts: frozenset[str]
    meaning: str


def _code(name: str, value: int, scripts: str, meaning: str) -> ReturnCode:
    return ReturnCode(name, value, frozenset(scripts.split()), meaning)


# Every job script (claim's reply is lists, no code); _job.lua's context comes with most.
_JOB_SCRIPTS = (
    "cancel compact complete continue delete expire fail finalize gate_wait give_back heartbeat "
    "lost publish_tasks queue_roots release repair restore resubmit revive start submit "
    "clear mark pause_job resume_job mark_late signal await_due await_settle spawned archived"
)
_JOB_CHECKED = (
    "cancel complete continue delete expire fail finalize gate_wait give_back lost queue_roots "
    "release repair revive submit clear mark resume_job signal await_due await_settle spawned "
    "archived"
)
# Every code a script returns as the first item of its reply. Codes < 0 are refusals and
# change nothing. Each value has one meaning in every script (the `scripts` column says which
# return it): a caller reads a code without knowing which script sent it.
RETURN_CODES = (
    _code(
        "OK",
        0,
        f"{_JOB_SCRIPTS} singleton schedule_add schedule_save schedule_remove notify_attempt "
        "notify_done pool_set rate_set reconcile_slots shard_lease hashtables save_logs "
        "queue_pause await_register archive_status",
        "done",
    ),
    _code(
        "ALREADY",
        1,
        "cancel compact fail finalize lost restore resubmit singleton submit notify_attempt "
        "shard_lease pause_job resume_job queue_pause mark_late signal await_due spawned "
        "archived archive_status",
        "nothing to do: done already (by this or an earlier call); archive_status: an outcome "
        "seen later is recorded",
    ),
    _code(
        "BUSY", 3, "revive clear mark", "a failure cascade is under way: finish it, then call again"
    ),
    _code("UNFINISHED", 2, "finalize", "the job has tasks not finished yet"),
    _code("HELD", -1, "singleton", "another holder has the lease"),
    _code("NAME_TAKEN", -11, "schedule_add", "the name belongs to another schedule"),
    _code(
        "STALE_TOKEN",
        -2,
        "fail notify_done shard_lease spawned",
        "the attempt (or shard lease) is not the one the caller holds",
    ),
    _code(
        "UNKNOWN_ATTEMPT",
        -9,
        "fail spawned",
        "Redis never started the attempt of this token: it lost writes (a rollback)",
    ),
    _code("CHANGED", -12, "schedule_save", "the schedule changed since the revision read"),
    _code(
        "WRONG_STATE",
        -3,
        "delete fail publish_tasks queue_roots revive submit pool_set clear mark pause_job signal "
        "spawned",
        "the job or task is not in a state this transition applies to",
    ),
    _code(
        "JOB_GONE",
        -4,
        "cancel compact complete continue delete expire fail finalize gate_wait give_back "
        "heartbeat publish_tasks queue_roots release repair restore resubmit revive start "
        "notify_attempt save_logs clear mark pause_job resume_job mark_late signal await_due "
        "await_settle spawned archived",
        "no such job (never submitted, expired, or deleted)",
    ),
    _code("SCHEDULE_GONE", -13, "schedule_save schedule_remove", "no such schedule"),
    _code("KEYS_MISSING", -5, _JOB_CHECKED, "a queue or the idempotency key was not in KEYS"),
    _code(
        "CURSOR_MOVED",
        -6,
        "archived compact publish_tasks queue_roots restore",
        "another caller moved on meanwhile (compact: or the job changed since it was read)",
    ),
    _code("IDEMPOTENCY_CONFLICT", -14, "submit", "the key names a job of a different spec"),
    _code(
        "JOB_STOPPED",
        -7,
        "fail spawned",
        "its job was cancelled (or abandoned by recovery): the attempt's outcome is not kept",
    ),
    _code("LAST_OWNER", -8, "shard_lease", "no other live owner would keep the segment: kept"),
    _code(
        "NEWER_PROTOCOL",
        -10,
        _JOB_SCRIPTS.replace(" submit", ""),
        "a newer release wrote the job (its protocol is above PROTOCOL): left to that release",
    ),
)

# Codes per item of a batch (complete: per pair, heartbeat and give_back: per triple): ITEM_X
# is X said of one item, with X's value.
ITEM_CODES = (
    _code("ITEM_OK", 0, "complete heartbeat give_back gate_wait", "done"),
    _code(
        "ITEM_ALREADY",
        1,
        "complete gate_wait",
        "this attempt completed already; gate_wait: ended already, the gate said no too long",
    ),
    _code(
        "ITEM_STALE_TOKEN",
        -2,
        "complete heartbeat give_back gate_wait",
        "not this handler's attempt",
    ),
    _code(
        "ITEM_WRONG_STATE",
        -3,
        "complete heartbeat give_back gate_wait",
        "the task is not running",
    ),
    _code("ITEM_JOB_STOPPED", -7, "heartbeat", "its job was cancelled: the attempt should stop"),
    _code(
        "ITEM_UNKNOWN_ATTEMPT",
        -9,
        "complete heartbeat give_back gate_wait",
        "Redis never started the attempt of this token: it lost writes (a rollback)",
    ),
)


ALL_CODES = (*RETURN_CODES, *ITEM_CODES)


def code(name: str) -> int:
    """The value of the return code called `name`."""
    for c in ALL_CODES:
        if c.name == name:
            return c.value
    raise KeyError(f"no return code named {name!r}")


def lua_prelude() -> str:
    """Lua `local` lines naming every state (states.lua_constants), task field, job, payload
    and schedule field (JOB_FIELD.STATE == 'state', LUA_TABLES) and return code, prepended to each
    script by the loader."""
    lines = [f"local {f.lua_name} = '{f.value}'" for f in TaskField]
    names = ", ".join(f.lua_name for f in WORKING_FIELDS)
    lines.append(f"local WORKING_FIELDS = {{{names}}}")
    lines += [
        f"local HASHTABLE_FIELD = '{HASHTABLE_FIELD}'",
        f"local HASHTABLE_VALUE = '{HASHTABLE_VALUE}'",
        f"local TASKS_HASHTABLE_MIN_TASKS = {TASKS_HASHTABLE_MIN_TASKS}",
        f"local LISTPACK_ENTRIES_MAX = {LISTPACK_ENTRIES_MAX}",
        f"local PROTOCOL = {PROTOCOL}",
        f"local ENTRY_PROTOCOL = '{PROTOCOL_MARK}(%d+)$'",  # a queue entry's protocol, if marked
    ]
    for table, fields in LUA_TABLES.items():
        entries = ", ".join(f"{f.name} = '{f.value}'" for f in fields)
        lines.append(f"local {table} = {{{entries}}}")
    lines += [f"local {c.name} = {c.value}" for c in {c.name: c for c in ALL_CODES}.values()]
    # one table (_job.lua adds its event and metric helpers): a script may have 200 locals
    buckets = ", ".join(map(str, HISTOGRAM_BUCKETS_MS))
    late, failed, most = notify.LATE, notify.TASK_FAILED, notify.TASK_FAILED_NOTICES_MAX
    lines.append(
        f"local NOTICE = {{LATE = '{late}', TASK_FAILED = '{failed}', TASK_FAILED_MAX = {most}}}"
    )
    # each bucket's field suffix as text: a number joined to a string is formatted by sprintf
    suffixes = ", ".join(f"'\\t{b}'" for b in range(1, len(HISTOGRAM_BUCKETS_MS) + 2))
    # and the fields its helpers keep for the call (OBS.children_after's last answer), named
    # here so the table is built at its size: a key added later makes Lua resize the table
    lines.append(
        f"local OBS = {{error_max = {EVENT_ERROR_MAX}, buckets_ms = {{{buckets}}}, "
        f"bucket_suffixes = {{{suffixes}}}, children_csv = false, children_job = false, "
        "children_first = 0}"
    )
    return lua_constants() + trigger_rules.lua_constants() + "\n".join(lines) + "\n"
