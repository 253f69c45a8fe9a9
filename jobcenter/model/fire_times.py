"""Fire times: when a job was due (a schedule's fire, or one given at submit), read from
ISO 8601, and filled into a spec's placeholders (model.placeholders)."""

from __future__ import annotations

from datetime import UTC, datetime, tzinfo

from jobcenter.errors import SpecError

from . import placeholders
from .spec import JobSpec, parse_spec

ISO_FORMS = "an ISO-8601 date or date-time, e.g. 2026-11-01 or 2026-11-01T02:00:00+01:00"


def parse_instant(value: str | datetime, what: str) -> datetime:
    """An ISO-8601 date or date-time as an aware datetime; one without a zone is UTC (a date
    alone is its midnight, UTC). SpecError naming `what` (`--from`) otherwise."""
    if isinstance(value, datetime):
        moment = value
    else:
        try:
            moment = datetime.fromisoformat(str(value).strip())
        except ValueError:
            raise SpecError(f"{what}: {value!r} is not {ISO_FORMS} (UTC when no zone)") from None
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def fire_datetime(seconds: float | None, zone: tzinfo = UTC) -> datetime | None:
    """A fire time as the job hash and task payload keep it (epoch seconds), as a datetime."""
    return None if seconds is None else datetime.fromtimestamp(seconds, zone)


def fill_spec(spec: JobSpec, values: placeholders.FireValues) -> JobSpec:
    """`spec` with its tasks' placeholders filled (the same spec when it has none)."""
    if not spec.uses_placeholders:
        return spec
    tasks = []
    for task in spec.to_dict()["tasks"]:
        for key in ("args", "kwargs"):
            if key in task:
                task[key] = placeholders.fill(task[key], values)
        tasks.append(task)
    return parse_spec({**spec.to_dict(), "tasks": tasks})


def given_fire_time(spec: JobSpec, value: str | datetime, what: str) -> tuple[JobSpec, float]:
    """A job submitted by hand for a fire time (`--fire-time`): its spec with the
    placeholders filled in the time's own zone (UTC when it has none), and the time as the
    job keeps it (epoch seconds)."""
    at = parse_instant(value, what)
    return fill_spec(spec, placeholders.FireValues(at)), at.timestamp()


def unfilled(spec: JobSpec) -> SpecError | None:
    """The error for a spec whose placeholders have no fire time to be filled with."""
    for task in spec.tasks if spec.uses_placeholders else ():
        if placeholders.check(task.args, task.kwargs):
            return SpecError(
                f"task {task.id!r} uses a placeholder ({', '.join(placeholders.NAMES)}) but "
                "its job has no fire time: submit it with a fire time (--fire-time), or "
                "from a schedule"
            )
    return None
