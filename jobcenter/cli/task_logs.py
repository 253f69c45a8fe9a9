"""`jobcenter logs JOB TASK`: what an attempt of a task printed and logged, and `--follow`
to print a running attempt's output as its worker stores it."""

from __future__ import annotations

import sys
import time

import click

from jobcenter.client import Client
from jobcenter.config import Settings
from jobcenter.model.states import TERMINAL_TASK_STATES, TaskState
from jobcenter.storage import task_logs

from .options import client_for, redis_options

# A followed attempt's log is stored by its worker's heartbeat (every lease/3): reading it
# more often than this shows nothing new.
FOLLOW_READ_SECONDS = 1.0
ATTEMPT_LIVE = {TaskState.RUNNING, TaskState.TIMED_OUT}  # its attempt may still write


@click.command()
@click.argument("job_id")
@click.argument("task_id")
@click.option(
    "--attempt",
    type=click.IntRange(min=1),
    default=None,
    help="This attempt (default: the latest).",
)
@click.option(
    "--follow", "-f", is_flag=True, help="Print a running attempt's output until it ends."
)
@redis_options
def logs(settings: Settings, job_id: str, task_id: str, attempt: int | None, follow: bool) -> None:
    """Print what an attempt of TASK_ID printed and logged (INFO and above), with the
    worker's lines about it: its last 64 KiB. Exit 2 for an unknown job, task or attempt."""
    client = client_for(settings)
    if follow:
        _follow(client, job_id, task_id, attempt)
        return
    shown = client.task_log(job_id, task_id, attempt)
    if shown["log"] is None:
        click.echo(_nothing(shown), err=True)
        return
    click.echo(shown["log"], nl=False)
    if shown["running"]:
        click.echo("(the attempt is still running: its output so far)", err=True)


def _nothing(shown: dict[str, object]) -> str:
    if not shown["attempt"]:
        ended = TaskState(str(shown["state"])) in TERMINAL_TASK_STATES
        how = "did not run" if ended else "has not run yet"
        return f"task {shown['task']} {how} ({shown['state']})"
    return f"attempt {shown['attempt']} of task {shown['task']} wrote nothing ({shown['state']})"


def _follow(client: Client, job_id: str, task_id: str, attempt: int | None) -> None:
    """Print the attempt's output as its worker stores it, until the attempt ended (the
    latest attempt; when the task has not run yet, the first one to start)."""
    index = client.store.task_index(job_id, task_id)
    written = 0
    while True:
        shown = task_logs.for_index(client.store, job_id, index, attempt, task_id)  # no id scan
        attempt = attempt or shown["attempt"]
        if attempt is None:  # not started: over only if it never will
            over = TaskState(shown["state"]) in TERMINAL_TASK_STATES
        else:
            over = shown["state"] not in ATTEMPT_LIVE or shown["attempts"] > attempt
            stored = task_logs.read(client.store, job_id, index, attempt)
            if stored is not None:
                sys.stdout.buffer.write(stored.since(written))
                sys.stdout.flush()
                written = stored.written
                over = over or not stored.running
        if over:
            if not written:
                click.echo(_nothing({**shown, "attempt": attempt}), err=True)
            return
        time.sleep(FOLLOW_READ_SECONDS)


COMMANDS = (logs,)
