"""Workers holding pool and limit slots are killed with -9 over and over: the job still
converges, no slot leaks (the counters end at zero and agree with the leases), and the side
log of the tasks' starts and finishes never shows more running at once than each limit."""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from typing import Any

from chaos_harness import Cluster, check_converged
from chaos_tasks import events_key
from helpers import wait_until

from jobcenter import Client
from jobcenter.runtime.recovery import Recovery

JOB_SECONDS = 60.0
KILL_EVERY_STARTS = 12  # a worker is killed each time this many more attempts have started
WORK = 0.2  # seconds per attempt: kills land mid-task


def peak(events: list[dict[str, Any]], key: Callable[[dict[str, Any]], str]) -> dict[str, int]:
    """The most attempts running at once per key, from the side log (in Redis order): an
    attempt runs from its start to its finish, or to the kill of its worker."""
    running: dict[str, set[str]] = {}
    top: dict[str, int] = {}
    for e in events:
        if e["e"] == "killed":
            for tokens in running.values():
                for token in [t for t in tokens if f":{e['handler']}:" in t]:
                    tokens.discard(token)
            continue
        if e["e"] not in ("start", "finish"):
            continue
        tokens = running.setdefault(key(e), set())
        attempt = f"{e['task']}@{e['token']}"  # a token is the same for tasks of one claim
        if e["e"] == "start":
            tokens.add(attempt)
            top[key(e)] = max(top.get(key(e), 0), len(tokens))
        else:
            tokens.discard(attempt)
    return top


def test_kill9_of_workers_holding_pool_slots_leaks_none_and_never_exceeds_a_limit(
    cluster: Cluster, client: Client, record_property: Any
) -> None:
    rng = random.Random(17)
    client.set_pool("gpu", 3)
    tasks = [
        {"id": f"g{i}", "task": "chaos.step", "kwargs": {"work": WORK}, "pool": "gpu",
         "retries": 10}
        for i in range(30)
    ]  # fmt: skip
    tasks += [
        {"id": f"k{i}", "task": "chaos.step", "kwargs": {"work": WORK}, "retries": 10,
         "concurrency_key": "tenant", "concurrency_limit": 2}
        for i in range(20)
    ]  # fmt: skip
    spec = {"name": "limited", "max_running": 6, "tasks": tasks}
    live = [cluster.start(concurrency=4) for _ in range(3)]
    job_id = client.submit(spec)

    def unfinished() -> bool:
        return client.state(job_id) in ("pending", "running")

    kills = 0
    while unfinished():
        target = KILL_EVERY_STARTS * (kills + 1)
        wait_until(
            lambda n=target: len(cluster.events("start", job_id)) >= n or not unfinished(),
            timeout=JOB_SECONDS,
            message="no progress between kills",
        )
        if not unfinished():
            break
        victim = rng.choice(live)
        handler = cluster.handler_of(victim) or victim.handler  # none: it never claimed
        victim.kill9()
        # after the process is gone: its attempts ran no further than this entry of the log
        cluster.events_redis.rpush(
            events_key(cluster.namespace), json.dumps({"e": "killed", "handler": handler or "-"})
        )
        kills += 1
        live.remove(victim)
        live.append(cluster.start(concurrency=4, wait_ready=False))
        assert kills < 30, "the job never finished"
    status = client.wait(job_id, JOB_SECONDS)

    result = check_converged(cluster, job_id, spec, "succeeded")
    assert not result.problems, "\n".join(result.problems[:30])
    assert status["state"] == "succeeded"
    events = cluster.events()
    pools = peak([e for e in events if e.get("job") in (job_id, None)], lambda e: e["task"][0])
    overall = peak([e for e in events if e.get("job") in (job_id, None)], lambda e: "")
    print(
        f"\n[chaos] limits under kill -9: {kills} kills, {result.reruns} re-runs; most "
        f"running at once: pool gpu {pools['g']}/3, key {pools['k']}/2, job {overall['']}/6"
    )
    record_property("kills", kills)
    assert kills >= 2 and result.reruns >= 1  # the kills did land on running tasks
    assert pools["g"] <= 3 and pools["k"] <= 2 and overall[""] <= 6
    # no leak: every counter back at zero, nothing waiting, and recovery finds nothing to fix
    assert client.pools() == [{"name": "gpu", "slots": 3, "used": 0, "waiting": 0}]
    assert client.store.redis.hlen(client.store.keys.slots(0)) == 0
    report = Recovery(client.store, "cli:check").run()
    assert (report.slots_leaked, report.slots_corrected) == (0, 0)
