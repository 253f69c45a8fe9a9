"""Job commands: submit, status, list, history, retry, delete, cancel and the dead letters."""

from __future__ import annotations

import base64
import json
import sys
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import click

from jobcenter.client import Client
from jobcenter.config import LIST_LIMIT, Settings
from jobcenter.errors import SpecError
from jobcenter.model.fire_times import parse_instant
from jobcenter.model.spec import load_spec_file
from jobcenter.model.states import JobState, TaskState
from jobcenter.model.tags import format_tags, parse_tag_filter
from jobcenter.storage.events import Event
from jobcenter.storage.export import FINISHED_STATES
from jobcenter.storage.keyspace.schema import EventKind
from jobcenter.storage.server.outages import ride_out

from .bulk import Bulk, bulk_options, one_or_many, run_bulk
from .options import (
    EXIT_FAILED,
    EXIT_TIMEOUT,
    FOLLOW_ERROR_WIDTH,
    FOLLOW_PAGE,
    FOLLOW_POLL_SECONDS,
    Duration,
    client_for,
    echo_rows,
    fail,
    first_line,
    format_time,
    parse_time_option,
    redis_options,
)

T = TypeVar("T")


@dataclass
class _Wait:
    """`submit --wait`'s deadline, and its reads. The job exists: each read rides out a Redis
    outage until the deadline, and never ends the command with "unreachable" (exit 3), which
    says "nothing happened, submit it again"."""

    job_id: str
    timeout: float | None
    deadline: float | None = field(init=False)

    def __post_init__(self) -> None:
        self.deadline = None if self.timeout is None else time.monotonic() + self.timeout

    def read(self, call: Callable[[], T]) -> T:
        return ride_out(call, self.deadline, f"waiting for job {self.job_id}")

    def check(self) -> None:
        """TimeoutError once the deadline has passed."""
        if self.deadline is not None and time.monotonic() >= self.deadline:
            raise TimeoutError(f"job {self.job_id} not finished after {self.timeout}s")


@click.command()
@click.argument("spec_file", type=click.Path(dir_okay=False))
@click.option("--wait", is_flag=True, help="Wait for the job; exit 0 if it succeeded, else 1.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON (with --wait: final status).")
@click.option(
    "--timeout",
    type=Duration(),
    default=None,
    help="With --wait: give up after this long (seconds, or 90s, 15m, PT1H; exit 4; the job "
    "goes on).",
)
@click.option(
    "--fire-time",
    default=None,
    help="The time this run is for, to run a schedule's job for a past date: an ISO-8601 "
    "date or date-time (UTC when it has no zone). Its tasks read it as "
    "current_task().fire_time; the spec's placeholders are filled with it.",
)
@redis_options
def submit(
    settings: Settings,
    spec_file: str,
    wait: bool,
    as_json: bool,
    timeout: float | None,
    fire_time: str | None,
) -> None:
    """Submit the job in SPEC_FILE (YAML or JSON); prints its id."""
    spec = load_spec_file(spec_file)  # validated before anything touches Redis
    at = None if fire_time is None else parse_instant(fire_time, "--fire-time")
    client = client_for(settings)
    job_id = client.submit(spec, fire_time=at)
    for queue, name in client.unserved(client.spec_tasks(spec)):
        click.echo(
            f"warning: no live worker has task {name!r} on queue {queue!r}: its tasks wait "
            "until one does (start a worker that imports its module)",
            err=True,
        )
    if not wait:
        click.echo(json.dumps({"id": job_id}) if as_json else job_id)
        return
    if not as_json:
        click.echo(f"job {job_id} submitted ({len(spec.tasks)} tasks)")
    waiting = _Wait(job_id, timeout)
    try:
        state = _follow(client, waiting, len(spec.tasks), quiet=as_json)
        if as_json:
            click.echo(json.dumps(waiting.read(lambda: client.status(job_id)), indent=2))
    except TimeoutError as exc:  # not finished, or Redis unreachable, until --timeout
        fail(f"{exc}; the job goes on", EXIT_TIMEOUT)
    if not as_json:
        click.echo(f"job {job_id} {state}")
    sys.exit(0 if state == JobState.SUCCEEDED else EXIT_FAILED)


