"""Job and task specs: frozen dataclasses, validation, and loading from YAML or JSON.

A spec is checked completely before anything reaches Redis, so a typo fails at submit
with a message naming it instead of leaving a half-built job behind.
"""

from __future__ import annotations

import difflib
import hashlib
import re
import reprlib
import weakref
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from jobcenter.errors import SpecError

from . import codec, documents, placeholders
from .dag import check_dag
from .durations import MAX_SECONDS, parse_seconds
from .notify import Notify, parse_notify
from .tags import Tags, parse_tags
from .trigger_rules import DEFAULT_TRIGGER_RULE, TriggerRule

DEFAULT_QUEUE = "default"  # the queue of a job or task that names none
# A task's retry backoff, in seconds: the base of an exponential backoff with full jitter,
# and its cap (the worker goes by these for a payload that names none).
DEFAULT_RETRY_BACKOFF = 1.0
DEFAULT_RETRY_BACKOFF_MAX = 300.0

# The rules for the order of a job's ready tasks (the `order` key; model/ordering.py ranks).
FIFO, DOWNSTREAM, CRITICAL_PATH = "fifo", "downstream", "critical_path"
ORDER_RULES = (FIFO, DOWNSTREAM, CRITICAL_PATH)
DEFAULT_ORDER = CRITICAL_PATH  # the measured best when nothing is known (docs: Task order)

# A job is one set of Redis hashes, split and published in bounded chunks; past this the
# per-job hashes get large enough to slow every script that touches them.
MAX_TASKS = 100_000
# Arguments travel through Redis with every claim; bulk data belongs in external storage.
MAX_TASK_PAYLOAD_BYTES = 512 * 1024
# All of a job's arguments go to Redis in one submit and are kept twice until it is split
# (the stored spec and the tasks' fields); a bound keeps a submit from flooding memory.
MAX_JOB_PAYLOAD_BYTES = 64 * 1024 * 1024
# Every dependency is an entry of a parent's children list and a step of each release:
# ten parents a task at the task limit. (YAML aliases can repeat one long list cheaply.)
MAX_DEPENDENCIES = 1_000_000
# Beyond this, retries hide a broken task rather than ride out a transient fault.
MAX_RETRIES = 100
# Priorities are stored as sorted-set scores; a bound keeps them exact in a double.
MAX_PRIORITY = 1_000_000_000
# The stored spec nests args and kwargs three containers deep (job -> tasks -> task), so
# they get that much less than the codec's limit and the whole spec always packs.
ARGS_MAX_DEPTH = codec.MAX_DEPTH - 3
# Names are shown in listings and history; longer ones are a mistake, not a name.
MAX_NAME_LENGTH = 200
# Slots a task takes from its pool, a job's running tasks, a key's running tasks: far above
# any machine's cores, low enough to stay exact as counters.
MAX_POOL_SLOTS = 10_000
MAX_RUNNING_LIMIT = 1_000_000
# A concurrency key's template names kwargs in braces: "{tenant}" or "db-{region}".
KEY_FIELD_RE = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")
# A spec file is read whole; far above a 100,000-task spec with its payloads, low enough
# that `submit /dev/zero` fails at once instead of eating memory.
MAX_SPEC_FILE_BYTES = 256 * 1024 * 1024
# The deepest container a valid spec holds: job -> tasks -> task -> args, and the args
# ARGS_MAX_DEPTH deep (the args list included). A deeper file is refused while parsing.
SPEC_MAX_DEPTH = 3 + ARGS_MAX_DEPTH

# Task ids, queue, node and owner names end up inside Redis key names and queue entries,
# so they exclude the separators those use (`|`, `:`, `{`, `}`, whitespace).
ID_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}")
# Registered task names look like dotted Python paths, optionally with `:` or `-`.
TASK_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_.:-]{0,199}")

_ID_RULE = "1-128 letters, digits, '_', '.' or '-', starting with a letter or digit"
_TASK_NAME_RULE = "1-200 letters, digits, '_', '.', ':' or '-', starting with a letter or '_'"


