"""The worker's reports of ended attempts: successes (whose call takes what runs next),
failures, attempts given back for want of their code or for a closed gate, and the reports
Redis refused, in words."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Sequence

from jobcenter.config import THREAD_POOL
from jobcenter.storage import task_logs
from jobcenter.storage.keyspace import schema
from jobcenter.storage.refusals import UNKNOWN_ATTEMPT, count_unknown, what_it_returned, why_refused
from jobcenter.storage.server.errors import RedisError, trouble
from jobcenter.storage.server.outages import Backoff
from jobcenter.storage.store import RefusedInPart, StartedTask
from jobcenter.storage.task_logs import LogEntry

from ..execution.outcome import Outcome, task_label
from .state import CLAIM_BATCH_MAX, Running, WorkerState

log = logging.getLogger(__name__)

# A completion of short tasks (each ran under PREFETCH_RUN_MAX_SECONDS) takes up to this many
# tasks per slot beyond the free slots (thread pool only): started, leased and heartbeated
# here, they wait at most about one short task for a thread, so no thread waits for the
# completion's round trip; a stopping worker gives back those no thread has begun.
PREFETCH_PER_SLOT = 1
PREFETCH_RUN_MAX_SECONDS = 0.05
REPORT_BATCH_MAX = 512  # finished attempts reported per round trip
REPORT_RETRY_MAX_SECONDS = 1.0  # a refused report is tried again at least this often
GATE_GAVE_UP = schema.code("ITEM_ALREADY")  # gate_wait.lua: the task failed
COMPLETED_ALREADY = schema.code("ITEM_ALREADY")  # complete.lua: reported before
# A task this worker has no code for waits this long at least before it is claimed again (no
# hot loop on the worker that lacks it), and at most this long (a worker that has the code,
# once started, gets it soon); in between, a quarter of the time it has waited so far, and
# the least while a live worker serves it.
GIVE_BACK_DELAY_MIN_MS = 500
GIVE_BACK_DELAY_MAX_MS = 10_000


class Reporting(WorkerState):
    """How a worker reports what its attempts did."""

    def _ended(self, *outcomes: Outcome) -> None:
        """Attempts ended: report them from this thread (the one that ran them, the runner's
        timeout watcher, or its event loop's reporter), with every other outcome waiting,
        unless a thread is reporting already; that one reports them with its next batch.
        Whoever lets go of the reporting looks again, so no outcome is left behind."""
        self.outcomes.extend(outcomes)
        try:
            while self.outcomes and self.reporting.acquire(blocking=False):
                try:
                    while self.outcomes:
                        # a task thread that kept a taken attempt for itself reports on
                        # first: another thread runs it
                        self.runner.hand_over_deferred()
                        batch = [self.outcomes.popleft()]
                        while self.outcomes and len(batch) < REPORT_BATCH_MAX:
                            batch.append(self.outcomes.popleft())
                        self._report_with_retry(batch)
                finally:
                    self.reporting.release()
        except BaseException:
            self._die("reporter")

    def _report_with_retry(self, batch: list[Outcome]) -> None:
        """Report a batch until Redis has taken all of it. What Redis refuses (unreachable,
        out of memory, read-only) is kept and tried again, never turned into a task failure;
        meanwhile those attempts stay in `running`, so the heartbeat keeps their leases. A
        lease that runs out all the same makes the late report stale: the task then runs
        again elsewhere."""
        backoff = Backoff(REPORT_RETRY_MAX_SECONDS)
        left = list(batch)
        while left:
            try:
                self._report(left)
            except RedisError as exc:
                backoff.wait(None, f"cannot report {len(left)} results: {trouble(exc)}")

    def _report(self, left: list[Outcome]) -> None:
        """Report finished attempts. Each one Redis takes leaves `left` (and `running`) at
        once, so when a RedisError comes out, `left` holds just what is still to report."""
        self._save_logs(left)
        done = [o for o in left if o.ok]
        if done:
            self._complete(done, left)
            if left:  # more round trips before this thread is free: not with a task kept
                self.runner.hand_over_deferred()
        given_back = [o for o in left if o.missing_task]
        if given_back:
            self._give_back(given_back, left)
        gated = [o for o in left if o.gate]
        if gated:
            self._gate_wait(gated, left)
        for outcome in list(left):
            t = outcome.task
            code, _ = self.store.fail(
                self.handler, t.job_id, t.index, t.token, outcome.error, outcome.retry_delay_ms
            )
            if code < 0:
                self._refused(
                    "failure", t.job_id, t.index, t.token, code, f"its error: {outcome.error}"
                )
            self.failed += 1
            self._settle(left, [outcome])

    def _save_logs(self, left: list[Outcome]) -> None:
        """Store the logs of the attempts to report, before their reports (a report may end
        the job, and whoever reads it then finds them); each is stored once."""
        logged = [o for o in left if o.log]
        if not logged:
            return
        entries = [LogEntry(o.task.job_id, o.task.index, o.task.attempt, o.log) for o in logged]
        task_logs.save(self.store, entries)
        for outcome in logged:
            outcome.log = b""

    def _refused(
        self, report: str, job_id: str, index: int, token: str, code: int, reported: str = ""
    ) -> None:
        """Log a report (result, failure, heartbeat) Redis refused, with its real cause. One
        of an attempt Redis does not know (it lost writes: the task may run again) is an
        error, counted, with what the attempt reported: its only trace."""
        cause = why_refused(self.store, job_id, index, token, code)
        name = self._label(job_id, index)
        if code == UNKNOWN_ATTEMPT:
            log.error(
                "job %s task %s: %s refused: %s (code %d)%s",
                job_id,
                name,
                report,
                cause,
                code,
                f"; {reported}" if reported else "",
            )
            with contextlib.suppress(RedisError):  # the log line above is what counts
                count_unknown(self.store, job_id, report)
        elif report == "heartbeat":
            log.warning(
                "job %s task %s: heartbeat refused: %s (code %d)", job_id, name, cause, code
            )
        else:
            log.warning(
                "late %s of job %s task %s discarded: %s (code %d)",
                report,
                job_id,
                name,
                cause,
                code,
            )

    def _complete(self, done: list[Outcome], left: list[Outcome]) -> None:
        """Report successes; the same call takes what the freed slots (and any other free
        one) run next: released children, then the next queued tasks of the same job."""
        with self.lock:
            take_max = prefetch = 0
            before: bytes | None = None
            if not self.stopping.is_set() and self.eviction.safe.is_set():
                free = self._free_slots(len(done))  # below 0: that many held beyond the slots
                take_max = max(0, min(CLAIM_BATCH_MAX, free))
                prefetch, before = self._prefetch(done)
                prefetch += min(0, free)  # what the prefetch has left
                prefetch = max(0, min(CLAIM_BATCH_MAX - take_max, prefetch))
            self.taking += take_max + prefetch  # held from the claim loop until the reply is in
        attempts = [(o.task.job_id, o.task.index, o.task.token, o.result) for o in done]
        # the run times learned for critical_path: from the thread's start, not from Redis's
        # (a prefetched task waited for a thread in between); 0: not measured (processes)
        ran_ms = {
            (o.task.job_id, o.task.index): round(o.seconds * 1000) for o in done if o.seconds > 0
        }
        refused: RefusedInPart | None = None
        try:
            codes, taken = self.store.complete(
                self.handler,
                attempts,
                take_queues=self.queues,
                take_max=take_max,
                prefetch=prefetch,
                prefetch_before=before,
                ran_ms=ran_ms,
            )
        except RefusedInPart as exc:
            codes, taken, refused = exc.codes, exc.taken, exc
        except BaseException:
            with self.lock:
                self.taking -= take_max + prefetch
            raise
        for (job_id, index), code in codes.items():
            if code < 0:
                token, result = next((t, r) for j, i, t, r in attempts if (j, i) == (job_id, index))
                self._refused("result", job_id, index, token, code, what_it_returned(result))
        reported = [o for o in done if (o.task.job_id, o.task.index) in codes]
        self.completed += len(reported)
        self._settle(left, reported, taken, take_max + prefetch)
        self._submit(taken)
        self._adopt([job_id for (job_id, _), code in codes.items() if code == COMPLETED_ALREADY])
        if refused is not None:
            raise refused

    def _prefetch(self, done: list[Outcome]) -> tuple[int, bytes | None]:
        """Tasks a worker may hold beyond its slots (called with the lock held), and the run
        order they must sort before (None: any): none unless every task it reports was
        short (a long task would keep a prefetched one waiting for a thread while another
        worker idles); only ones before the first child of every task held here (a thread
        that task frees would start a prefetched one before its children, which are
        released only once it ended: the thread pool runs what it holds in run order);
        none with child processes (nothing to take back on stop)."""
        if self.options.pool != THREAD_POOL:
            return 0, None
        if any(o.seconds >= PREFETCH_RUN_MAX_SECONDS for o in done):
            return 0, None
        reporting = {(o.task.job_id, o.task.index) for o in done}
        firsts = [
            r.task.first_child
            for k, r in self.running.items()
            if k not in reporting and r.task.first_child is not None
        ]
        before = min(firsts, default=None)
        if before == b"":  # a held task with too many children to order
            return 0, None
        return self.options.concurrency * PREFETCH_PER_SLOT, before

    def _give_back_prefetched(self) -> None:
        """A stopping worker finishes what runs; tasks it took but no thread has begun go
        back to their queues (release.lua: no attempt used up). If Redis refuses, their
        leases run out and recovery re-drives them."""
        waiting = self.runner.withdraw_waiting()
        if not waiting:
            return
        try:
            released = self.store.release(
                self.handler, [(t.job_id, t.index, t.token) for t in waiting]
            )
            log.info("worker %s: gave %d prefetched tasks back", self.handler, released)
        except RedisError as exc:
            log.warning("prefetched tasks not given back (%s): their leases run out", exc)
        with self.lock:
            for task in waiting:
                self.running.pop((task.job_id, task.index), None)
            self.lock.notify_all()

    def _adopt(self, replayed: list[str]) -> None:
        """Run the tasks that a completion whose reply was lost (a connection reset: the
        call ran, it was sent again and found done) started for this worker: they run under
        its handler, and nobody else would run them before their lease ran out."""
        for job_id in sorted(set(replayed)):
            with self.starting:
                running = self.store.running_attempts(self.handler, job_id)
                with self.lock:
                    orphans = [t for t in running if (t.job_id, t.index) not in self.running]
                self._run(orphans)

    def _give_back(self, given_back: list[Outcome], left: list[Outcome]) -> None:
        """Hand back attempts of tasks this worker has no code for: unused, they wait in
        their queue for a worker that has the code (warned once per task name)."""
        for name in sorted({o.missing_task for o in given_back} - self.lacking):
            self.lacking.add(name)
            log.warning(
                "task %r is not registered on this worker (modules: %s): giving its tasks "
                "back to the queue for a worker that has it",
                name,
                ", ".join(self.options.modules) or "none",
            )
        attempts = [(o.task.job_id, o.task.index, o.task.token, o.missing_task) for o in given_back]
        # a live worker that has the code takes the task after the shortest delay, not after
        # one grown with the wait (which only keeps a hot loop off while nobody has it)
        live_since = self.store.now_ms() - int(self.store.settings.worker_timeout_seconds * 1000)
        served = self.store.served_since(live_since)
        refused: RefusedInPart | None = None
        try:
            codes = self.store.give_back(
                self.handler, attempts, GIVE_BACK_DELAY_MIN_MS, GIVE_BACK_DELAY_MAX_MS, served
            )
        except RefusedInPart as exc:
            codes, refused = exc.codes, exc
        self._settle(left, [o for o in given_back if (o.task.job_id, o.task.index) in codes])
        if refused is not None:
            raise refused

    def _gate_wait(self, gated: list[Outcome], left: list[Outcome]) -> None:
        """Hand back attempts whose gate said no: unused, they wait the gate's backoff."""
        attempts = [
            (o.task.job_id, o.task.index, o.task.token, o.gate, o.gate_backoff_ms,
             o.gate_give_up_ms)
            for o in gated
        ]  # fmt: skip
        codes = self.store.gate_wait(self.handler, attempts)
        labels = {(o.task.job_id, o.task.index): task_label(o.task) for o in gated}
        for (job_id, index), code in codes.items():
            if code == GATE_GAVE_UP:
                name = labels[(job_id, index)]
                log.warning("job %s task %s failed: its gate said no too long", job_id, name)
        self._settle(left, [o for o in gated if (o.task.job_id, o.task.index) in codes])

    def _settle(
        self,
        left: list[Outcome],
        reported: list[Outcome],
        taken: Sequence[StartedTask] = (),
        was_taking: int = 0,
    ) -> None:
        """Outcomes Redis took: no longer to report, and their slots are free, or run what
        the same call took (`taken`, for `was_taking` slots held): in one step, so the claim
        loop never sees those slots free in between."""
        ids = {id(o) for o in reported}
        left[:] = [o for o in left if id(o) not in ids]
        with self.lock:
            for outcome in reported:
                key = (outcome.task.job_id, outcome.task.index)
                # not the task's next attempt here (the task started again after Redis lost
                # the writes of this one's claim)
                if key in self.running and self.running[key].task.token == outcome.task.token:
                    del self.running[key]
            for task in taken:
                self.running[(task.job_id, task.index)] = Running(task)
            self.taking -= was_taking
            # waiters: the claim loop, for a free slot; a graceful stop, for none running
            if self._free_slots() > 0 or not self.running:
                self.lock.notify_all()
