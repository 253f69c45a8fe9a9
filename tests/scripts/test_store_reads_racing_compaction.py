"""Reads racing compaction: while leaders pack finished jobs (compact.lua) and retries
unpack them (restore.lua) under the readers, every read of a job's tasks and history
(status, result, results, history, the dashboard's job page, events named by task, dead
letters) is whole: it read the tasks hash or the packed record, never half of each."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator

import pytest
from lua_helpers import H1, NO_RETRY, claim, submit

import jobcenter.storage.jobs.lifecycle
import jobcenter.storage.store
from jobcenter.model import codec
from jobcenter.storage import admin, views
from jobcenter.storage.events import Events
from jobcenter.storage.store import Store

JOBS = 8  # jobs swapped round-robin: a reader meets one mid-swap often
TASKS = 40  # succeeded tasks per job, each returning its index; one more task fails
SWAPS_WANTED = 120  # compactions and restores made while the readers read
# a restore writes the hash back in many calls (the record stays what readers read until
# the last): a reader of the hash half written shows itself
RESTORE_CHUNK = 20


def _failed_job(store: Store) -> str:
    """A finished job a retry would unpack: TASKS tasks succeeded, `bad` failed for good."""
    tasks = [{"id": f"t{k}", "task": "t.x"} for k in range(TASKS)]
    job_id = submit(store, {"name": "swapped", "tasks": [*tasks, {"id": "bad", "task": "t.x"}]})
    while started := claim(store, H1, 100):
        for t in started:
            if t.index == TASKS:
                store.fail(H1, job_id, t.index, t.token, "no", NO_RETRY)
            else:
                value = codec.pack(t.index)
                assert store.complete(H1, [(job_id, t.index, t.token, value)])[0] == {
                    (job_id, t.index): 0
                }
    assert store.compact(job_id)
    return job_id


def _check_every_read(store: Store, events: Events, job_id: str) -> None:
    """Each reader once; each must have read all of the job."""
    names = {f"t{k}" for k in range(TASKS)} | {"bad"}
    tasks = store.status(job_id)["tasks"]
    assert set(tasks) == names, "status"
    assert [t["state"] for t in tasks.values()].count("succeeded") == TASKS, "status"
    assert store.result(job_id, "t7") == 7, "result"
    assert store.results(job_id) == {f"t{k}": k for k in range(TASKS)}, "results"
    history = store.history(job_id)
    assert {h["task"] for h in history} == names and len(history) == TASKS + 1, "history"
    graph = views.job_graph(store, job_id)
    assert set(graph.ids) == names and graph.states.count("succeeded") == TASKS, "graph"
    assert views.live_states(store, job_id).states.count("succeeded") == TASKS, "live"
    detail = views.task_detail(store, job_id, 7)
    assert (detail.id, detail.state, detail.result) == ("t7", "succeeded", "7"), "detail"
    assert [a.state for a in detail.history] == ["succeeded"], "detail"
    dead = admin.dead_letter(store, job_id, "bad")
    assert (dead["task"], dead["attempts"], len(dead["history"])) == ("bad", 1, 1), "dlq"
    named = events.named(events.read(job_id=job_id)[0][: TASKS + 1])
    assert {e.task for e in named if e.index is not None} <= names, "events"


class Swapper:
    """Packs and unpacks jobs round-robin in a thread of its own (its own Store) until
    stopped; `swaps()` counts what it did and raises what stopped it early."""

    def __init__(self, store: Store, jobs: list[str]) -> None:
        self.store, self.jobs = store, jobs
        self.made = 0
        self.error: BaseException | None = None
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        try:
            while not self.stopping.is_set():
                for job_id in self.jobs:
                    assert self.store.restore(job_id), f"restore {job_id}"
                    assert self.store.compact(job_id), f"compact {job_id}"
                    self.made += 2
        except BaseException as exc:
            self.error = exc

    def swaps(self) -> int:
        if self.error is not None:
            raise self.error
        return self.made


@pytest.fixture
def swapper(make_store: Callable[..., Store], monkeypatch: pytest.MonkeyPatch) -> Iterator[Swapper]:
    monkeypatch.setattr(jobcenter.storage.jobs.lifecycle, "RESTORE_CHUNK", RESTORE_CHUNK)
    store = make_store()
    swapper = Swapper(store, [_failed_job(store) for _ in range(JOBS)])
    swapper.thread.start()
    try:
        yield swapper
    finally:
        swapper.stopping.set()
        swapper.thread.join()


def test_every_read_is_whole_while_jobs_are_packed_and_unpacked_under_it(
    store: Store, swapper: Swapper
) -> None:
    events = Events(store)
    reads = 0
    while swapper.swaps() < SWAPS_WANTED or reads < len(swapper.jobs):
        for job_id in swapper.jobs:
            _check_every_read(store, events, job_id)
            reads += 1
