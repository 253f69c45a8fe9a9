"""The workloads of `make bench`: each runs on a Bench and returns its figures."""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import redis

from jobcenter.model.spec import parse_spec
from jobcenter.storage.keyspace.packed import decode as decode_record
from jobcenter.storage.keyspace.schema import TaskField

from .common import (
    BENCH_COMMANDS,
    CASCADE_SCRIPTS,
    FOLLOWER_NAME,
    IDLE_QUEUE,
    PIPELINE_BATCH,
    POOL_SLOTS,
    PUBLISH_SCRIPTS,
    RESULT_BYTES,
    SLOWLOG_US,
    TRIVIAL_SCRIPT,
    Bench,
    Sizes,
    SlowlogDrain,
    chain_spec,
    check_job,
    deps_of,
    depth_of,
    fan_spec,
    flat_spec,
    job_timeout,
    map_spec,
    pct,
    pooled_flat,
    redis_load,
    run_one_job,
    seed000_spec,
    text,
    wait_active_below,
    wait_compacted,
    wait_job,
)
from .tasks import ran_key

# W1-observe: the variants, in the order each repeat runs them (the last is the default).
OBSERVE_VARIANTS = {
    "off": {"JOBCENTER_EVENTS_MAXLEN": "0", "JOBCENTER_METRICS": "0"},
    "events": {"JOBCENTER_METRICS": "0"},
    "both": {},
}
OBSERVE_TARGET_PCT = 10.0  # the issue's bound on what events may cost W1
OBSERVE_COMMANDS = ("xadd", "hincrby")  # what emit() and count() run


def run_observe(bench: Bench, n: int) -> dict[str, Any]:
    """W1 once per variant of OBSERVE_VARIANTS, the workers restarted for each."""
    out: dict[str, Any] = {"wall_s": 0.0, "problems": []}
    for name, settings_env in OBSERVE_VARIANTS.items():
        bench.restart_workers(settings_env)
        run_one_job(bench, flat_spec(200))  # warm-up: scripts loaded, pools filled
        stats = bench.commandstats()
        redis_cpu = bench.cpu_seconds()["redis"]
        run = run_one_job(bench, flat_spec(n))
        # Redis's own work per task: what the scripts cost, whatever else loads the machine
        after = bench.commandstats()
        evalsha = redis_load(stats, after, run["wall_s"])["evalsha_s"]
        out[f"evalsha_us_per_task_{name}"] = evalsha * 1e6 / n
        # the commands events and metrics add, inside the scripts (commandstats counts them)
        for command in OBSERVE_COMMANDS:
            calls = after.get(command, {"calls": 0, "usec": 0})
            was = stats.get(command, {"calls": 0, "usec": 0})
            out[f"{command}_calls_per_task_{name}"] = (calls["calls"] - was["calls"]) / n
            out[f"{command}_us_per_task_{name}"] = (calls["usec"] - was["usec"]) / n
        out[f"redis_cpu_us_per_task_{name}"] = (bench.cpu_seconds()["redis"] - redis_cpu) * 1e6 / n
        out[f"tasks_per_s_{name}"] = run["tasks_per_s"]
        out["wall_s"] += run["wall_s"]
        out["problems"] += [f"{name}: {p}" for p in run["problems"]]
    return out


def observe_cost(r: dict[str, Any], variant: str) -> float:
    """How much slower W1 ran with `variant` than with events and metrics off, in %."""
    return 100 * (1 - r[f"tasks_per_s_{variant}"] / r["tasks_per_s_off"])


def run_map(bench: Bench, n: int) -> dict[str, Any]:
    """A map of n elements: the expansion time is from the source's success (the first
    chunk is written by that same script) to the creation of the last instance, whose
    chunks leader 'continue' steps write while the first instances already run."""
    t0_ms = bench.now_ms()
    w0 = time.perf_counter()
    job_id = bench.client.submit(map_spec(n))
    state = wait_job(bench, job_id, job_timeout(n))
    wall_s = time.perf_counter() - w0
    tasks = bench.client.store.keys.job(job_id).tasks
    source_done, instances = bench.redis.hmget(tasks, ["tf:0", "mx:1"])
    problems = [] if state == "succeeded" else [f"job {job_id} ended {state}"]
    expand_s = float("nan")
    if instances:
        first, count = map(int, instances.split(b"|")[:2])
        created = bench.redis.hmget(tasks, [f"tc:{k}" for k in range(first, first + count)])
        expand_s = (max(int(c) for c in created) - int(source_done)) / 1000
        if count != n:
            problems.append(f"{count} instances for {n} elements")
    ran = bench.redis.llen(ran_key(job_id))
    if ran != n + 2:
        problems.append(f"{ran} attempts ran, not {n + 2}")
    if bench.client.result(job_id, "join") != n:
        problems.append("the join did not get every instance's result")
    finished = int(bench.job_fields(job_id, "finished_at")[0] or t0_ms)
    bench.purge([job_id])
    return {
        "tasks": n + 2,
        "expand_s": expand_s,
        "redis_s": (finished - t0_ms) / 1000,
        "wall_s": wall_s,
        "problems": problems,
    }


