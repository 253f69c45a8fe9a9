"""`make bench BENCH_ARGS=--only=burst`: does a ready task ever wait beside a free slot?

Two shapes of zero-work tasks (bench.noop), run by the bench's workers (2 x 32 slots unless
--workers / --concurrency say otherwise):

  burst  root -> 1,000 -> join -> 1,000: each level of 1,000 is released by one completion
  deep   small deep DAGs one after another: ten levels of 5-10 tasks, each with 1-3
         parents in the level above

and one shape of tasks that do work (bench.work: each sleeps 20-60 ms, drawn per task):

  level  root -> 1,000: the level's makespan (from the root's end to its last task's end)
         over the zero-overhead greedy schedule of the same tasks on the same slots (list
         scheduling in spec order, every slot taking the next task the moment it frees;
         target: within 1.05 x); and over the greedy schedule of what each task's body
         took, measured in it and returned (its sleep and its record, an RPUSH: under load
         its sleep wakes late and its RPUSH waits, which no order of the tasks can help)

Every task's ready time is its `tq` (Redis TIME of the transition that queued it, or of the
completion that took it at once) and its start its `ts` (start.lua); `tf` ends it. A task
*had a free slot* when, at its ready time, the tasks running plus the ready ones that started
before it (ahead of it in line) were fewer than the workers' slots: it could have started at
once. For those tasks the bench prints ready -> started p50 / p99 / max (targets: p99 under
20 ms); for the deep DAGs the time per level (first start to last end over ten levels: under
1.5 ms). CPU seconds per task of the workers and of Redis go beside them (less noisy than
wall time on a shared machine). Times are Redis ms: a wait under 1 ms reads as 0.
"""

from __future__ import annotations

import bisect
import heapq
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from .common import Bench, check_job, job_timeout, pct, wait_job

WIDTH = 1_000  # tasks per burst level
DEEP_LEVELS = 10
DEEP_WIDTH = (5, 10)  # tasks per level of a deep DAG
DEEP_PARENTS = (1, 3)  # parents each task of a deep DAG has in the level above
DEEP_JOBS = 30  # deep DAGs per run, one at a time
SEED = 15
P99_TARGET_MS = 20.0
LEVEL_TARGET_MS = 1.5
WORK_MS = (20, 60)  # a level task's sleep, drawn per task
MAKESPAN_TARGET = 1.05  # a level's makespan over the greedy schedule's


@dataclass(frozen=True)
class Timing:
    """One task's Redis times (ms): ready (queued), started, finished."""

    ready: int
    start: int
    end: int


def burst_spec(width: int) -> dict[str, Any]:
    """root -> width -> join -> width: two bursts, each released by one completion."""
    tasks: list[dict[str, Any]] = [{"id": "root", "task": "bench.noop"}]
    tasks += [{"id": f"a{i}", "task": "bench.noop", "depends_on": ["root"]} for i in range(width)]
    tasks.append(
        {"id": "join", "task": "bench.noop", "depends_on": [f"a{i}" for i in range(width)]}
    )
    tasks += [{"id": f"b{i}", "task": "bench.noop", "depends_on": ["join"]} for i in range(width)]
    return {"name": f"bench-burst-{width}", "tasks": tasks}


def deep_spec(rng: random.Random, levels: int = DEEP_LEVELS) -> dict[str, Any]:
    """`levels` levels of 5-10 tasks, each task with 1-3 parents in the level above."""
    tasks: list[dict[str, Any]] = []
    above: list[str] = []
    for level in range(levels):
        here = [f"l{level}t{k}" for k in range(rng.randint(*DEEP_WIDTH))]
        for task_id in here:
            task: dict[str, Any] = {"id": task_id, "task": "bench.noop"}
            if above:
                task["depends_on"] = rng.sample(above, min(len(above), rng.randint(*DEEP_PARENTS)))
            tasks.append(task)
        above = here
    return {"name": "bench-deep", "tasks": tasks}


def level_spec(rng: random.Random, width: int) -> tuple[dict[str, Any], list[float]]:
    """root -> width tasks of work; and their durations (ms), in spec order."""
    durations = [float(rng.randint(*WORK_MS)) for _ in range(width)]
    tasks: list[dict[str, Any]] = [{"id": "root", "task": "bench.noop"}]
    tasks += [
        {"id": f"w{i}", "task": "bench.work", "args": [ms / 1000], "depends_on": ["root"]}
        for i, ms in enumerate(durations)
    ]
    return {"name": f"bench-level-{width}", "tasks": tasks}, durations


def greedy_ms(durations: Sequence[float], slots: int) -> float:
    """Makespan of list scheduling with no overhead: in order, each task starts on the slot
    that frees first."""
    free = [0.0] * slots
    for ms in durations:
        heapq.heappush(free, heapq.heappop(free) + ms)
    return max(free)


