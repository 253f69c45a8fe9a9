"""One option set for the commands that act on many jobs at once (`retry`, `cancel`,
`delete`, `dlq requeue`): the list's filters and a window of creation times, `--dry-run`,
`--batch`; and the loop that walks the matching jobs a batch at a time, acts on each one
its action applies to, and ends with a count."""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import click

from jobcenter import schedules
from jobcenter.client import Client
from jobcenter.errors import SpecError
from jobcenter.model.states import JobState
from jobcenter.model.tags import parse_tag_filter
from jobcenter.storage.bulk import ACTIONS, BULK_BATCH, BulkFilter, run
from jobcenter.storage.views import PAGE_SIZE_MAX, JobFilter

from .options import parse_time_option


@dataclass(frozen=True)
class Bulk:
    """A bulk action's choice of jobs and how to go about it."""

    where: BulkFilter
    dry_run: bool
    batch: int


def bulk_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    """The filters of a bulk action; the command gets `bulk`, a Bulk, or None when it was
    given none of them (it acts on the one job named instead)."""

    @click.option("--state", type=click.Choice([s.value for s in JobState]), default=None)
    @click.option("--owner", default=None)
    @click.option("--name", default=None, help="Jobs whose name has this part (any case).")
    @click.option("--schedule", "schedule_id", default=None, help="Jobs fired by this schedule.")
    @click.option("--tag", default=None, help="Jobs with this tag: key=value.")
    @click.option("--since", default=None, help="Created since: epoch, ISO time, or 15m/2h/7d.")
    @click.option("--until", default=None, help="Created before this (same forms).")
    @click.option("--dry-run", is_flag=True, help="Print what it would touch, touch nothing.")
    @click.option(
        "--batch",
        type=click.IntRange(1, PAGE_SIZE_MAX),
        default=BULK_BATCH,
        show_default=True,
        help="Jobs read, then acted on, per round.",
    )
    @functools.wraps(fn)
    def wrapper(
        *args: Any,
        state: str | None,
        owner: str | None,
        name: str | None,
        schedule_id: str | None,
        tag: str | None,
        since: str | None,
        until: str | None,
        dry_run: bool,
        batch: int,
        **kwargs: Any,
    ) -> Any:
        where = BulkFilter(
            JobFilter(
                owner=owner,
                state=state,
                schedule_id=schedule_id,
                name=name,
                tag=None if tag is None else "=".join(parse_tag_filter(tag)),
            ),
            since=parse_time_option(since),
            until=parse_time_option(until, "--until"),
        )
        chosen = None if where.empty else Bulk(where, dry_run, batch)
        if chosen is None and dry_run:
            raise SpecError("--dry-run goes with filters (--state, --owner, --tag, ...)")
        return fn(*args, bulk=chosen, **kwargs)

    return wrapper


def one_or_many(named: object, bulk: Bulk | None, usage: str) -> None:
    """A command acts on the job named or on the jobs its filters choose: one of them."""
    if (named is None) == (bulk is None):
        raise SpecError(f"give {usage} or filters (--state, --owner, --tag, ...), not both")


def run_bulk(client: Client, bulk: Bulk, action_name: str) -> int:
    """Walk the jobs the filters choose, a batch at a time; act on each one the action
    applies to (`--dry-run`: print it), a line per job, then the count. A job the action
    refuses (it changed meanwhile) is said on stderr and skipped. Returns how many it acted
    on."""
    action = ACTIONS[action_name]
    jobs = bulk.where.jobs
    if jobs.schedule_id:  # a schedule's id or name, as `list --schedule` takes
        jobs = replace(jobs, schedule_id=schedules.filter_id(client.store, jobs.schedule_id))
    where = replace(bulk.where, jobs=jobs)
    done = skipped = 0
    for outcome in run(client.store, action, where, dry_run=bulk.dry_run, batch=bulk.batch):
        job = outcome.job
        if outcome.error is not None:
            click.echo(f"job {job.id}: skipped: {outcome.error}", err=True)
            skipped += 1
            continue
        done += 1
        if bulk.dry_run:
            click.echo(f"would {action.name} job {job.id}  {job.name}  {job.state}")
        else:
            click.echo(f"job {job.id}: {outcome.message}")
    if bulk.dry_run:
        click.echo(f"{done} job(s) would be {action.past}; --dry-run: nothing changed")
    else:
        click.echo(f"{done} job(s) {action.past}" + (f" ({skipped} skipped)" if skipped else ""))
    return done
