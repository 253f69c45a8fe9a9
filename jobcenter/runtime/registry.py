"""@task registration: the allowlist of task names a worker will run.

Workers run only names registered here, by modules they import themselves; a name read
from Redis is looked up, never imported."""

from __future__ import annotations

import contextlib
import importlib
import inspect
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, TypeVar, overload

from jobcenter.errors import JobcenterError, SpecError
from jobcenter.model.durations import Duration, parse_seconds
from jobcenter.model.spec import check_name

F = TypeVar("F", bound=Callable[..., Any])

_REGISTRY: dict[str, Callable[..., Any]] = {}
_GATES: dict[str, Gate] = {}

# A gate registered with no timings: ask again every so often, fail its tasks after an hour.
GATE_BACKOFF_SECONDS = 30.0
GATE_GIVE_UP_SECONDS = 3600.0


@dataclass(frozen=True)
class Gate:
    """A check a task may require (`requires: [name]`) before it starts: `check()` answers
    whether the environment is ready (a connection probe, free IPs, a licence count). A task
    whose gate says no goes back to its queue for `backoff` seconds, its attempt unused; one
    whose gate keeps saying no for `give_up_after` seconds fails, naming the gate."""

    name: str
    check: Callable[[], Any]
    backoff: float
    give_up_after: float


class UnknownTask(JobcenterError, LookupError):
    """A task name that this worker has not registered."""


class NotATask(JobcenterError, TypeError):
    """@task was given something that would not do its work when called."""


@overload
def task(fn: F) -> F: ...
@overload
def task(*, name: str | None = None) -> Callable[[F], F]: ...


def task(fn: Any = None, *, name: str | None = None) -> Any:
    """Register a function as a task, by `name` or by default as `module.function`.
    Plain functions and `async def` coroutine functions are tasks; a generator function, an
    async generator function, a class or anything not callable is refused here, since
    calling it would not run its work (it would be reported succeeded without running)."""

    def register(f: F) -> F:
        refusal = _refusal(f)
        if refusal:
            raise NotATask(f"task {name or _place(f)[1] or repr(f)!r} {refusal}")
        task_name = name or _default_name(f)
        existing = _REGISTRY.get(task_name)
        # a module imported twice re-registers itself harmlessly
        if existing is not None and existing is not f and _place(existing) != _place(f):
            raise JobcenterError(f"task name {task_name!r} is registered twice")
        _REGISTRY[task_name] = f
        with contextlib.suppress(AttributeError, TypeError):  # bound methods, builtins
            f.task_name = task_name  # type: ignore[attr-defined]
        return f

    return register(fn) if fn is not None else register


def gate(
    name: str,
    *,
    backoff: Duration = GATE_BACKOFF_SECONDS,
    give_up_after: Duration = GATE_GIVE_UP_SECONDS,
) -> Callable[[F], F]:
    """Register a gate check under `name` (see Gate): a function of no arguments returning
    true when tasks that require the gate may start. An exception counts as no. `backoff`
    and `give_up_after` are durations (30, 30s, 1h: model.durations)."""
    check_name(name, "a gate name")
    backoff = parse_seconds(backoff, f"gate {name!r}: backoff", low_open=True)
    give_up_after = parse_seconds(give_up_after, f"gate {name!r}: give_up_after", low_open=True)
    if backoff > give_up_after:
        raise SpecError(
            f"gate {name!r}: backoff ({backoff:g} s) must be at most give_up_after "
            f"({give_up_after:g} s)"
        )

    def register(f: F) -> F:
        if not callable(f):
            raise NotATask(f"gate {name!r} must be a function, got {type(f).__name__}")
        _GATES[name] = Gate(name, f, backoff, give_up_after)
        return f

    return register


def lookup_gate(name: str) -> Gate | None:
    return _GATES.get(name)


def _default_name(f: Any) -> str:
    module, qualname = _place(f)
    if module is None or qualname is None:
        raise NotATask(f"cannot name {f!r} after its module and function: use @task(name=...)")
    return f"{module}.{qualname}"


def _place(f: Any) -> tuple[str | None, str | None]:
    return getattr(f, "__module__", None), getattr(f, "__qualname__", None)


def _refusal(f: Any) -> str:
    """Why calling `f` would not do a task's work ('' if it would)."""
    if inspect.isclass(f):
        return (
            "is a class: calling it only builds an instance; register a function "
            "(or an instance whose __call__ does the work)"
        )
    if not callable(f):
        return f"is not callable (a {type(f).__name__}): register a function"
    call = f if inspect.isroutine(f) else type(f).__call__  # an instance: its __call__
    if inspect.isgeneratorfunction(f) or inspect.isgeneratorfunction(call):
        return (
            "is a generator function: calling it only creates a generator and runs none "
            "of its body; make it a plain function that does the work (and returns a list "
            "instead of yielding)"
        )
    if inspect.isasyncgenfunction(f) or inspect.isasyncgenfunction(call):
        return (
            "is an async generator function: calling it runs none of its body; make it an "
            "`async def` without `yield` (coroutine functions run on an event loop)"
        )
    return ""


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
