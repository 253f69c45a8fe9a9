"""The `jobcenter` command: every command parses, calls the library, prints."""

from __future__ import annotations

import functools
import json
import logging
import os
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import click
import redis

from . import server
from .client import Client
from .config import DEFAULT_REDIS_URL, Settings, redacted_url
from .errors import JobcenterError, NotFound, RedisUnavailable, Refused, SpecError
from .spec import check_name, load_spec_file
from .states import JobState, TaskState

EXIT_FAILED = 1  # the job failed or was cancelled; nothing else
EXIT_BAD_INPUT = 2
EXIT_NO_REDIS = 3
EXIT_TIMEOUT = 4  # --wait gave up; the job goes on
EXIT_REFUSED = 5  # not allowed in the current state (delete of an unfinished job, ...)
EXIT_ERROR = 6  # anything else the message names (a task module that fails to import, ...)
URL_SOURCE = "jobcenter.url_source"  # click context meta: where the Redis URL came from
EXIT_UNHEALTHY = 1  # `jobcenter health` only: not ready/alive (the code Docker healthchecks expect)
HEALTH_TIMEOUT_SECONDS = 5.0  # `jobcenter health`: a worker's endpoint answers in under a second
FOLLOW_POLL_SECONDS = 0.1  # `submit --wait` reads the job's counters this often
FOLLOW_PAGE = 1_000  # history entries per read while following: each read stays short


def log_format_option(fn: Callable[..., Any]) -> Callable[..., Any]:
    return click.option(
        "--log-format",
        envvar="JOBCENTER_LOG_FORMAT",
        type=click.Choice(["text", "json"]),
        default="text",
        show_default=True,
        help="json: one object a line (time, level, worker, job, task, attempt, event) "
        "[env JOBCENTER_LOG_FORMAT].",
    )(fn)


def fail(message: str, code: int) -> None:
    click.echo(f"error: {message}", err=True)
    sys.exit(code)


def redis_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    """The options every command shares; turns library errors into exit codes."""

    @click.option(
        "--redis-url",
        envvar="JOBCENTER_REDIS_URL",
        default=None,
        help="Redis URL [env JOBCENTER_REDIS_URL; default: the server a running `jobcenter "
        "up` recorded in the nearest .jobcenter/ here or above, else the one this user "
        "started last, else redis://127.0.0.1:6379/0]",
    )
    @click.option(
        "--namespace",
        envvar="JOBCENTER_NAMESPACE",
        default=None,
        help="Namespace of keys [env JOBCENTER_NAMESPACE; default 'default']",
    )
    @functools.wraps(fn)
    def wrapper(redis_url: str | None, namespace: str | None, **kwargs: Any) -> Any:
        if redis_url is not None:
            source = "--redis-url / JOBCENTER_REDIS_URL"
        elif (found := server.find_recorded_url()) is not None:
            redis_url, place = found
            source = f"recorded by `jobcenter up` in {place}"
        else:
            redis_url, source = DEFAULT_REDIS_URL, "the default"
        click.get_current_context().meta[URL_SOURCE] = source
        try:
            settings = Settings.from_env(redis_url=redis_url, namespace=namespace)
            return fn(settings, **kwargs)
        except SpecError as exc:
            fail(str(exc), EXIT_BAD_INPUT)
        except (NotFound, ValueError) as exc:
            fail(str(exc), EXIT_BAD_INPUT)
        except RedisUnavailable as exc:
            fail(str(exc), EXIT_NO_REDIS)
        except (redis.ConnectionError, redis.TimeoutError) as exc:
            fail(f"cannot reach Redis: {exc}", EXIT_NO_REDIS)
        except redis.ResponseError as exc:
            reason = _write_refused(exc)
            if reason is None:
                raise
            # Each transition is one script, refused before its first write: none half-done.
            fail(f"Redis refused the write ({reason}); nothing of it was applied", EXIT_NO_REDIS)
        except Refused as exc:
            fail(str(exc), EXIT_REFUSED)
        except JobcenterError as exc:
            fail(str(exc), EXIT_ERROR)

    return wrapper


