"""`make bench BENCH_ARGS=--only=order`: how soon a DAG ends under each task-order rule.

Four shapes where the claim order matters, each run by real workers (tasks sleep their
duration) under each rule of jobcenter.model.ordering: fifo, downstream, critical_path cold (no
history: every task the same estimate), critical_path again once that run taught the learned
estimates, then fifo and downstream; each job submitted by a client of its own, whose ranks
use what Redis has learned by then. Each row shows the makespan (the job's started_at to
finished_at, Redis time) over the lower bound max(longest path, work / slots), the same ratio
for a zero-overhead list-scheduling simulation of the same order (what the order alone is worth),
and the makespan over the zero-overhead critical-path schedule (list scheduling by the true
durations' bottom levels: the order a perfect estimate gives, with nothing lost per task).
The last line gives that figure for the default order after one learning run, shape by shape.
"""

from __future__ import annotations

import heapq
import random
from collections.abc import Callable, Sequence
from typing import Any

from jobcenter import Client
from jobcenter.model.ordering import task_ranks
from jobcenter.model.spec import CRITICAL_PATH, DEFAULT_ORDER, DOWNSTREAM, FIFO, parse_spec
from jobcenter.storage.keyspace.layout import Layout

from .common import NAMESPACE, job_timeout, wait_job

UNIT_S = 0.02  # one duration unit, in seconds of sleep
SEED = 16
RUNS = (  # (label, order rule, whether the learned estimates are wiped first)
    ("critical_path cold", CRITICAL_PATH, True),
    ("critical_path learned", CRITICAL_PATH, False),  # after one learning run: the cold one
    ("fifo", FIFO, False),
    ("downstream", DOWNSTREAM, False),
)
DEFAULT_RUN = "critical_path learned"  # the default order (DEFAULT_ORDER), after learning


def chains_shape(rng: random.Random) -> tuple[list[list[int]], list[float]]:
    """160 independent chains of 1..8 tasks, each task 1..6 units: spec order chain by chain."""
    deps: list[list[int]] = []
    units: list[float] = []
    for _ in range(160):
        for k in range(rng.randint(1, 8)):
            deps.append([len(deps) - 1] if k else [])
            units.append(rng.randint(1, 6))
    return deps, units


def fan_in_shape(rng: random.Random) -> tuple[list[list[int]], list[float]]:
    """630 independent 1..3-unit tasks listed first, then a 60-task chain of 2-unit tasks;
    a join waits for all of them."""
    deps: list[list[int]] = [[] for _ in range(630)]
    units = [float(rng.randint(1, 3)) for _ in range(630)]
    for k in range(60):
        deps.append([len(deps) - 1] if k else [])
        units.append(2.0)
    deps.append(list(range(len(deps))))
    units.append(1.0)
    return deps, units


def wide_join_shape(rng: random.Random) -> tuple[list[list[int]], list[float]]:
    """16 chains of 12 two-unit tasks, then 584 independent 1..3-unit tasks; one join waits
    for the chains' ends and the independent tasks (a 600-way fan-in behind long chains).
    The chains (24 units) about equal the work over 64 slots, so both must go well."""
    deps: list[list[int]] = []
    units: list[float] = []
    for _ in range(16):
        for k in range(12):
            deps.append([len(deps) - 1] if k else [])
            units.append(2.0)
    ends = [i for i in range(len(deps)) if i % 12 == 11]
    for _ in range(584):
        deps.append([])
        units.append(float(rng.randint(1, 3)))
    deps.append(ends + list(range(16 * 12, len(deps))))
    units.append(1.0)
    return deps, units


def layered_shape(rng: random.Random) -> tuple[list[list[int]], list[float]]:
    """12 layers of 120 tasks, each with 1..3 parents in the layer above; durations skewed
    (Pareto: most tasks short, a few up to ten times longer)."""
    deps: list[list[int]] = []
    units: list[float] = []
    width = 120
    for layer in range(12):
        for _ in range(width):
            above = range((layer - 1) * width, layer * width)
            deps.append(rng.sample(above, rng.randint(1, 3)) if layer else [])
            units.append(round(min(10.0, rng.paretovariate(1.5)), 1))
    return deps, units


SHAPES: dict[str, Callable[[random.Random], tuple[list[list[int]], list[float]]]] = {
    "chains": chains_shape,
    "fan-in": fan_in_shape,
    "wide join": wide_join_shape,
    "layered": layered_shape,
}


