"""@task registration: the allowlist of task names a worker will run.

Workers run only names registered here, by modules they import themselves; a name read
from Redis is looked up, never imported."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable
from typing import Any, TypeVar, overload

from .errors import JobcenterError

F = TypeVar("F", bound=Callable[..., Any])

_REGISTRY: dict[str, Callable[..., Any]] = {}


class UnknownTask(JobcenterError, LookupError):
    """A task name that this worker has not registered."""


@overload
def task(fn: F) -> F: ...
@overload
def task(*, name: str | None = None) -> Callable[[F], F]: ...


def task(fn: Any = None, *, name: str | None = None) -> Any:
    """Register a function as a task, by `name` or by default as `module.function`."""

    def register(f: F) -> F:
        task_name = name or f"{f.__module__}.{f.__qualname__}"
        existing = _REGISTRY.get(task_name)
        if existing is not None and existing is not f:
            same_place = (existing.__module__, existing.__qualname__) == (
                f.__module__,
                f.__qualname__,
            )
            if not same_place:  # a module imported twice re-registers itself harmlessly
                raise JobcenterError(f"task name {task_name!r} is registered twice")
        _REGISTRY[task_name] = f
        f.task_name = task_name  # type: ignore[attr-defined]
        return f

    return register(fn) if fn is not None else register


def names() -> list[str]:
    """Every task name registered in this process."""
    return sorted(_REGISTRY)


def lookup(name: str) -> Callable[..., Any]:
    try:
        return _REGISTRY[name]
    except KeyError:
        raise UnknownTask(f"task {name!r} is not registered on this worker") from None


def import_modules(modules: Iterable[str]) -> None:
    """Import the modules named on the worker's command line, so their @task run."""
    for module in modules:
        try:
            importlib.import_module(module)
        except ImportError as exc:
            raise JobcenterError(f"cannot import task module {module!r}: {exc}") from exc