def run_many_jobs(
    bench: Bench, spec: dict[str, Any], count: int, full_check: bool
) -> dict[str, Any]:
    """Submit `count` copies of a job through the client (`submit_many`: 200 per round
    trip); wait for all."""
    n = len(spec["tasks"])
    deps = deps_of(spec)
    parse_spec(spec)  # a bad spec fails here, before any job is submitted
    baseline = bench.active_jobs()
    t0_ms = bench.now_ms()
    w0 = time.perf_counter()
    job_ids = bench.client.submit_many([spec] * count)
    submit_s = time.perf_counter() - w0
    wait_active_below(bench, baseline, job_timeout(n * count))
    wall_s = time.perf_counter() - w0
    wait_compacted(bench, job_ids, job_timeout(n * count))
    compacted_s = time.perf_counter() - w0
    pipe = bench.redis.pipeline(transaction=False)
    for job_id in job_ids:
        pipe.hmget(bench.job_key(job_id), ["state", "created_at", "finished_at"])
    rows = pipe.execute()
    problems: list[str] = []
    latencies: list[float] = []
    job_ms: list[float] = []
    finished = []
    for job_id, (state, created, done) in zip(job_ids, rows, strict=True):
        if state is None or state.decode() != "succeeded":
            problems.append(f"job {job_id} ended {state!r}")
            continue
        finished.append(int(done))
        job_ms.append(int(done) - int(created))
    if full_check:
        for job_id in job_ids:
            more, lat = check_job(bench, job_id, spec, bench.client.status(job_id))
            problems += more
            latencies += lat
    else:  # one-task jobs: the job's own state and one bench entry each
        pipe = bench.redis.pipeline(transaction=False)
        for job_id in job_ids:
            pipe.llen(ran_key(job_id))
        wrong = sum(1 for r in pipe.execute() if r != n)
        if wrong:
            problems.append(f"{wrong} jobs did not run exactly {n} task(s)")
        for state, queued, started in first_task_times(bench, job_ids):
            if state != b"succeeded":
                problems.append(f"a task ended {state!r}")
            elif queued and started:
                latencies.append(int(started) - int(queued))
    if len(problems) > 10:
        problems = problems[:10] + [f"... and {len(problems) - 10} more"]
    total_s = (max(finished) - t0_ms) / 1000 if finished else float("nan")
    bench.purge(job_ids)
    return {
        "jobs": count,
        "tasks": n * count,
        "redis_s": total_s,
        "wall_s": wall_s,
        "submit_s": submit_s,
        "submit_jobs_per_s": count / submit_s,
        "compacted_jobs_per_s": count / compacted_s,
        "jobs_per_s": count / total_s,
        "tasks_per_s": n * count / total_s,
        "hop_ms": statistics.median(job_ms) / depth_of(deps) if job_ms else None,
        "job_p50_ms": pct(job_ms, 0.5),
        "job_p99_ms": pct(job_ms, 0.99),
        "dispatch_p50_ms": pct(latencies, 0.5),
        "dispatch_p99_ms": pct(latencies, 0.99),
        "problems": problems,
    }


SINGLE_SUBMITS = 200  # W5's second figure: client.submit of one example-DAG job, one at a time


def run_single_submits(bench: Bench, spec: dict[str, Any], count: int) -> dict[str, Any]:
    """The round trip of `client.submit` of one job (durability as configured), `count`
    times one after another; the jobs run meanwhile and are waited for."""
    baseline = bench.active_jobs()
    round_trips: list[float] = []
    job_ids = []
    for _ in range(count):
        t0 = time.perf_counter()
        job_ids.append(bench.client.submit(spec))
        round_trips.append((time.perf_counter() - t0) * 1000)
    wait_active_below(bench, baseline, job_timeout(count * len(spec["tasks"])))
    bench.purge(job_ids)
    return {
        "single_submit_p50_ms": pct(round_trips, 0.5),
        "single_submit_p99_ms": pct(round_trips, 0.99),
    }


