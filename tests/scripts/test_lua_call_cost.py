"""What the task path's scripts cost Redis per call: the Redis commands a claim, a completion
that takes the next task, and a chain's hop run (counted on a server of the test's own, so
nothing else counts), and the script text the loader sends. Each command a script runs is
Redis CPU on every task; these budgets keep the path from growing one back unnoticed."""

from __future__ import annotations

import re
from typing import Any

import pytest
import redis
from lua_helpers import NONCE, job_context

from jobcenter.config import Settings
from jobcenter.model.spec import spec_from_any
from jobcenter.storage.jobs.attempts import started_tasks
from jobcenter.storage.lua.build import _inline_constants, source
from jobcenter.storage.server.embedded import RedisServer
from jobcenter.storage.store import NO_RESULT, StartedTask, Store

HANDLER = "handler-one"
QUEUES = ["default"]
# Commands run inside the scripts (events and metrics on, as a worker's defaults). The code
# this was written against ran 28, 37 and 42. A job's first starts also make its tasks hash
# a hash table (two commands, until one of its tasks ends): the claim measured is a first.
# A call that adds a field to the shard's metrics or estimates hash keeps it a hash table
# while it has at most 512 fields (`keep_hashtable`: two commands, and an HLEN for metrics):
# the claim is the fresh shard's first, and each completion here learns a new task id's
# estimate (2) and may hit a histogram bucket nothing hit before (3). A claim reads the head
# of its queue (ZRANGE) and removes what it takes (ZREM), where it once popped it (ZPOPMIN):
# one command more, so an entry a newer release wrote is never popped. A released child taken
# at once reads whether its queue is paused (one HMGET, shared with the rate limit's read).
# A completion tells its own children without a round trip through the frontier list (three
# commands fewer a hop), and keeps the metrics hash a hash table once a call, not at each of
# its two flushes (a hop took up to 34). A task's end writes the job's updated time and
# tasks left in one command, where it took two; and a worker with more free slots than the
# hop fills reads its queue's head before the checks a take needs: the queue is empty (the
# hop's own read saw so), so the checks are not run (three commands fewer: up to 31 before).
CLAIM_AND_START_MAX = 29
FLAT_COMPLETION_MAX = 31
CHAIN_HOP_MAX = 30


def flat(n: int) -> dict[str, Any]:
    return {"name": "flat", "tasks": [{"id": f"t{i}", "task": "t.x"} for i in range(n)]}


def chain(n: int) -> dict[str, Any]:
    tasks: list[dict[str, Any]] = [{"id": "c0", "task": "t.x"}]
    tasks += [{"id": f"c{i}", "task": "t.x", "depends_on": [f"c{i - 1}"]} for i in range(1, n)]
    return {"name": "chain", "tasks": tasks}


def commands_run(r: redis.Redis) -> int:
    """Commands the server ran so far, but the script calls themselves (and their loads)
    and INFO."""
    stats = r.info("commandstats")
    skipped = {"cmdstat_evalsha", "cmdstat_fcall", "cmdstat_function|load", "cmdstat_info"}
    return sum(v["calls"] for name, v in stats.items() if name not in skipped)


@pytest.fixture
def own_store(private_redis: RedisServer) -> Store:
    return Store.from_settings(Settings(redis_url=private_redis.url, namespace="cost"))


def complete_taking_one(store: Store, task: StartedTask, free: int) -> StartedTask | None:
    """Complete `task` from a worker with `free` free slots; the one task it takes, if any."""
    codes, taken = store.complete(
        HANDLER, [(task.job_id, task.index, task.token)], take_queues=QUEUES, take_max=free
    )
    assert set(codes.values()) == {0}
    assert len(taken) <= 1
    return taken[0] if taken else None


@pytest.mark.parametrize(
    ("spec", "free", "budget"),
    [
        (flat(8), 1, FLAT_COMPLETION_MAX),
        (chain(8), 1, CHAIN_HOP_MAX),
        (chain(8), 8, CHAIN_HOP_MAX),
    ],
    ids=["flat", "chain", "chain-free-slots"],
)
def test_a_completion_that_takes_the_next_task_runs_few_redis_commands(
    own_store: Store, spec: dict[str, Any], free: int, budget: int
) -> None:
    own_store.submit(spec_from_any(spec))
    before = commands_run(own_store.redis)
    (task,) = own_store.claim(HANDLER, QUEUES, max_tasks=1, max_leader=0).tasks
    claimed = commands_run(own_store.redis)
    assert claimed - before <= CLAIM_AND_START_MAX
    # the first completion learns the task name's estimate; the next ones are alike
    next_task = complete_taking_one(own_store, task, free)
    for _ in range(3):
        assert next_task is not None
        before = commands_run(own_store.redis)
        next_task = complete_taking_one(own_store, next_task, free)
        assert commands_run(own_store.redis) - before <= budget


