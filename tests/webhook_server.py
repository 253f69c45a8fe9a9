"""A real local HTTP endpoint for the notification tests: http.server in a thread, answering
each POST with the next scripted answer (a status code, or HANG: no answer until the test
releases it), recording every request it got. It listens on loopback, where a worker posts
only when the allow-list says so: the tests that use it set ALLOW_ENV (workers) and
ALLOW (a client's webhook_allow) explicitly. `raw_server` answers with whatever bytes it is
given, as a port that speaks no HTTP does."""

from __future__ import annotations

import hashlib
import hmac
import json
import socket
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from jobcenter import Client
from jobcenter.storage.store import Store

HANG = 0  # a scripted answer: hold the request without answering until released
HANG_MAX_SECONDS = 60.0  # a held request is let go at last, so no thread outlives its test
ALLOW = "127.0.0.1"  # the allow-list entry that lets a worker post to these servers
ALLOW_ENV = {"JOBCENTER_WEBHOOK_ALLOW": ALLOW}


def allowing(client: Client) -> Client:
    """`client` with these loopback servers allow-listed, to submit jobs that notify them."""
    return Client(Store(client.store.redis, replace(client.settings, webhook_allow=(ALLOW,))))


@dataclass(frozen=True)
class Received:
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)

    def signed_by(self, secret: str) -> bool:
        """The signature header is HMAC-SHA256 of '<timestamp>.<body>' keyed by `secret`,
        checked as the README tells a receiver to."""
        timestamp = self.headers["x-jobcenter-timestamp"]
        mac = hmac.new(secret.encode(), timestamp.encode() + b"." + self.body, hashlib.sha256)
        expected = "sha256=" + mac.hexdigest()
        return hmac.compare_digest(expected, self.headers.get("x-jobcenter-signature", ""))


class WebhookServer:
    """Answers the n-th POST with answers[n] (the last answer repeats)."""

    def __init__(self, answers: Sequence[int]) -> None:
        self.answers = list(answers)
        self.received: list[Received] = []
        self.released = threading.Event()
        self.lock = threading.Lock()
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        host, port = self.httpd.server_address[:2]
        return f"http://{host!s}:{port}/hooks/jobcenter"

    def count(self) -> int:
        with self.lock:
            return len(self.received)

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (http.server's name)
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                with server.lock:
                    n = len(server.received)
                    server.received.append(
                        Received({k.lower(): v for k, v in self.headers.items()}, body)
                    )
                    answer = server.answers[min(n, len(server.answers) - 1)]
                if answer == HANG:
                    server.released.wait(HANG_MAX_SECONDS)
                    return  # the connection closes without an answer
                self.send_response(answer)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                pass

        return Handler


@contextmanager
def webhook_server(answers: Sequence[int]) -> Iterator[WebhookServer]:
    server = WebhookServer(answers)
    server.thread.start()
    try:
        yield server
    finally:
        server.released.set()
        server.httpd.shutdown()
        server.httpd.server_close()


@contextmanager
def raw_server(reply: bytes) -> Iterator[str]:
    """A loopback port that answers every connection with `reply` and closes it; its URL."""
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(HANG_MAX_SECONDS)

    def serve() -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return  # closed: the test is over
            with conn:
                conn.settimeout(HANG_MAX_SECONDS)
                try:
                    conn.recv(65536)
                    conn.sendall(reply)
                except OSError:
                    pass

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}/hooks/jobcenter"
    finally:
        listener.shutdown(socket.SHUT_RDWR)  # wakes the accept (Linux)
        listener.close()
        thread.join(HANG_MAX_SECONDS)