def first_task_times(bench: Bench, job_ids: Sequence[str]) -> list[list[bytes | None]]:
    """State, queued and started time of each job's task 0: from its tasks hash, or from its
    packed record once a leader compacted the finished job (one transaction: the one or the
    other, never neither)."""
    names = ["s:0", "tq:0", "ts:0"]
    pipe = bench.redis.pipeline(transaction=True)
    for job_id in job_ids:
        jk = bench.client.store.keys.job(job_id)
        pipe.hmget(jk.tasks, names)
        pipe.get(jk.packed)
    replies = pipe.execute()
    out = []
    for values, record in zip(replies[0::2], replies[1::2], strict=True):
        if record is not None:
            values = [decode_record(record).fields.get(name) for name in names]
        out.append(values)
    return out


WAKE_GAP_SECONDS = 0.02  # between the wake workload's submits: the workers are idle again


def run_wakeups(bench: Bench, count: int) -> dict[str, Any]:
    """Idle workers woken up: `count` one-task jobs submitted one at a time, WAKE_GAP_SECONDS
    apart, each finding the workers idle; the ready -> started time of each task (queued at
    to started at, both Redis TIME) is what the idle wake-up path costs."""
    spec = flat_spec(1)
    baseline = bench.active_jobs()
    job_ids = []
    w0 = time.perf_counter()
    for _ in range(count):
        job_ids.append(bench.client.submit(spec))
        time.sleep(WAKE_GAP_SECONDS)
    wait_active_below(bench, baseline, job_timeout(count))
    wall_s = time.perf_counter() - w0
    problems: list[str] = []
    waits: list[float] = []
    for state, queued, started in first_task_times(bench, job_ids):
        if state != b"succeeded" or not queued or not started:
            problems.append(f"a task ended {state!r}")
        else:
            waits.append(int(started) - int(queued))
    bench.purge(job_ids)
    return {
        "jobs": count,
        "wall_s": wall_s,
        "dispatch_p50_ms": pct(waits, 0.5),
        "dispatch_p99_ms": pct(waits, 0.99),
        "dispatch_max_ms": max(waits) if waits else None,
        "problems": problems[:10],
    }


def run_big(bench: Bench, shape: str, n: int) -> dict[str, Any]:
    """A DAG of n tasks whose root fails: time submit + split, then the cascade to the
    n - 1 descendants; the longest script calls of each phase from SLOWLOG."""
    spec = (
        fan_spec(n - 1, "bench.fail", join=False) if shape == "fan" else chain_spec(n, "bench.fail")
    )
    root = spec["tasks"][0]["id"]
    bench.redis.config_set("slowlog-log-slower-than", SLOWLOG_US)
    bench.redis.slowlog_reset()
    t0_ms = bench.now_ms()
    w0 = time.perf_counter()
    parsed = parse_spec(spec)
    parse_s = time.perf_counter() - w0
    job_id = bench.client.submit(parsed)
    submit_s = time.perf_counter() - w0
    wait_job(bench, job_id, job_timeout(n))
    wall_s = time.perf_counter() - w0
    slow = bench.slowlog_entries()
    bench.redis.config_set("slowlog-log-slower-than", 10_000)
    created, started, finished, nfailed, state = bench.job_fields(
        job_id, "created_at", "started_at", "finished_at", "nfailed", "state"
    )
    records = bench.client.store.records(job_id)  # the tasks hash, or the packed record
    root_index = "0"
    (root_failed_at,) = records.values(["tf:" + root_index])
    problems = []
    if state != "failed":
        problems.append(f"job ended {state}, not failed")
    if nfailed is None or int(nfailed) != n:
        problems.append(f"{nfailed} tasks failed or upstream_failed, not {n}")
    states = records.field_of_every_task(TaskField.STATE).values()
    upstream = sum(1 for v in states if v == "upstream_failed")
    if upstream != n - 1:
        problems.append(f"{upstream} tasks upstream_failed, not {n - 1}")
    ran = [text(e).split("|")[0] for e in bench.redis.lrange(ran_key(job_id), 0, -1)]
    if ran != [root]:
        problems.append(f"tasks that ran: {ran[:5]} (only {root} should)")
    assert created and started and finished and root_failed_at
    publish = [e for e in slow if e["name"] in PUBLISH_SCRIPTS]
    cascade = [e for e in slow if e["name"] in CASCADE_SCRIPTS]
    other = [
        e
        for e in slow
        if e["name"] not in PUBLISH_SCRIPTS | CASCADE_SCRIPTS and e["name"] not in BENCH_COMMANDS
    ]
    split_s = (int(started) - int(created)) / 1000
    bench.purge([job_id])

    def longest(entries: list[dict[str, Any]]) -> dict[str, Any] | None:
        return max(entries, key=lambda e: e["us"]) if entries else None

    return {
        "tasks": n,
        "parse_s": parse_s,
        "submit_s": submit_s,  # client.submit: parse + store
        "split_s": split_s,  # created -> roots queued (Redis TIME)
        "submit_total_s": (int(started) - t0_ms) / 1000,  # before parse -> roots queued
        "cascade_s": (int(finished) - int(root_failed_at)) / 1000,
        "wall_s": wall_s,
        "publish_longest": longest(publish),
        "cascade_longest": longest(cascade),
        "other_longest": longest(other),
        "slow_calls_by_script": _by_name(
            e for e in slow if e["name"] in PUBLISH_SCRIPTS | CASCADE_SCRIPTS
        ),
        "problems": problems,
    }


