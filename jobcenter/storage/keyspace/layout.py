"""How a job's DAG is laid out in its tasks hash: the fields of each task (only what differs
from the job's defaults), and which tasks are ready at the start. Used by the leader when it
splits a job in chunks, and by submit when it splits a small job at once."""

from __future__ import annotations

import re
from typing import Any

from jobcenter.model import codec
from jobcenter.model.dag import children_of
from jobcenter.model.spec import DEFAULT_QUEUE, JobSpec, render_key
from jobcenter.model.trigger_rules import DEFAULT_TRIGGER_RULE

from .keys import node_queue
from .schema import LimitKind, PayloadKey, TaskField

# Characters a concurrency key keeps as they are inside a queue member; any other is
# written %XX, so a key never holds the separators of the limits part ('|', ';', '=', '*').
_KEY_SAFE = re.compile(r"[^A-Za-z0-9_.:@/+-]")


def limit_spec(task: dict[str, Any], max_running: int | None) -> str | None:
    """The slots a task takes while it runs, as claim.lua reads them (_slots.lua): entries
    "<limit>=<cap>*<slots>" joined by ';'. None for a task without pool or limit."""
    entries = []
    if task.get("pool"):
        entries.append(f"{LimitKind.POOL}{task['pool']}=*{task.get('pool_slots', 1)}")
    if max_running:
        entries.append(f"j={max_running}*1")
    if task.get("concurrency_key"):
        key = render_key(task["concurrency_key"], task.get("kwargs", {}), task["id"])
        safe = _KEY_SAFE.sub(lambda m: "".join(f"%{b:02X}" for b in m.group().encode()), key)
        entries.append(f"{LimitKind.KEY}{safe}={task['concurrency_limit']}*1")
    return ";".join(entries) or None


# A wait's kind as _await.lua names it (the letter in a task's `aw:` field).
AWAIT_KIND_LETTERS = {"signal": "s", "job": "j", "schedule": "c"}


def await_spec(wait_for: dict[str, Any]) -> str:
    """What a task waits for, as _await.lua reads it: "<kind>|<timeout ms or 0>|<name>"."""
    timeout = int(round(wait_for.get("timeout", 0) * 1000))
    kind = next(k for k in AWAIT_KIND_LETTERS if k in wait_for)
    return f"{AWAIT_KIND_LETTERS[kind]}|{timeout}|{wait_for[kind]}"


def job_queues(spec: JobSpec) -> list[str]:
    """Every queue the job's tasks may enter (node-pinned tasks use the node's queue)."""
    names = {node_queue(t.node) if t.node else (t.queue or spec.queue) for t in spec.tasks}
    return sorted(names)


