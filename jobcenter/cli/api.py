"""The HTTP API's commands: `serve` (the dashboard with the API under /api/v1) and `token`
(create, list, revoke the API's tokens)."""

from __future__ import annotations

import json

import click

from jobcenter.config import Settings
from jobcenter.storage import tokens

from .options import (
    EXIT_BAD_INPUT,
    client_for,
    echo_rows,
    fail,
    format_time,
    http_server_setup,
    listen_options,
    log_format_option,
    redis_options,
)


@click.command()
@listen_options
@log_format_option
@redis_options
def serve(settings: Settings, host: str, port: int, allowed_hosts: str, log_format: str) -> None:
    """Serve the HTTP API under /api/v1 (its interactive docs at /api/v1/docs) and the
    dashboard, in one process. Every API call needs a token (`jobcenter token create`);
    the dashboard's actions take an operate token."""

    try:
        from jobcenter.api import serve as api_serve
    except ImportError as exc:
        fail(f"the API needs its extra: pip install 'jobcenter[api]' ({exc})", EXIT_BAD_INPUT)
    hosts, verbose, announce = http_server_setup(host, allowed_hosts, log_format, "jobcenter.api")
    try:
        api_serve.run(
            client_for(settings), host=host, port=port, access_log=verbose, announce=announce,
            hosts=hosts,
        )  # fmt: skip
    except OSError as exc:
        fail(f"cannot listen on {host}:{port}: {exc}", EXIT_BAD_INPUT)


@click.group(name="token")
def token_group() -> None:
    """The HTTP API's tokens: each has a scope (read < submit < operate < admin, or work for
    executors) and may be bound to an owner; Redis keeps only its hash."""


@token_group.command(name="create")
@click.option(
    "--scope",
    required=True,
    type=click.Choice([s.value for s in tokens.Scope]),
    help="read: read; submit: also submit; operate: also cancel, retry, requeue, pause; "
    "work: the worker protocol; admin: everything, tokens too.",
)
@click.option("--owner", default=None, help="Submit as, and see only the jobs of, this owner.")
@click.option("--name", default=None, help="A label for `token list`.")
@click.option("--json", "as_json", is_flag=True)
@redis_options
def token_create(
    settings: Settings, scope: str, owner: str | None, name: str | None, as_json: bool
) -> None:
    """Make a token and print it, this once: only its hash is kept."""
    token, record = tokens.create(client_for(settings).store, scope, owner, name)
    if as_json:
        click.echo(json.dumps({**record.to_dict(), "token": token}))
        return
    click.echo(token)
    bound = f" for owner {owner}" if owner else ""
    click.echo(f"token {record.id}: {scope}{bound}; shown this once, keep it safe", err=True)


@token_group.command(name="list")
@click.option("--json", "as_json", is_flag=True)
@redis_options
def token_list(settings: Settings, as_json: bool) -> None:
    """Every token's id, scope, owner and label (never the token)."""
    rows = [r.to_dict() for r in tokens.list_tokens(client_for(settings).store)]
    echo_rows(
        rows,
        as_json,
        [
            ("ID", lambda r: r["id"]),
            ("SCOPE", lambda r: r["scope"]),
            ("OWNER", lambda r: r["owner"] or "-"),
            ("CREATED (UTC)", lambda r: format_time(r["created_at"])),
            ("LABEL", lambda r: r["name"] or ""),
        ],
    )


@token_group.command(name="revoke")
@click.argument("token_id")
@redis_options
def token_revoke(settings: Settings, token_id: str) -> None:
    """Revoke the token TOKEN_ID (its id, as `token list` shows): refused from now on."""
    tokens.revoke(client_for(settings).store, token_id)
    click.echo(f"token {token_id} revoked")


COMMANDS = (serve, token_group)
