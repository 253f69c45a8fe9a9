"""`jobcenter pool ...` and `jobcenter rate ...`: set, list and delete pools and rate
limits. Every command parses, calls the client, prints."""

from __future__ import annotations

import click

from jobcenter.config import Settings
from jobcenter.model.spec import MAX_RUNNING_LIMIT

from .options import client_for, echo_rows, redis_options

pool_group = click.Group(
    "pool", help="Named pools of slots: a task with `pool: NAME` runs only while one is free."
)


@pool_group.command("set")
@click.argument("name")
@click.argument("slots", type=click.IntRange(0, MAX_RUNNING_LIMIT))
@redis_options
def set_(settings: Settings, name: str, slots: int) -> None:
    """Create pool NAME with SLOTS slots, or change its size (at once, for the next claims)."""
    client_for(settings).set_pool(name, slots)
    click.echo(f"pool {name}: {slots} slot(s)")


@pool_group.command("list")
@click.option("--json", "as_json", is_flag=True)
@redis_options
def list_(settings: Settings, as_json: bool) -> None:
    """Every pool: slots used / its size, and tasks waiting for a slot."""
    echo_rows(
        client_for(settings).pools(),
        as_json,
        [
            ("POOL", lambda r: r["name"]),
            ("USED", lambda r: r["used"]),
            ("SLOTS", lambda r: "unset" if r["slots"] is None else r["slots"]),
            ("WAITING", lambda r: r["waiting"]),
        ],
    )


@pool_group.command("delete")
@click.argument("name")
@redis_options
def delete(settings: Settings, name: str) -> None:
    """Delete pool NAME (refused while its slots are in use or tasks wait for it)."""
    client_for(settings).delete_pool(name)
    click.echo(f"pool {name} deleted")


rate_group = click.Group(
    "rate",
    help="Rate limits: at most N tasks of a queue or pool start per period (queue:q 100/1s).",
)


@rate_group.command("set")
@click.argument("target")
@click.argument("rate")
@redis_options
def rate_set(settings: Settings, target: str, rate: str) -> None:
    """Limit TARGET (queue:NAME or pool:NAME) to RATE starts: 100/1s, 5/500ms, 60/1m, 1000/1h."""
    client_for(settings).set_rate(target, rate)
    click.echo(f"{target}: at most {rate} starts")


@rate_group.command("list")
@click.option("--json", "as_json", is_flag=True)
@redis_options
def rate_list(settings: Settings, as_json: bool) -> None:
    """Every rate limit."""
    echo_rows(
        client_for(settings).rates(),
        as_json,
        [
            ("TARGET", lambda r: r["target"]),
            ("STARTS", lambda r: r["starts"]),
            ("PER", lambda r: f"{r['period']:g} s"),
        ],
    )


@rate_group.command("delete")
@click.argument("target")
@redis_options
def rate_delete(settings: Settings, target: str) -> None:
    """Remove TARGET's rate limit."""
    client_for(settings).delete_rate(target)
    click.echo(f"{target}: no rate limit")