def run_follow(bench: Bench, n: int) -> dict[str, Any]:
    """`jobcenter submit --wait` (a CLI process, lines to a file) following a job of n
    independent tasks while the workers run it: the longest command the follower sent and
    the longest of anyone, from SLOWLOG at threshold 0 (drained while it runs). Then, for
    scale, one HGETALL of the finished job's tasks hash: what every poll cost when the
    follower read the whole status ten times a second."""
    spec_path = bench.data_dir / "follow.json"
    spec_path.write_text(json.dumps(flat_spec(n)))
    out_path = bench.data_dir / "follow.out"
    drain = SlowlogDrain(bench.server.url, bench.sha_names, FOLLOWER_NAME)
    drain.start()
    command = [sys.executable, "-m", "jobcenter", "submit", str(spec_path), "--wait"]
    command += ["--redis-url", f"{bench.server.url}?client_name={FOLLOWER_NAME}"]
    w0 = time.perf_counter()
    with out_path.open("w") as out:
        done = subprocess.run(
            command,
            env=bench.worker_env(),
            stdout=out,
            stderr=subprocess.PIPE,
            text=True,
            timeout=job_timeout(n),
        )
    wall_s = time.perf_counter() - w0
    drain.stop()
    lines = out_path.read_text().splitlines()
    job_id = lines[0].split()[1] if lines else ""
    problems = [] if done.returncode == 0 else [f"submit --wait exited {done.returncode}"]
    if len(lines) != n + 2 or lines[-1] != f"job {job_id} succeeded":
        problems.append(f"{len(lines)} lines, not a line per task: {lines[-1:]} {done.stderr}")
    bench.redis.config_set("slowlog-log-slower-than", 0)
    bench.redis.slowlog_reset()
    tasks_fields = len(bench.redis.hgetall(bench.client.store.keys.job(job_id).tasks))
    whole = [e for e in bench.slowlog_entries() if e["name"] == "HGETALL"]
    bench.redis.config_set("slowlog-log-slower-than", 10_000)
    bench.purge([job_id])
    return {
        "tasks": n,
        "wall_s": wall_s,
        "follower_longest": drain.longest["named"],
        "others_longest": drain.longest["others"],
        "follower_commands": {
            name: {"calls": len(us), "median_us": statistics.median(us), "longest_us": max(us)}
            for name, us in drain.named_us.items()
        },
        "tasks_hash_fields": tasks_fields,
        "hgetall_tasks_us": whole[0]["us"] if whole else None,
        "problems": problems,
    }