def had_free_slot(timings: Sequence[Timing], slots: int) -> list[Timing]:
    """The tasks that could have started at once: at their ready time, fewer than `slots`
    tasks were running or ready and started ahead of them."""
    starts = sorted(t.start for t in timings)
    ends = sorted(t.end for t in timings)
    by_start = sorted(timings, key=lambda t: (t.start, t.ready))
    out = []
    for pos, t in enumerate(by_start):
        r = t.ready
        started = bisect.bisect_right(starts, r)
        running = started - bisect.bisect_right(ends, r) - (1 if t.start <= r else 0)
        busy = running
        for other in by_start[started:pos]:  # started after r, before t: ahead of it in line
            if other.ready <= r:
                busy += 1
                if busy >= slots:
                    break
        if busy < slots:
            out.append(t)
    return out


def timings_of(bench: Bench, job_id: str, spec: dict[str, Any]) -> tuple[list[Timing], list[str]]:
    status = bench.client.status(job_id)
    problems, _ = check_job(bench, job_id, spec, status)
    out = []
    for task in status["tasks"].values():
        times = [task["queued_at"], task["started_at"], task["finished_at"]]
        if None in times:
            problems.append(f"job {job_id}: a task without its times")
            continue
        out.append(Timing(*(round(x * 1000) for x in times)))
    return out, problems


def waits_ms(timings: Sequence[Timing]) -> list[float]:
    return [float(t.start - t.ready) for t in timings]


def run_job(bench: Bench, spec: dict[str, Any]) -> tuple[list[Timing], list[str]]:
    job_id = bench.client.submit(spec)
    wait_job(bench, job_id, job_timeout(len(spec["tasks"])))
    timings, problems = timings_of(bench, job_id, spec)
    bench.purge([job_id])
    return timings, problems


def cpu_us_per_task(bench: Bench, before: dict[str, float], tasks: int) -> dict[str, float]:
    after = bench.cpu_seconds()
    return {k: (after[k] - before[k]) * 1e6 / tasks for k in ("workers", "redis")}


def run_burst(bench: Bench, slots: int, width: int) -> dict[str, Any]:
    spec = burst_spec(width)
    cpu = bench.cpu_seconds()
    timings, problems = run_job(bench, spec)
    free = had_free_slot(timings, slots)
    all_waits = waits_ms(timings)
    return {
        "tasks": len(timings),
        "free": len(free),
        "waits": waits_ms(free),
        "all_p99_ms": pct(all_waits, 0.99),
        "makespan_ms": max(t.end for t in timings) - min(t.start for t in timings),
        "cpu_us": cpu_us_per_task(bench, cpu, len(timings)),
        "problems": problems,
    }


def run_deep(bench: Bench, slots: int, jobs: int, rng: random.Random) -> dict[str, Any]:
    levels: list[float] = []
    waits: list[float] = []
    problems: list[str] = []
    tasks = 0
    cpu = bench.cpu_seconds()
    for _ in range(jobs):
        timings, found = run_job(bench, deep_spec(rng))
        problems += found
        tasks += len(timings)
        span = max(t.end for t in timings) - min(t.start for t in timings)
        levels.append(span / DEEP_LEVELS)
        waits += waits_ms(had_free_slot(timings, slots))
    return {
        "tasks": tasks,
        "level_ms": levels,
        "waits": waits,
        "cpu_us": cpu_us_per_task(bench, cpu, tasks),
        "problems": problems,
    }


def run_level(bench: Bench, slots: int, width: int, rng: random.Random) -> dict[str, Any]:
    """The level's makespan over the greedy schedule's, of the nominal durations and of
    what the tasks' bodies took."""
    spec, durations = level_spec(rng, width)
    job_id = bench.client.submit(spec)
    wait_job(bench, job_id, job_timeout(len(spec["tasks"])) + sum(durations) / 1000 / slots)
    status = bench.client.status(job_id)
    problems, _ = check_job(bench, job_id, spec, status)
    tasks = status["tasks"]
    took = {k: v for k, v in bench.client.store.results(job_id).items() if k != "root"}
    bench.purge([job_id])
    if problems or len(took) != width:
        problems = problems or [f"job {job_id}: {width - len(took)} tasks' times missing"]
        return {"ratio": None, "makespan_ms": None, "greedy_ms": None, "problems": problems}
    ready = tasks["root"]["finished_at"] * 1000
    makespan = max(t["finished_at"] for k, t in tasks.items() if k != "root") * 1000 - ready
    greedy = greedy_ms(durations, slots)
    bodies = greedy_ms([float(took[f"w{i}"]) for i in range(width)], slots)
    return {
        "ratio": makespan / greedy,
        "bodies_ratio": makespan / bodies,
        "makespan_ms": makespan,
        "greedy_ms": greedy,
        "bodies_ms": bodies,
        "problems": problems,
    }


