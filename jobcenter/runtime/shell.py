"""The built-in shell task `jobcenter.shell`. Importing this module registers it, and only
workers started with --allow-shell import it: whoever can submit jobs can then run commands
on those workers, so it is off by default."""

from __future__ import annotations

import subprocess
from collections.abc import Sequence

from jobcenter.errors import Fatal

from .context import current_task
from .registry import task

OUTPUT_TAIL = 2_000  # characters of a failed command's output kept in its error


@task(name="jobcenter.shell")
def run_command(
    argv: Sequence[str], cwd: str | None = None, env: dict[str, str] | None = None
) -> int:
    """Run `argv` (a list: no shell parsing); a non-zero exit fails the attempt."""
    if isinstance(argv, str) or not argv or not all(isinstance(a, str) for a in argv):
        raise Fatal('jobcenter.shell takes a non-empty list of strings, e.g. ["ls", "-l"]')
    current_task().progress(f"running {argv[0]}")
    done = subprocess.run(list(argv), cwd=cwd, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        output = (done.stdout + done.stderr)[-OUTPUT_TAIL:]
        raise RuntimeError(f"command {argv[0]!r} exited {done.returncode}: {output}")
    return done.returncode