def _by_name(entries: Iterable[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """SLOWLOG entries summed per script: calls over the threshold, their total, median, max."""
    grouped: dict[str, list[int]] = {}
    for e in entries:
        grouped.setdefault(e["name"], []).append(e["us"])
    return {
        name: {
            "calls": len(us),
            "total_ms": sum(us) / 1000,
            "median_ms": statistics.median(us) / 1000,
            "max_ms": max(us) / 1000,
        }
        for name, us in grouped.items()
    }


def measure_memory(bench: Bench, n: int) -> dict[str, Any]:
    """INFO used_memory before vs after a job of n independent tasks is published into a
    queue no worker serves (so all n stay queued, live); then the job is cancelled."""
    spec = flat_spec(n, queue=IDLE_QUEUE)
    spec["retention"] = 1
    before = int(bench.redis.info("memory")["used_memory"])
    job_id = bench.client.submit(spec)
    deadline = time.monotonic() + job_timeout(n)
    while True:
        state, queued, has_spec = bench.job_fields(job_id, "state", "queued", "spec")
        if state == "running" and queued == str(n) and has_spec is None:
            break
        if time.monotonic() > deadline:
            raise TimeoutError(f"memory probe job not split after {job_timeout(n):.0f} s")
        time.sleep(0.01)
    after = int(bench.redis.info("memory")["used_memory"])
    store = bench.client.store
    jk = store.keys.job(job_id)
    shard = store.keys.job_shard(job_id)
    usage = {
        "job hash": bench.redis.memory_usage(jk.job, samples=0),
        "tasks hash": bench.redis.memory_usage(jk.tasks, samples=0),
        "ready queue": bench.redis.memory_usage(store.keys.queue(shard, IDLE_QUEUE), samples=0),
    }
    fields = bench.redis.hlen(jk.tasks)
    state = bench.client.cancel(job_id)
    bench.purge([job_id])
    return {
        "tasks": n,
        "used_memory_before": before,
        "used_memory_after": after,
        "bytes_per_task": (after - before) / n,
        "key_bytes_per_task": {k: (v or 0) / n for k, v in usage.items()},
        "tasks_hash_fields_per_task": fields / n,
        "cancelled_state": state,
    }


def redis_ceiling(bench: Bench, n: int) -> dict[str, float]:
    """EVALSHA of a trivial script: one per round trip, and pipelined in batches."""
    r = redis.Redis.from_url(bench.server.url)
    sha = r.script_load(TRIVIAL_SCRIPT)
    for _ in range(200):
        r.evalsha(sha, 0)
    w0 = time.perf_counter()
    for _ in range(n):
        r.evalsha(sha, 0)
    single = n / (time.perf_counter() - w0)
    m = n * 10
    w0 = time.perf_counter()
    for start in range(0, m, PIPELINE_BATCH):
        pipe = r.pipeline(transaction=False)
        for _ in range(min(PIPELINE_BATCH, m - start)):
            pipe.evalsha(sha, 0)
        pipe.execute()
    pipelined = m / (time.perf_counter() - w0)
    r.close()
    return {"single_per_s": single, "pipelined_per_s": pipelined}


# -- driver ----------------------------------------------------------------------------


Workload = Callable[[Bench], dict[str, Any]]


def workloads(sizes: Sizes) -> dict[str, tuple[str, Workload]]:
    seed = seed000_spec()
    return {
        "W1": (
            f"flat {sizes.flat:,} tasks (events + metrics on)",
            lambda b: run_one_job(b, flat_spec(sizes.flat)),
        ),
        "W1-async": (
            f"flat {sizes.flat:,} async tasks (on the worker's event loop)",
            lambda b: run_one_job(b, flat_spec(sizes.flat, task="bench.async_noop")),
        ),
        "W1-pool": (
            f"flat {sizes.flat:,} tasks in a pool of {POOL_SLOTS}",
            lambda b: run_one_job(b, pooled_flat(b, sizes.flat)),
        ),
        "W1-observe": (
            f"flat {sizes.flat:,} tasks: events, metrics off / on",
            lambda b: run_observe(b, sizes.flat),
        ),
        "W1r": (
            f"flat {sizes.flat:,} tasks, {RESULT_BYTES}-byte results",
            lambda b: run_one_job(b, flat_spec(sizes.flat, task="bench.result")),
        ),
        "W2": (f"1 -> {sizes.fan:,} -> 1", lambda b: run_one_job(b, fan_spec(sizes.fan))),
        "W3": (f"chain of {sizes.chain:,}", lambda b: run_one_job(b, chain_spec(sizes.chain))),
        "W4": (
            f"{sizes.seed_jobs} example-DAG jobs",
            lambda b: run_many_jobs(b, seed, sizes.seed_jobs, full_check=True),
        ),
        "W5": (
            f"{sizes.one_task_jobs:,} one-task jobs",
            lambda b: {
                **run_many_jobs(b, flat_spec(1), sizes.one_task_jobs, full_check=False),
                **run_single_submits(b, seed, SINGLE_SUBMITS),
            },
        ),
        "wake": (
            f"{sizes.wake} one-task jobs, one at a time",
            lambda b: run_wakeups(b, sizes.wake),
        ),
        "map": (
            f"map over {sizes.map_elements:,} elements",
            lambda b: run_map(b, sizes.map_elements),
        ),
        "big-fan": (
            f"{sizes.big:,}-task fan, root fails",
            lambda b: run_big(b, "fan", sizes.big),
        ),
        "big-chain": (
            f"{sizes.big:,}-task chain, root fails",
            lambda b: run_big(b, "chain", sizes.big),
        ),
        "big-follow": (
            f"submit --wait following a {sizes.big:,}-task job",
            lambda b: run_follow(b, sizes.big),
        ),
    }
