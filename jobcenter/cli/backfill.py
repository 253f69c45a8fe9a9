"""`jobcenter backfill SCHEDULE --from T1 --to T2`: run a schedule once per fire time in a
window (jobcenter.schedules.backfill), showing its progress: a bar on a terminal, a line per
run otherwise (one JSON object a line with --json)."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator

import click

from jobcenter.config import Settings
from jobcenter.model.fire_times import parse_instant
from jobcenter.model.states import JobState
from jobcenter.schedules import backfill as runs

from .options import EXIT_FAILED, format_time, redis_options


@click.command()
@click.argument("schedule")
@click.option(
    "--from",
    "start",
    required=True,
    help="The first fire time to run (included): an ISO-8601 date or date-time, UTC when it "
    "has no zone (2026-11-01, 2026-11-01T02:00:00+01:00).",
)
@click.option("--to", "end", required=True, help="The end of the window (excluded); same forms.")
@click.option(
    "--max-running",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    help="At most this many of the window's runs unfinished at a time.",
)
@click.option("--wait", is_flag=True, help="Wait until every run ends; exit 1 if one failed.")
@click.option(
    "--rerun-failed",
    is_flag=True,
    help="Run again the fires whose run failed (retried in place) or was cancelled.",
)
@click.option("--rerun-all", is_flag=True, help="Run again every fire that ran already.")
@click.option("--json", "as_json", is_flag=True, help="One JSON object a line.")
@redis_options
def backfill(
    settings: Settings,
    schedule: str,
    start: str,
    end: str,
    max_running: int,
    wait: bool,
    rerun_failed: bool,
    rerun_all: bool,
    as_json: bool,
) -> None:
    """Run SCHEDULE (id or name) once for each of its fire times from --from to --to, oldest
    first, each run with its fire time. Fires it ran already (by its ticker or a backfill
    before) are not run again unless asked: running the same backfill again, or after it
    was stopped, submits only what is missing."""
    if rerun_failed and rerun_all:
        raise click.UsageError("give one of --rerun-failed and --rerun-all")
    rerun = runs.RERUN_ALL if rerun_all else runs.RERUN_FAILED if rerun_failed else None
    window = (parse_instant(start, "--from"), parse_instant(end, "--to"))
    from jobcenter.storage.store import Store

    lines = runs.backfill(
        Store.from_settings(settings), schedule, *window,
        max_running=max_running, rerun=rerun, wait=wait,
    )  # fmt: skip
    failed = 0
    if sys.stdout.isatty() and not as_json:
        failed = _bar(lines)
    else:
        for line in lines:
            failed += _failed(line)
            click.echo(json.dumps(line.to_dict()) if as_json else _text(line))
    if wait and failed:
        sys.exit(EXIT_FAILED)


def _failed(line: runs.BackfillLine) -> bool:
    return line.outcome == runs.ENDED and line.state != JobState.SUCCEEDED


def _text(line: runs.BackfillLine) -> str:
    state = f" {line.state}" if line.state else ""
    return (
        f"{format_time(line.fire_ms / 1000, to_second=True)}  {line.outcome}{state}  "
        f"{line.job_id or '-'}  ({line.unfinished} unfinished)"
    )


def _bar(lines: Iterator[runs.BackfillLine]) -> int:
    """On a terminal: a bar of the fires decided, the last line beside it; then the runs
    that did not succeed."""
    failed: list[runs.BackfillLine] = []
    decided = 0
    with click.progressbar(length=1, label="fires", item_show_func=lambda t: t) as bar:
        for line in lines:
            bar.length = max(line.total, 1)
            if line.outcome == runs.ENDED:
                if _failed(line):
                    failed.append(line)
            else:
                decided += 1
            bar.update(decided - bar.pos, _text(line))
    for line in failed:
        click.echo(_text(line))
    return len(failed)


COMMANDS = (backfill,)
