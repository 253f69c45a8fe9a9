"""Task order within a job (jobcenter.model.ordering) as the queue and the complete transition see
it: ranks break ties within a priority, inside one job; jobs stay first in, first out; a
success updates the learned run times."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from lua_helpers import H1, claim, complete_one, job_field, submit_and_split, task_field

import jobcenter.storage.jobs.submit
import jobcenter.storage.store
from jobcenter.model.spec import parse_spec
from jobcenter.storage.jobs.submit import INLINE_SPLIT_MAX
from jobcenter.storage.store import Store


def _singles_then_chain(name: str, singles: int, chain: int, **job: Any) -> dict[str, Any]:
    tasks: list[dict[str, Any]] = [{"id": f"s{k}", "task": "t.single"} for k in range(singles)]
    for k in range(chain):
        task: dict[str, Any] = {"id": f"c{k}", "task": "t.chain"}
        if k:
            task["depends_on"] = [f"c{k - 1}"]
        tasks.append(task)
    return {"name": name, "tasks": tasks, **job}


def _first_claimed(store: Store) -> tuple[str, str]:
    (task,) = claim(store, H1, n=1)
    tasks = store.status(task.job_id)["tasks"]
    return task.job_id, list(tasks)[task.index]


@pytest.mark.parametrize("singles", [3, INLINE_SPLIT_MAX + 10], ids=["inline", "leader-split"])
def test_critical_path_claims_the_head_of_the_long_chain_before_earlier_listed_tasks(
    store: Store, singles: int
) -> None:
    job_id, _ = submit_and_split(store, _singles_then_chain("cp", singles, 3))
    assert _first_claimed(store) == (job_id, "c0")
    assert job_field(store, job_id, "ranks") is None  # the split's working copy is gone


def test_fifo_keeps_spec_order(store: Store) -> None:
    job_id, _ = submit_and_split(store, _singles_then_chain("f", 3, 3, order="fifo"))
    assert _first_claimed(store) == (job_id, "s0")


def test_an_older_job_of_the_same_priority_runs_before_a_newer_jobs_critical_path(
    store: Store,
) -> None:
    """No starvation: ranks only order one job's tasks; jobs keep their submit order, and a
    higher priority still goes first."""
    old, _ = submit_and_split(store, _singles_then_chain("old", 2, 0))
    new, _ = submit_and_split(store, _singles_then_chain("new", 1, 4))
    urgent, _ = submit_and_split(store, _singles_then_chain("urgent", 1, 0, priority=1))
    order = [_first_claimed(store) for _ in range(5)]
    assert order == [(urgent, "s0"), (old, "s0"), (old, "s1"), (new, "c0"), (new, "s0")]


def test_a_success_folds_its_run_time_into_the_learned_estimates(store: Store) -> None:
    estimates = store.keys.estimates(0)
    store.redis.hset(estimates, "j\tlearn\ta", 1000.0)  # a run learned before
    job_id, _ = submit_and_split(
        store,
        {"name": "learn", "tasks": [{"id": "a", "task": "t.learned"}, {"id": "b", "task": "t.x"}]},
    )
    (task,) = [t for t in claim(store, H1) if t.index == 0]
    assert complete_one(store, H1, job_id, 0, task.token) == 0
    started, finished = (int(task_field(store, job_id, f, 0) or 0) for f in ("ts", "tf"))
    ran_ms = finished - started
    learned = store.redis.hgetall(estimates)
    assert float(learned[b"j\tlearn\ta"]) == pytest.approx(1000 + 0.3 * (ran_ms - 1000), abs=0.1)
    assert float(learned[b"t\tt.learned"]) == ran_ms  # first run of that task name
    assert b"j\tlearn\tb" not in learned  # b never succeeded
    unseen = parse_spec(  # two tasks: a lone task's rank needs no estimate, so reads none
        {
            "name": "learn",
            "tasks": [{"id": "a", "task": "t.unseen"}, {"id": "z", "task": "t.unseen"}],
        }
    )
    assert store.learned_estimates([unseen]) == {
        "j\tlearn\ta": pytest.approx(1000 + 0.3 * (ran_ms - 1000), abs=0.1)
    }


def test_a_success_learns_the_run_time_the_worker_measured_not_its_wait_for_a_thread(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A task held beyond the free slots (a prefetch) starts in Redis before it waits for a
    thread: the worker's own measure of the run is learned, so the next submit ranks by
    what the tasks ran, not by how long they were held."""
    spec = {
        "name": "measured",
        "tasks": [
            {"id": "held", "task": "t.held"},
            {"id": "long", "task": "t.long"},
            {"id": "join", "task": "t.join", "depends_on": ["held", "long"]},
        ],
    }
    job_id, _ = submit_and_split(store, spec)
    tokens = {t.index: t.token for t in claim(store, H1)}
    ran = {(job_id, 0): 40, (job_id, 1): 2500}
    codes, _ = store.complete(H1, [(job_id, i, tokens[i]) for i in (0, 1)], ran_ms=ran)
    assert codes == {(job_id, 0): 0, (job_id, 1): 0}

    learned = store.learned_estimates([parse_spec(spec)])
    assert learned["j\tmeasured\theld"] == 40 and learned["t\tt.held"] == 40
    assert learned["j\tmeasured\tlong"] == 2500 and learned["t\tt.long"] == 2500
    monkeypatch.setattr(jobcenter.storage.jobs.submit, "LEARNED_ABSENT_SECONDS", 0.0)
    again, _ = submit_and_split(store, spec)
    assert [task_field(store, again, "o", i) for i in (0, 1)] == ["1", "0"]  # long first


