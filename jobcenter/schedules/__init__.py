"""Schedules: jobs submitted once (`at`), on an interval (`every`, a duration: 30s, PT1H) or on
a cron expression, fired by one ticker at a time per namespace.

triggers (parsing, fire times) <- planning (the pure catch-up decision) <- manage (add, list,
show, pause, resume, run now, remove) <- ticker (fires due schedules). Their Redis calls live in
jobcenter.storage.schedules. This module hands on the names callers use."""

from jobcenter.storage.schedules import FIRES_KEPT, ScheduleState

from .manage import (
    SHOWN_FIRES,
    add_schedule,
    filter_id,
    list_schedules,
    now_ms,
    pause_schedule,
    read_schedule,
    remove_schedule,
    resolve,
    resume_schedule,
    run_schedule_now,
    show_schedule,
)
from .planning import (
    BUFFERED,
    CATCHUP_POLICIES,
    DEFAULT_CATCHUP,
    DEFAULT_OVERLAP,
    FAILED,
    MISFIRE_GRACE_MS,
    MISSED,
    OVERLAP_POLICIES,
    SKIPPED,
    SUBMITTED,
    Fire,
    Plan,
    Schedule,
    plan_fires,
)
from .ticker import SINGLETON, TICK_SECONDS, Scheduler, run_ticker
from .triggers import (
    AT,
    CRON,
    EVERY,
    Trigger,
    parse_at,
    parse_cron,
    parse_duration,
    parse_trigger,
    parse_zone,
)

__all__ = [
    "AT", "BUFFERED", "CATCHUP_POLICIES", "CRON", "DEFAULT_CATCHUP", "DEFAULT_OVERLAP", "EVERY",
    "FAILED", "FIRES_KEPT", "MISFIRE_GRACE_MS", "MISSED", "OVERLAP_POLICIES", "SHOWN_FIRES",
    "SINGLETON", "SKIPPED", "SUBMITTED", "TICK_SECONDS", "Fire", "Plan", "Schedule",
    "ScheduleState", "Scheduler", "Trigger", "add_schedule", "filter_id", "list_schedules",
    "now_ms", "parse_at", "parse_cron", "parse_duration", "parse_trigger", "parse_zone",
    "pause_schedule", "plan_fires", "read_schedule", "remove_schedule", "resolve",
    "resume_schedule", "run_schedule_now", "run_ticker", "show_schedule",
]  # fmt: skip
