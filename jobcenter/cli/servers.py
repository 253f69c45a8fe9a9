"""Commands that run something: a worker, the dashboard, a recovery pass, a managed
redis-server (`up`), and the health probe of a running worker."""

from __future__ import annotations

import json
import logging
import os
import sys
from pathlib import Path

import click

from jobcenter.config import DEFAULT_CONCURRENCY, POOLS, THREAD_POOL, Settings
from jobcenter.errors import JobcenterError, Refused, SpecError
from jobcenter.model.spec import DEFAULT_QUEUE, check_name
from jobcenter.storage.server import embedded as server

from .options import (
    EXIT_BAD_INPUT,
    EXIT_ERROR,
    EXIT_REFUSED,
    EXIT_UNHEALTHY,
    HEALTH_TIMEOUT_SECONDS,
    LOCAL_HOST,
    client_for,
    fail,
    http_server_setup,
    listen_options,
    log_format_option,
    log_server,
    redis_options,
)

# Task slots of one worker: each is a thread of its own (a child process with --pool
# process), started at once; more than this is a typo, not a machine.
MAX_CONCURRENCY = 10_000


@click.command()
@click.argument("modules", nargs=-1, envvar="JOBCENTER_MODULES")
@click.option(
    "--queues",
    "-q",
    envvar="JOBCENTER_QUEUES",
    default=DEFAULT_QUEUE,
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
    default=DEFAULT_CONCURRENCY,
    show_default=True,
    help="Task slots [env JOBCENTER_CONCURRENCY].",
)
@click.option(
    "--pool",
    envvar="JOBCENTER_POOL",
    type=click.Choice(POOLS),
    default=THREAD_POOL,
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
    default=LOCAL_HOST,
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
    from jobcenter.runtime import exits, health, logs, registry
    from jobcenter.runtime.worker import Options, Worker
    from jobcenter.storage.store import Store

    if not 1 <= concurrency <= MAX_CONCURRENCY:
        raise SpecError(
            f"--concurrency (JOBCENTER_CONCURRENCY) must be from 1 to {MAX_CONCURRENCY}, "
            f"got {concurrency}"
        )
    served = [check_name(q.strip(), f"--queues {queues!r}: each queue") for q in queues.split(",")]
    if node is not None:
        check_name(node, "--node")
    logs.configure(log_format)
    os.environ[logs.FORMAT_ENV] = log_format  # the rq recovery child logs the same way
    # a step more than other commands: info by default (the worker's own lines and its
    # tasks' logging.info), debug with -v
    root = logging.getLogger()
    root.setLevel(max(logging.DEBUG, root.level - 10))
    if allow_shell:
        modules = (*modules, "jobcenter.runtime.shell")
    # MODULES are found in the current directory, as under `python -m jobcenter` (the
    # console script's sys.path starts with its own bin directory instead)
    if "" not in sys.path and str(Path.cwd()) not in sys.path:
        sys.path.insert(0, str(Path.cwd()))
    exits.guard()  # before the task modules load: an os._exit of theirs is no chosen stop
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
    exits.finish(0)  # stopped as it chose: no thread a task left running keeps it alive


@click.command()
@listen_options
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
def dashboard(
    settings: Settings,
    host: str,
    port: int,
    token: str | None,
    allowed_hosts: str,
    log_format: str,
) -> None:
    """Serve the web dashboard: jobs, each job's live DAG, workers, queues, dead letters,
    schedules and recovery."""

    try:
        from jobcenter.web import serve
    except ImportError as exc:
        fail(
            f"the dashboard needs its extra: pip install 'jobcenter[dashboard]' ({exc})",
            EXIT_BAD_INPUT,
        )
    hosts, verbose, announce = http_server_setup(host, allowed_hosts, log_format, "jobcenter.web")
    try:
        serve.run(
            client_for(settings), host=host, port=port, token=token or None,
            access_log=verbose, announce=announce, hosts=hosts,
        )  # fmt: skip
    except OSError as exc:
        fail(f"cannot listen on {host}:{port}: {exc}", EXIT_BAD_INPUT)


@click.command(name="metrics")
@redis_options
def metrics_command(settings: Settings) -> None:
    """Print the namespace's figures in the Prometheus text format (what the dashboard serves
    at /metrics)."""
    try:
        from jobcenter.web.metrics import exposition
    except ImportError as exc:
        fail(
            f"metrics need the dashboard extra: pip install 'jobcenter[dashboard]' ({exc})",
            EXIT_BAD_INPUT,
        )
    click.echo(exposition(client_for(settings).store).decode(), nl=False)


@click.command(name="health")
@click.option(
    "--port",
    envvar="JOBCENTER_HEALTH_PORT",
    type=click.IntRange(1, 65535),
    required=True,
    help="The worker's --health-port [env JOBCENTER_HEALTH_PORT].",
)
@click.option("--host", default=LOCAL_HOST, show_default=True)
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


@click.command()
@click.option(
    "--once",
    is_flag=True,
    required=True,
    help="Run one recovery pass now (workers run one every interval).",
)
@click.option("--json", "as_json", is_flag=True)
@redis_options
def recover(settings: Settings, once: bool, as_json: bool) -> None:
    """Repair what crashes and lost messages left behind (ARCHITECTURE.md, Recovery)."""
    from jobcenter.model.ids import handler_id
    from jobcenter.runtime.recovery import Recovery
    from jobcenter.storage.store import Store

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


@click.command()
@click.option(
    "--dir",
    "data_dir",
    type=click.Path(file_okay=False),
    default=str(server.DEFAULT_DATA_DIR),
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


COMMANDS = (worker, dashboard, metrics_command, health_command, recover, up)