def _follow(client: Client, waiting: _Wait, total: int, quiet: bool) -> JobState:
    """Wait for a job, showing a bar on a terminal, else a line per finished task; returns
    its final state. A poll reads the job's counters and the attempts that ended since the
    last poll (a page at a time), never every task: following a huge job stays cheap."""
    job_id = waiting.job_id
    on_terminal = not quiet and sys.stdout.isatty()
    lines = _TaskLines(client, waiting, total, echo=not on_terminal) if not quiet else None
    bar = None
    if on_terminal:
        bar = click.progressbar(length=total, label="tasks finished")
        bar.__enter__()
    try:
        while True:
            progress = waiting.read(lambda: client.progress(job_id))
            if bar is not None:
                bar.length = progress.total  # a map adds its instances as it expands
                bar.update(progress.finished - bar.pos)
            if lines is not None:
                lines.total = progress.total
                lines.show_attempts()
            if progress.state.terminal:
                if lines is not None:
                    lines.show_unattempted()
                return progress.state
            waiting.check()
            time.sleep(FOLLOW_POLL_SECONDS)
    finally:
        if bar is not None:
            bar.__exit__(None, None, None)
            if lines is not None:
                lines.show_not_succeeded()


class _TaskLines:
    """`submit --wait`: a line per task as it ends (off a terminal), read from the job's
    history of attempts a page at a time; on a terminal, under the bar, the tasks that did
    not succeed once the job ended. `total` is the job's task count, which grows as a map
    expands into its instances."""

    def __init__(self, client: Client, waiting: _Wait, total: int, *, echo: bool) -> None:
        self.client, self.waiting, self.total, self.echo = client, waiting, total, echo
        self.job_id = waiting.job_id
        self.read = 0  # history entries read so far
        self.ended: set[str] = set()
        self.not_succeeded: dict[str, tuple[str, str]] = {}  # task -> state, error

    def _show(self, task_id: str, state: str, error: str | None = None) -> None:
        if task_id in self.ended:
            return
        self.ended.add(task_id)
        note = first_line(error, FOLLOW_ERROR_WIDTH) if state == TaskState.FAILED else ""
        if state != TaskState.SUCCEEDED:
            self.not_succeeded[task_id] = (state, note)
        if self.echo:
            line = f"  [{len(self.ended)}/{self.total}] {task_id} {state}"
            click.echo(f"{line}: {note}" if note else line)

    def show_attempts(self) -> None:
        """The tasks whose last attempt ended since the last call."""
        while True:
            page = self.waiting.read(
                lambda: self.client.history(self.job_id, self.read, FOLLOW_PAGE)
            )
            self.read += len(page)
            for attempt in page:
                if TaskState(attempt["state"]).terminal:
                    self._show(attempt["task"], attempt["state"], attempt["error"])
            if len(page) < FOLLOW_PAGE:
                return

    def show_unattempted(self) -> None:
        """Once the job has ended: the tasks that ended without an attempt of their own
        (upstream_failed, skipped, cancelled before they ran, a mapped task's join)."""
        if len(self.ended) >= self.total:
            return
        states = self.waiting.read(lambda: self.client.task_states(self.job_id))
        for task_id, state in states.items():
            if task_id not in self.ended and TaskState(state).terminal:
                self._show(task_id, state)

    def show_not_succeeded(self) -> None:
        """Under the bar: each failed task by name with its error, then how many others
        did not succeed, by state."""
        others: Counter[str] = Counter()
        for task_id, (state, error) in self.not_succeeded.items():
            if state == TaskState.FAILED:
                click.echo(f"  {task_id} failed: {error}")
            else:
                others[state] += 1
        if others:
            click.echo("  " + ", ".join(f"{n} {state}" for state, n in sorted(others.items())))


