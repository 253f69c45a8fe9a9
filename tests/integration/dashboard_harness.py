"""The dashboard served by a real uvicorn in a thread of the test process, on a free
loopback port, for the HTTP-level tests."""

from __future__ import annotations

import re
import threading
from typing import Any

import httpx
import uvicorn
from helpers import wait_until
from starlette.routing import Mount

from jobcenter import Client
from jobcenter.web.app import create_app
from jobcenter.web.serve import _bind

TOKEN = "test-token-0123456789"
STOP_SECONDS = 10.0


class Dashboard:
    """A running dashboard and an HTTP client for it."""

    def __init__(self, client: Client, token: str | None = TOKEN) -> None:
        self.client = client
        sock = _bind("127.0.0.1", 0)
        self.url = f"http://127.0.0.1:{sock.getsockname()[1]}"
        config = uvicorn.Config(
            create_app(client, token), log_config=None, lifespan="off", access_log=False
        )
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(
            target=self.server.run, kwargs={"sockets": [sock]}, daemon=True
        )
        self.thread.start()
        wait_until(lambda: self.server.started, message="the dashboard did not start")
        self.http = httpx.Client(base_url=self.url, timeout=30.0)

    def get(self, path: str, **kwargs: object) -> httpx.Response:
        return self.http.get(path, **kwargs)  # type: ignore[arg-type]

    def json(self, path: str) -> object:
        reply = self.http.get(path)
        assert reply.status_code == 200, (path, reply.status_code, reply.text)
        return reply.json()

    def act(
        self, path: str, token: str | None = TOKEN, headers: dict[str, str] | None = None
    ) -> httpx.Response:
        """POST an action the way the page's script does (token in a header, JSON back)."""
        sent = {"Accept": "application/json", **(headers or {})}
        if token is not None:
            sent["X-Jobcenter-Token"] = token
        return self.http.post(path, headers=sent)

    def close(self) -> None:
        self.http.close()
        self.server.should_exit = True
        self.thread.join(STOP_SECONDS)


# What a route needs besides its path to get as far as Redis (without it, it refuses the
# request itself: a 400 that never reads Redis), by the path's last part.
ROUTE_QUERIES = {"mark": "?state=succeeded", "retry": "?state=failed"}


def every_route(app: Any, job_id: str, schedule_id: str) -> list[tuple[str, str]]:
    """(method, path) of every route the app serves, its parameters filled in, so a route
    added later (an API mounted beside the pages) is covered without naming it here."""
    params = {
        "job_id": job_id, "schedule_id": schedule_id, "index:int": "0", "task_id:path": "t1",
        "queue": "default", "name": "approve",
    }  # fmt: skip
    out = []
    for route in app.routes:
        if isinstance(route, Mount):
            out.append(("GET", f"{route.path}/app.css"))
            continue
        path = re.sub(r"{([^}]+)}", lambda m: params[m.group(1)], route.path)
        path += ROUTE_QUERIES.get(route.path.rsplit("/", 1)[-1], "")
        out.append(("POST" if "POST" in route.methods else "GET", path))
    return out
