"""`jobcenter schedule ...`: add, list, show, pause, resume and remove schedules. Every
command parses, calls jobcenter.schedules, prints."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import click

from jobcenter import schedules as sched
from jobcenter.config import Settings
from jobcenter.model.spec import load_spec_file

from .options import echo_rows, format_time, redis_options

schedule_group = click.Group(
    "schedule", help="One-time (--at), interval (--every) and cron (--cron) schedules."
)


def _store(settings: Settings) -> Any:
    from jobcenter.storage.store import Store

    return Store.from_settings(settings)


def _on_one_schedule(name: str) -> Callable[[Callable[..., Any]], click.Command]:
    """A `schedule NAME SCHEDULE` command: one schedule, by id or name, and the Redis
    options."""

    def decorate(fn: Callable[..., Any]) -> click.Command:
        return schedule_group.command(name)(click.argument("schedule")(redis_options(fn)))

    return decorate


def _time(seconds: float | None) -> str:
    return format_time(seconds, to_second=True)


@schedule_group.command("add")
@click.argument("spec_file", type=click.Path(dir_okay=False))
@click.option("--at", default=None, help="Fire once at this ISO-8601 time (naive: in --tz/UTC).")
@click.option("--every", default=None, help="Fire every this long: 30s, 15m, 1h30m, 1d, PT1H.")
@click.option(
    "--cron",
    default=None,
    help="Fire on a cron expression: 5 fields, or 6 with seconds first; read in --tz.",
)
@click.option("--tz", default=None, help="IANA time zone for --cron/--at (default UTC).")
@click.option("--name", default=None, help="A unique name, usable instead of the id.")
@click.option(
    "--overlap",
    type=click.Choice(sched.OVERLAP_POLICIES),
    default=sched.DEFAULT_OVERLAP,
    show_default=True,
    help="When the previous run is still going: skip the fire, allow it, or buffer one.",
)
@click.option(
    "--catchup",
    type=click.Choice(sched.CATCHUP_POLICIES),
    default=sched.DEFAULT_CATCHUP,
    show_default=True,
    help="Fires missed while no scheduler ran: run none, the latest one, or all.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the schedule as JSON.")
@redis_options
def add(
    settings: Settings,
    spec_file: str,
    at: str | None,
    every: str | None,
    cron: str | None,
    tz: str | None,
    name: str | None,
    overlap: str,
    catchup: str,
    as_json: bool,
) -> None:
    """Schedule the job in SPEC_FILE; prints the schedule id."""
    spec = load_spec_file(spec_file)
    sched.parse_trigger(at=at, every=every, cron=cron, tz=tz)  # bad input exits before Redis
    store = _store(settings)
    added = sched.add_schedule(
        store, spec, at=at, every=every, cron=cron, tz=tz, name=name,
        overlap=overlap, catchup=catchup,
    )  # fmt: skip
    if as_json:
        click.echo(json.dumps(sched.show_schedule(store, added.id, fires=0), indent=2))
    else:
        click.echo(added.id)


@schedule_group.command("list")
@click.option("--json", "as_json", is_flag=True)
@redis_options
def list_(settings: Settings, as_json: bool) -> None:
    """List schedules, oldest first."""
    echo_rows(
        sched.list_schedules(_store(settings)),
        as_json,
        [
            ("SCHEDULE", lambda r: r["id"]),
            ("STATE", lambda r: r["state"]),
            ("NEXT FIRE (UTC)", lambda r: _time(r["next_fire"])),
            ("FIRES", lambda r: r["fires"]),
            ("SKIPPED", lambda r: r["skipped"]),
            ("NAME", lambda r: r["name"] or r["job"]),
            (
                "TRIGGER",
                lambda r: f"{r['kind']} {r['expr']}" + (f" ({r['tz']})" if r["tz"] else ""),
            ),
        ],
    )


@schedule_group.command("show")
@click.argument("schedule")
@click.option(
    "--fires", type=int, default=sched.SHOWN_FIRES, show_default=True, help="Recent fires shown."
)
@click.option("--json", "as_json", is_flag=True)
@redis_options
def show(settings: Settings, schedule: str, fires: int, as_json: bool) -> None:
    """Show a schedule (by id or name) and its recent fires."""
    view = sched.show_schedule(_store(settings), schedule, fires=fires)
    if as_json:
        click.echo(json.dumps(view, indent=2))
        return
    for k in ("id", "name", "job", "kind", "expr", "tz", "overlap", "catchup", "state"):
        click.echo(f"{k:<13} {view[k] if view[k] is not None else '-'}")
    for k in ("created_at", "next_fire", "last_fire", "buffered_fire"):
        click.echo(f"{k:<13} {_time(view[k])}")
    click.echo(f"{'last_job':<13} {view['last_job'] or '-'}")
    click.echo(
        f"{'counts':<13} fires={view['fires']} skipped={view['skipped']} "
        f"missed={view['missed']} failed={view['failed']}"
    )
    for r in view["recent"]:
        extra = r.get("job") or r.get("reason") or ""
        until = f"..{_time(r['until'])}" if "until" in r else ""
        click.echo(f"  {_time(r['fire'])}{until}  {r['outcome']:<9}  {extra}")


@_on_one_schedule("pause")
def pause(settings: Settings, schedule: str) -> None:
    """Stop a schedule firing until resumed."""
    view = sched.pause_schedule(_store(settings), schedule)
    click.echo(f"schedule {view['id']} paused")


@_on_one_schedule("resume")
def resume(settings: Settings, schedule: str) -> None:
    """Fire again from the next fire after now (fires due while paused are not caught up)."""
    view = sched.resume_schedule(_store(settings), schedule)
    click.echo(f"schedule {view['id']} {view['state']}; next fire {_time(view['next_fire'])}")


@_on_one_schedule("remove")
def remove(settings: Settings, schedule: str) -> None:
    """Delete a schedule; jobs it submitted are kept."""
    click.echo(f"schedule {sched.remove_schedule(_store(settings), schedule)} removed")
