"""Job-finished hooks: Python functions a worker calls when a job whose spec asks for it
(`notify: {on: [...], hook: true}`) ends in one of those states.

Registered like tasks, by the modules a worker imports (`@jobcenter.on_job_finished`); the
worker that takes a delivery calls every hook it has, so register them on every worker that
runs the leader role. A hook gets the notice dict the webhook would get and should be quick
and idempotent: a delivery is at least once, and retried when a hook raises."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any, TypeVar

from jobcenter.errors import JobcenterError

Hook = Callable[[dict[str, Any]], object]
H = TypeVar("H", bound=Hook)

_HOOKS: list[Hook] = []


def on_job_finished(fn: H) -> H:
    """Register `fn(notice)` to be called for each job that asked to be told (hook: true)."""
    if not callable(fn) or inspect.isclass(fn):
        raise JobcenterError(f"on_job_finished needs a function, got {fn!r}")
    if inspect.iscoroutinefunction(fn) or inspect.isasyncgenfunction(fn):
        raise JobcenterError(
            f"on_job_finished hook {getattr(fn, '__qualname__', fn)!r} is async: hooks run "
            "on the notifier's thread; make it a plain function"
        )
    if fn not in _HOOKS:  # a module imported twice registers its hooks once
        _HOOKS.append(fn)
    return fn


def registered() -> list[Hook]:
    """The hooks this process registered, in registration order."""
    return list(_HOOKS)
