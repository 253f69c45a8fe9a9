"""Trigger rules in the Lua transitions: each rule against each way its parents end, in
either order, the skips and failures they pass on, concurrent completions from several
clients (one release decision per child), and retry of a job with rules."""

from __future__ import annotations

import itertools
import random
import threading
from collections import Counter
from collections.abc import Callable, Mapping

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from lua_helpers import (
    H1,
    NO_RETRY,
    assert_finalized,
    claim,
    complete_one,
    job_field,
    submit_and_split,
    task_states,
)
from trigger_reference import FAILED_STATES, Node, expected_states, job_state

from jobcenter.model.trigger_rules import TriggerRule
from jobcenter.runtime.recovery import Recovery
from jobcenter.storage import admin
from jobcenter.storage.store import StartedTask, Store

RULES = [r.value for r in TriggerRule]
ENDINGS = ["succeeded", "failed", "upstream_failed", "skipped"]

Pick = Callable[[list[StartedTask]], StartedTask]


def _spec(nodes: Mapping[str, Node]) -> dict[str, object]:
    tasks = []
    for task_id, node in nodes.items():
        task: dict[str, object] = {"id": task_id, "task": "t.rules"}
        if node.deps:
            task["depends_on"] = list(node.deps)
        if node.rule != "all_success":
            task["trigger_rule"] = node.rule
        tasks.append(task)
    return {"name": "trigger-rules", "tasks": tasks}


def run_job(
    store: Store, nodes: Mapping[str, Node], pick: Pick = lambda running: running[0]
) -> tuple[str, dict[str, str]]:
    """Submit `nodes`, then play the worker: run what is queued, ending each task as its
    node says, in the order `pick` chooses, until the job ends. Every task runs at most once."""
    job_id, ids = submit_and_split(store, _spec(nodes))
    runs = play(store, job_id, ids, {t: n.outcome for t, n in nodes.items()}, pick)
    assert max(runs.values(), default=1) == 1, runs
    return job_id, task_states(store, job_id)


def play(
    store: Store,
    job_id: str,
    ids: Mapping[str, int],
    outcomes: Mapping[str, str],
    pick: Pick = lambda running: running[0],
) -> Counter[str]:
    """Play the worker until the job ends: run what is queued, ending each task as
    `outcomes` says, in the order `pick` chooses; returns how often each task ran. A task
    runs only once every parent it waits for has ended (claim hands out no other)."""
    names = {index: task_id for task_id, index in ids.items()}
    running: list[StartedTask] = []
    runs: Counter[str] = Counter()
    while job_field(store, job_id, "state") == "running":
        for task in claim(store, H1):
            assert task.job_id == job_id
            runs[names[task.index]] += 1
            running.append(task)
        assert running, f"stuck: {task_states(store, job_id)}"
        task = pick(running)
        running.remove(task)
        if outcomes[names[task.index]] == "succeeded":
            assert complete_one(store, H1, job_id, task.index, task.token) == 0
        else:
            reply = store.fail(H1, job_id, task.index, task.token, "boom", NO_RETRY)
            assert reply == (0, "failed")
    assert not running and claim(store, H1) == []
    return runs


def _parent(name: str, ending: str) -> dict[str, Node]:
    """Nodes that make task `name` end `ending` (with a helper root for the indirect ones)."""
    if ending in ("succeeded", "failed"):
        return {name: Node(outcome=ending)}
    root = f"{name}_root"
    if ending == "upstream_failed":  # its parent failed
        return {root: Node(outcome="failed"), name: Node(deps=[root])}
    # skipped: it runs only when its parent fails, and the parent succeeds
    return {root: Node(), name: Node(deps=[root], rule="one_failed")}


def _rule_case(rule: str, first: str, second: str) -> dict[str, Node]:
    """Child `c` with `rule` over parents a and b, and an all_success grandchild g."""
    nodes = {**_parent("a", first), **_parent("b", second)}
    nodes["c"] = Node(deps=["a", "b"], rule=rule)
    nodes["g"] = Node(deps=["c"])
    return nodes


