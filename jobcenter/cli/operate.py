"""Operating a job's tasks by hand: clear (run tasks again) and mark (settle a task)."""

from __future__ import annotations

import getpass
import json
from typing import Any

import click

from jobcenter.config import Settings

from .options import BadInput, client_for, redis_options


def _person(by: str | None) -> str:
    """Who does it, for the history: --by, else the user running the command."""
    if by:
        return by
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # no name for this uid (a bare container)
        return "cli"


_BY = click.option("--by", default=None, help="Who does it, for the history [default: your user].")
_REASON = click.option("--reason", default="", help="Why, for the history.")


@click.command()
@click.argument("job_id")
@click.argument("task_ids", nargs=-1, required=True)
@click.option("--downstream", is_flag=True, help="Also every task below them.")
@click.option("--upstream", is_flag=True, help="Also every task above them.")
@_BY
@_REASON
@redis_options
def clear(
    settings: Settings,
    job_id: str,
    task_ids: tuple[str, ...],
    downstream: bool,
    upstream: bool,
    by: str | None,
    reason: str,
) -> None:
    """Run tasks of a job again, whatever they ended as (succeeded too), with every task below
    them (--downstream) or above them (--upstream) that ended; the rest of the job keeps its
    state and results. A finished job runs again; a compacted one is unpacked first. A mapped
    task runs again with all its instances; name one instance (`each[3]`) to run that one.
    Refused while a task to clear is queued, running or waiting for a retry."""
    cleared, ids = client_for(settings).clear(
        job_id, list(task_ids), downstream=downstream, upstream=upstream, by=_person(by),
        reason=reason,
    )  # fmt: skip
    click.echo(f"job {job_id}: {cleared} tasks to run again ({', '.join(ids)})")


@click.command()
@click.argument("job_id")
@click.argument("task_id")
@click.option("--succeeded", "outcome", flag_value="succeeded", help="It succeeded.")
@click.option("--failed", "outcome", flag_value="failed", help="It failed (its children too).")
@click.option("--skipped", "outcome", flag_value="skipped", help="It is skipped.")
@click.option("--result", "result_json", default=None, help="With --succeeded: its result, JSON.")
@_BY
@_REASON
@redis_options
def mark(
    settings: Settings,
    job_id: str,
    task_id: str,
    outcome: str | None,
    result_json: str | None,
    by: str | None,
    reason: str,
) -> None:
    """Settle a task by hand as succeeded (with --result), failed or skipped, and let the job
    go on as if it had ended so: its children run, or the failure or skip is passed on. From
    waiting, queued, retry_wait (its retry never runs), failed or upstream_failed; not while
    an attempt runs. Who and why go in the history."""
    if outcome is None:
        raise BadInput("say how it ended: --succeeded, --failed or --skipped")
    result: Any = None
    if result_json is not None:
        try:
            result = json.loads(result_json)
        except ValueError as exc:
            raise BadInput(f"--result must be JSON: {exc}") from None
    was = client_for(settings).mark(
        job_id, task_id, outcome, result=result, by=_person(by), reason=reason
    )
    click.echo(f"job {job_id}: task {task_id} marked {outcome} (it was {was})")


COMMANDS = (clear, mark)
