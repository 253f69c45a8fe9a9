"""The API tier's servers and clients: the dashboard with the API mounted under /api/v1 (as
`jobcenter serve` composes them) on a real uvicorn in a thread, on a free loopback port;
httpx for the calls; real `jobcenter worker` processes and the reference executor
(examples/executor/executor.sh) as processes of their own."""

from __future__ import annotations

import os
import signal
import subprocess
import threading
from pathlib import Path
from typing import Any

import httpx
import uvicorn
from harness import PROCESS_START_SECONDS, REPO_ROOT, WORKER_STOP_SECONDS, WorkerPool, spawn
from helpers import wait_until

from jobcenter import Client
from jobcenter.api.app import PREFIX, api_mount
from jobcenter.storage import tokens
from jobcenter.web.app import create_app
from jobcenter.web.serve import _bind

# Short leases: a killed executor's task is taken again within seconds. The executor
# heartbeats every third of a lease (1 s), well within it.
LEASE_SECONDS = 3.0
SETTINGS = {"JOBCENTER_LEASE_SECONDS": str(LEASE_SECONDS)}
STOP_SECONDS = 10.0
EXECUTOR = REPO_ROOT / "examples" / "executor" / "executor.sh"
EXAMPLE_TASKS = REPO_ROOT / "examples" / "executor" / "tasks"
JOB_SECONDS = 60.0  # a job of this tier not finished by then is stuck


class ApiServer:
    """A running server of the dashboard and the API, one namespace, and an HTTP client."""

    def __init__(self, redis_url: str, namespace: str, *, claim_wait_max: float = 60.0) -> None:
        self.client = Client.from_url(redis_url, namespace, lease_seconds=LEASE_SECONDS)
        api = api_mount(self.client, claim_wait_max=claim_wait_max)
        app = create_app(self.client, mounts=[api], api_tokens=True)
        sock = _bind("127.0.0.1", 0)
        self.url = f"http://127.0.0.1:{sock.getsockname()[1]}"
        self.base = self.url + PREFIX
        config = uvicorn.Config(app, log_config=None, lifespan="off", access_log=False)
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(
            target=self.server.run, kwargs={"sockets": [sock]}, daemon=True
        )
        self.thread.start()
        wait_until(lambda: self.server.started, message="the API server did not start")
        self.http = httpx.Client(base_url=self.base, timeout=60.0)

    def token(self, scope: str, owner: str | None = None) -> str:
        """A new token, as `jobcenter token create` makes it."""
        made, _ = tokens.create(self.client.store, scope, owner)
        return made

    def call(
        self, method: str, path: str, token: str | None = None, **kwargs: Any
    ) -> httpx.Response:
        headers = dict(kwargs.pop("headers", {}))
        if token is not None:
            headers["Authorization"] = f"Bearer {token}"
        return self.http.request(method, path, headers=headers, **kwargs)

    def submit(self, token: str, spec: dict[str, Any]) -> str:
        reply = self.call("POST", "/jobs", token, json=spec)
        assert reply.status_code == 201, reply.text
        job_id: str = reply.json()["id"]
        return job_id

    def state(self, token: str, job_id: str) -> str:
        reply = self.call("GET", f"/jobs/{job_id}", token)
        assert reply.status_code == 200, reply.text
        state: str = reply.json()["state"]
        return state

    def wait_finished(self, token: str, job_id: str, timeout: float = JOB_SECONDS) -> str:
        return wait_until(
            lambda: (s := self.state(token, job_id)) in ("succeeded", "failed", "cancelled") and s,
            timeout=timeout,
            interval=0.05,
            message=f"job {job_id} did not finish",
        )

    def close(self) -> None:
        self.http.close()
        self.server.should_exit = True
        self.thread.join(STOP_SECONDS)


class Workers(WorkerPool):
    """Python workers beside the executors: the demo's tasks, the tier's short leases."""

    modules = ("jobcenter.demo",)
    settings = SETTINGS

    def close(self) -> list[str]:
        problems = []
        for worker in self.started:
            if worker.alive:
                worker.signal(signal.SIGTERM)
        for worker in self.started:
            try:
                worker.proc.wait(WORKER_STOP_SECONDS)
            except subprocess.TimeoutExpired:
                worker.proc.kill()
                worker.proc.wait()
                problems.append(f"worker {worker.name} ignored SIGTERM; killed")
            if "Traceback" in worker.log():
                problems.append(f"worker {worker.name} logged a traceback:\n{worker.log()}")
        self.redis.close()
        return problems


class Executor:
    """The reference executor (POSIX sh over curl) as a process group of its own: the
    script, its heartbeat loop and the command it runs."""

    def __init__(self, base: str, token: str, tasks: Path, log_dir: Path, name: str) -> None:
        self.log_path = log_dir / f"executor-{name}.log"
        env = {
            **{k: v for k, v in os.environ.items() if not k.startswith("JOBCENTER_")},
            "JOBCENTER_API": base,
            "JOBCENTER_TOKEN": token,
            "JOBCENTER_WAIT": "1",
        }
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(
                ["sh", str(EXECUTOR), str(tasks)],
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def kill9(self) -> None:
        """Kill the whole group at once, as a container's end would."""
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(STOP_SECONDS)

    def stop(self) -> int:
        """SIGTERM: it finishes its running task, then exits."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(STOP_SECONDS + JOB_SECONDS)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            return self.proc.wait(STOP_SECONDS)


__all__ = ["PROCESS_START_SECONDS", "spawn"]
