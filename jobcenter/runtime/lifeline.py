"""Child processes of a worker (its rq recovery worker, process-pool attempts) must not
outlive it: a kill -9'd worker's attempt would otherwise run on beside the attempt that
took it over."""

from __future__ import annotations

import os
import threading

CHECK_SECONDS = 0.5  # how soon a child notices that its worker is gone


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else: not ours any more, but alive
        return True
    return True


def exit_with(worker_pid: int) -> None:
    """Exit this process as soon as `worker_pid` is gone (checked from a daemon thread)."""

    # Reparenting (to init or a subreaper) also means the parent is gone; compare with the
    # parent at start, not with pid 1: in a container the worker itself may be pid 1.
    parent = os.getppid()

    def watch() -> None:
        while _alive(worker_pid) and os.getppid() == parent:
            threading.Event().wait(CHECK_SECONDS)
        os._exit(0)

    threading.Thread(target=watch, name="jobcenter-lifeline", daemon=True).start()
