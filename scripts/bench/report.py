"""The figures as a table: medians over runs, CPU per task, targets and peers."""

from __future__ import annotations

import os
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from .common import LUA_CALL_TARGET_MS, PIPELINE_BATCH, RESULT_COST_MAX
from .workloads import OBSERVE_COMMANDS, OBSERVE_TARGET_PCT, OBSERVE_VARIANTS, observe_cost


@dataclass(frozen=True)
class Target:
    op: str  # ">=" or "<"
    value: float
    text: str


TARGETS = {
    "W1": Target(">=", 10_000, ">= 10,000 tasks/s"),
    "W1-async": Target(">=", 10_000, ">= 10,000 tasks/s"),
    "W1-pool": Target(">=", 10_000, ">= 10,000 tasks/s"),
    "W2": Target("<", 0.5, "< 0.5 s"),
    "W3": Target("<", 0.5, "< 0.5 ms/hop"),
    "W4": Target("<", 0.3, "< 0.3 s"),
    "W5": Target(">=", 5_000, ">= 5,000 jobs/s"),
    "single_submit": Target("<", 2.0, "< 2 ms"),
    "big_submit": Target("<", 2.0, "< 2 s"),
    "lua_max": Target("<", LUA_CALL_TARGET_MS, "< 50 ms"),
}
PEERS = {
    "W1": "300 (RQ) - 2,600 (Dramatiq) tasks/s",
    "W1-async": "-",
    "W1-pool": "-",
    "W2": "8 - 19 s",
    "W3": "5 - 17 ms/hop",
    "W4": "1.8 - 8 s",
    "W5": "-",
    "ceiling_single": "~6,000/s",
    "ceiling_pipelined": "~76,000/s",
}


def meets(target: Target, value: float | None) -> bool | None:
    if value is None:
        return None
    return value >= target.value if target.op == ">=" else value < target.value


# -- specs -----------------------------------------------------------------------------


