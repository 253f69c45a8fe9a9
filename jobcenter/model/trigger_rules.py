"""Trigger rules: when a task with parents runs, given how its parents ended (Airflow's
names and meanings). The Lua prelude gets the names from here (storage/keyspace/schema.py); the
decision itself is made in Lua (`rule_verdict`, storage/lua/_job.lua), in the transition
that ends the parent."""

from __future__ import annotations

from enum import StrEnum


class TriggerRule(StrEnum):
    ALL_SUCCESS = "all_success"  # every parent succeeded (the default)
    ALL_DONE = "all_done"  # every parent ended, however: cleanup
    ALL_FAILED = "all_failed"  # every parent failed or upstream_failed
    ONE_SUCCESS = "one_success"  # a parent succeeded: runs at once, not waiting for the rest
    ONE_FAILED = "one_failed"  # a parent failed or upstream_failed: runs at once
    NONE_FAILED = "none_failed"  # every parent ended, none failed or upstream_failed

    @property
    def lua_name(self) -> str:
        return f"R_{self.name}"


DEFAULT_TRIGGER_RULE = TriggerRule.ALL_SUCCESS


def lua_constants() -> str:
    """Lua `local` lines naming every trigger rule, prepended to each script."""
    return "".join(f"local {r.lua_name} = '{r.value}'\n" for r in TriggerRule)
