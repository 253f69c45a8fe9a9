"""The worker daemon's lifecycle: it starts its threads, serves until stopped, stops
gracefully (finishing what runs) or by force (giving it back), and exits with the code it
chose.

Threads: the main thread claims tasks (claiming.py; blocking on wake-up lists when idle), a
leader thread runs leader messages and sweeps expired leases (so leader steps never wait for
a free task slot), notifier threads deliver job notifications (runtime/notifier.py), a
heartbeat thread renews leases (heartbeats.py); the runner's threads or child processes run
the tasks. The thread on which an attempt ends reports it (reporting.py), with whatever else
ended meanwhile, unless another is reporting already (that one takes it along): no hand-off
to a reporter thread.

Every loop rides out any Redis error (unreachable, out of memory, read-only, busy): it logs
it, backs off and goes on, and what it had to write waits and is tried again. A loop that
fails otherwise (a bug) takes the process down with a non-zero exit, its running tasks given
back, so a supervisor restarts it: never a live process that does no work.
"""

from __future__ import annotations

import contextlib
import logging
import signal
import threading
from collections.abc import Callable
from typing import Any, NoReturn

from jobcenter.schedules import run_ticker
from jobcenter.storage.keyspace.keys import LEADER_SEGMENT
from jobcenter.storage.server.errors import RedisError

from .. import exits, rq_runner
from ..archive_guard import check_not_shared
from ..notifier import DELIVERY_THREADS, Notifier
from .claiming import Claiming
from .heartbeats import Heartbeats
from .reporting import Reporting

log = logging.getLogger(__name__)

GIVE_BACK_WAIT_SECONDS = 5.0  # a forced stop waits this long at most for a claim under way
FORCED_STOP_MAX_SECONDS = 60.0  # past this, a forced stop that hangs (Redis hung) exits anyway
EXIT_LOOP_FAILED = 70  # exit code when a loop met an error it cannot go on from (EX_SOFTWARE)