class Layout:
    """The tasks-hash fields of a job spec (as a dict: JobSpec.to_dict() or a stored spec),
    with each task's claim rank within the job (jobcenter.model.ordering; None: spec order)."""

    def __init__(
        self,
        spec: dict[str, Any],
        ranks: list[int] | None = None,
        fired: tuple[str | None, float | None] = (None, None),
    ) -> None:
        self.tasks: list[dict[str, Any]] = spec["tasks"]
        self.queue = spec.get("queue", DEFAULT_QUEUE)
        self.priority = spec.get("priority", 0)
        ids = [t["id"] for t in self.tasks]
        self.index = index = {task_id: i for i, task_id in enumerate(ids)}
        self.deps = [t.get("depends_on", ()) for t in self.tasks]
        children = children_of(ids, dict(zip(ids, self.deps, strict=True)))
        self.children = [[index[c] for c in children[task_id]] for task_id in ids]
        self.roots = [i for i, deps in enumerate(self.deps) if not deps]
        self.ranks = ranks
        self.max_running: int | None = spec.get("max_running")
        # the job's schedule and fire time, which every task's payload carries (a task
        # reads them from current_task())
        self.schedule_id, self.fire_time = fired

    def has_trigger_rules(self) -> bool:
        """Whether a task with parents has a rule other than the default (a job without
        one never skips a task, nor keeps a task waiting once a parent failed)."""
        return any(
            deps and t.get("trigger_rule", DEFAULT_TRIGGER_RULE) != DEFAULT_TRIGGER_RULE
            for t, deps in zip(self.tasks, self.deps, strict=True)
        )

    def __len__(self) -> int:
        return len(self.tasks)

    def pairs(self, start: int, end: int) -> list[Any]:
        """Field, value pairs of tasks [start, end)."""
        out: list[Any] = []
        for i in range(start, end):
            out += self._fields(i)
        return out

    def _fields(self, i: int) -> list[Any]:
        t = self.tasks[i]
        payload = {
            PayloadKey.TASK: t["task"],
            PayloadKey.ARGS: t.get("args", []),
            PayloadKey.KWARGS: t.get("kwargs", {}),
            PayloadKey.ID: t["id"],
            PayloadKey.TIMEOUT: t.get("timeout"),
            PayloadKey.RETRY_BACKOFF: t.get("retry_backoff", 1.0),
            PayloadKey.RETRY_BACKOFF_MAX: t.get("retry_backoff_max", 300.0),
        }
        if t.get("requires"):
            payload[PayloadKey.GATES] = list(t["requires"])
        if self.fire_time is not None:
            payload[PayloadKey.FIRE_TIME] = self.fire_time
        if self.schedule_id:
            payload[PayloadKey.SCHEDULE] = self.schedule_id
        n = str(i)
        fields: list[Any] = [
            TaskField.ID.of(n),
            t["id"],
            TaskField.STATE.of(n),
            "waiting",
            TaskField.PAYLOAD.of(n),
            codec.pack_valid(payload),  # its args were checked when the spec was parsed
        ]
        queue = node_queue(t["node"]) if t.get("node") else (t.get("queue") or self.queue)
        if queue != self.queue:
            fields += [TaskField.QUEUE.of(n), queue]
        priority = t.get("priority")
        if priority is not None and priority != self.priority:
            fields += [TaskField.PRIORITY.of(n), priority]
        if t.get("retries"):
            fields += [TaskField.MAX_ATTEMPTS.of(n), 1 + int(t["retries"])]
        if self.deps[i]:
            fields += [TaskField.DEPS_LEFT.of(n), len(self.deps[i])]
        rule = t.get("trigger_rule")
        if self.deps[i] and rule and rule != DEFAULT_TRIGGER_RULE:
            fields += [
                TaskField.TRIGGER_RULE.of(n),
                rule,
                TaskField.PARENTS.of(n),
                len(self.deps[i]),
            ]
        if self.children[i]:
            fields += [TaskField.CHILDREN.of(n), ",".join(map(str, self.children[i]))]
        if self.ranks is not None:
            fields += [TaskField.RANK.of(n), self.ranks[i]]
        limits = limit_spec(t, self.max_running)
        if limits is not None:
            fields += [TaskField.LIMITS.of(n), limits]
        if t.get("inputs"):
            fields += [TaskField.INPUTS.of(n), self._refs(t["inputs"])]
        if t.get("map"):  # the source's list is split into instances when it succeeds
            fields += [TaskField.MAP_ARG.of(n), self._refs(t["map"])]
        if t.get("wait_for"):
            fields += [TaskField.AWAIT.of(n), await_spec(t["wait_for"])]
        return fields

    def awaits(self) -> str | None:
        """The indexes of the tasks with `wait_for:` (JobField.AWAITS), or None."""
        waits = [str(i) for i, t in enumerate(self.tasks) if t.get("wait_for")]
        return ",".join(waits) or None

    def _refs(self, refs: dict[str, str]) -> str:
        """kwarg -> task id, as the Lua reads it: "<kwarg>=<index>,..." """
        return ",".join(f"{name}={self.index[ref]}" for name, ref in refs.items())
