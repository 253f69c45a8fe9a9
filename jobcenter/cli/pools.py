"""`jobcenter pool ...`: set, list and delete pools. Every command parses, calls the client,
prints."""

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
        lambda r: (
            f"{r['name']}  used {r['used']}/{'unset' if r['slots'] is None else r['slots']}"
            f"  waiting {r['waiting']}"
        ),
    )


@pool_group.command("delete")
@click.argument("name")
@redis_options
def delete(settings: Settings, name: str) -> None:
    """Delete pool NAME (refused while its slots are in use or tasks wait for it)."""
    client_for(settings).delete_pool(name)
    click.echo(f"pool {name} deleted")