def fmt_ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def run(bench: Bench, slots: int, repeats: int, say: Callable[[str], None]) -> list[dict[str, Any]]:
    """Each shape `repeats` times, interleaved; one row per shape over every run."""
    rng = random.Random(SEED)
    run_job(bench, burst_spec(100))  # warm-up: scripts loaded, thread pools filled
    bursts: list[dict[str, Any]] = []
    deeps: list[dict[str, Any]] = []
    levels: list[dict[str, Any]] = []
    for rep in range(repeats):
        b = run_burst(bench, slots, WIDTH)
        bursts.append(b)
        say(
            f"  run {rep + 1} burst: {b['free']} of {b['tasks']} tasks had a free slot; their "
            f"ready -> started p99 {fmt_ms(pct(b['waits'], 0.99))} ms, max "
            f"{fmt_ms(max(b['waits'], default=None))} ms; all tasks p99 "
            f"{fmt_ms(b['all_p99_ms'])} ms; makespan {b['makespan_ms']} ms"
        )
        time.sleep(0.2)  # the workers idle again: each deep DAG starts from idle
        d = run_deep(bench, slots, DEEP_JOBS, rng)
        deeps.append(d)
        say(
            f"  run {rep + 1} deep: per level p50 {fmt_ms(pct(d['level_ms'], 0.5))} ms, p90 "
            f"{fmt_ms(pct(d['level_ms'], 0.9))} ms; ready -> started p99 "
            f"{fmt_ms(pct(d['waits'], 0.99))} ms"
        )
        time.sleep(0.2)
        lv = run_level(bench, slots, WIDTH, rng)
        levels.append(lv)
        say(
            f"  run {rep + 1} level: makespan {fmt_ms(lv['makespan_ms'])} ms, greedy "
            f"{fmt_ms(lv['greedy_ms'])} ms: {ratio(lv['ratio'])}; on the bodies' times "
            f"{fmt_ms(lv.get('bodies_ms'))} ms: {ratio(lv.get('bodies_ratio'))}"
        )
    return [
        summary("burst 2 x 1,000 (root, join)", bursts),
        summary("deep 10 x 5-10", deeps),
        level_summary(levels),
    ]


def ratio(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f} x"


def level_summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
    ratios = [r["ratio"] for r in runs if r["ratio"] is not None]
    return {
        "shape": f"level 1,000 x {WORK_MS[0]}-{WORK_MS[1]} ms",
        "ratios": ratios,
        "bodies_ratios": [r["bodies_ratio"] for r in runs if r["ratio"] is not None],
        "problems": [p for r in runs for p in r["problems"]],
    }


def summary(shape: str, runs: list[dict[str, Any]]) -> dict[str, Any]:
    waits = [w for r in runs for w in r["waits"]]
    levels = [x for r in runs for x in r.get("level_ms", [])]
    tasks = sum(r["tasks"] for r in runs)
    return {
        "shape": shape,
        "tasks": tasks,
        "free": len(waits),
        "p50_ms": pct(waits, 0.5),
        "p99_ms": pct(waits, 0.99),
        "max_ms": max(waits, default=None),
        "level_p50_ms": pct(levels, 0.5) if levels else None,
        "level_p90_ms": pct(levels, 0.9) if levels else None,
        "cpu_worker_us": sum(r["cpu_us"]["workers"] * r["tasks"] for r in runs) / tasks,
        "cpu_redis_us": sum(r["cpu_us"]["redis"] * r["tasks"] for r in runs) / tasks,
        "problems": [p for r in runs for p in r["problems"]],
    }


def render(rows: Sequence[dict[str, Any]]) -> str:
    lines = [
        "| shape | tasks with a free slot | ready -> started p50 / p99 / max (target p99 < "
        f"{P99_TARGET_MS:.0f} ms) | per level p50 / p90 (target < {LEVEL_TARGET_MS} ms) "
        "| CPU us per task: workers / redis |",
        "|---|---|---|---|---|",
    ]
    for r in rows:
        if "ratios" in r:
            continue
        level = (
            "-"
            if r["level_p50_ms"] is None
            else f"{r['level_p50_ms']:.2f} / {r['level_p90_ms']:.2f} ms"
        )
        lines.append(
            f"| {r['shape']} | {r['free']:,} of {r['tasks']:,} | {fmt_ms(r['p50_ms'])} / "
            f"{fmt_ms(r['p99_ms'])} / {fmt_ms(r['max_ms'])} ms | {level} | "
            f"{r['cpu_worker_us']:.0f} / {r['cpu_redis_us']:.0f} |"
        )
    for r in rows:
        if "ratios" in r:
            lines.append(
                f"\n{r['shape']}: makespan over the greedy schedule's (target < "
                f"{MAKESPAN_TARGET} x): median {ratio(pct(r['ratios'], 0.5))}, worst "
                f"{ratio(max(r['ratios'], default=None))}; over the greedy schedule of what "
                f"the bodies took: median {ratio(pct(r['bodies_ratios'], 0.5))}, worst "
                f"{ratio(max(r['bodies_ratios'], default=None))}"
            )
    return "\n".join(lines)
