"""Child jobs: a task that returns `spawn(spec)` starts that job as its child and ends when
the child ends, its worker slot freed meanwhile. The marker travels as the attempt's result,
packed under a key no task returns (SPAWN_KEY); the store turns it into the child job and the
task's wait for it (storage/jobs/waits.py)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from . import codec
from .spec import spec_from_any

SPAWN_KEY = "\x00jobcenter.spawn"
SPAWN_PREFIX = codec.pack({SPAWN_KEY: None})[:-1]  # a one-entry map of that key, then its value


@dataclass(frozen=True)
class Spawn:
    """A child job to start: its spec (as plain data) and which of its tasks' results becomes
    the spawning task's result (None: every result of the child, by task id)."""

    spec: dict[str, Any]
    result: str | None = None

    def packed(self) -> bytes:
        return codec.pack({SPAWN_KEY: {"spec": self.spec, "result": self.result}})


def spawn(spec: Any, *, result: str | None = None) -> Spawn:
    """What a task returns to start `spec` (a JobSpec, a mapping or a builder Job) as a child
    job and end with it: its slot is freed while the child runs; it succeeds with the child's
    results (or the one of task `result`), and fails (with its retries) when the child fails.
    The spec is checked here: a bad one fails the task at once."""
    job = spec_from_any(spec)
    if result is not None and result not in {t.id for t in job.tasks}:
        raise ValueError(f"spawn(result={result!r}): the child job has no task {result!r}")
    return Spawn(job.to_dict(), result)


def unpack_spawn(result: bytes) -> Spawn | None:
    """The Spawn a packed result stands for, or None for any other result."""
    if not result.startswith(SPAWN_PREFIX):
        return None
    value = codec.unpack(result)
    assert isinstance(value, dict)
    inner = value[SPAWN_KEY]
    return Spawn(inner["spec"], inner.get("result"))