@dataclass(frozen=True)
class TaskSpec:
    """One node of a job's DAG."""

    id: str
    task: str  # registered task name
    args: tuple[Any, ...] = ()
    kwargs: Mapping[str, Any] = field(default_factory=dict)
    depends_on: tuple[str, ...] = ()
    retries: int = 0  # extra attempts
    retry_backoff: float = DEFAULT_RETRY_BACKOFF  # base seconds, exponential with full jitter
    retry_backoff_max: float = DEFAULT_RETRY_BACKOFF_MAX
    timeout: float | None = None  # seconds
    queue: str | None = None  # None: the job's queue
    node: str | None = None
    priority: int | None = None  # None: the job's priority
    estimate: float | None = None  # seconds it usually runs; None: learned (model.ordering)
    pool: str | None = None  # a named pool (`jobcenter pool set`) it takes slots of to run
    pool_slots: int = 1  # how many of the pool's slots it takes
    concurrency_key: str | None = None  # a template over its kwargs, e.g. "{tenant}"
    concurrency_limit: int | None = None  # at most this many tasks with its key run at once
    requires: tuple[str, ...] = ()  # gates (checks workers register) that must say yes first

    def rendered_key(self) -> str | None:
        """Its concurrency key with its kwargs filled in ("{tenant}" -> "acme"), or None."""
        if self.concurrency_key is None:
            return None
        return render_key(self.concurrency_key, self.kwargs, self.id)

    # When it runs, given how its parents ended (model.trigger_rules); no effect on a root.
    trigger_rule: str = DEFAULT_TRIGGER_RULE
    # kwarg -> the id of a parent whose result it receives (a mapped parent: their list)
    inputs: Mapping[str, str] = field(default_factory=dict)
    # {kwarg: source id}: one instance per element of the source's result (run-time fan-out)
    map: Mapping[str, str] = field(default_factory=dict)
    # what it waits for instead of running ({"signal": name, "timeout": seconds}, or a job
    # by id, or the run of a schedule (id or name) of the same fire time): WAIT_KINDS
    wait_for: Mapping[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """Plain data parse_spec accepts back; fields left at their default are omitted."""
        out: dict[str, Any] = {"id": self.id, "task": self.task}
        if self.args:
            out["args"] = list(self.args)
        if self.kwargs:
            out["kwargs"] = dict(self.kwargs)
        if self.depends_on:
            out["depends_on"] = list(self.depends_on)
        if self.inputs:
            out["inputs"] = dict(self.inputs)
        if self.map:
            out["map"] = dict(self.map)
        if self.wait_for:
            out["wait_for"] = dict(self.wait_for)
        for name, default in _TASK_DEFAULTS.items():
            value = getattr(self, name)
            if value != default:
                out[name] = list(value) if isinstance(value, tuple) else value
        return out


@dataclass(frozen=True)
class JobSpec:
    """A validated job: a name, its DAG of tasks, and job-wide defaults."""

    name: str
    tasks: tuple[TaskSpec, ...]
    owner: str | None = None
    priority: int = 0
    queue: str = DEFAULT_QUEUE
    idempotency_key: str | None = None
    retention: float | None = None  # seconds a finished job is kept; None: namespace default
    order: str = DEFAULT_ORDER  # which ready task of the job runs first (jobcenter.model.ordering)
    max_running: int | None = None  # at most this many of its tasks run at once
    notify: Notify | None = None  # whom to tell when it ends (jobcenter.model.notify)
    # its tasks' args hold placeholders, filled at submit (model.placeholders): known from
    # the parse, not a field of the spec itself
    uses_placeholders: bool = field(default=False, compare=False, repr=False)
    tags: Tags = ()  # (key, value) pairs, sorted by key (jobcenter.model.tags)
    timeout: float | None = None  # seconds it may run; then it fails, its attempts revoked
    sla: float | None = None  # seconds after its fire time or submit it should be done by

    def to_dict(self) -> dict[str, Any]:
        """Plain data (JSON/msgpack-ready) that round-trips through parse_spec."""
        out: dict[str, Any] = {"name": self.name}
        for name, default in _JOB_DEFAULTS.items():
            value = getattr(self, name)
            if value != default:
                out[name] = value
        if self.notify is not None:
            out["notify"] = self.notify.to_dict()
        if self.tags:
            out["tags"] = dict(self.tags)
        out["tasks"] = [t.to_dict() for t in self.tasks]
        return out


# Scalar fields and their defaults; to_dict omits a field holding its default.
_TASK_DEFAULTS: dict[str, Any] = {
    "retries": 0,
    "retry_backoff": DEFAULT_RETRY_BACKOFF,
    "retry_backoff_max": DEFAULT_RETRY_BACKOFF_MAX,
    "timeout": None,
    "queue": None,
    "node": None,
    "priority": None,
    "estimate": None,
    "pool": None,
    "pool_slots": 1,
    "concurrency_key": None,
    "concurrency_limit": None,
    "requires": (),
    "trigger_rule": DEFAULT_TRIGGER_RULE,
}
_JOB_DEFAULTS: dict[str, Any] = {
    "owner": None,
    "priority": 0,
    "queue": DEFAULT_QUEUE,
    "idempotency_key": None,
    "retention": None,
    "order": DEFAULT_ORDER,
    "max_running": None,
    "timeout": None,
    "sla": None,
}
_TASK_KEYS = frozenset(
    {"id", "task", "args", "kwargs", "depends_on", "inputs", "map", "wait_for", *_TASK_DEFAULTS}
)
_JOB_KEYS = frozenset({"name", "tasks", "notify", "tags", *_JOB_DEFAULTS})


# --- field checks; `task_id` None means a job-level field ----------------------------


def _bad(task_id: str | None, problem: str) -> SpecError:
    return SpecError(f"job: {problem}" if task_id is None else f"task {task_id!r}: {problem}")


# Shows a few levels and items of a value: a huge or deeply nested one costs no more.
_SHORT_REPR = reprlib.Repr()
_SHORT_REPR.maxlevel = 3
_SHORT_REPR.maxstring = _SHORT_REPR.maxother = 60


def _show(value: object) -> str:
    """repr of a bad value, cut short so one huge value cannot flood the message."""
    try:
        text = _SHORT_REPR.repr(value)
    except Exception:  # a repr that raises, an int too long to print
        text = f"<{type(value).__name__}>"
    return text if len(text) <= 60 else text[:57] + "..."


def _unknown_key(key: object, allowed: frozenset[str], where: str) -> SpecError:
    message = f"unknown key {_show(key)} in {where}"
    if isinstance(key, str):
        close = difflib.get_close_matches(key.replace("-", "_"), sorted(allowed), n=1)
        if close:
            message += f" (did you mean {close[0]!r}?)"
    return SpecError(message)


def _int(value: object, key: str, task_id: str | None, low: int, high: int, rule: str) -> int:
    """An int field; integral floats (JSON's 3.0) pass, bools and fractions do not."""
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if not isinstance(value, int) or isinstance(value, bool) or value < low:
        raise _bad(task_id, f"{key!r} must be {rule}, got {_show(value)}")
    if value > high:
        raise _bad(task_id, f"{key!r} must be at most {high}, got {_show(value)}")
    return value


def _priority(value: object, task_id: str | None) -> int:
    rule = f"an integer from -{MAX_PRIORITY} to {MAX_PRIORITY}"
    return _int(value, "priority", task_id, -MAX_PRIORITY, MAX_PRIORITY, rule)


def _seconds(value: object, key: str, task_id: str | None, *, strict: bool) -> float:
    """A duration (model.durations) up to MAX_SECONDS: > 0 if strict, else >= 0."""
    if isinstance(value, int | float) and not isinstance(value, bool) and 0 < value <= MAX_SECONDS:
        return float(value)  # the common case, kept short for 100,000-task specs
    try:
        return parse_seconds(value, repr(key), low_open=strict)
    except SpecError as exc:
        raise _bad(task_id, str(exc)) from None


def _name(value: object, key: str, task_id: str | None) -> str:
    """A queue, node or owner name: safe inside Redis key names."""
    if not isinstance(value, str) or not ID_RE.fullmatch(value):
        raise _bad(task_id, f"{key!r} must be {_ID_RULE}, got {_show(value)}")
    return value


def render_key(template: str, kwargs: Mapping[str, Any], task_id: str) -> str:
    """A concurrency key template with each "{name}" replaced by that kwarg's value."""

    def value(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in kwargs:
            raise _bad(
                task_id,
                f"'concurrency_key' {template!r} names kwarg {name!r}, "
                "which the task does not have",
            )
        return str(kwargs[name])

    key = KEY_FIELD_RE.sub(value, template)
    if not 0 < len(key) <= MAX_NAME_LENGTH:
        raise _bad(
            task_id,
            f"'concurrency_key' {template!r} makes a key of {len(key)} "
            f"characters; it must have 1-{MAX_NAME_LENGTH}",
        )
    return key


def _limits(raw: Mapping[str, Any], task_id: str) -> tuple[str | None, int, str | None, int | None]:
    """pool, pool_slots, concurrency_key, concurrency_limit of a raw task."""
    pool = raw.get("pool")
    if pool is not None:
        pool = _name(pool, "pool", task_id)
    slots = 1
    if "pool_slots" in raw:
        if pool is None:
            raise _bad(task_id, "'pool_slots' needs a 'pool'")
        rule = f"an integer from 1 to {MAX_POOL_SLOTS}"
        slots = _int(raw["pool_slots"], "pool_slots", task_id, 1, MAX_POOL_SLOTS, rule)
    key, limit = raw.get("concurrency_key"), raw.get("concurrency_limit")
    if (key is None) != (limit is None):
        raise _bad(task_id, "'concurrency_key' and 'concurrency_limit' go together: give both")
    if key is not None:
        if not isinstance(key, str) or not key:
            raise _bad(task_id, f"'concurrency_key' must be a text template, got {_show(key)}")
        rule = f"an integer from 1 to {MAX_RUNNING_LIMIT}"
        limit = _int(limit, "concurrency_limit", task_id, 1, MAX_RUNNING_LIMIT, rule)
    return pool, slots, key, limit


def _requires(value: object, task_id: str) -> tuple[str, ...]:
    """A task's gates: a gate name or a list of them (names as queue names)."""
    names = [value] if isinstance(value, str) else value
    if not isinstance(names, list | tuple) or not names:
        raise _bad(task_id, f"'requires' must be a gate name or a list of them, got {_show(value)}")
    return tuple(dict.fromkeys(_name(n, "requires", task_id) for n in names))


def check_name(value: object, what: str) -> str:
    """A queue, node or namespace name given outside a spec (a CLI option, a setting):
    the same rule as inside one, since it ends up in Redis key names too."""
    if not isinstance(value, str) or not ID_RE.fullmatch(value):
        shown = "an empty name" if value == "" else _show(value)
        raise SpecError(f"{what} must be {_ID_RULE}, got {shown}")
    return value


def _label(value: object, key: str) -> str:
    """Free text shown to people (job name, idempotency key): 1..200 printable characters."""
    if (
        not isinstance(value, str)
        or not 0 < len(value) <= MAX_NAME_LENGTH
        or not value.isprintable()
    ):
        raise _bad(
            None, f"{key!r} must be 1-{MAX_NAME_LENGTH} printable characters, got {_show(value)}"
        )
    return value


# --- parsing -------------------------------------------------------------------------


class _JobTotals:
    """What a job's tasks add up to so far, against the per-job limits."""

    def __init__(self) -> None:
        self.payload_bytes = 0
        self.dependencies = 0
        self.placeholders = False  # a task's args or kwargs hold one (model.placeholders)

    def add_payload(self, task_id: str, size: int) -> None:
        self.payload_bytes += size
        if self.payload_bytes > MAX_JOB_PAYLOAD_BYTES:
            raise SpecError(
                f"job: the tasks' args and kwargs take more than {MAX_JOB_PAYLOAD_BYTES} bytes "
                f"packed in all (the limit per job), passed at task {task_id!r}"
            )

    def add_dependencies(self, task_id: str, count: int) -> None:
        self.dependencies += count
        if self.dependencies > MAX_DEPENDENCIES:
            raise SpecError(
                f"job has more than {MAX_DEPENDENCIES} dependencies (the limit), "
                f"passed at task {task_id!r}"
            )


def _parse_task(raw: object, position: int, known_names: set[str], totals: _JobTotals) -> TaskSpec:
    # Hot for 100,000-task jobs: absent keys take their (valid) default unchecked, and
    # message prefixes are only formatted on the way to an error.
    if not isinstance(raw, (dict, Mapping)):
        raise SpecError(f"tasks[{position}] must be a mapping, got {type(raw).__name__}")
    task_id = raw.get("id")
    if not _TASK_KEYS.issuperset(raw):
        key = next(k for k in raw if k not in _TASK_KEYS)
        where = f"task {_show(task_id)}" if isinstance(task_id, str) else f"tasks[{position}]"
        raise _unknown_key(key, _TASK_KEYS, where)
    if task_id is None:
        raise SpecError(f"tasks[{position}] has no 'id'")
    if not isinstance(task_id, str) or not ID_RE.fullmatch(task_id):
        raise SpecError(f"tasks[{position}]: invalid id {_show(task_id)}: use {_ID_RULE}")

    wait_for = _wait_for(raw["wait_for"], task_id) if "wait_for" in raw else {}
    name = raw.get("task")
    if wait_for:
        if name is not None and name != WAIT_TASK:
            raise _bad(
                task_id,
                f"a task with 'wait_for' runs no function: drop 'task' ({_show(name)})",
            )
        name = WAIT_TASK
    if name is None:
        raise SpecError(f"task {task_id!r} has no 'task' (the registered task name)")
    if not isinstance(name, str):
        raise _bad(task_id, f"'task' must be a registered task name, got {_show(name)}")
    if name not in known_names:  # most jobs reuse a few task names across many tasks
        if not TASK_NAME_RE.fullmatch(name):
            raise _bad(task_id, f"'task' must be {_TASK_NAME_RULE}, got {_show(name)}")
        known_names.add(name)

    args = raw.get("args")
    if args is None:
        args = ()
    elif isinstance(args, (list, tuple)):
        args = tuple(args)
    else:
        raise _bad(task_id, f"'args' must be a list, got {type(args).__name__}")
    kwargs = raw.get("kwargs")
    if kwargs is None:
        kwargs = {}
    elif isinstance(kwargs, (dict, Mapping)):
        kwargs = dict(kwargs)
        for key in kwargs:
            if not isinstance(key, str):
                raise _bad(task_id, f"'kwargs' keys must be strings, got {_show(key)}")
    else:
        raise _bad(task_id, f"'kwargs' must be a mapping, got {type(kwargs).__name__}")
    if args or kwargs:
        size, packed = _check_payload(task_id, args, kwargs)
        totals.add_payload(task_id, size)
        if placeholders.may_hold(packed):  # a byte search first: the walk only when it may
            try:
                totals.placeholders |= placeholders.check(args, kwargs)
            except SpecError as exc:
                raise _bad(task_id, str(exc)) from None

    deps = raw.get("depends_on")
    if deps is None:
        depends_on: tuple[str, ...] = ()
    else:
        if isinstance(deps, str):
            deps = (deps,)
        # counted before they are read: a YAML alias can repeat one long list cheaply
        totals.add_dependencies(task_id, len(deps) if isinstance(deps, (list, tuple)) else 0)
        if not isinstance(deps, (list, tuple)) or not all(isinstance(d, str) for d in deps):
            raise _bad(
                task_id, f"'depends_on' must be a task id or a list of task ids, got {_show(deps)}"
            )
        depends_on = tuple(dict.fromkeys(deps)) if len(deps) > 1 else tuple(deps)
    inputs = _task_refs(raw.get("inputs"), "inputs", task_id)
    mapped = _task_refs(raw.get("map"), "map", task_id)
    if len(mapped) > 1:
        raise _bad(task_id, "'map' takes one argument: {argument: source task}")
    for source in mapped.values():  # a mapped task depends on its source
        if source not in depends_on:
            depends_on = (*depends_on, source)
    for arg, parent in inputs.items():
        if parent not in depends_on:
            raise _bad(
                task_id,
                f"input {arg!r} names task {parent!r}, which it does not depend on: "
                "add it to depends_on",
            )
    for arg in (*inputs, *mapped):
        if arg in kwargs:
            raise _bad(task_id, f"{arg!r} is both in 'kwargs' and an input: keep one")
        if arg in inputs and arg in mapped:
            raise _bad(task_id, f"{arg!r} is both an input and the map argument")

    retries, backoff, backoff_max = 0, DEFAULT_RETRY_BACKOFF, DEFAULT_RETRY_BACKOFF_MAX
    timeout = queue = node = priority = estimate = None
    if "retries" in raw:
        retries = _int(raw["retries"], "retries", task_id, 0, MAX_RETRIES, "an integer >= 0")
    if "retry_backoff" in raw:
        backoff = _seconds(raw["retry_backoff"], "retry_backoff", task_id, strict=False)
    if "retry_backoff_max" in raw:
        backoff_max = _seconds(raw["retry_backoff_max"], "retry_backoff_max", task_id, strict=False)
    if backoff_max < backoff:
        raise _bad(
            task_id,
            f"'retry_backoff_max' ({backoff_max:g}) must be >= 'retry_backoff' ({backoff:g})",
        )
    if raw.get("timeout") is not None:
        timeout = _seconds(raw["timeout"], "timeout", task_id, strict=True)
    if raw.get("queue") is not None:
        queue = _name(raw["queue"], "queue", task_id)
    if raw.get("node") is not None:
        node = _name(raw["node"], "node", task_id)
    if raw.get("priority") is not None:
        priority = _priority(raw["priority"], task_id)
    if raw.get("estimate") is not None:
        estimate = _seconds(raw["estimate"], "estimate", task_id, strict=False)
    pool, pool_slots, concurrency_key, concurrency_limit = None, 1, None, None
    if (
        "pool" in raw
        or "pool_slots" in raw
        or "concurrency_key" in raw
        or "concurrency_limit" in raw
    ):
        pool, pool_slots, concurrency_key, concurrency_limit = _limits(raw, task_id)
        if concurrency_key is not None:
            render_key(concurrency_key, kwargs, task_id)  # every kwarg it names is there
    requires: tuple[str, ...] = ()
    if raw.get("requires") is not None:
        requires = _requires(raw["requires"], task_id)
    trigger_rule: str = DEFAULT_TRIGGER_RULE
    if raw.get("trigger_rule") is not None:
        trigger_rule = _trigger_rule(raw["trigger_rule"], task_id)
    return TaskSpec(
        task_id,
        name,
        args,
        kwargs,
        depends_on,
        retries,
        backoff,
        backoff_max,
        timeout,
        queue,
        node,
        priority,
        estimate,
        pool,
        pool_slots,
        concurrency_key,
        concurrency_limit,
        requires,
        trigger_rule,
        inputs,
        mapped,
        wait_for,
    )


# What a task may wait for (`wait_for: {<kind>: <name>, timeout: <duration>}`); such a task
# runs no function: it is the built-in WAIT_TASK, and needs no worker.
WAIT_KINDS = ("signal", "job", "schedule")
WAIT_TASK = "jobcenter.wait"


def _wait_for(value: object, task_id: str) -> dict[str, Any]:
    """`wait_for`: one kind (WAIT_KINDS) naming what it waits for, and an optional timeout."""
    if not isinstance(value, (dict, Mapping)):
        raise _bad(
            task_id,
            f"'wait_for' must be a mapping like {{job: ID}}, got {_show(value)}",
        )
    kinds = [k for k in value if k in WAIT_KINDS]
    unknown = [k for k in value if k not in WAIT_KINDS and k != "timeout"]
    if unknown or len(kinds) != 1:
        raise _bad(
            task_id,
            f"'wait_for' takes one of {', '.join(WAIT_KINDS)} (and an optional timeout), "
            f"got {_show(dict(value))}",
        )
    kind = kinds[0]
    out: dict[str, Any] = {kind: _name(value[kind], f"wait_for.{kind}", task_id)}
    if value.get("timeout") is not None:
        out["timeout"] = _seconds(value["timeout"], "wait_for.timeout", task_id, strict=True)
    return out


def _trigger_rule(value: object, task_id: str) -> str:
    if value not in _TRIGGER_RULES:
        raise _bad(
            task_id,
            f"unknown trigger_rule {_show(value)}: use one of {', '.join(_TRIGGER_RULES)}",
        )
    return str(value)


_TRIGGER_RULES = tuple(r.value for r in TriggerRule)


def _task_refs(value: object, key: str, task_id: str) -> dict[str, str]:
    """`inputs` or `map`: keyword argument names (identifiers) -> task ids."""
    if value is None:
        return {}
    if not isinstance(value, (dict, Mapping)):
        raise _bad(task_id, f"{key!r} must map argument names to task ids, got {_show(value)}")
    refs: dict[str, str] = {}
    for name, ref in value.items():
        if not isinstance(name, str) or not name.isidentifier():
            raise _bad(task_id, f"{key!r}: {_show(name)} is not a keyword argument name")
        if not isinstance(ref, str) or not ID_RE.fullmatch(ref):
            raise _bad(task_id, f"{key!r}: {name!r} must name a task id, got {_show(ref)}")
        refs[name] = ref
    return refs


def _check_maps(tasks: tuple[TaskSpec, ...]) -> None:
    """A mapped task's source returns the list: it must not be a mapped task itself (whose
    result is the list of its instances' results: map over a task that gathers them)."""
    mapped = {t.id for t in tasks if t.map}
    for t in tasks:
        if t.map and t.trigger_rule != DEFAULT_TRIGGER_RULE:  # its instances are its parents
            raise _bad(t.id, f"a mapped task runs by all_success, not {t.trigger_rule!r}")
        for source in t.map.values():
            if source in mapped:
                raise _bad(
                    t.id,
                    f"maps over {source!r}, itself a mapped task: map over a task that takes "
                    f"{source!r}'s results as an input and returns the list",
                )


def _check_payload(
    task_id: str, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> tuple[int, tuple[bytes, ...]]:
    """args and kwargs must pack (plain data, not too deep) into MAX_TASK_PAYLOAD_BYTES
    together; returns their packed size, and the packed bytes."""
    limit = MAX_TASK_PAYLOAD_BYTES
    packs: list[bytes] = []
    try:
        size = 0
        if args:
            packs.append(codec.pack(args, what="args", max_depth=ARGS_MAX_DEPTH, max_bytes=limit))
            size = len(packs[0])
        if kwargs:
            packed = codec.pack(
                kwargs, what="kwargs", max_depth=ARGS_MAX_DEPTH, max_bytes=limit - size
            )
            packs.append(packed)
            size += len(packed)
    except codec.TooLarge:
        raise _bad(
            task_id, f"args and kwargs take more than {limit} bytes packed (the limit per task)"
        ) from None
    except SpecError as exc:
        raise _bad(task_id, str(exc)) from None
    return size, tuple(packs)


# The JobSpecs parse_spec made (by id; weak, so they are forgotten with the spec): only
# those are known valid, since a frozen dataclass can also be built by hand.
_VALIDATED: weakref.WeakValueDictionary[int, JobSpec] = weakref.WeakValueDictionary()


def parse_spec(data: Mapping[str, Any], *, max_tasks: int = MAX_TASKS) -> JobSpec:
    """Validate a job spec given as plain data (parsed YAML/JSON) and build a JobSpec.

    Every problem raises SpecError naming it: unknown keys (typos), bad values, unknown or
    duplicate task ids, self dependencies and cycles (with the cycle's path).
    """
    if not isinstance(data, Mapping):
        raise SpecError(f"a job spec must be a mapping, got {type(data).__name__}")
    if not _JOB_KEYS.issuperset(data):
        key = next(k for k in data if k not in _JOB_KEYS)
        raise _unknown_key(key, _JOB_KEYS, "job")
    if "name" not in data:
        raise SpecError("job has no 'name'")
    name = _label(data["name"], "name")
    owner = data.get("owner")
    if owner is not None:
        owner = _name(owner, "owner", None)
    priority = _priority(data.get("priority", 0), None)
    queue = _name(data.get("queue", DEFAULT_QUEUE), "queue", None)
    idempotency_key = data.get("idempotency_key")
    if idempotency_key is not None:
        idempotency_key = _label(idempotency_key, "idempotency_key")
    retention = data.get("retention")
    if retention is not None:
        retention = _seconds(retention, "retention", None, strict=True)
    order = data.get("order", DEFAULT_ORDER)
    if order not in ORDER_RULES:
        raise SpecError(f"job: 'order' must be one of {', '.join(ORDER_RULES)}, got {_show(order)}")
    max_running = data.get("max_running")
    if max_running is not None:
        rule = f"an integer from 1 to {MAX_RUNNING_LIMIT}"
        max_running = _int(max_running, "max_running", None, 1, MAX_RUNNING_LIMIT, rule)
    notify = parse_notify(data["notify"]) if data.get("notify") is not None else None
    tags = parse_tags(data["tags"]) if data.get("tags") is not None else ()
    deadlines = {
        key: _seconds(data[key], key, None, strict=True)
        for key in ("timeout", "sla")
        if data.get(key) is not None
    }

    raw_tasks = data.get("tasks")
    if raw_tasks is None or (isinstance(raw_tasks, list | tuple) and not raw_tasks):
        raise SpecError("job has no tasks")
    if not isinstance(raw_tasks, list | tuple):
        raise SpecError(f"job: 'tasks' must be a list, got {type(raw_tasks).__name__}")
    if len(raw_tasks) > max_tasks:
        raise SpecError(f"job has {len(raw_tasks)} tasks; the limit is {max_tasks}")

    seen_names: set[str] = set()
    totals = _JobTotals()
    tasks = tuple(_parse_task(raw, i, seen_names, totals) for i, raw in enumerate(raw_tasks))
    check_dag([t.id for t in tasks], {t.id: t.depends_on for t in tasks if t.depends_on})
    _check_maps(tasks)
    spec = JobSpec(
        name=name,
        tasks=tasks,
        owner=owner,
        priority=priority,
        queue=queue,
        idempotency_key=idempotency_key,
        retention=retention,
        order=order,
        max_running=max_running,
        notify=notify,
        uses_placeholders=totals.placeholders,
        tags=tags,
        **deadlines,
    )
    _VALIDATED[id(spec)] = spec
    return spec


def load_spec_file(path: str | Path) -> JobSpec:
    """Read a job spec from a file: JSON if it ends with .json, else YAML (which reads JSON too).

    Errors name the file, and for syntax errors the line and column.
    """
    path = Path(path)
    where = f"spec file {str(path)!r}"
    data = documents.load(path, where, max_bytes=MAX_SPEC_FILE_BYTES, max_depth=SPEC_MAX_DEPTH)
    if data is None:
        raise SpecError(f"{where} is empty")
    if not isinstance(data, Mapping):
        raise SpecError(f"{where} must hold a mapping at the top level, got {type(data).__name__}")
    try:
        return parse_spec(data)
    except SpecError as exc:
        raise SpecError(f"{where}: {exc}") from None


def spec_digest(spec: JobSpec) -> str:
    """A digest of everything the spec says (maps in sorted key order, so the order a
    caller built its kwargs in does not count): stored with an idempotency key, so a
    resubmit with a different spec under the same key is caught."""
    return hashlib.sha256(codec.pack_valid(_canonical(spec.to_dict()))).hexdigest()


def _canonical(value: Any) -> Any:
    if isinstance(value, dict):
        items = sorted(value.items(), key=lambda item: (type(item[0]).__name__, repr(item[0])))
        return {key: _canonical(item) for key, item in items}
    if isinstance(value, list | tuple):
        return [_canonical(item) for item in value]
    return value


def spec_from_any(obj: object) -> JobSpec:
    """A validated JobSpec from a JobSpec, a mapping (parse_spec) or a builder (.build()).
    A JobSpec built by hand rather than by parse_spec is validated here too."""
    if isinstance(obj, JobSpec):
        return obj if _VALIDATED.get(id(obj)) is obj else parse_spec(obj.to_dict())
    if isinstance(obj, Mapping):
        return parse_spec(obj)
    build = getattr(obj, "build", None)
    if callable(build):
        spec = build()
        if not isinstance(spec, JobSpec):
            raise SpecError(
                f"{type(obj).__name__}.build() returned {type(spec).__name__}, not a JobSpec"
            )
        return spec
    raise SpecError(
        f"cannot make a job spec from {type(obj).__name__}: "
        "pass a JobSpec, a mapping or a builder Job"
    )
