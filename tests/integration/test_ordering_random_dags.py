"""The ordering invariant of seed 000 over many random DAGs run concurrently by two workers:
no task starts before every one of its parents has finished, and every task runs once."""

from __future__ import annotations

import os
import random
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from integration_harness import JOB_SECONDS, Scratch, Workers, parents_finished_first

from jobcenter import Client

DAGS = 30
TASKS_MIN, TASKS_MAX = 10, 60
MAX_PARENTS = 4  # edges per task, each to an earlier task: acyclic by construction
PAUSES = (0.0, 0.0, 0.005, 0.02)  # seconds a task works: varied, so completions interleave
SUBMIT_THREADS = 8
# Override to replay a failure: JOBCENTER_TEST_SEED=<the seed in the failure message>.
SEED = int(os.environ.get("JOBCENTER_TEST_SEED", "20251122"))


def random_dag(rng: random.Random, number: int) -> dict[str, Any]:
    size = rng.randint(TASKS_MIN, TASKS_MAX)
    tasks = []
    for i in range(size):
        parents = rng.sample(range(i), rng.randint(0, min(i, MAX_PARENTS))) if i else []
        task: dict[str, Any] = {
            "id": f"n{i}",
            "task": "tasks_for_tests.record",
            "args": [f"dag{number}.n{i}", rng.choice(PAUSES)],
        }
        if parents:
            task["depends_on"] = [f"n{p}" for p in parents]
        tasks.append(task)
    return {"name": f"random-dag-{number}", "tasks": tasks}


def test_random_dags_run_each_task_once_and_only_after_all_its_parents(
    client: Client, workers: Workers, scratch: Scratch
) -> None:
    rng = random.Random(SEED)
    specs = [random_dag(rng, n) for n in range(DAGS)]
    workers.start()
    workers.start()

    with ThreadPoolExecutor(SUBMIT_THREADS) as pool:
        job_ids = list(pool.map(client.submit, specs))

    assert len(set(job_ids)) == DAGS, f"seed {SEED}"
    problems = []
    for job_id, spec in zip(job_ids, specs, strict=True):
        status = client.wait(job_id, JOB_SECONDS)
        name = f"{spec['name']} ({job_id})"
        if status["state"] != "succeeded":
            problems.append(f"{name} ended {status['state']}")
        deps = {t["id"]: t.get("depends_on", []) for t in spec["tasks"]}
        problems += [f"{name}: {p}" for p in parents_finished_first(status, deps)]
        not_succeeded = [k for k, t in status["tasks"].items() if t["state"] != "succeeded"]
        if not_succeeded:
            problems.append(f"{name}: not succeeded: {not_succeeded}")
        attempts = Counter(h["task"] for h in client.history(job_id))
        for task_id in deps:
            if attempts[task_id] != 1:
                problems.append(f"{name}: {task_id} has {attempts[task_id]} history entries")
    runs = Counter((r["job"], r["task"]) for r in scratch.events("run"))
    for job_id, spec in zip(job_ids, specs, strict=True):
        for t in spec["tasks"]:
            if runs[(job_id, t["id"])] != 1:
                problems.append(f"{spec['name']}: {t['id']} ran {runs[(job_id, t['id'])]} times")
    assert not problems, f"seed {SEED} (JOBCENTER_TEST_SEED to replay):\n" + "\n".join(
        problems[:50]
    )