def spec_of(name: str, deps: list[list[int]], units: list[float], order: str) -> dict[str, Any]:
    tasks = []
    for i, (parents, u) in enumerate(zip(deps, units, strict=True)):
        task: dict[str, Any] = {"id": f"t{i}", "task": "bench.sleep", "args": [u * UNIT_S]}
        if parents:
            task["depends_on"] = [f"t{p}" for p in parents]
        tasks.append(task)
    return {"name": f"order-{name}", "order": order, "tasks": tasks}


def lower_bound(deps: list[list[int]], seconds: list[float], slots: int) -> float:
    finish: list[float] = []
    for parents, s in zip(deps, seconds, strict=True):  # spec order is topological here
        finish.append(s + max((finish[p] for p in parents), default=0.0))
    return max(max(finish), sum(seconds) / slots)


def simulate(
    deps: list[list[int]], seconds: list[float], ranks: Sequence[int], slots: int
) -> float:
    """Makespan of list scheduling with no overhead: a free slot takes the lowest-ranked
    ready task."""
    n = len(deps)
    children: list[list[int]] = [[] for _ in range(n)]
    waiting = [len(p) for p in deps]
    for i, parents in enumerate(deps):
        for p in parents:
            children[p].append(i)
    ready = [(ranks[i], i) for i in range(n) if not waiting[i]]
    heapq.heapify(ready)
    running: list[tuple[float, int]] = []
    now = 0.0
    while ready or running:
        while ready and len(running) < slots:
            _, i = heapq.heappop(ready)
            heapq.heappush(running, (now + seconds[i], i))
        now, i = heapq.heappop(running)
        for c in children[i]:
            waiting[c] -= 1
            if not waiting[c]:
                heapq.heappush(ready, (ranks[c], c))
    return now


def sim_ranks(spec: dict[str, Any], learned: dict[str, float]) -> list[int]:
    parsed = parse_spec(spec)
    layout = Layout(spec)
    ranks = task_ranks(parsed, layout.children, learned)
    return ranks if ranks is not None else list(range(len(layout)))


def critical_path_schedule(
    deps: list[list[int]], units: list[float], seconds: list[float], slots: int
) -> float:
    """The zero-overhead makespan of critical_path ranked by the true durations."""
    spec = spec_of("true", deps, units, CRITICAL_PATH)
    for task, s in zip(spec["tasks"], seconds, strict=True):
        task["estimate"] = s
    return simulate(deps, seconds, sim_ranks(spec, {}), slots)


def run(bench: Any, slots: int, say: Callable[[str], None]) -> list[tuple[str, ...]]:
    """Every shape under every rule; returns the table rows (the header first)."""
    store = bench.client.store
    estimates_key = store.keys.estimates(0)
    header = ("shape", "tasks", "rule", "makespan s", "bound s", "run / bound", "sim / bound")
    rows: list[tuple[str, ...]] = [(*header, "run / CP")]
    for shape, make in SHAPES.items():
        deps, units = make(random.Random(SEED))
        seconds = [u * UNIT_S for u in units]
        bound = lower_bound(deps, seconds, slots)
        best = critical_path_schedule(deps, units, seconds, slots)
        for label, rule, wipe in RUNS:
            if wipe:
                bench.redis.delete(estimates_key)
            spec = spec_of(shape, deps, units, rule)
            learned = store.learned_estimates([parse_spec(spec)])
            sim = simulate(deps, seconds, sim_ranks(spec, learned), slots)
            # a client of its own: one that read the learned times moments ago (for the last
            # run, or its cold run of under LEARNED_ABSENT_SECONDS) would rank by that read
            job_id = Client.from_url(bench.server.url, NAMESPACE).submit(spec)
            state = wait_job(bench, job_id, job_timeout(len(deps)))
            started, finished = bench.job_fields(job_id, "started_at", "finished_at")
            makespan = (int(finished) - int(started)) / 1000
            bench.purge([job_id])
            row = (
                shape,
                str(len(deps)),
                label,
                f"{makespan:.2f}",
                f"{bound:.2f}",
                f"{makespan / bound:.2f}" + ("" if state == "succeeded" else f" ({state})"),
                f"{sim / bound:.2f}",
                f"{makespan / best:.2f}",
            )
            say("  " + "  ".join(row))
            rows.append(row)
    return rows


def render(rows: Sequence[tuple[str, ...]]) -> str:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]
    default = [f"{r[0]} {r[-1]}" for r in rows[1:] if r[2] == DEFAULT_RUN]
    return "\n".join(
        [
            lines[0],
            "  ".join("-" * w for w in widths),
            *lines[1:],
            "",
            f"default order ({DEFAULT_ORDER}) after one learning run, makespan over the "
            f"zero-overhead critical-path schedule: {', '.join(default)}",
        ]
    )
