"""Commands an operator runs on a live fleet: `pause` and `resume` a job or a queue, and
`paused`, what is paused. Every command parses, calls the client, prints."""

from __future__ import annotations

import click

from jobcenter.config import Settings
from jobcenter.errors import SpecError

from .options import client_for, echo_rows, format_time, redis_options


def _target(job_id: str | None, queue: str | None, verb: str) -> None:
    if (job_id is None) == (queue is None):
        raise SpecError(f"{verb} takes a JOB_ID or --queue NAME (one of them)")


@click.command()
@click.argument("job_id", required=False)
@click.option("--queue", default=None, help="Pause this queue instead: no task of it is claimed.")
@redis_options
def pause(settings: Settings, job_id: str | None, queue: str | None) -> None:
    """Pause a job (none of its tasks starts) or a queue (no task of it is claimed) until
    `resume`. Running attempts finish."""
    _target(job_id, queue, "pause")
    client = client_for(settings)
    if queue is not None:
        done = client.pause_queue(queue)
        click.echo(f"queue {queue} {'paused' if done else 'was paused already'}")
    else:
        assert job_id is not None
        done = client.pause(job_id)
        click.echo(f"job {job_id} {'paused' if done else 'was paused already'}")


@click.command()
@click.argument("job_id", required=False)
@click.option("--queue", default=None, help="Resume this queue instead.")
@redis_options
def resume(settings: Settings, job_id: str | None, queue: str | None) -> None:
    """Resume a paused job (its waiting tasks go back into their queues, in their places) or
    a paused queue."""
    _target(job_id, queue, "resume")
    client = client_for(settings)
    if queue is not None:
        done = client.resume_queue(queue)
        click.echo(f"queue {queue} {'resumed' if done else 'was not paused'}")
    else:
        assert job_id is not None
        done = client.resume(job_id)
        click.echo(f"job {job_id} {'resumed' if done else 'was not paused'}")


@click.command()
@click.option("--json", "as_json", is_flag=True)
@redis_options
def paused(settings: Settings, as_json: bool) -> None:
    """The paused queues, and how many jobs are paused (`list` marks them)."""
    found = client_for(settings).paused()
    if as_json:
        echo_rows([found], True, [])
        return
    echo_rows(
        found["queues"],
        False,
        [
            ("QUEUE", lambda r: r["queue"]),
            ("PAUSED SINCE (UTC)", lambda r: format_time(r["since"])),
        ],
    )
    click.echo(f"{found['jobs']} job(s) paused")


COMMANDS = (pause, resume, paused)