@pytest.mark.parametrize("rule", RULES)
@pytest.mark.parametrize("endings", list(itertools.product(ENDINGS, repeat=2)), ids=str)
@pytest.mark.parametrize("order", ["spec-order", "reverse"])
def test_each_rule_against_each_way_two_parents_end(
    store: Store, rule: str, endings: tuple[str, str], order: str
) -> None:
    nodes = _rule_case(rule, *endings)
    pick: Pick = (lambda r: r[0]) if order == "spec-order" else (lambda r: r[-1])
    job_id, states = run_job(store, nodes, pick)
    assert states == expected_states(nodes)
    assert_finalized(store, job_id, job_state(states))


# The rules' table in the README, row by row: (rule, parents' endings, child's state).
HAND_CHECKED = [
    ("all_success", ("succeeded", "succeeded"), "succeeded"),
    ("all_success", ("succeeded", "skipped"), "skipped"),
    ("all_success", ("skipped", "failed"), "upstream_failed"),
    ("all_done", ("failed", "skipped"), "succeeded"),
    ("all_done", ("upstream_failed", "upstream_failed"), "succeeded"),
    ("all_failed", ("failed", "upstream_failed"), "succeeded"),
    ("all_failed", ("failed", "succeeded"), "upstream_failed"),
    ("all_failed", ("succeeded", "succeeded"), "skipped"),
    ("one_success", ("failed", "succeeded"), "succeeded"),
    ("one_success", ("failed", "skipped"), "upstream_failed"),
    ("one_success", ("skipped", "skipped"), "skipped"),
    ("one_failed", ("succeeded", "upstream_failed"), "succeeded"),
    ("one_failed", ("succeeded", "skipped"), "skipped"),
    ("none_failed", ("succeeded", "skipped"), "succeeded"),
    ("none_failed", ("succeeded", "failed"), "upstream_failed"),
]


@pytest.mark.parametrize(("rule", "endings", "state"), HAND_CHECKED)
def test_rules_table(store: Store, rule: str, endings: tuple[str, str], state: str) -> None:
    _, states = run_job(store, _rule_case(rule, *endings))
    assert states["c"] == state
    # the grandchild (all_success) follows: runs, or passes the skip or failure on
    assert states["g"] == {"succeeded": "succeeded"}.get(state, state)


def test_one_success_runs_at_once_without_waiting_for_its_other_parents(store: Store) -> None:
    nodes = {"a": Node(), "b": Node(), "c": Node(deps=["a", "b"], rule="one_success")}
    job_id, ids = submit_and_split(store, _spec(nodes))
    a, b = sorted(claim(store, H1), key=lambda t: t.index)
    assert complete_one(store, H1, job_id, a.index, a.token) == 0
    (c,) = claim(store, H1)  # b still running
    assert c.index == ids["c"]
    assert complete_one(store, H1, job_id, b.index, b.token) == 0
    assert claim(store, H1) == []  # b's success does not release c a second time
    assert complete_one(store, H1, job_id, c.index, c.token) == 0
    assert_finalized(store, job_id, "succeeded")


def test_a_skip_waits_for_the_other_parents_so_a_late_failure_still_counts(store: Store) -> None:
    """all_success over a skipped and a running parent: not decided until the running one
    ends, so it ends upstream_failed if that fails, whichever order they end in."""
    nodes = {**_parent("a", "skipped"), "b": Node(outcome="failed")}
    nodes["c"] = Node(deps=["a", "b"])
    job_id, _ = submit_and_split(store, _spec(nodes))
    by_id = {t.index: t for t in claim(store, H1)}  # a_root and b
    a_root, b = by_id[0], by_id[2]
    assert complete_one(store, H1, job_id, a_root.index, a_root.token) == 0
    states = task_states(store, job_id)
    assert (states["a"], states["c"]) == ("skipped", "waiting")
    assert store.fail(H1, job_id, b.index, b.token, "boom", NO_RETRY) == (0, "failed")
    status = store.status(job_id)
    assert status["tasks"]["c"]["state"] == "upstream_failed"
    assert status["tasks"]["a"]["error"] == "trigger rule one_failed not met"
    assert_finalized(store, job_id, "failed")


def test_a_cleanup_task_runs_after_a_failure_and_the_job_still_fails(store: Store) -> None:
    nodes = {
        "extract": Node(),
        "load": Node(deps=["extract"], outcome="failed"),
        "report": Node(deps=["load"]),
        "cleanup": Node(deps=["load", "report"], rule="all_done"),
    }
    job_id, states = run_job(store, nodes)
    assert states == {
        "extract": "succeeded",
        "load": "failed",
        "report": "upstream_failed",
        "cleanup": "succeeded",
    }
    assert_finalized(store, job_id, "failed")
    assert store.status(job_id)["tasks"]["report"]["error"] == "upstream task load failed"