def _write_refused(exc: redis.ResponseError) -> str | None:
    """Why Redis refused to write, if that is what `exc` says. A command's refusal comes as
    its own class; a script's wraps the reply in a plain ResponseError (Redis < 7)."""
    message = str(exc)
    if isinstance(exc, redis.exceptions.OutOfMemoryError) or "OOM command not allowed" in message:
        return "out of memory: maxmemory reached and eviction is off"
    if isinstance(exc, redis.exceptions.ReadOnlyError) or "READONLY" in message:
        return "it is a read-only replica"
    return None


def log_server(settings: Settings) -> None:
    """Say which server and namespace a long-running command uses, and how it found them,
    so a process talking to an unexpected server shows it at once."""
    logging.getLogger("jobcenter").info(
        "using Redis at %s (%s), namespace %r",
        redacted_url(settings.redis_url),
        click.get_current_context().meta.get(URL_SOURCE, "given"),
        settings.namespace,
    )


def client_for(settings: Settings) -> Client:
    from .store import Store

    return Client(Store.from_settings(settings))


def _time(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]


@click.group()
@click.option("-v", "--verbose", count=True, help="More logging (-vv for debug).")
@click.version_option(package_name="jobcenter")
def main(verbose: int) -> None:
    """jobcenter: a DAG job center over Redis."""
    level = logging.WARNING - 10 * verbose
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")


@main.command()
@click.argument("spec_file", type=click.Path(dir_okay=False))
@click.option("--wait", is_flag=True, help="Wait for the job; exit 0 if it succeeded, else 1.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON (with --wait: final status).")
@click.option(
    "--timeout",
    type=click.FloatRange(min=0, min_open=True),
    default=None,
    help="With --wait: give up after seconds (exit 4; the job goes on).",
)
@redis_options
def submit(
    settings: Settings, spec_file: str, wait: bool, as_json: bool, timeout: float | None
) -> None:
    """Submit the job in SPEC_FILE (YAML or JSON); prints its id."""
    spec = load_spec_file(spec_file)  # validated before anything touches Redis
    client = client_for(settings)
    job_id = client.submit(spec)
    if not wait:
        click.echo(json.dumps({"id": job_id}) if as_json else job_id)
        return
    if not as_json:
        click.echo(f"job {job_id} submitted ({len(spec.tasks)} tasks)")
    state = _follow(client, job_id, len(spec.tasks), timeout, quiet=as_json)
    if as_json:
        click.echo(json.dumps(client.status(job_id), indent=2))  # the one full read
    else:
        click.echo(f"job {job_id} {state}")
    sys.exit(0 if state == JobState.SUCCEEDED else EXIT_FAILED)


def _follow(
    client: Client, job_id: str, total: int, timeout: float | None, quiet: bool
) -> JobState:
    """Wait for a job, showing a bar on a terminal, else a line per finished task; returns
    its final state. A poll reads the job's counters and the attempts that ended since the
    last poll (a page at a time), never every task: following a huge job stays cheap."""
    deadline = None if timeout is None else time.monotonic() + timeout
    lines = _TaskLines(client, job_id, total) if not quiet and not sys.stdout.isatty() else None
    bar = None
    if not quiet and lines is None:
        bar = click.progressbar(length=total, label="tasks finished")
        bar.__enter__()
    try:
        while True:
            progress = client.progress(job_id)
            if bar is not None:
                bar.update(progress.finished - bar.pos)
            if lines is not None:
                lines.show_attempts()
            if progress.state.terminal:
                if lines is not None:
                    lines.show_unattempted()
                return progress.state
            if deadline is not None and time.monotonic() >= deadline:
                fail(f"job {job_id} not finished after {timeout}s", EXIT_TIMEOUT)
            time.sleep(FOLLOW_POLL_SECONDS)
    finally:
        if bar is not None:
            bar.__exit__(None, None, None)


