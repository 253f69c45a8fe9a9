"""What every `jobcenter` command shares: the Redis options (one decorator that also turns
library errors into exit codes), the exit codes, and small printing helpers."""

from __future__ import annotations

import functools
import json
import logging
import os
import sys
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any

import click

from jobcenter.client import Client
from jobcenter.config import DEFAULT_NAMESPACE, DEFAULT_REDIS_URL, Settings, redacted_url
from jobcenter.errors import (
    JobcenterError,
    NoResult,
    NotFound,
    RedisUnavailable,
    Refused,
    SpecError,
)
from jobcenter.model.durations import parse_seconds
from jobcenter.storage.server import embedded as server
from jobcenter.storage.server.errors import UNREACHABLE, ResponseError, write_refused

EXIT_FAILED = 1  # the job failed or was cancelled; nothing else
EXIT_BAD_INPUT = 2
EXIT_NO_REDIS = 3
EXIT_TIMEOUT = 4  # --wait gave up; the job goes on
EXIT_REFUSED = 5  # not allowed in the current state (delete of an unfinished job, ...)
EXIT_ERROR = 6  # anything else the message names (a task module that fails to import, ...)
EXIT_NO_RESULT = 7  # `result`: the task exists but has not succeeded (yet)
URL_SOURCE = "jobcenter.url_source"  # click context meta: where the Redis URL came from
EXIT_UNHEALTHY = 1  # `jobcenter health` only: not ready/alive (the code Docker healthchecks expect)
HEALTH_TIMEOUT_SECONDS = 5.0  # `jobcenter health`: a worker's endpoint answers in under a second
FOLLOW_POLL_SECONDS = 0.1  # `submit --wait` reads the job's counters this often
FOLLOW_PAGE = 1_000  # history entries per read while following: each read stays short
FOLLOW_ERROR_WIDTH = 100  # a failed task's error while following: its first line, cut here
LOCAL_HOST = "127.0.0.1"  # what a server listens on, and `health` asks, unless told: this machine
DEFAULT_HTTP_PORT = 8080  # the dashboard's and the API's port unless told


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


def listen_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    """--host, --port and --allowed-hosts of the commands serving HTTP (dashboard, serve)."""
    options = [
        click.option("--host", default=LOCAL_HOST, show_default=True, help="Address to listen on."),
        click.option(
            "--port",
            type=click.IntRange(0, 65535),
            default=DEFAULT_HTTP_PORT,
            show_default=True,
            help="0: any.",
        ),  # fmt: skip
        click.option(
            "--allowed-hosts",
            envvar="JOBCENTER_ALLOWED_HOSTS",
            default="",
            help="Comma-separated names the server is reached by, beside localhost, "
            "127.0.0.1, [::1] and --host: a request for any other Host is refused (400), so "
            "that no other site's page can read it; *.example.com for a domain, * for any "
            "[env JOBCENTER_ALLOWED_HOSTS].",
        ),
    ]
    for option in reversed(options):
        fn = option(fn)
    return fn


def more_verbose(ctx: click.Context, param: click.Parameter, count: int) -> None:
    """`-v` given after a command (`jobcenter worker -v`): as before it, each one lowers the
    logging level a step (-vv: debug)."""
    if count:
        root = logging.getLogger()
        root.setLevel(max(logging.DEBUG, root.getEffectiveLevel() - 10 * count))


def verbose_option() -> click.Option:
    """The -v every command takes after its name, as the main command takes it before."""
    return click.Option(
        ["-v", "--verbose"],
        count=True,
        expose_value=False,
        callback=more_verbose,
        help="More logging (-vv for debug); also before the command.",
    )


def http_server_setup(
    host: str, allowed_hosts: str, log_format: str, logger: str
) -> tuple[list[str], bool, Callable[[str], None]]:
    """What `dashboard` and `serve` do before they listen: the Host names they answer (exit 2
    naming a bad one), logging configured, and whether to log each request; and how they
    say their address (a line, or a JSON log line a collector reads)."""
    from jobcenter.runtime import logs
    from jobcenter.web.serve import allowed_hosts as hosts_for

    try:
        hosts = hosts_for(host, allowed_hosts.split(","))
    except ValueError as exc:
        fail(str(exc), EXIT_BAD_INPUT)
    logs.configure(log_format)
    verbose = logging.getLogger().level < logging.WARNING
    logging.getLogger("jobcenter").setLevel(min(logging.INFO, logging.getLogger().level))
    logging.getLogger("uvicorn.error").setLevel(logging.INFO)
    announce = click.echo if log_format == "text" else logging.getLogger(logger).info
    return hosts, verbose, announce


