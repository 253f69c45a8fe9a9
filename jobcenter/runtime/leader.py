"""The leader role: split a submitted job into its DAG and queue its ready tasks; carry on
bounded releases, cascades and cancels; finalize jobs. Any worker plays it."""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Iterator
from typing import Any

from jobcenter.model import codec
from jobcenter.storage.keyspace.layout import Layout
from jobcenter.storage.keyspace.records import JobRecord
from jobcenter.storage.store import CURSOR_MOVED, Store

from .archiver import archiver_for

log = logging.getLogger(__name__)

PUBLISH_CHUNK = 500  # tasks written per script call: a few ms, well under 50 ms under load
ROOTS_CHUNK = 2_000  # ready tasks queued per script call
SPEC_MAX_BYTES = 1 << 31  # a stored spec is read back whole, whatever its size
STEPS_PER_MESSAGE = 200  # bounded steps one leader message may take before yielding


class Leader:
    """Handles leader messages for one worker (its handler id)."""

    def __init__(self, store: Store, handler: str) -> None:
        self.store = store
        self.handler = handler

    def handle(self, kind: str, job_id: str) -> str | None:
        """Run one leader message; returns 'abandoned' when a stalled scheduled job was
        marked failed instead of resubmitted."""
        step = {
            "split": self.split,
            "continue": self.go_on,
            "finalize": self.finalize,
            "cancel": self.cancel,
            "compact": self.compact,
        }.get(kind)
        if step is None:
            log.warning("dropping unknown leader message %s|%s", kind, job_id)
            self.store.drop_leader_message(kind, job_id)
            return None
        return step(job_id)

    def split(self, job_id: str) -> str | None:
        """Write every task of a pending job, then queue its ready ones, in bounded chunks.
        Goes on from the job's cursors, so a leader that died half way is simply resumed,
        except for a scheduled job: that one is marked failed (seed 000's rule against
        storms of resubmitted scheduled runs)."""
        store = self.store
        job = JobRecord.from_hash(store.job_fields(job_id))
        if job.spec is None:
            store.drop_leader_message("split", job_id)  # gone, or split already ended
            return None
        previous = job.leader or ""
        if job.schedule_id and previous and previous != self.handler:
            self.abandon(
                job_id,
                f"abandoned: leader {previous} stalled while splitting this "
                "scheduled job; scheduled runs are never resubmitted",
            )
            return "abandoned"
        spec = codec.unpack(job.spec, max_bytes=SPEC_MAX_BYTES)
        assert isinstance(spec, dict)
        ranks = codec.unpack(job.ranks, max_bytes=SPEC_MAX_BYTES) if job.ranks is not None else None
        layout = Layout(spec, ranks)  # type: ignore[arg-type]
        n = len(layout)
        written = job.written
        for start, end, pairs in _prepared(layout, written):
            code = store.publish_tasks(job_id, self.handler, start, end, pairs)
            if code < 0:
                self._stopped("split", job_id, code)
                return None

        roots = layout.roots
        queued = job.queued
        for start in range(queued, len(roots), ROOTS_CHUNK):
            end = min(start + ROOTS_CHUNK, len(roots))
            last = end == len(roots)
            code = store.queue_roots(job_id, self.handler, start, end, last, roots[start:end])
            if code < 0:
                self._stopped("split", job_id, code)
                return None
        log.info("job %s split: %d tasks, %d ready", job_id, n, len(roots))
        return None

    def abandon(self, job_id: str, error: str) -> None:
        """Mark the job and its unfinished tasks failed (the last step finalizes it)."""
        self.store.stop_job(job_id, "abandon", error=error)
        log.warning("job %s: %s", job_id, error)

    def _stopped(self, kind: str, job_id: str, code: int) -> None:
        if code == CURSOR_MOVED:
            log.info("%s of job %s: another leader went further; leaving it to them", kind, job_id)
        else:  # cancelled, gone or finished: the message has nothing left to do
            self.store.drop_leader_message(kind, job_id)

    def go_on(self, job_id: str) -> None:
        """Carry on a job's unfinished releases and failure cascades."""
        for _ in range(STEPS_PER_MESSAGE):
            if self.store.continue_frontier(job_id) == 0:
                return

    def compact(self, job_id: str) -> None:
        """Pack a finished job's tasks and history into one record (storage/keyspace/packed.py),
        then archive it (with an archive)."""
        self.compact_many([job_id])

    def compact_many(self, job_ids: list[str]) -> None:
        """compact() for several jobs, the small ones in a few round trips for all; then, with
        an archive, the batch goes to it (runtime/archiver.py)."""
        if len(job_ids) == 1:
            self.store.compact(job_ids[0])
        else:
            self.store.compact_many(job_ids)
        archiver = archiver_for(self.store)
        if archiver is not None:
            archiver.archive(self.store, job_ids)

    def cancel(self, job_id: str) -> None:
        """Go on with stopping a cancelled job, a share of its tasks per message."""
        self.store.stop_job(job_id, None, steps=STEPS_PER_MESSAGE)

    def finalize(self, job_id: str) -> None:
        code, state = self.store.finalize(job_id)
        if code == 0:
            log.info("job %s %s", job_id, state)


def _prepared(layout: Layout, start: int) -> Iterator[tuple[int, int, list[Any]]]:
    """The chunks of a layout from `start`, built by a helper thread one chunk ahead, so
    building chunk k+1 overlaps Redis writing chunk k."""
    chunks: queue.Queue[tuple[int, int, list[Any]] | BaseException | None] = queue.Queue(2)
    stop = threading.Event()

    def build() -> None:
        try:
            for first in range(start, len(layout), PUBLISH_CHUNK):
                if stop.is_set():
                    return
                last = min(first + PUBLISH_CHUNK, len(layout))
                chunks.put((first, last, layout.pairs(first, last)))
            chunks.put(None)
        except BaseException as exc:  # the leader's thread raises it
            chunks.put(exc)

    threading.Thread(target=build, name="jobcenter-split", daemon=True).start()
    try:
        while (chunk := chunks.get()) is not None:
            if isinstance(chunk, BaseException):
                raise chunk
            yield chunk
    finally:
        stop.set()  # the consumer stopped early: let the builder end
        while not chunks.empty():
            chunks.get_nowait()