class _TaskLines:
    """`submit --wait` off a terminal: a line per task as it ends, read from the job's
    history of attempts a page at a time."""

    def __init__(self, client: Client, job_id: str, total: int) -> None:
        self.client, self.job_id, self.total = client, job_id, total
        self.read = 0  # history entries read so far
        self.ended: set[str] = set()

    def _show(self, task_id: str, state: str) -> None:
        self.ended.add(task_id)
        click.echo(f"  [{len(self.ended)}/{self.total}] {task_id} {state}")

    def show_attempts(self) -> None:
        """The tasks whose last attempt ended since the last call."""
        while True:
            page = self.client.history(self.job_id, self.read, FOLLOW_PAGE)
            self.read += len(page)
            for attempt in page:
                if TaskState(attempt["state"]).terminal:
                    self._show(attempt["task"], attempt["state"])
            if len(page) < FOLLOW_PAGE:
                return

    def show_unattempted(self) -> None:
        """Once the job has ended: the tasks that ended without an attempt of their own
        (upstream_failed, or cancelled before they ran)."""
        if len(self.ended) >= self.total:
            return
        for task_id, state in self.client.task_states(self.job_id).items():
            if task_id not in self.ended and TaskState(state).terminal:
                self._show(task_id, state)


@main.command()
@click.argument("job_id")
@click.option("--json", "as_json", is_flag=True)
@redis_options
def status(settings: Settings, job_id: str, as_json: bool) -> None:
    """Show a job and each of its tasks."""
    st = client_for(settings).status(job_id)
    if as_json:
        click.echo(json.dumps(st, indent=2))
        return
    click.echo(f"job {st['id']}  {st['name']}  state={st['state']}  owner={st['owner'] or '-'}")
    click.echo(f"created {_time(st['created_at'])}  finished {_time(st['finished_at'])}")
    rows = [("TASK", "STATE", "ATT", "HANDLER", "STARTED", "FINISHED", "ERROR / PROGRESS")]
    for task_id, t in st["tasks"].items():
        note = (t["error"] or t.get("progress") or "").splitlines()
        text = note[0][:60] if note else ""
        if t.get("waiting_for"):  # workers gave it back for want of its code
            waiting = t["waiting_for"]
            text = f"waiting since {_time(waiting['since'])} for a worker with {waiting['task']}"
        rows.append(
            (
                task_id,
                t["state"],
                str(t["attempts"]),
                (t["handler"] or "-")[:8],
                _time(t["started_at"])[11:],
                _time(t["finished_at"])[11:],
                text,
            )
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]) - 1)]
    for r in rows:
        click.echo("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=False)) + "  " + r[-1])


def _since(value: str | None) -> float | None:
    """--since: epoch seconds, an ISO time, or an age like 90s, 15m, 2h, 7d."""
    if value is None:
        return None
    units = {"s": 1, "m": 60, "h": 3600, "d": 86400}
    if value[-1:] in units and value[:-1].replace(".", "", 1).isdigit():
        return time.time() - float(value[:-1]) * units[value[-1]]
    try:
        return float(value)
    except ValueError:
        pass
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        raise SpecError(
            f"--since {value!r}: give epoch seconds, an ISO time or an age like 15m, 2h, 7d"
        ) from None
    return (moment if moment.tzinfo else moment.replace(tzinfo=UTC)).timestamp()


@main.command(name="list")
@click.option("--owner", default=None)
@click.option("--state", type=click.Choice([s.value for s in JobState]), default=None)
@click.option("--schedule", "schedule_id", default=None, help="Only jobs fired by this schedule.")
@click.option("--since", default=None, help="Created since: epoch, ISO time, or 15m/2h/7d.")
@click.option("--limit", type=click.IntRange(min=1), default=50, show_default=True)
@click.option("--json", "as_json", is_flag=True)
@redis_options
def list_jobs(
    settings: Settings,
    owner: str | None,
    state: str | None,
    schedule_id: str | None,
    since: str | None,
    limit: int,
    as_json: bool,
) -> None:
    """List jobs, newest first."""
    rows = client_for(settings).list(
        owner=owner, state=state, schedule_id=schedule_id, since=_since(since), limit=limit
    )
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    for r in rows:
        fired = f"  schedule {r['schedule_id']}" if r["schedule_id"] else ""
        click.echo(
            f"{r['id']}  {r['state']:<9}  {_time(r['created_at'])}  "
            f"{r['owner'] or '-':<10}  {r['name']}{fired}"
        )


@main.command()
@click.argument("job_id")
@click.option("--json", "as_json", is_flag=True)
@redis_options
def history(settings: Settings, job_id: str, as_json: bool) -> None:
    """Every attempt of every task of a job, oldest first."""
    rows = client_for(settings).history(job_id)
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    for r in rows:
        error = (r["error"] or "").splitlines()
        click.echo(
            f"{r['task']:<20} #{r['attempt']:<3} {r['state']:<11} "
            f"{(r['handler'] or '-')[:8]:<8}  {_time(r['started_at'])}  "
            f"{_time(r['finished_at'])}  {error[0][:60] if error else ''}"
        )


@main.command()
@click.argument("job_id")
@redis_options
def retry(settings: Settings, job_id: str) -> None:
    """Re-run a failed job's failed and upstream_failed tasks; succeeded ones are kept."""
    revived = client_for(settings).retry(job_id)
    click.echo(f"job {job_id}: {revived} tasks to run again")


@main.command()
@click.argument("job_id")
@redis_options
def delete(settings: Settings, job_id: str) -> None:
    """Delete a finished job and every trace of it."""
    client_for(settings).delete(job_id)
    click.echo(f"job {job_id} deleted")


@main.group()
def dlq() -> None:
    """Dead letters: tasks that failed for good (attempts exhausted, or Fatal)."""


@dlq.command(name="list")
@click.option("--limit", type=click.IntRange(min=1), default=50, show_default=True)
@click.option("--json", "as_json", is_flag=True)
@redis_options
def dlq_list(settings: Settings, limit: int, as_json: bool) -> None:
    """The newest dead letters."""
    rows = client_for(settings).dead_letters(limit)
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    for r in rows:
        error = (r["error"] or "").splitlines()
        click.echo(
            f"{r['job']}  {r['task']:<20} attempts={r['attempts']:<3} "
            f"{_time(r['failed_at'])}  {error[0][:70] if error else ''}"
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
        f"{entry['attempts']} attempts, failed {_time(entry['failed_at'])}"
    )
    for h in entry["history"]:
        first = (h["error"] or "").splitlines()
        click.echo(
            f"  #{h['attempt']} {h['state']} {_time(h['finished_at'])} {first[0] if first else ''}"
        )
    click.echo(entry["error"] or "")


@dlq.command(name="requeue")
@click.argument("job_id")
@click.argument("task_id")
@redis_options
def dlq_requeue(settings: Settings, job_id: str, task_id: str) -> None:
    """Run a dead-lettered task again; on success its children run and the job re-finalizes."""
    revived = client_for(settings).requeue(job_id, task_id)
    click.echo(f"job {job_id}: task {task_id} requeued ({revived} tasks to run again)")


@main.command()
@click.argument("job_id")
@redis_options
def cancel(settings: Settings, job_id: str) -> None:
    """Cancel a job: nothing more of it starts; running attempts are revoked."""
    click.echo(f"job {job_id} {client_for(settings).cancel(job_id)}")


@main.command()
@click.argument("modules", nargs=-1, envvar="JOBCENTER_MODULES")
@click.option(
    "--queues",
    "-q",
    envvar="JOBCENTER_QUEUES",
    default="default",
    show_default=True,
    help="Comma-separated queues, served in this order [env JOBCENTER_QUEUES].",
)
@click.option(
    "--node",
    envvar="JOBCENTER_NODE",
    default=None,
    help="Also serve this node's private queue [env JOBCENTER_NODE].",
)
@click.option(
    "--concurrency",
    "-c",
    envvar="JOBCENTER_CONCURRENCY",
    type=int,
    default=4,
    show_default=True,
    help="Task slots [env JOBCENTER_CONCURRENCY].",
)
@click.option(
    "--pool",
    envvar="JOBCENTER_POOL",
    type=click.Choice(["thread", "process"]),
    default="thread",
    show_default=True,
    help="process: for CPU-bound tasks [env JOBCENTER_POOL].",
)
@click.option("--burst", is_flag=True, help="Exit when nothing is left to do.")
@click.option(
    "--allow-shell",
    is_flag=True,
    help="Register the built-in 'jobcenter.shell' task (runs commands): off by "
    "default, since anyone who can submit jobs could then run commands here.",
)
@click.option(
    "--health-port",
    envvar="JOBCENTER_HEALTH_PORT",
    type=click.IntRange(0, 65535),
    default=None,
    help="Serve /healthz (alive) and /readyz (ready) on this port; 0: any free port "
    "(logged) [env JOBCENTER_HEALTH_PORT; default: none].",
)
@click.option(
    "--health-host",
    envvar="JOBCENTER_HEALTH_HOST",
    default="127.0.0.1",
    show_default=True,
    help="Address of the health endpoint; 0.0.0.0 for Kubernetes probes "
    "[env JOBCENTER_HEALTH_HOST].",
)
@log_format_option
@redis_options
def worker(
    settings: Settings,
    modules: tuple[str, ...],
    queues: str,
    node: str | None,
    concurrency: int,
    pool: str,
    burst: bool,
    allow_shell: bool,
    health_port: int | None,
    health_host: str,
    log_format: str,
) -> None:
    """Run a worker; MODULES are imported to register their @task functions
    [env JOBCENTER_MODULES, separated by spaces]."""
    from . import health, logs, registry
    from .store import Store
    from .worker import Options, Worker

    if concurrency < 1:
        raise SpecError("--concurrency must be >= 1")
    served = [check_name(q.strip(), f"--queues {queues!r}: each queue") for q in queues.split(",")]
    if node is not None:
        check_name(node, "--node")
    logs.configure(log_format)
    os.environ[logs.FORMAT_ENV] = log_format  # the rq recovery child logs the same way
    logging.getLogger("jobcenter").setLevel(min(logging.INFO, logging.getLogger().level))
    if allow_shell:
        modules = (*modules, "jobcenter.shell")
    # MODULES are found in the current directory, as under `python -m jobcenter` (the
    # console script's sys.path starts with its own bin directory instead)
    if "" not in sys.path and str(Path.cwd()) not in sys.path:
        sys.path.insert(0, str(Path.cwd()))
    registry.import_modules(modules)
    options = Options(
        queues=served,
        node=node,
        concurrency=concurrency,
        pool=pool,
        burst=burst,
        modules=list(modules),
    )
    log_server(settings)
    w = Worker(Store.from_settings(settings), options)
    logs.set_worker(w.handler)
    w.install_signal_handlers()
    health.start(w, health_host, health_port)
    w.run()


@main.command()
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option(
    "--port", type=click.IntRange(0, 65535), default=8080, show_default=True, help="0: any."
)
@click.option(
    "--token",
    envvar="JOBCENTER_DASHBOARD_TOKEN",
    default=None,
    help="Allow actions (cancel, retry, requeue, pause, resume) to whoever sends this "
    "token; without it the dashboard is read-only [env JOBCENTER_DASHBOARD_TOKEN, "
    "which `ps` does not show].",
)
@log_format_option
@redis_options
def dashboard(settings: Settings, host: str, port: int, token: str | None, log_format: str) -> None:
    """Serve the web dashboard: jobs, each job's live DAG, workers, queues, dead letters,
    schedules and recovery."""
    from . import logs

    try:
        from .web import serve
    except ImportError as exc:
        fail(
            f"the dashboard needs its extra: pip install 'jobcenter[dashboard]' ({exc})",
            EXIT_BAD_INPUT,
        )
    logs.configure(log_format)
    verbose = logging.getLogger().level < logging.WARNING
    logging.getLogger("jobcenter").setLevel(min(logging.INFO, logging.getLogger().level))
    logging.getLogger("uvicorn.error").setLevel(logging.INFO)
    # a collector reading JSON lines gets the address as one of them
    announce = click.echo if log_format == "text" else logging.getLogger("jobcenter.web").info
    try:
        serve.run(
            client_for(settings), host=host, port=port, token=token or None,
            access_log=verbose, announce=announce,
        )  # fmt: skip
    except OSError as exc:
        fail(f"cannot listen on {host}:{port}: {exc}", EXIT_BAD_INPUT)


@main.command(name="health")
@click.option(
    "--port",
    envvar="JOBCENTER_HEALTH_PORT",
    type=click.IntRange(1, 65535),
    required=True,
    help="The worker's --health-port [env JOBCENTER_HEALTH_PORT].",
)
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--alive", "check_alive", is_flag=True, help="Ask /healthz instead of /readyz.")
def health_command(port: int, host: str, check_alive: bool) -> None:
    """Ask a worker's health endpoint: exit 0 if it is ready (alive, with --alive), else 1.
    For supervisors that run a command (Docker HEALTHCHECK, compose)."""
    import urllib.error
    import urllib.request

    url = f"http://{host}:{port}/{'healthz' if check_alive else 'readyz'}"
    try:
        with urllib.request.urlopen(url, timeout=HEALTH_TIMEOUT_SECONDS) as reply:
            click.echo(reply.read().decode().strip())
    except urllib.error.HTTPError as exc:  # 503: it answered "no"
        click.echo(exc.read().decode().strip())
        sys.exit(EXIT_UNHEALTHY)
    except OSError as exc:
        fail(f"no worker health endpoint at {url}: {exc}", EXIT_UNHEALTHY)


@main.command()
@click.option(
    "--once",
    is_flag=True,
    required=True,
    help="Run one recovery pass now (workers run one every interval).",
)
@click.option("--json", "as_json", is_flag=True)
@redis_options
def recover(settings: Settings, once: bool, as_json: bool) -> None:
    """Repair what crashes and lost messages left behind (DESIGN.md section 6)."""
    from .ids import handler_id
    from .recovery import Recovery
    from .store import Store

    report = Recovery(Store.from_settings(settings), f"cli:{handler_id()}").run()
    if as_json:
        click.echo(json.dumps(report.to_dict(), indent=2))
    elif not report.ran:
        click.echo(f"recovery did not run: {report.skipped}")
    else:
        click.echo(
            f"recovery checked {report.jobs_checked} unfinished jobs; {report.repairs} repairs"
        )
        for name, value in report.to_dict().items():
            if name not in ("ran", "skipped", "jobs_checked") and value:
                click.echo(f"  {name}: {value}")


@main.command()
@click.option(
    "--dir",
    "data_dir",
    type=click.Path(file_okay=False),
    default=".jobcenter",
    show_default=True,
    help="Where the server keeps its data and URL.",
)
@click.option("--port", type=click.IntRange(1, 65535), default=None, help="Default: a free port.")
def up(data_dir: str, port: int | None) -> None:
    """Run a managed redis-server for local use (AOF on, noeviction) until Ctrl-C."""
    try:
        server.run_up(Path(data_dir), port, click.echo)
    except Refused as exc:
        fail(str(exc), EXIT_REFUSED)
    except JobcenterError as exc:
        fail(str(exc), EXIT_ERROR)


from .cli_schedule import schedule_group  # noqa: E402 (it imports redis_options from here)

main.add_command(schedule_group)