def fail(message: str, code: int) -> None:
    click.echo(f"error: {message}", err=True)
    sys.exit(code)


class BadInput(click.ClickException):
    """A bad option value found while click reads the options: exit 2, said as `fail` says it."""

    exit_code = EXIT_BAD_INPUT

    def show(self, file: Any = None) -> None:
        click.echo(f"error: {self.format_message()}", err=True)


class Duration(click.ParamType):  # type: ignore[type-arg]  # generic from click 8.2 only
    """An option taking a duration > 0 in seconds, in any form a spec takes (30, 90s, 15m,
    1h30m, PT1H: model.durations), refused with the message a spec's gets."""

    name = "duration"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        what = max(param.opts, key=len) if param is not None else "the duration"
        try:
            return parse_seconds(value, what, low_open=True)
        except SpecError as exc:
            raise BadInput(str(exc)) from None


def redis_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    """The options every command shares; turns library errors into exit codes."""

    @click.option(
        "--redis-url",
        envvar="JOBCENTER_REDIS_URL",
        default=None,
        help="Redis URL [env JOBCENTER_REDIS_URL; default: the server a running `jobcenter "
        f"up` recorded in the nearest {server.DEFAULT_DATA_DIR}/ here or above, else the one this "
        f"user started last, else {DEFAULT_REDIS_URL}]",
    )
    @click.option(
        "--namespace",
        envvar="JOBCENTER_NAMESPACE",
        default=None,
        help=f"Namespace of keys [env JOBCENTER_NAMESPACE; default {DEFAULT_NAMESPACE!r}]",
    )
    @functools.wraps(fn)
    def wrapper(redis_url: str | None, namespace: str | None, **kwargs: Any) -> Any:
        archive_url = None
        if redis_url is not None:
            source = "--redis-url / JOBCENTER_REDIS_URL"
        else:
            redis_url, source = server.local_url()
            # the server of a `jobcenter up`: its SQLite archive, unless one is given
            if not os.environ.get("JOBCENTER_ARCHIVE_URL"):
                archive_url = server.recorded_archive_url() or None
        click.get_current_context().meta[URL_SOURCE] = source
        try:
            settings = Settings.from_env(
                redis_url=redis_url, namespace=namespace, archive_url=archive_url
            )
            return fn(settings, **kwargs)
        except SpecError as exc:
            fail(str(exc), EXIT_BAD_INPUT)
        except (NotFound, ValueError) as exc:
            fail(str(exc), EXIT_BAD_INPUT)
        except RedisUnavailable as exc:
            fail(str(exc), EXIT_NO_REDIS)
        except UNREACHABLE as exc:
            fail(f"cannot reach Redis: {exc}", EXIT_NO_REDIS)
        except ResponseError as exc:
            reason = write_refused(exc)
            if reason is None:
                raise
            # Each transition is one script, refused before its first write: none half-done.
            fail(f"Redis refused the write ({reason}); nothing of it was applied", EXIT_NO_REDIS)
        except Refused as exc:
            fail(str(exc), EXIT_REFUSED)
        except NoResult as exc:
            fail(str(exc), EXIT_NO_RESULT)
        except JobcenterError as exc:
            fail(str(exc), EXIT_ERROR)

    return wrapper


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
    from jobcenter.storage.store import Store

    return Client(Store.from_settings(settings))


def format_time(seconds: float | None, *, to_second: bool = False) -> str:
    """A time for the tables, in UTC, which its 'Z' says: to the millisecond (attempts,
    jobs), or to the second (schedule fires); '-' for none."""
    if seconds is None:
        return "-"
    moment = datetime.fromtimestamp(seconds, UTC)
    if to_second:
        return moment.strftime("%Y-%m-%d %H:%M:%SZ")
    return moment.strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + "Z"


def first_line(text: str | None, width: int | None = None) -> str:
    """The first line of an error or note (its traceback left out), cut to `width`."""
    lines = (text or "").splitlines()
    return lines[0][:width] if lines else ""


Column = tuple[str, Callable[[dict[str, Any]], Any]]  # a table's header, and its cell


def echo_rows(rows: list[dict[str, Any]], as_json: bool, columns: Sequence[Column]) -> None:
    """A listing: the rows as one JSON document, or a table under a header line, its
    columns aligned (the last one, free text, is not padded)."""
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    table = [[header for header, _ in columns]]
    table += [[str(cell(row)) for _, cell in columns] for row in rows]
    widths = [max(len(line[k]) for line in table) for k in range(len(columns) - 1)]
    for line in table:
        padded = [text.ljust(width) for text, width in zip(line, widths, strict=False)]
        click.echo("  ".join([*padded, line[-1]]).rstrip())