def test_a_submit_soon_after_a_jobs_first_run_ranks_by_what_that_run_taught(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A learned time a submit read is kept for LEARNED_CACHE_SECONDS, but a field it found
    never learned only for LEARNED_ABSENT_SECONDS: the run after a job's first (which
    learned it meanwhile) is ranked by it, while a burst of submits still reads once."""
    clock = [1000.0]
    monkeypatch.setattr(
        jobcenter.storage.jobs.submit, "time", SimpleNamespace(monotonic=lambda: clock[0])
    )
    spec = {"name": "first", "tasks": [{"id": "a", "task": "t.fa"}, {"id": "b", "task": "t.fb"}]}
    first, _ = submit_and_split(store, spec)  # nothing learned: spec order
    assert (task_field(store, first, "o", 0), task_field(store, first, "o", 1)) == ("0", "1")

    store.redis.hset(store.keys.estimates(0), mapping={"j\tfirst\ta": 10.0, "j\tfirst\tb": 900.0})
    clock[0] += 0.5  # a burst: the read of a moment ago stands
    burst, _ = submit_and_split(store, spec)
    assert (task_field(store, burst, "o", 0), task_field(store, burst, "o", 1)) == ("0", "1")
    clock[0] += 1.0  # the first run has ended: what it taught ranks the next one
    again, _ = submit_and_split(store, spec)
    assert (task_field(store, again, "o", 0), task_field(store, again, "o", 1)) == ("1", "0")


def test_submits_reuse_the_learned_estimates_read_within_the_cache_time(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A submit reads the learned run times its ranks need once per LEARNED_CACHE_SECONDS,
    not once per call: a one-job submit makes one round trip, not two."""
    estimates = store.keys.estimates(0)
    spec = {"name": "cached", "tasks": [{"id": "a", "task": "t.a"}, {"id": "b", "task": "t.b"}]}
    store.redis.hset(estimates, mapping={"j\tcached\ta": 1000.0, "j\tcached\tb": 5000.0})
    first, _ = submit_and_split(store, spec)
    assert (task_field(store, first, "o", 0), task_field(store, first, "o", 1)) == ("1", "0")

    store.redis.hset(estimates, "j\tcached\ta", 9000.0)  # a completion learned more meanwhile
    again, _ = submit_and_split(store, spec)
    assert (task_field(store, again, "o", 0), task_field(store, again, "o", 1)) == ("1", "0")

    monkeypatch.setattr(jobcenter.storage.jobs.submit, "LEARNED_CACHE_SECONDS", 0.0)
    later, _ = submit_and_split(store, spec)  # read again: a now outweighs b
    assert (task_field(store, later, "o", 0), task_field(store, later, "o", 1)) == ("0", "1")