def test_skipped_tasks_do_not_fail_the_job(store: Store) -> None:
    nodes = {
        "a": Node(),
        "on_error": Node(deps=["a"], rule="one_failed"),
        "after": Node(deps=["on_error"]),
    }
    job_id, states = run_job(store, nodes)
    assert states == {"a": "succeeded", "on_error": "skipped", "after": "skipped"}
    assert_finalized(store, job_id, "succeeded")
    assert job_field(store, job_id, "nskipped") == "2"
    assert job_field(store, job_id, "nfailed") == "0"


def test_a_rule_on_a_root_task_has_no_effect(store: Store) -> None:
    nodes = {"a": Node(rule="all_failed")}
    job_id, states = run_job(store, nodes)
    assert states == {"a": "succeeded"}
    assert job_field(store, job_id, "rules") is None  # nothing for Lua to decide


def test_a_skip_passes_on_through_a_wide_fan_out_in_bounded_chunks(
    store: Store,
) -> None:
    """A skip at the head of a wide fan-out reaches every descendant through the frontier
    (continue messages), exactly as a failure does."""
    width = 700  # more than one call's child visits (FRONTIER_BUDGET)
    nodes: dict[str, Node] = {"root": Node(), "gate": Node(deps=["root"], rule="one_failed")}
    for k in range(width):
        nodes[f"c{k}"] = Node(deps=["gate"])
    nodes["join"] = Node(deps=[f"c{k}" for k in range(width)], rule="none_failed")
    job_id, ids = submit_and_split(store, _spec(nodes))
    (root,) = claim(store, H1)
    assert complete_one(store, H1, job_id, root.index, root.token) == 0
    assert job_field(store, job_id, "state") == "running"  # the rest waits for a leader
    while store.continue_frontier(job_id):
        pass
    states = task_states(store, job_id)
    assert Counter(states.values()) == {"succeeded": 1, "skipped": width + 1, "queued": 1}
    assert states["join"] == "queued"  # none_failed: every parent skipped, none failed
    (join,) = claim(store, H1)
    assert complete_one(store, H1, job_id, join.index, join.token) == 0
    assert_finalized(store, job_id, "succeeded")


