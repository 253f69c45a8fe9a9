"""A pure reference of the trigger rules, written from Airflow's definitions and kept apart
from the package (which decides in Lua, parent by parent): the state every task of a DAG
ends in, given each task's rule and how each task that runs ends."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

FAILED_STATES = frozenset({"failed", "upstream_failed"})


@dataclass(frozen=True)
class Node:
    deps: Sequence[str] = ()
    rule: str = "all_success"
    outcome: str = "succeeded"  # how it ends if it runs: succeeded or failed


def rule_met(rule: str, parents: Sequence[str]) -> bool:
    """Whether a task runs once its parents ended in `parents` (their final states)."""
    failed = [s in FAILED_STATES for s in parents]
    if rule == "all_success":
        return all(s == "succeeded" for s in parents)
    if rule == "all_done":
        return True
    if rule == "all_failed":
        return all(failed)
    if rule == "one_success":
        return any(s == "succeeded" for s in parents)
    if rule == "one_failed":
        return any(failed)
    if rule == "none_failed":
        return not any(failed)
    raise ValueError(f"unknown rule {rule!r}")


def expected_states(nodes: Mapping[str, Node]) -> dict[str, str]:
    """Every task's final state. `nodes` must be given parents first."""
    states: dict[str, str] = {}
    for task_id, node in nodes.items():
        parents = [states[p] for p in node.deps]
        if not node.deps or rule_met(node.rule, parents):
            states[task_id] = node.outcome
        elif any(s in FAILED_STATES for s in parents):
            states[task_id] = "upstream_failed"
        else:
            states[task_id] = "skipped"
    return states


def job_state(states: Mapping[str, str]) -> str:
    return "failed" if any(s in FAILED_STATES for s in states.values()) else "succeeded"
