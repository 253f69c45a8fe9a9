"""Write a job's DAG in code instead of YAML; build() validates it exactly like a spec file."""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from jobcenter.errors import SpecError
from jobcenter.model.spec import DEFAULT_QUEUE, DEFAULT_RETRY_BACKOFF, DEFAULT_RETRY_BACKOFF_MAX

from .durations import Duration
from .spec import JobSpec, parse_spec


@dataclass(frozen=True)
class TaskRef:
    """A handle to a task added with Job.task(), usable in another task's depends_on."""

    id: str


Dependency = TaskRef | str


class Job:
    """A job under construction::

    job = Job("nightly-etl", owner="alice")
    a = job.task("extract", "myapp.tasks.extract", args=[1, 2], retries=3)
    job.task("load", "myapp.tasks.load", depends_on=[a])
    spec = job.build()
    """

    def __init__(
        self,
        name: str,
        *,
        owner: str | None = None,
        priority: int = 0,
        queue: str = DEFAULT_QUEUE,
        idempotency_key: str | None = None,
        retention: Duration | None = None,
        order: str | None = None,
        max_running: int | None = None,
        notify: dict[str, Any] | None = None,
    ) -> None:
        self._job: dict[str, Any] = {
            "name": name,
            "owner": owner,
            "priority": priority,
            "queue": queue,
            "idempotency_key": idempotency_key,
            "retention": retention,
        }
        if order is not None:
            self._job["order"] = order
        if max_running is not None:
            self._job["max_running"] = max_running
        if notify is not None:  # {on: [...], webhook: URL, hook: bool} (jobcenter.model.notify)
            self._job["notify"] = notify
        self._tasks: list[dict[str, Any]] = []
        self._ids: set[object] = set()

    def task(
        self,
        id: str,
        task: str,
        *,
        args: Sequence[Any] = (),
        kwargs: Mapping[str, Any] | None = None,
        depends_on: Dependency | Iterable[Dependency] = (),
        retries: int = 0,
        retry_backoff: Duration = DEFAULT_RETRY_BACKOFF,
        retry_backoff_max: Duration = DEFAULT_RETRY_BACKOFF_MAX,
        timeout: Duration | None = None,
        queue: str | None = None,
        node: str | None = None,
        priority: int | None = None,
        estimate: Duration | None = None,
        pool: str | None = None,
        pool_slots: int | None = None,
        concurrency_key: str | None = None,
        concurrency_limit: int | None = None,
        requires: Iterable[str] = (),
        trigger_rule: str | None = None,
        inputs: Mapping[str, Dependency] | None = None,
        map: Mapping[str, Dependency] | None = None,
    ) -> TaskRef:
        """Add a task; depends_on takes TaskRefs or task ids, and so do the values of
        `inputs` (kwarg -> parent whose result it receives) and `map` ({kwarg: source}: one
        instance per element of the source's result). Values are checked by build()."""
        with contextlib.suppress(TypeError):  # an unhashable id: build() refuses it, naming it
            if id in self._ids:
                raise SpecError(f"duplicate task id {id!r}")
            self._ids.add(id)
        deps: Any = depends_on  # anything but a ref, an id or an iterable: build() names it
        if isinstance(depends_on, TaskRef | str):
            deps = [depends_on]
        if isinstance(deps, Iterable):
            deps = [d.id if isinstance(d, TaskRef) else d for d in deps]
        limits = {
            "pool": pool,
            "pool_slots": pool_slots,
            "concurrency_key": concurrency_key,
            "concurrency_limit": concurrency_limit,
            "requires": list(requires) or None,
        }
        self._tasks.append(
            {
                **{k: v for k, v in limits.items() if v is not None},
                "id": id,
                "task": task,
                "args": args,
                "kwargs": kwargs,
                "depends_on": deps,
                "retries": retries,
                "retry_backoff": retry_backoff,
                "retry_backoff_max": retry_backoff_max,
                "timeout": timeout,
                "queue": queue,
                "node": node,
                "priority": priority,
                "estimate": estimate,
                "trigger_rule": trigger_rule,
                "inputs": _ids(inputs),
                "map": _ids(map),
            }
        )
        return TaskRef(id)

    def build(self) -> JobSpec:
        """The validated JobSpec; raises SpecError with the same messages as a spec file."""
        return parse_spec({**self._job, "tasks": self._tasks})


def _ids(refs: Mapping[str, Dependency] | None) -> Any:
    """inputs / map with TaskRefs turned into task ids (anything else: build() names it)."""
    if not isinstance(refs, Mapping):
        return refs
    return {name: ref.id if isinstance(ref, TaskRef) else ref for name, ref in refs.items()}