def test_the_loader_writes_the_preludes_constants_as_literals() -> None:
    """A constant kept as a local would make each function that names it capture it, and
    every call rebuilds those captures: the values are written in place instead."""
    text = source("complete")
    kept = r"^local (TF_|JOB_FIELD |EVENT_KIND |METRIC_FIELD |OK |ITEM_OK )"
    assert not re.search(kept, text, re.M)
    assert "'s:' .. i" in text and "{(-5)}" in text  # TF_STATE .. i, {KEYS_MISSING}


def test_inlining_leaves_comments_strings_and_other_names_alone() -> None:
    prelude = "local TF_STATE = 's:'\nlocal GONE = -4\nlocal JF = {STATE = 'state'}\n"
    body = (
        "-- TF_STATE in a comment\n"
        "local s = 'TF_STATE' .. TF_STATE .. i\n"
        "if x == GONE then return {GONE, JF.STATE, JF.OTHER, OBS.TF_STATE} end\n"
    )
    assert _inline_constants(prelude, body) == (
        "-- TF_STATE in a comment\n"
        "local s = 'TF_STATE' .. 's:' .. i\n"
        "if x == (-4) then return {(-4), 'state', JF.OTHER, OBS.TF_STATE} end\n"
    )


@pytest.mark.parametrize(
    "body",
    ["local GONE = 1", "local a, GONE = 1, 2", "local function f(x, GONE) end", "GONE = 2"],
)
def test_inlining_refuses_a_script_that_reuses_a_constants_name(body: str) -> None:
    with pytest.raises(ValueError, match="GONE"):
        _inline_constants("local GONE = -4\n", body)


def test_the_tasks_a_completion_hands_over_come_as_one_string(own_store: Store) -> None:
    """Redis 6.2 writes each nested array of a script's reply with a write() of its own (a
    task, its inputs: seven for a chain's hop): the task list comes as one msgpack string,
    which the store decodes into the same tasks."""
    own_store.submit(spec_from_any(chain(2)))
    (task,) = own_store.claim(HANDLER, QUEUES, max_tasks=1, max_leader=0).tasks
    script_keys, argv = job_context(own_store, task.job_id)
    estimates = own_store.keys.estimates(own_store.keys.job_shard(task.job_id))
    args = [HANDLER, NONCE, 30_000, 1, len(QUEUES), *QUEUES, 1, task.job_id, 1]
    args += [task.index, task.token, NO_RESULT, ""]

    (reply,) = own_store.scripts.run("complete", [*script_keys, estimates], [*argv, *args])

    assert reply[0] == 0 and isinstance(reply[2], bytes)
    (taken,) = started_tasks(task.job_id, reply[2], HANDLER, NONCE)
    assert (taken.index, taken.attempt, taken.inputs, taken.has_children) == (1, 1, (), False)


def fan_in(n: int) -> dict[str, Any]:
    """W2's middle: n independent tasks, one join after all of them."""
    tasks: list[dict[str, Any]] = [{"id": f"m{i}", "task": "t.x"} for i in range(n)]
    tasks.append({"id": "j", "task": "t.x", "depends_on": [f"m{i}" for i in range(n)]})
    return {"name": "fan-in", "tasks": tasks}


def hmgets_run(r: redis.Redis) -> int:
    return int(r.info("commandstats").get("cmdstat_hmget", {}).get("calls", 0))


# HMGETs of a completion of BATCH fan-in tasks taking BATCH more: each task's read as it
# completes and as it starts, and a few a call (the job, its queue's flags, the estimates).
# The tasks it takes share one child, the join, whose run order the worker is told (the
# prefetch's bound): read once a call, where it was read for each task taken (BATCH - 1 more).
BATCH = 4
FAN_IN_HMGETS_MAX = 2 * BATCH + 4


def test_siblings_taken_together_read_their_shared_child_once(own_store: Store) -> None:
    own_store.submit(spec_from_any(fan_in(4 * BATCH)))
    held = own_store.claim(HANDLER, QUEUES, max_tasks=BATCH, max_leader=0).tasks
    for _ in range(2):  # the first completion learns the task name's estimate
        before = hmgets_run(own_store.redis)
        codes, held = own_store.complete(
            HANDLER,
            [(t.job_id, t.index, t.token) for t in held],
            take_queues=QUEUES,
            take_max=BATCH,
        )
        assert set(codes.values()) == {0} and len(held) == BATCH
    assert hmgets_run(own_store.redis) - before <= FAN_IN_HMGETS_MAX
