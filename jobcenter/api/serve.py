"""`jobcenter serve`: one process serving the dashboard and, under /api/v1, the HTTP API,
whose tokens the dashboard's actions take too."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from jobcenter.client import Client
from jobcenter.web import serve as dashboard

from .app import api_mount


def run(
    client: Client,
    *,
    host: str,
    port: int,
    access_log: bool,
    announce: Callable[[str], None],
    hosts: Sequence[str] | None = None,
) -> None:
    """Serve until interrupted (web/serve.py runs uvicorn), answering requests for `hosts`
    only (web/serve.py's allowed_hosts(host) by default)."""
    api = api_mount(client)
    dashboard.run(
        client, host=host, port=port, token=None, access_log=access_log, announce=announce,
        mounts=[api], api_tokens=True, hosts=hosts,
    )  # fmt: skip
