"""Running one attempt: the outcome policy (outcome.py: `execute`, Outcome, error text),
the thread pool (threads.py, with its event loop for coroutine functions, event_loop.py) and
the process pool (processes.py, and what runs in its child, child.py), over what both keep
(runner.py). The names callers use are handed on here too."""

from .outcome import (
    ERROR_TEXT_MAX,
    Outcome,
    ResultRefused,
    attempt_key,
    context_for,
    decode,
    execute,
    pack_result,
    task_label,
)
from .processes import ProcessRunner
from .threads import ThreadRunner

__all__ = [
    "ERROR_TEXT_MAX", "Outcome", "ProcessRunner", "ResultRefused", "ThreadRunner",
    "attempt_key", "context_for", "decode", "execute", "pack_result", "task_label",
]  # fmt: skip
