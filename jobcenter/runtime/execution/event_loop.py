"""The event loop of the thread pool: coroutine functions' attempts run on it side by side."""

from __future__ import annotations

import asyncio
import queue
import threading
from collections.abc import Coroutine
from typing import Any

from .outcome import Done, Outcome


class EventLoop:
    """An asyncio event loop on a thread of its own: the attempts of coroutine functions run
    on it side by side (no thread each), as many as the runner has free slots. Their
    outcomes are reported from another thread, so the loop runs on during a report, and what
    ends meanwhile goes out with the next report, in one batch."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.tasks: set[asyncio.Task[None]] = set()  # the loop keeps only weak references
        self.ended: queue.SimpleQueue[tuple[Done, Outcome]] = queue.SimpleQueue()
        self.thread = threading.Thread(
            target=self.loop.run_forever, name="jobcenter-event-loop", daemon=True
        )
        self.thread.start()
        threading.Thread(target=self._report, name="jobcenter-loop-reports", daemon=True).start()

    def start(self, coroutine: Coroutine[Any, Any, None]) -> None:
        """Run `coroutine` as a task of the loop (from any thread)."""
        if threading.current_thread() is self.thread:
            self._spawn(coroutine)
        else:
            self.loop.call_soon_threadsafe(self._spawn, coroutine)

    def _spawn(self, coroutine: Coroutine[Any, Any, None]) -> None:
        task = self.loop.create_task(coroutine)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    def _report(self) -> None:
        while True:
            ended = [self.ended.get()]
            while not self.ended.empty():
                ended.append(self.ended.get())
            by_done: dict[Done, list[Outcome]] = {}
            for done, outcome in ended:
                by_done.setdefault(done, []).append(outcome)
            for done, outcomes in by_done.items():
                done(*outcomes)
