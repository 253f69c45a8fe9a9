"""A worker's children exit when the worker is gone, and only then: also when the worker is
pid 1, as in a container without an init."""

from __future__ import annotations

import shutil
import subprocess
import sys
import textwrap

import pytest
from helpers import pid_alive, wait_until

# The "worker": starts a child that holds a lifeline to it, prints whether the child is
# still alive after a few of the lifeline's checks, then exits; the child must outlive those
# checks and end after the worker does.
WORKER = textwrap.dedent(
    """
    import os, subprocess, sys, time
    from jobcenter.runtime.lifeline import CHECK_SECONDS
    child = subprocess.Popen([sys.executable, "-c",
        "import os, threading; from jobcenter.runtime.lifeline import exit_with; "
        f"exit_with({os.getpid()}); threading.Event().wait(60)"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 4 * CHECK_SECONDS
    while time.monotonic() < deadline and child.poll() is None:
        time.sleep(0.05)
    print("pid", os.getpid(), "child alive:", child.poll() is None, flush=True)
    print("child_pid", child.pid, flush=True)
    """
)


def _run_worker(prefix: list[str]) -> tuple[bool, str]:
    done = subprocess.run(
        [*prefix, sys.executable, "-c", WORKER], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    return "child alive: True" in done.stdout, done.stdout


def test_a_child_lives_while_its_worker_lives() -> None:
    alive, out = _run_worker([])
    assert alive, out


@pytest.mark.skipif(shutil.which("unshare") is None, reason="no unshare(1) to make a pid 1")
def test_a_child_lives_while_its_worker_is_pid_1() -> None:
    probe = subprocess.run(["unshare", "--pid", "--fork", "true"], capture_output=True)
    if probe.returncode != 0:
        pytest.skip(f"cannot make a pid namespace here: {probe.stderr.decode().strip()}")
    alive, out = _run_worker(["unshare", "--pid", "--fork", "--kill-child"])
    assert "pid 1 " in out, out
    assert alive, out


def test_a_child_exits_once_its_worker_is_gone() -> None:
    worker = subprocess.run(
        [sys.executable, "-c", WORKER], capture_output=True, text=True, timeout=60
    )
    child_pid = int(worker.stdout.split("child_pid ")[1].split()[0])
    # a zombie counts as gone: it exited, waiting for its new parent to reap it
    wait_until(
        lambda: not pid_alive(child_pid), message=f"child {child_pid} outlived its worker by 10 s"
    )
