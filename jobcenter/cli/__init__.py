"""The `jobcenter` command: every command parses, calls the library, prints.

options (shared options, exit codes) <- jobs, schedules, servers (the commands) <- this
module (the main group that gathers them)."""

from __future__ import annotations

import logging

import click

from . import api, backfill, jobs, operate, pausing, pools, schedules, servers, task_logs
from .options import (
    EXIT_BAD_INPUT,
    EXIT_ERROR,
    EXIT_FAILED,
    EXIT_NO_REDIS,
    EXIT_REFUSED,
    EXIT_TIMEOUT,
    verbose_option,
)

__all__ = [
    "EXIT_BAD_INPUT", "EXIT_ERROR", "EXIT_FAILED", "EXIT_NO_REDIS", "EXIT_REFUSED", "EXIT_TIMEOUT",
    "main",
]  # fmt: skip


@click.group()
@click.option(
    "-v", "--verbose", count=True, help="More logging (-vv for debug); also after the command."
)
@click.version_option(package_name="jobcenter")
def main(verbose: int) -> None:
    """jobcenter: a DAG job center over Redis."""
    level = logging.WARNING - 10 * verbose
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")


for command in (
    *jobs.COMMANDS,
    *operate.COMMANDS,
    *servers.COMMANDS,
    *api.COMMANDS,
    *backfill.COMMANDS,
    *task_logs.COMMANDS,
    *pausing.COMMANDS,
    schedules.schedule_group,
    pools.pool_group,
    pools.rate_group,
):
    main.add_command(command)


def _add_verbose(command: click.Command) -> None:
    """Every command, and each of a group's, takes -v after its name too."""
    if isinstance(command, click.Group):
        for sub in command.commands.values():
            _add_verbose(sub)
    else:
        command.params.append(verbose_option())


for command in main.commands.values():
    _add_verbose(command)