@pytest.mark.parametrize("rule", RULES)
def test_concurrent_completions_from_several_clients_decide_each_child_once(
    make_store: Callable[..., Store], rule: str
) -> None:
    """Many parents end at once from four clients (half succeed, half fail); each child of
    every rule is decided exactly once, as the reference says."""
    parents = 24
    nodes: dict[str, Node] = {
        f"p{k}": Node(outcome="failed" if k % 2 else "succeeded") for k in range(parents)
    }
    for n in (1, 2, parents):  # a child over the first n parents
        nodes[f"c{n}"] = Node(deps=[f"p{k}" for k in range(n)], rule=rule)
    stores = [make_store() for _ in range(4)]
    job_id, ids = submit_and_split(stores[0], _spec(nodes))
    started = claim(stores[0], H1)
    assert len(started) == parents
    gate = threading.Barrier(len(stores))
    errors: list[BaseException] = []

    def finish(client: Store, share: list[StartedTask]) -> None:
        try:
            gate.wait()
            for task in share:
                if task.index % 2:
                    client.fail(H1, job_id, task.index, task.token, "boom", NO_RETRY)
                else:
                    client.complete(H1, [(job_id, task.index, task.token)])
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [
        threading.Thread(target=finish, args=(s, started[k :: len(stores)]))
        for k, s in enumerate(stores)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    children = claim(stores[0], H1)
    released = Counter(t.index for t in children)
    assert all(count == 1 for count in released.values())
    for task in claim(stores[0], H1):
        raise AssertionError(f"released twice: {task}")
    names = {index: task_id for task_id, index in ids.items()}
    for child in children:  # the children that run end as their node says
        assert complete_one(stores[0], H1, job_id, child.index, child.token) == 0
    states = task_states(stores[0], job_id)
    expected = expected_states(nodes)
    assert states == expected
    assert {names[i] for i in released} == {
        t for t, s in expected.items() if t.startswith("c") and s == "succeeded"
    }
    assert_finalized(stores[0], job_id, job_state(expected))


def test_retry_job_runs_again_everything_downstream_of_the_failed_task(store: Store) -> None:
    """retry JOB after a failure: the failed task runs again, and so does every task below
    it that ended, decided again on its parents' new outcome: the error handler that ran
    is skipped now, the cleanup that ran before the retry runs again after its parents."""
    nodes = {
        "a": Node(outcome="failed"),
        "b": Node(),
        "ok": Node(deps=["a", "b"]),  # upstream_failed, then runs
        "on_error": Node(deps=["a", "b"], rule="one_failed"),  # runs, then skipped
        "cleanup": Node(deps=["ok", "on_error"], rule="all_done"),  # runs, then runs again
        "strict": Node(deps=["a", "ok"], rule="none_failed"),  # upstream_failed, then runs
    }
    job_id, states = run_job(store, nodes)
    assert states == {
        "a": "failed",
        "b": "succeeded",
        "ok": "upstream_failed",
        "on_error": "succeeded",
        "cleanup": "succeeded",
        "strict": "upstream_failed",
    }
    assert admin.retry_job(store, job_id) == 5  # all but b
    assert job_field(store, job_id, "state") == "running"
    assert task_states(store, job_id)["cleanup"] == "waiting"
    ids = {task_id: i for i, task_id in enumerate(nodes)}
    runs = play(store, job_id, ids, dict.fromkeys(nodes, "succeeded"))
    assert runs == {"a": 1, "ok": 1, "strict": 1, "cleanup": 1}
    assert task_states(store, job_id) == {
        "a": "succeeded",
        "b": "succeeded",
        "ok": "succeeded",
        "on_error": "skipped",
        "cleanup": "succeeded",
        "strict": "succeeded",
    }
    assert (job_field(store, job_id, "nfailed"), job_field(store, job_id, "nskipped")) == ("0", "1")
    assert_finalized(store, job_id, "succeeded")


def test_retry_resets_a_waiting_child_that_counted_the_failure(store: Store) -> None:
    """all_done over a failed parent and a running one waits; a retry of the failed one
    must not count it twice when it ends again."""
    nodes = {"a": Node(outcome="failed"), "b": Node(), "c": Node(deps=["a", "b"], rule="all_done")}
    job_id, ids = submit_and_split(store, _spec(nodes))
    by_index = {t.index: t for t in claim(store, H1)}
    a, b = by_index[ids["a"]], by_index[ids["b"]]
    assert store.fail(H1, job_id, a.index, a.token, "boom", NO_RETRY) == (0, "failed")
    assert admin.retry_job(store, job_id) == 1
    (a2,) = claim(store, H1)
    assert complete_one(store, H1, job_id, a2.index, a2.token) == 0
    assert task_states(store, job_id)["c"] == "waiting"  # b has not ended
    assert complete_one(store, H1, job_id, b.index, b.token) == 0
    (c,) = claim(store, H1)
    assert complete_one(store, H1, job_id, c.index, c.token) == 0
    assert_finalized(store, job_id, "succeeded")


# --- property: random DAGs, rules and outcomes against the reference ------------------


@st.composite
def dags(draw: st.DrawFn) -> dict[str, Node]:
    n = draw(st.integers(min_value=1, max_value=10))
    nodes: dict[str, Node] = {}
    for k in range(n):
        earlier = list(nodes)
        deps = draw(st.lists(st.sampled_from(earlier), unique=True, max_size=3)) if earlier else []
        rule = draw(st.sampled_from(RULES))
        outcome = draw(st.sampled_from(["succeeded", "succeeded", "failed"]))
        nodes[f"t{k}"] = Node(deps=deps, rule=rule, outcome=outcome)
    return nodes


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(nodes=dags(), seed=st.integers(min_value=0, max_value=2**32 - 1))
def test_random_dags_end_as_the_reference_says(
    store: Store, nodes: dict[str, Node], seed: int
) -> None:
    rng = random.Random(seed)
    job_id, states = run_job(store, nodes, lambda running: rng.choice(running))
    expected = expected_states(nodes)
    assert states == expected
    assert job_field(store, job_id, "state") == job_state(expected)
    nfailed = sum(s in FAILED_STATES for s in expected.values())
    assert job_field(store, job_id, "nfailed") == str(nfailed)


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(nodes=dags(), seed=st.integers(min_value=0, max_value=2**32 - 1))
def test_a_retry_ends_every_task_as_a_run_without_the_failures_would(
    store: Store, nodes: dict[str, Node], seed: int
) -> None:
    """Random DAGs with failures, retried once every task succeeds: each task ends as in a
    run where nothing failed, and each one below a failed task that runs in that run runs
    again after the retry, whatever it ended as before."""
    rng = random.Random(seed)
    job_id, first = run_job(store, nodes, lambda running: rng.choice(running))
    failed = [t for t, state in first.items() if state == "failed"]
    if not failed:
        return
    assert admin.retry_job(store, job_id) > 0
    ids = {task_id: i for i, task_id in enumerate(nodes)}
    runs = play(store, job_id, ids, dict.fromkeys(nodes, "succeeded"), rng.choice)

    clean = {t: Node(deps=n.deps, rule=n.rule) for t, n in nodes.items()}
    expected = expected_states(clean)
    assert task_states(store, job_id) == expected
    below = _below(nodes, failed)
    assert {t for t in runs} == {t for t in below if expected[t] == "succeeded"}
    assert job_field(store, job_id, "state") == job_state(expected)


def _below(nodes: Mapping[str, Node], roots: list[str]) -> set[str]:
    """`roots` and every task below them."""
    out = set(roots)
    for task_id, node in nodes.items():  # parents first
        if out.intersection(node.deps):
            out.add(task_id)
    return out


# --- recovery rule 3: a lost decision is made by a recovery pass ------------------------


@pytest.mark.parametrize(
    ("rule", "a_ends", "decided"),
    [("all_done", "failed", "queued"), ("one_failed", "succeeded", "skipped")],
)
def test_recovery_decides_a_waiting_task_whose_decision_was_lost(
    store: Store, rule: str, a_ends: str, decided: str
) -> None:
    """c's parents both ended but c still waits, its counts lost with the decision (a
    release or cascade that never happened): a recovery pass counts its parents again and
    its rule decides, once."""
    nodes = {
        "a": Node(outcome=a_ends),
        "b": Node(),
        "c": Node(deps=["a", "b"], rule=rule),
        "slow": Node(),  # keeps the job running meanwhile
    }
    job_id, ids = submit_and_split(store, _spec(nodes))
    by_index = {t.index: t for t in claim(store, H1)}
    a, b, slow = (by_index[ids[t]] for t in ("a", "b", "slow"))
    assert complete_one(store, H1, job_id, b.index, b.token) == 0
    if a_ends == "failed":
        assert store.fail(H1, job_id, a.index, a.token, "boom", NO_RETRY) == (0, "failed")
    else:
        assert complete_one(store, H1, job_id, a.index, a.token) == 0
    c = ids["c"]
    assert task_states(store, job_id)["c"] == decided
    jk, shard = store.keys.job(job_id), store.keys.job_shard(job_id)
    # lose the decision: c back to waiting as the split wrote it, in no queue
    store.redis.zremrangebyrank(store.keys.queue(shard, "default"), 0, -1)
    store.redis.hdel(jk.tasks, *(f"{f}:{c}" for f in ("u", "nf", "nk", "tf", "e")))
    store.redis.hset(jk.tasks, mapping={f"s:{c}": "waiting", f"d:{c}": 2})
    if decided == "skipped":
        store.redis.hincrby(jk.job, "left", 1)
        store.redis.hincrby(jk.job, "nskipped", -1)

    first, second = Recovery(store, "test-recovery").run(), Recovery(store, "test").run()

    assert (first.released, second.released) == (1, 0)
    assert task_states(store, job_id)["c"] == decided
    if decided == "queued":
        assert store.redis.hmget(jk.tasks, f"d:{c}", f"u:{c}", f"nf:{c}") == [b"1", b"0", b"1"]
        (run,) = claim(store, H1)
        assert complete_one(store, H1, job_id, run.index, run.token) == 0
    assert complete_one(store, H1, job_id, slow.index, slow.token) == 0
    assert_finalized(store, job_id, "failed" if a_ends == "failed" else "succeeded")