class Worker(Claiming, Reporting, Heartbeats):
    """One `jobcenter worker` process."""

    def install_signal_handlers(self) -> None:
        """First SIGTERM/SIGINT: stop claiming, finish what runs. Second: give it back, exit."""

        def on_signal(signum: int, _frame: Any) -> None:
            # Both stops wait on locks and Redis from a thread of their own, never in the
            # frame the signal interrupted: that frame may hold a lock (a connection pool's)
            # that another thread needs before it lets go of one the stop waits for.
            if self.stopping.is_set():
                threading.Thread(
                    target=self.give_back_and_exit, name="jobcenter-forced-stop", daemon=True
                ).start()
                return
            log.info(
                "worker %s stopping (signal %d): finishing running tasks", self.handler, signum
            )
            self.stopping.set()
            with self.lock:
                self.lock.notify_all()
            # give the owned shards back and end the blocking waits now, from another
            # thread and connection
            threading.Thread(target=self._stop_polling, daemon=True).start()

        signal.signal(signal.SIGTERM, on_signal)
        signal.signal(signal.SIGINT, on_signal)

    def _stop_polling(self) -> None:
        """A stopping worker claims nothing more: its shards go to the other workers at
        once, the claim loop's wait ends, and no listener stays blocked in Redis. (The
        leader loop, owning nothing now, waits on until the worker has stopped.)"""
        listened = set(self.task_waits.shards) | set(self.leader_waits.shards)
        try:
            self.ownership.give_back_all()
        except RedisError as exc:  # its leases expire instead
            log.warning("could not give the owned shards back (%s)", exc)
        self.task_waits.close()
        with contextlib.suppress(RedisError):
            self.store.poke(self.handler, sorted(listened))

    def give_back_and_exit(self, exit_code: int = 0) -> NoReturn:
        """Forced stop: kill what runs, give it back to the queues, exit. Whatever fails on
        the way (Redis down), the process exits; leases then expire and recovery re-drives."""
        try:
            self.exiting.set()
            self.stopping.set()  # nothing more is claimed, nor any child taken on completion
            # nor is a claim left half done: what it started is given back too
            self.starting.acquire(timeout=GIVE_BACK_WAIT_SECONDS)
            with self.lock:
                running = [
                    (r.task.job_id, r.task.index, r.task.token) for r in self.running.values()
                ]
            self.runner.kill_all()  # a given-back attempt must not run on beside the next one
            released = self.store.release(self.handler, running) if running else 0
            self.ownership.give_back_all()
            if self.rq_child is not None:  # forced: no grace (a graceful stop may be waiting on it)
                rq_runner.stop_rq_worker(self.rq_child, grace_seconds=0)

            log.warning("worker %s: gave %d running tasks back; exiting", self.handler, released)
            self._deregister()
        except Exception:
            log.exception("worker %s: forced stop could not finish cleanly", self.handler)
        finally:
            exits.exit_now(exit_code)

    def _die(self, loop: str) -> NoReturn:
        """A loop met an error it cannot go on from (not Redis's: those it waits out): give
        the running tasks back and exit non-zero, so a supervisor restarts the worker."""
        log.critical(
            "worker %s: its %s loop failed; giving its tasks back and exiting",
            self.handler,
            loop,
            exc_info=True,
        )
        self.give_back_and_exit(EXIT_LOOP_FAILED)

    def _thread(self, loop: Callable[[], None], name: str) -> threading.Thread:
        """A daemon thread running `loop`; if it ever raises, the process exits (_die)."""

        def run() -> None:
            try:
                loop()
            except BaseException:
                self._die(name)

        return threading.Thread(target=run, name=f"jobcenter-{name}", daemon=True)

    def run(self) -> None:
        """Serve until stopped (or, with burst, until nothing is left to do)."""
        self.store.check_server()
        self.eviction.check_at_start()
        check_not_shared(self.store)  # an SQLite archive written from two hosts
        self.ownership.renew_round()  # the shards to poll, before it says it serves
        self._register()
        self.pulse.beat(ok=True)
        self._supervise_recovery()
        threads = [
            self._thread(self._heartbeat_loop, "heartbeat"),
            self._thread(lambda: self.ownership.run(self.stopped), "shard-leases"),
        ]
        if self.options.leader:
            threads.append(self._thread(self._leader_loop, "leader"))
            threads.append(
                self._thread(
                    lambda: run_ticker(self.store, self.handler, self.stopped),
                    "scheduler",
                )
            )
            notifier = Notifier(
                self.store, self.handler, self.stopped, lambda: self.ownership.owned(LEADER_SEGMENT)
            )
            threads.append(self._thread(notifier.poll_loop, "notifier"))
            threads += [
                self._thread(notifier.deliver_loop, f"notify-{n}") for n in range(DELIVERY_THREADS)
            ]

        for thread in threads:
            thread.start()
        log.info(
            "worker %s serving %s with %d %s slots",
            self.handler,
            ",".join(self.queues),
            self.options.concurrency,
            self.options.pool,
        )
        try:
            try:
                self._claim_loop()
            except Exception:
                self._die("claim")
            self._give_back_prefetched()
            with self.lock:  # graceful: wait for running tasks to be reported
                while self.running:
                    self.lock.wait()
        finally:
            if self.exiting.is_set():
                # a loop failed, and its thread gives the running tasks back and ends the
                # process: not a normal exit here (it would say 0), unless it hangs
                threading.Event().wait(FORCED_STOP_MAX_SECONDS)
                exits.exit_now(EXIT_LOOP_FAILED)
            self.stopped.set()
            self._stop_polling()
            self.leader_waits.close()
            self.runner.shutdown()
            if self.rq_child is not None:
                rq_runner.stop_rq_worker(self.rq_child)
            with contextlib.suppress(RedisError):
                self.stop_counts.flush(self.store)
            self._deregister()
            log.info(
                "worker %s stopped: %d succeeded, %d failed",
                self.handler,
                self.completed,
                self.failed,
            )