def median_of(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Per-figure median over runs (numbers only); other values from the median run."""
    out: dict[str, Any] = {}
    for key in runs[0]:
        values = [r[key] for r in runs]
        if all(isinstance(v, int | float) and not isinstance(v, bool) for v in values):
            out[key] = statistics.median(values)
        elif key == "problems":
            out[key] = [p for r in runs for p in r[key]]
        elif key.endswith("_longest"):
            present = [v for v in values if v]
            out[key] = max(present, key=lambda e: e["us"]) if present else None
        else:
            out[key] = values[len(values) // 2]
    return out


def cpu_per_task(run: dict[str, Any]) -> dict[str, float]:
    """CPU microseconds per task of the workers (their threads, rq children aside) and of
    redis-server over one run: far less noisy on a shared machine than its wall time."""
    tasks = run.get("tasks")
    if not tasks:
        return {}
    return {
        "worker_cpu_us_per_task": run["cpu_s"]["workers"] * 1e6 / tasks,
        "redis_cpu_us_per_task": run["cpu_s"]["redis"] * 1e6 / tasks,
    }


def fmt(value: float | None, unit: str = "", digits: int = 0) -> str:
    if value is None:
        return "-"
    return f"{value:,.{digits}f}{unit}"


def verdict(ok: bool | None) -> str:
    return {True: "PASS", False: "FAIL", None: "-"}[ok]


def table_rows(results: dict[str, Any]) -> list[tuple[str, str, str, str, str, str]]:
    rows: list[tuple[str, str, str, str, str, str]] = []
    w = results["workloads"]
    ceiling = results["redis_ceiling"]
    runs = results["redis_ceiling_runs"]
    for key, label, peers in (
        ("single_per_s", "EVALSHA 1/round trip", PEERS["ceiling_single"]),
        ("pipelined_per_s", f"EVALSHA pipelined x{PIPELINE_BATCH}", PEERS["ceiling_pipelined"]),
    ):
        each = " / ".join(fmt(c[key]) for c in runs)
        rows.append(
            (
                "Redis ceiling" if key.startswith("single") else "",
                label,
                f"{fmt(ceiling[key], '/s')} (start / end: {each})",
                "",
                peers,
                "",
            )
        )
    mem = results["memory"]
    rows.append(
        (
            "memory",
            f"bytes per live task ({mem['tasks']:,} queued)",
            fmt(mem["bytes_per_task"], " B"),
            "printed",
            "",
            "",
        )
    )
    parts = ", ".join(f"{k} {v:,.0f} B" for k, v in mem["key_bytes_per_task"].items())
    rows.append(("", "  of which (MEMORY USAGE per task)", parts, "", "", ""))

    def common(key: str, rate: bool = True) -> None:
        r = w[key]["median"]
        if rate:
            rows.append(("", "tasks/s", fmt(r["tasks_per_s"]), "", "", ""))
        if "worker_cpu_us_per_task" in r:
            cpu = f"{fmt(r['worker_cpu_us_per_task'])} / {fmt(r['redis_cpu_us_per_task'])} us"
            rows.append(("", "CPU per task: workers / Redis", cpu, "printed", "", ""))
        rows.append(
            (
                "",
                "wall: Redis TIME / client",
                f"{r['redis_s']:.3f} s / {r['wall_s']:.3f} s",
                "",
                "",
                "",
            )
        )
        rows.append(
            (
                "",
                "per hop; dispatch p50/p99",
                f"{fmt(r['hop_ms'], ' ms', 2)}; {fmt(r['dispatch_p50_ms'], '', 1)}/"
                f"{fmt(r['dispatch_p99_ms'], ' ms', 1)}",
                "",
                "",
                "",
            )
        )

    def headline(key: str, figure: str, value: float | None, shown: str) -> None:
        if key not in w:
            return
        ok = meets(TARGETS[key], value)
        if w[key]["median"]["problems"]:
            ok = False
        runs = len(w[key]["runs"])
        label = f"{key} {w[key]['label']}" + (f" [median of {runs}]" if runs > 1 else "")
        rows.append((label, figure, shown, TARGETS[key].text, PEERS[key], verdict(ok)))

    if "W1" in w:
        r = w["W1"]["median"]
        headline("W1", "tasks/s", r["tasks_per_s"], fmt(r["tasks_per_s"]))
        common("W1", rate=False)
    for key in ("W1-async", "W1-pool"):
        if key in w:
            r = w[key]["median"]
            headline(key, "tasks/s", r["tasks_per_s"], fmt(r["tasks_per_s"]))
            common(key, rate=False)
    if "W1-observe" in w:
        r = w["W1-observe"]["median"]
        runs = len(w["W1-observe"]["runs"])
        label = f"W1-observe {w['W1-observe']['label']}" + (
            f" [median of {runs}]" if runs > 1 else ""
        )
        shown = " / ".join(fmt(r[f"tasks_per_s_{v}"]) for v in OBSERVE_VARIANTS)
        rows.append((label, "tasks/s: off / events / events + metrics", shown, "", "", ""))
        for key, figure in (
            ("evalsha_us_per_task", "  script time per task (us)"),
            ("redis_cpu_us_per_task", "  Redis CPU per task (us)"),
        ):
            shown = " / ".join(fmt(r[f"{key}_{v}"], "", 1) for v in OBSERVE_VARIANTS)
            rows.append(("", figure, shown, "", "", ""))
        for command in OBSERVE_COMMANDS:
            shown = " / ".join(
                f"{r[f'{command}_calls_per_task_{v}']:.3f} calls, "
                f"{r[f'{command}_us_per_task_{v}']:.2f} us"
                for v in OBSERVE_VARIANTS
            )
            rows.append(("", f"  {command.upper()} per task", shown, "", "", ""))
        cost = observe_cost(r, "events")
        ok = cost <= OBSERVE_TARGET_PCT and not r["problems"]
        target = f"<= {OBSERVE_TARGET_PCT:.0f} %"
        rows.append(("", "cost of events", f"{cost:.1f} %", target, "", verdict(ok)))
        cost = observe_cost(r, "both")
        rows.append(("", "cost of events + metrics", f"{cost:.1f} %", "printed", "", ""))
        # what load cannot blur: the time of the commands they add, against the scripts' time
        share = 100 * r["xadd_us_per_task_events"] / r["evalsha_us_per_task_off"]
        rows.append(
            ("", "  XADD time / script time (events on)", f"{share:.1f} %", "printed", "", "")
        )
    if "W1r" in w:
        r = w["W1r"]["median"]
        base = w["W1"]["median"]["tasks_per_s"] if "W1" in w else None
        cost = 1 - r["tasks_per_s"] / base if base else None
        shown = fmt(r["tasks_per_s"]) + (f" ({cost:+.0%} vs W1)" if cost is not None else "")
        ok = None if cost is None else cost <= RESULT_COST_MAX and not r["problems"]
        label = f"W1r {w['W1r']['label']}"
        rows.append(
            (label, "tasks/s", shown, f"<= {RESULT_COST_MAX:.0%} below W1", "", verdict(ok))
        )
        common("W1r", rate=False)
    if "map" in w:
        r = w["map"]["median"]
        rows.append(
            (
                f"map {w['map']['label']}",
                "expansion: source done to last instance written",
                fmt(r["expand_s"], " s", 3),
                "",
                "",
                verdict(None if r["problems"] else True),
            )
        )
        rows.append(("", "whole job (Redis TIME)", fmt(r["redis_s"], " s", 3), "", "", ""))
    if "W2" in w:
        r = w["W2"]["median"]
        headline("W2", "wall (Redis TIME)", r["redis_s"], fmt(r["redis_s"], " s", 3))
        common("W2")
    if "W3" in w:
        r = w["W3"]["median"]
        headline("W3", "per hop", r["hop_ms"], fmt(r["hop_ms"], " ms", 3))
        common("W3")
    if "W4" in w:
        r = w["W4"]["median"]
        headline("W4", "wall (Redis TIME)", r["redis_s"], fmt(r["redis_s"], " s", 3))
        common("W4")
        rows.append(("", "submit (client)", f"{fmt(r['submit_jobs_per_s'])} jobs/s", "", "", ""))
    if "wake" in w:
        r = w["wake"]["median"]
        runs = len(w["wake"]["runs"])
        rows.append(
            (
                f"wake {w['wake']['label']}" + (f" [median of {runs}]" if runs > 1 else ""),
                "ready -> started p50/p99/max",
                f"{fmt(r['dispatch_p50_ms'], '', 1)}/{fmt(r['dispatch_p99_ms'], '', 1)}/"
                f"{fmt(r['dispatch_max_ms'], ' ms', 1)}",
                "",
                "",
                verdict(not r["problems"]),
            )
        )
    if "W5" in w:
        r = w["W5"]["median"]
        headline("W5", "jobs/s, submit to last finished", r["jobs_per_s"], fmt(r["jobs_per_s"]))
        rows.append(
            ("", "jobs/s, submit to all compacted", fmt(r["compacted_jobs_per_s"]), "", "", "")
        )
        ok = meets(TARGETS["W5"], r["submit_jobs_per_s"])
        rows.append(
            (
                "",
                "jobs/s, client.submit alone",
                fmt(r["submit_jobs_per_s"]),
                TARGETS["W5"].text,
                "",
                verdict(ok),
            )
        )
        rows.append(
            (
                "",
                "9-task job, client.submit round trip p50/p99",
                f"{fmt(r.get('single_submit_p50_ms'), '', 2)}/"
                f"{fmt(r.get('single_submit_p99_ms'), ' ms', 2)}",
                TARGETS["single_submit"].text,
                "",
                verdict(meets(TARGETS["single_submit"], r.get("single_submit_p50_ms"))),
            )
        )
        common("W5", rate=False)
        rows.append(
            (
                "",
                "job latency p50/p99",
                f"{fmt(r['job_p50_ms'], '', 1)}/{fmt(r['job_p99_ms'], ' ms', 1)}",
                "",
                "",
                "",
            )
        )
    for key in ("big-fan", "big-chain"):
        if key not in w:
            continue
        r = w[key]["median"]
        ok_submit = meets(TARGETS["big_submit"], r["submit_total_s"])
        rows.append(
            (
                f"{key} {w[key]['label']}",
                "submit + split (to roots queued)",
                f"{r['submit_total_s']:.3f} s",
                TARGETS["big_submit"].text,
                "",
                verdict(ok_submit and not r["problems"]),
            )
        )
        rows.append(
            (
                "",
                "  parse / client.submit / split",
                f"{r['parse_s']:.3f} / {r['submit_s']:.3f} / {r['split_s']:.3f} s",
                "",
                "",
                "",
            )
        )
        for phase in ("publish", "cascade"):
            e = r[f"{phase}_longest"]
            value = e["us"] / 1000 if e else 0.0
            shown = f"{value:.1f} ms ({e['name']})" if e else "none over 1 ms"
            rows.append(
                (
                    "",
                    f"longest Lua call, {phase}",
                    shown,
                    TARGETS["lua_max"].text,
                    "",
                    verdict(meets(TARGETS["lua_max"], value)),
                )
            )
        for name, st in sorted(r["slow_calls_by_script"].items()):
            rows.append(
                (
                    "",
                    f"  {name}: calls over 1 ms",
                    f"{st['calls']} calls, {st['total_ms']:.0f} ms in all, "
                    f"median {st['median_ms']:.1f} ms",
                    "",
                    "",
                    "",
                )
            )
        e = r["other_longest"]
        if e:
            rows.append(
                (
                    "",
                    "longest other command (in scripts too)",
                    f"{e['us'] / 1000:.1f} ms ({e['name']})",
                    "",
                    "",
                    "",
                )
            )
        rows.append(
            (
                "",
                f"cascade to {r['tasks'] - 1:,} descendants",
                f"{r['cascade_s']:.3f} s",
                "",
                "",
                "",
            )
        )
    if "big-follow" in w:
        r = w["big-follow"]["median"]
        label = f"big-follow {w['big-follow']['label']}"
        for who, figure in (
            ("follower", "longest command of `submit --wait`"),
            ("others", "longest command of anyone meanwhile"),
        ):
            e = r[f"{who}_longest"]
            shown = f"{e['us'] / 1000:.2f} ms ({e['name']})" if e else "-"
            rows.append((label, figure, shown, "", "", verdict(not r["problems"])))
            label = ""
        for name, c in sorted(r["follower_commands"].items(), key=lambda kv: -kv[1]["calls"]):
            median, longest = c["median_us"] / 1000, c["longest_us"] / 1000
            rows.append(
                (
                    "",
                    f"  its {name}: calls, median / longest",
                    f"{c['calls']:,}, {median:.3f} / {longest:.2f} ms",
                    "",
                    "",
                    "",
                )
            )
        rows.append(
            (
                "",
                f"  vs one HGETALL of the tasks hash ({r['tasks_hash_fields']:,} fields)",
                fmt(
                    None if r["hgetall_tasks_us"] is None else r["hgetall_tasks_us"] / 1000,
                    " ms",
                    1,
                ),
                "",
                "",
                "",
            )
        )
    return rows


def render(rows: Sequence[tuple[str, ...]]) -> str:
    header = ("workload", "figure", "value", "target", "peers", "pass/fail")
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    line = "  ".join("-" * w for w in widths)
    out = ["  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True)), line]
    for r in rows:
        if r[0] and out[-1] != line:
            out.append("")
        out.append("  ".join(str(c).ljust(w) for c, w in zip(r, widths, strict=True)).rstrip())
    return "\n".join(out)


def machine() -> dict[str, Any]:
    return {
        "loadavg": [round(x, 2) for x in os.getloadavg()],
        "nproc": os.cpu_count(),
        "usable_cpus": len(os.sched_getaffinity(0)),
    }
