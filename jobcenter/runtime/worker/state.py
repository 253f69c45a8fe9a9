"""What the rooms of a worker share: its options, the attempts it runs, its locks and events,
its runner, and the count of its free slots. Each room (lifecycle.py, claiming.py,
reporting.py, heartbeats.py) is a class over this state; `Worker` joins them."""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NoReturn

from jobcenter.config import DEFAULT_CONCURRENCY, PROCESS_POOL, THREAD_POOL
from jobcenter.model.ids import handler_id
from jobcenter.model.spec import DEFAULT_QUEUE
from jobcenter.storage.keyspace.keys import LEADER_SEGMENT, node_queue
from jobcenter.storage.store import StartedTask, Store

from ..eviction_guard import EvictionGuard
from ..execution.outcome import Outcome, task_label
from ..execution.processes import ProcessRunner
from ..execution.threads import ThreadRunner
from ..leader import Leader
from ..pulse import Pulse
from ..segments import Ownership, ShardWaits
from ..stopping import AttemptKey, Stop, StopCounts

CLAIM_BATCH_MAX = 256  # tasks reserved per claim: one round trip serves many tasks


@dataclass
class Options:
    queues: list[str] = field(default_factory=lambda: [DEFAULT_QUEUE])
    node: str | None = None
    concurrency: int = DEFAULT_CONCURRENCY
    pool: str = THREAD_POOL  # or PROCESS_POOL for CPU-bound tasks
    burst: bool = False
    modules: list[str] = field(default_factory=list)
    leader: bool = True
    recovery: bool = True  # supervise an rq worker for the recovery job, and enqueue it


@dataclass
class Running:
    task: StartedTask
    progress: str = ""
    progress_sent_at: float = 0.0  # monotonic time the last progress went out at once


class WorkerState:
    """One `jobcenter worker` process's state, and what every room of it reads."""

    def __init__(self, store: Store, options: Options) -> None:
        self.store = store
        self.options = options
        self.handler = handler_id()
        self.queues = ([node_queue(options.node)] if options.node else []) + options.queues
        self.leader = Leader(store, self.handler)
        self.running: dict[tuple[str, int], Running] = {}
        self.outcomes: deque[Outcome] = deque()  # ended attempts waiting to be reported
        self.reporting = threading.Lock()  # held by the one thread reporting them
        self.lock = threading.Condition()
        self.stopping = threading.Event()
        self.stopped = threading.Event()
        self.stop_counts = StopCounts(store.keys)  # attempts stopped, for the metrics
        self.stop_labels: dict[AttemptKey, str] = {}  # the ids of stopped attempts' tasks, for logs
        self.live_logs_sent: dict[AttemptKey, int] = {}  # each running log's writes, as stored
        self.runner = self._make_runner()
        self.completed = 0
        self.failed = 0
        self.taking = 0  # slots a completion call under way may fill with what it takes
        self.rq_child: Any = None
        self.next_retry_ms = -1  # from the last claim: when a retry in our queues is due
        # the last claim filled every slot it asked for: more may be ready, so a freed slot
        # claims at once instead of waiting for a wake-up token
        self.more_ready = False
        # the shards this worker polls (owned segments): its queues', and with a leader
        # thread the leader messages'; each idle loop waits on the shards it owns
        segments = [*self.queues, *([LEADER_SEGMENT] if options.leader else [])]
        self.ownership = Ownership(store, self.handler, segments, self._owned_changed)
        self.task_waits = ShardWaits(
            store, self.handler, self._task_wake_keys, self._thread, "task-wait"
        )
        self.leader_waits = ShardWaits(
            store, self.handler, lambda s: [store.keys.leader_wake(s)], self._thread, "lead-wait"
        )
        self.pulse = Pulse()  # what health.py reports: the heartbeat's rounds
        self.eviction = EvictionGuard(store)  # claims nothing while Redis may evict keys
        self.exiting = threading.Event()  # a forced stop is under way (give_back_and_exit)
        self.lacking: set[str] = set()  # task names given back for want of their code
        self.newer_seen: set[tuple[str, int]] = set()  # (queue, protocol) of a newer release
        # held while tasks are started and registered in `running`, so the reporter never
        # takes a task just started by a claim for one it has to adopt (_adopt), and a forced
        # stop gives back every task a claim started
        self.starting = threading.RLock()

    def _make_runner(self) -> ThreadRunner | ProcessRunner:
        limit = self.store.settings.result_max_bytes
        if self.options.pool == PROCESS_POOL:
            return ProcessRunner(
                self.options.concurrency,
                self.handler,
                self.options.modules,
                self._slot_freed,
                limit,
                self._attempt_stopped,
            )
        return ThreadRunner(
            self.options.concurrency, self.handler, self._slot_freed, limit, self._attempt_stopped
        )

    def _slot_freed(self) -> None:
        """A runner's thread or child returned. Its slot is free only if its outcome was
        reported already (it ran past its timeout, or was stopped); otherwise the report
        frees it and wakes the claim loop then: no wake-up per task for nothing."""
        with self.lock:
            if self._free_slots() > 0:
                self.lock.notify_all()

    def _free_slots(self, reporting: int = 0) -> int:
        """Slots free, once `reporting` of the running attempts (finished, their threads
        returned) are reported; slots a completion call may fill (`taking`) are not free."""
        # a thread running past its timeout was reported already but still holds its slot
        used = max(len(self.running) - reporting, self.runner.busy)
        return self.options.concurrency - used - self.taking

    def _label(self, job_id: str, index: int) -> str:
        """A running task's id for a log line ('#index' once it left)."""
        with self.lock:
            running = self.running.get((job_id, index))
        return f"#{index}" if running is None else task_label(running.task)

    if TYPE_CHECKING:
        # What one room calls in another; `Worker` joins the rooms, so these are its own.

        def _thread(self, loop: Callable[[], None], name: str) -> threading.Thread: ...  # lifecycle
        def _die(self, loop: str) -> NoReturn: ...  # lifecycle
        def _task_wake_keys(self, shard: int) -> list[str]: ...  # claiming
        def _owned_changed(self, taken: set[tuple[int, str]]) -> None: ...  # claiming
        def _run(self, tasks: list[StartedTask]) -> None: ...  # claiming
        def _submit(self, tasks: list[StartedTask]) -> None: ...  # claiming
        def _ended(self, *outcomes: Outcome) -> None: ...  # reporting
        def _refused(
            self, report: str, job_id: str, index: int, token: str, code: int, reported: str = ""
        ) -> None: ...  # reporting
        def _report_progress(self, task: StartedTask, message: str) -> None: ...  # heartbeats
        def _attempt_stopped(self, stop: Stop) -> None: ...  # heartbeats