@click.command()
@click.argument("job_id")
@click.option("--json", "as_json", is_flag=True)
@redis_options
def status(settings: Settings, job_id: str, as_json: bool) -> None:
    """Show a job and each of its tasks."""
    client = client_for(settings)
    st = client.status(job_id)
    if as_json:
        click.echo(json.dumps(st, indent=2))
        return
    click.echo(f"job {st['id']}  {st['name']}  state={st['state']}  owner={st['owner'] or '-'}")
    click.echo(
        f"created {format_time(st['created_at'])}  finished {format_time(st['finished_at'])}"
    )
    if st.get("fire_time") is not None:
        schedule = f"  schedule {st['schedule_id']}" if st.get("schedule_id") else ""
        click.echo(f"fire time {format_time(st['fire_time'])}{schedule}")
    if st.get("tags"):
        click.echo(f"tags {format_tags(tuple(st['tags'].items()))}")
    if st.get("late_at"):
        click.echo(f"late: unfinished past its sla at {format_time(st['late_at'])}")
    if st.get("paused_at"):
        click.echo(f"paused since {format_time(st['paused_at'])}: nothing more of it starts")
    if st["error"]:
        click.echo(f"error: {st['error']}")
    rows = [("TASK", "STATE", "ATT", "HANDLER", "STARTED", "FINISHED (UTC)", "ERROR / PROGRESS")]
    unserved = {} if JobState(st["state"]).terminal else client.queued_unserved(job_id)
    for task_id, t in st["tasks"].items():
        text = first_line(t["error"] or t.get("progress"), 60)
        if t.get("waiting_for"):  # workers gave it back for want of its code
            waiting = t["waiting_for"]
            since = format_time(waiting["since"])
            text = f"waiting since {since} for a worker with {waiting['task']}"
            if task_id in unserved:
                text += ": no live worker has it"
        elif task_id in unserved:  # queued, and no live worker can run it now
            text = f"no live worker has task {unserved[task_id]}"
        elif t.get("waiting_for_limit"):  # parked: its pool or limit is full
            text = f"waiting for a slot of {t['waiting_for_limit']}"
        elif t.get("waiting_for_gate"):  # a gate it requires said no
            gate = t["waiting_for_gate"]
            text = f"waiting since {format_time(gate['since'])} for gate {gate['gate']}"
        rows.append(
            (
                task_id,
                t["state"],
                str(t["attempts"]),
                (t["handler"] or "-")[:8],
                format_time(t["started_at"])[11:],
                format_time(t["finished_at"])[11:],
                text,
            )
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]) - 1)]
    for r in rows:
        click.echo("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=False)) + "  " + r[-1])
    if st.get("notifications"):
        _show_notifications(st["notifications"], JobState(st["state"]).terminal)


def _show_notifications(notify: dict[str, Any], job_ended: bool) -> None:
    """Each channel's delivery (state, attempts, when, last error), then its attempts."""
    idle = "none: the job ended in a state not asked for" if job_ended else "waits for the end"

    click.echo(
        f"notify on {','.join(notify['on'])}"
        + (f"  webhook {notify['webhook']}" if notify["webhook"] else "")
    )
    for channel, d in notify["deliveries"].items():
        state = d["state"] or idle
        when = {"retrying": d["next_at"], "pending": d["next_at"]}.get(state, d["done_at"])
        line = f"  {channel:<8} {state:<10} attempts={d['attempts']}"
        if when:
            line += f"  {'next' if state in ('retrying', 'pending') else 'at'} {format_time(when)}"
        if d["error"]:
            line += f"  last error: {first_line(d['error'], 80)}"
        click.echo(line)
    for a in notify["attempts"]:
        click.echo(
            f"    {a['channel']} attempt {a['attempt']}: {a['outcome']}"
            f"  {format_time(a['finished_at'])}  {(a['handler'] or '-')[:8]}"
            f"  {first_line(a['detail'], 80)}"
        )


_since = parse_time_option  # --since, --until


@click.command(name="list")
@click.option("--owner", default=None)
@click.option("--state", type=click.Choice([s.value for s in JobState]), default=None)
@click.option(
    "--schedule", "schedule_id", default=None, help="Only jobs fired by this schedule (id or name)."
)
@click.option("--tag", default=None, help="Only jobs with this tag: key=value.")
@click.option("--name", default=None, help="Only jobs of this name.")
@click.option("--since", default=None, help="Created since: epoch, ISO time, or 15m/2h/7d.")
@click.option("--until", default=None, help="... and before this (same forms).")
@click.option("--limit", type=click.IntRange(min=1), default=LIST_LIMIT, show_default=True)
@click.option("--json", "as_json", is_flag=True)
@redis_options
def list_jobs(
    settings: Settings,
    owner: str | None,
    state: str | None,
    schedule_id: str | None,
    tag: str | None,
    name: str | None,
    since: str | None,
    until: str | None,
    limit: int,
    as_json: bool,
) -> None:
    """List jobs, newest first (with an archive, the jobs Redis let go too)."""
    rows = client_for(settings).list(
        owner=owner,
        state=state,
        schedule_id=schedule_id,
        tag=None if tag is None else "=".join(parse_tag_filter(tag)),
        since=_since(since),
        name=name,
        until=_since(until, "--until"),
        limit=limit,
    )
    echo_rows(
        rows,
        as_json,
        [
            ("JOB", lambda r: r["id"]),
            ("STATE", _state_marks),
            ("CREATED (UTC)", lambda r: format_time(r["created_at"])),
            ("OWNER", lambda r: r["owner"] or "-"),
            ("SCHEDULE", lambda r: r["schedule_id"] or "-"),
            ("FIRE TIME (UTC)", lambda r: format_time(r["fire_time"])),
            ("TAGS", lambda r: format_tags(tuple(r["tags"].items())) or "-"),
            ("NAME", lambda r: r["name"]),
        ],
    )


def _state_marks(row: dict[str, Any]) -> str:
    """A list row's state, with what an operator looks for: paused, late."""
    marks = [m for m, on in (("paused", row.get("paused_at")), ("late", row.get("late_at"))) if on]
    return row["state"] + (f" ({', '.join(marks)})" if marks else "")


@click.command()
@click.argument("job_id")
@click.option("--json", "as_json", is_flag=True)
@redis_options
def history(settings: Settings, job_id: str, as_json: bool) -> None:
    """Every attempt of every task of a job, oldest first."""
    echo_rows(
        client_for(settings).history(job_id),
        as_json,
        [
            ("TASK", lambda r: r["task"]),
            ("ATTEMPT", lambda r: f"#{r['attempt']}"),
            ("ENDED", lambda r: ATTEMPT_ENDINGS.get(r["state"], r["state"])),
            ("HANDLER", lambda r: (r["handler"] or "-")[:8]),
            ("STARTED (UTC)", lambda r: format_time(r["started_at"])),
            ("FINISHED (UTC)", lambda r: format_time(r["finished_at"])),
            ("ERROR", lambda r: first_line(r["error"], 60)),
        ],
    )


# How an attempt ended, in `history`'s words: an attempt recorded as retry_wait failed, and
# its task was retried (--json keeps the recorded state)
ATTEMPT_ENDINGS = {TaskState.RETRY_WAIT.value: "failed, retried"}


@click.command()
@click.option("--job", "job_id", default=None, help="Only this job's events (from its start).")
@click.option(
    "--follow",
    is_flag=True,
    help="Go on printing events as they come (Ctrl-C ends; with --job, the job's end too).",
)
@click.option("--json", "as_json", is_flag=True, help="One JSON object a line.")
@click.option("--since", default=None, help="From this time: epoch, ISO time, or 15m/2h/7d.")
@click.option(
    "--limit",
    type=click.IntRange(min=1),
    default=None,
    help="At most this many (the newest) before following; 100 without --job or --since.",
)
@redis_options
def events(
    settings: Settings,
    job_id: str | None,
    follow: bool,
    as_json: bool,
    since: str | None,
    limit: int | None,
) -> None:
    """The event stream: every transition (submitted, queued, started, succeeded, failed,
    retried, upstream_failed, cancelled, timed_out, finalized, repaired, ...), oldest first."""
    if settings.events_maxlen == 0:
        click.echo("note: JOBCENTER_EVENTS_MAXLEN=0 here: new transitions add no events", err=True)
    client = client_for(settings)
    stream = client.events()
    # read before the events: a job that had ended then has its last event among them
    ended = job_id is not None and JobState(client.state(job_id)).terminal
    since_s = _since(since)
    since_ms = None if since_s is None else int(since_s * 1000)
    if limit is None and job_id is None and since_ms is None:
        limit = DEFAULT_EVENTS
    shown, cursor = stream.read(job_id=job_id, since_ms=since_ms, limit=limit)
    if not as_json:
        click.echo(_event_line("TIME (UTC)", "JOB", "TASK", "ATT", "EVENT", "HANDLER", "NOTE"))
    for event in shown:
        _echo_event(event, as_json)
    if not follow or ended:
        return
    try:
        for event in stream.follow(cursor, job_id=job_id):
            _echo_event(event, as_json)
            if job_id is not None and event.kind == EventKind.FINALIZED:
                return  # the job ended: nothing more comes unless a retry re-opens it
    except KeyboardInterrupt:
        return


DEFAULT_EVENTS = 100  # what `events` alone shows: the newest hundred


def _echo_event(event: Event, as_json: bool) -> None:
    if as_json:
        click.echo(json.dumps(event.to_dict()))
        return
    task = "-" if event.task is None else event.task
    attempt = f"#{event.attempt}" if event.attempt is not None else ""
    note = first_line(event.error or event.detail or "", 60)
    when, handler = format_time(event.time), (event.handler or "-")[:8]
    click.echo(_event_line(when, event.job, task, attempt, event.kind, handler, note))
    sys.stdout.flush()


def _event_line(*cells: str) -> str:
    """A line of `events`, the header's too: fixed widths, as events come one at a time."""
    when, job, task, attempt, kind, handler, note = cells
    return (
        f"{when:<24}  {job:<26}  {task:<16} {attempt:<4} {kind:<15} {handler:<8}  {note}"
    ).rstrip()


@click.command()
@click.argument("job_id", required=False)
@redis_options
@bulk_options
def retry(settings: Settings, job_id: str | None, bulk: Bulk | None) -> None:
    """Re-run a failed job's failed tasks and every task below them (upstream_failed ones, and
    cleanups that ran); the other succeeded ones are kept. With filters instead of JOB_ID:
    every failed job they choose (`retry --tag customer=acme`)."""
    one_or_many(job_id, bulk, "a JOB_ID")
    client = client_for(settings)
    if bulk is None:
        click.echo(f"job {job_id}: {client.retry(str(job_id))} tasks to run again")
        return
    run_bulk(client, bulk, "retry")


@click.command()
@click.argument("job_id", required=False)
@redis_options
@bulk_options
def delete(settings: Settings, job_id: str | None, bulk: Bulk | None) -> None:
    """Delete a finished job and every trace of it. With filters instead of JOB_ID: every
    finished job they choose."""
    one_or_many(job_id, bulk, "a JOB_ID")
    client = client_for(settings)
    if bulk is None:
        client.delete(str(job_id))
        click.echo(f"job {job_id} deleted")
        return
    run_bulk(client, bulk, "delete")


@click.group()
def dlq() -> None:
    """Dead letters: tasks that failed for good (attempts exhausted, or Fatal)."""


@dlq.command(name="list")
@click.option("--limit", type=click.IntRange(min=1), default=LIST_LIMIT, show_default=True)
@click.option("--json", "as_json", is_flag=True)
@redis_options
def dlq_list(settings: Settings, limit: int, as_json: bool) -> None:
    """The newest dead letters."""
    echo_rows(
        client_for(settings).dead_letters(limit),
        as_json,
        [
            ("JOB", lambda r: r["job"]),
            ("TASK", lambda r: r["task"]),
            ("ATTEMPTS", lambda r: r["attempts"]),
            ("FAILED (UTC)", lambda r: format_time(r["failed_at"])),
            ("ERROR", lambda r: first_line(r["error"], 70)),
        ],
    )


@dlq.command(name="show")
@click.argument("job_id")
@click.argument("task_id")
@click.option("--json", "as_json", is_flag=True)
@redis_options
def dlq_show(settings: Settings, job_id: str, task_id: str, as_json: bool) -> None:
    """One dead letter: its error with traceback, and every attempt."""
    entry = client_for(settings).dead_letter(job_id, task_id)
    if as_json:
        click.echo(json.dumps(entry, indent=2))
        return
    click.echo(
        f"job {entry['job']} ({entry['job_name']}) task {entry['task']}: "
        f"{entry['attempts']} attempts, failed {format_time(entry['failed_at'])}"
    )
    for h in entry["history"]:
        click.echo(
            f"  #{h['attempt']} {h['state']} {format_time(h['finished_at'])} "
            f"{first_line(h['error'])}"
        )
    click.echo(entry["error"] or "")


@dlq.command(name="requeue")
@click.argument("job_id", required=False)
@click.argument("task_id", required=False)
@redis_options
@bulk_options
def dlq_requeue(
    settings: Settings, job_id: str | None, task_id: str | None, bulk: Bulk | None
) -> None:
    """Run a dead-lettered task again; on success its children run and the job re-finalizes.
    With filters instead of JOB_ID TASK_ID: every dead letter of the jobs they choose."""
    one_or_many(job_id, bulk, "JOB_ID TASK_ID")
    client = client_for(settings)
    if bulk is None:
        if task_id is None:
            raise SpecError("give JOB_ID TASK_ID: the dead-lettered task to requeue")
        revived = client.requeue(str(job_id), task_id)
        click.echo(f"job {job_id}: task {task_id} requeued ({revived} tasks to run again)")
        return
    run_bulk(client, bulk, "requeue")


@click.command()
@click.argument("job_id", required=False)
@redis_options
@bulk_options
def cancel(settings: Settings, job_id: str | None, bulk: Bulk | None) -> None:
    """Cancel a job: nothing more of it starts; running attempts are revoked. With filters
    instead of JOB_ID: every unfinished job they choose."""
    one_or_many(job_id, bulk, "a JOB_ID")
    client = client_for(settings)
    if bulk is None:
        click.echo(f"job {job_id} {client.cancel(str(job_id))}")
        return
    run_bulk(client, bulk, "cancel")


@click.command()
@click.argument("job_id")
@click.argument("name")
@click.option("--payload", default=None, help="JSON: the waiting tasks' result (default null).")
@redis_options
def signal(settings: Settings, job_id: str, name: str, payload: str | None) -> None:
    """Send signal NAME to JOB_ID: its tasks with `wait_for: {signal: NAME}` succeed with the
    payload as their result (a task not waiting yet keeps it). Sent twice with the same
    payload it changes nothing; exit 7 when nothing waits for it."""
    try:
        value = None if payload is None else json.loads(payload)
    except json.JSONDecodeError as exc:
        raise click.BadParameter(f"not JSON: {exc}", param_hint="--payload") from None
    released, kept = client_for(settings).signal(job_id, name, value)
    if released or kept:
        click.echo(f"job {job_id}: signal {name} released {released} task(s), kept by {kept}")
    else:
        click.echo(f"job {job_id}: signal {name} was sent already")


@click.command()
@click.argument("job_id")
@click.argument("task_id")
@click.option("--json", "as_json", is_flag=True, help="Print the value as one JSON document.")
@redis_options
def result(settings: Settings, job_id: str, task_id: str, as_json: bool) -> None:
    """Print what TASK_ID of JOB_ID returned (a mapped task: its instances' results). Exit
    2 for an unknown job or task, 7 when the task has not succeeded (yet)."""
    value = client_for(settings).result(job_id, task_id)
    if isinstance(value, str) and not as_json:
        click.echo(value)
    else:
        click.echo(json.dumps(value, indent=None if as_json else 2, default=_bytes_as_base64))


def _bytes_as_base64(value: object) -> str:
    """bytes, the one result type JSON lacks, shown as base64 text."""
    if isinstance(value, bytes):
        return base64.b64encode(value).decode()
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


@click.command()
@click.option(
    "--since", required=True, help="Jobs created since: epoch, ISO time, or an age like 2h, 7d."
)
@click.option("--until", default=None, help="... and before this (same forms; default: now).")
@click.option(
    "--state",
    "states",
    multiple=True,
    type=click.Choice(list(FINISHED_STATES)),
    help="Only jobs that ended in this state (repeatable; default: every finished state).",
)
@redis_options
def export(settings: Settings, since: str, until: str | None, states: tuple[str, ...]) -> None:
    """Print finished jobs as JSON lines, oldest first: each job's fields, its tasks (as
    `status --json`) and its attempts (as `history --json`). For history kept longer than
    Redis keeps it: `jobcenter export --since 1d > jobs.jsonl`."""
    low, high = _since(since), _since(until, "--until")
    assert low is not None
    if high is not None and high < low:
        raise SpecError(f"--until {until!r} is before --since {since!r}")
    for record in client_for(settings).export(low, high, states or None):
        click.echo(json.dumps(record, separators=(",", ":")))


COMMANDS = (
    submit,
    status,
    list_jobs,
    history,
    events,
    retry,
    delete,
    dlq,
    cancel,
    signal,
    result,
    export,
)
