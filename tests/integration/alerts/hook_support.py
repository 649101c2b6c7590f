"""What the alert-hook tests run against: the real ``kvpilot alert-hook`` process on 127.0.0.1, a
Prometheus stand-in that misbehaves on purpose (never answers, trickles, answers hostile labels), raw
sockets for slow and malformed clients (the forward sink's receiver and the Kubernetes API stand-in are
tests.integration.diagnose.fakes.LoopbackServer). Every server listens on loopback on a free port and is
stopped by the test (the hook by its PID).
"""

from __future__ import annotations

import json
import os
import select
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from tests.support.prom import free_port
from tests.support.waiting import stop_process, wait_for

TOKEN = "s3cret-hook-token"
FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "webhooks"


def fixture(name: str) -> dict:
    return json.loads((FIXTURES / name).read_text())


def alert_body(*labels: dict[str, str], status: str = "firing", fingerprint: str | None = None) -> dict:
    """An Alertmanager v4 body with one alert per label set."""
    alerts = []
    for i, ls in enumerate(labels):
        alert = {"status": status, "labels": {"alertname": "VLLMKVCacheExhaustion", **ls}, "annotations": {}}
        alert["fingerprint"] = fingerprint if fingerprint is not None else f"{i:016x}"
        alerts.append(alert)
    return {"version": "4", "status": status, "receiver": "kvpilot", "alerts": alerts}


@dataclass
class Query:
    """One request the stand-in received: when it was opened and when the client let it go."""

    path: str
    params: dict[str, str]
    headers: dict[str, str]
    opened: float
    closed: float | None = None

    def matches(self, text: str) -> bool:
        return text in self.params.get("query", "")


def vector(rows: list[dict[str, str]], value: str = "1") -> dict:
    """A Prometheus instant-vector answer (prometheus.io/docs/prometheus/latest/querying/api/)."""
    return {
        "status": "success",
        "data": {"resultType": "vector", "result": [{"metric": r, "value": [time.time(), value]} for r in rows]},
    }


def matrix(rows: list[dict[str, str]], value: str = "1") -> dict:
    """A range-matrix answer: one point per row."""
    return {
        "status": "success",
        "data": {"resultType": "matrix", "result": [{"metric": r, "values": [[time.time(), value]]} for r in rows]},
    }


@dataclass
class StandIn:
    """A Prometheus stand-in on 127.0.0.1.

    ``mode``: ``never`` (reads the query, never answers; holds the connection until the client closes
    it), ``slow`` (answers one byte every 0.5 s), ``rows`` (answers ``rows(query)`` as a vector, or a
    matrix for ``/api/v1/query_range``; ``fail(query)`` may return ``(status, error text)`` instead).
    ``queries`` records every request with the time it was opened and the time the client closed it
    (``never``/``slow``) or it was answered.
    """

    mode: str
    rows: Callable[[Query], list[dict[str, str]]] = lambda _q: []
    fail: Callable[[Query], tuple[int, str] | None] = lambda _q: None
    queries: list[Query] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.stop = threading.Event()
        self.lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self) -> None:  # http.server's naming
                url = urllib.parse.urlsplit(self.path)
                query = Query(url.path, dict(urllib.parse.parse_qsl(url.query)), dict(self.headers), time.monotonic())
                with outer.lock:
                    outer.queries.append(query)
                try:
                    outer.serve(self, query)
                except (BrokenPipeError, ConnectionResetError):
                    pass
                finally:
                    if query.closed is None:
                        query.closed = time.monotonic()

            def log_message(self, *args) -> None:
                pass

        class Server(ThreadingHTTPServer):
            request_queue_size = 128
            daemon_threads = True

        self.server = Server(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def _wait_for_close(self, h: BaseHTTPRequestHandler, query: Query, seconds: float | None) -> bool:
        """Wait ``seconds`` (forever: None) for the client to close; True (and ``query.closed`` set) if it did."""
        deadline = None if seconds is None else time.monotonic() + seconds
        while not self.stop.is_set() and (deadline is None or time.monotonic() < deadline):
            # the client's close makes the socket readable with nothing to read
            ready, _, _ = select.select([h.connection], [], [], 0.05)
            if ready and not h.connection.recv(1, socket.MSG_PEEK):
                query.closed = time.monotonic()
                return True
        return self.stop.is_set()

    def serve(self, h: BaseHTTPRequestHandler, query: Query) -> None:
        if self.mode == "never":
            self._wait_for_close(h, query, None)
            return
        if self.mode == "slow":
            for byte in b'HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\r\n{"status": "success"':
                if self._wait_for_close(h, query, 0.5):
                    return
                h.wfile.write(bytes([byte]))
                h.wfile.flush()
            return
        failure = self.fail(query)
        if failure is not None:
            status, text = failure
            data = json.dumps({"status": "error", "errorType": "execution", "error": text}).encode()
        else:
            rows = self.rows(query)
            status = 200
            data = json.dumps(matrix(rows) if query.path.endswith("query_range") else vector(rows)).encode()
        h.send_response(status)
        h.send_header("Content-Type", "application/json")
        h.send_header("Content-Length", str(len(data)))
        h.end_headers()
        h.wfile.write(data)
        query.closed = time.monotonic()

    def __enter__(self) -> StandIn:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=10)

    def snapshot(self) -> list[Query]:
        with self.lock:
            return list(self.queries)


class HookProcess:
    """``kvpilot alert-hook ARGS --listen 127.0.0.1:PORT`` in a child process, stopped by its PID.

    ``stdout`` (the log sink's JSON lines) and ``stderr`` (the hook's log) go to files in ``workdir``.
    """

    def __init__(self, workdir: Path, *args: str, token: str | None = TOKEN, env: dict[str, str] | None = None):
        self.workdir = workdir
        self.port = free_port()
        self.host = "127.0.0.1"
        self.url = f"http://127.0.0.1:{self.port}"
        argv = [sys.executable, "-m", "kvpilot.cli", "alert-hook", "--listen", f"127.0.0.1:{self.port}", *args]
        if token is not None:
            token_file = workdir / "hook-token"
            token_file.write_text(token + "\n")
            argv += ["--bearer-token-file", str(token_file)]
        self.argv = argv
        self.env = {**os.environ, **(env or {})}
        self.proc: subprocess.Popen | None = None

    def __enter__(self) -> HookProcess:
        self._out = open(self.workdir / f"hook-{self.port}.out", "wb")  # closed in __exit__
        self._err = open(self.workdir / f"hook-{self.port}.err", "wb")  # closed in __exit__
        self.proc = subprocess.Popen(self.argv, stdout=self._out, stderr=self._err, env=self.env)

        def healthy() -> bool:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise AssertionError(f"the hook exited {self.proc.returncode}: {self.stderr()}")
            try:
                with urllib.request.urlopen(f"{self.url}/healthz", timeout=2) as resp:
                    return resp.status == 200
            except OSError:
                return False

        wait_for(healthy, timeout=60, what="the hook's /healthz")
        return self

    def __exit__(self, *exc) -> None:
        stop_process(self.proc)
        self._out.close()
        self._err.close()

    def stdout(self) -> str:
        return (self.workdir / f"hook-{self.port}.out").read_bytes().decode("utf-8", "replace")

    def stderr(self) -> str:
        return (self.workdir / f"hook-{self.port}.err").read_bytes().decode("utf-8", "replace")

    def post(self, body: object, token: str | None = TOKEN, timeout: float = 60, raw: bytes | None = None):
        """POST ``body`` (JSON) or ``raw`` to /alerts; returns ``(status, decoded JSON or text, headers)``."""
        data = raw if raw is not None else json.dumps(body).encode()
        headers = {"Content-Type": "application/json"}
        if token is not None:
            headers["Authorization"] = f"Bearer {token}"
        request = urllib.request.Request(f"{self.url}/alerts", data=data, headers=headers, method="POST")
        try:
            with urllib.request.urlopen(request, timeout=timeout) as resp:
                status, text, got = resp.status, resp.read().decode(), dict(resp.headers)
        except urllib.error.HTTPError as exc:
            status, text, got = exc.code, exc.read().decode(), dict(exc.headers)
        try:
            return status, json.loads(text), got
        except ValueError:
            return status, text, got

    def metrics(self, path: str = "/metrics", url: str | None = None) -> str:
        with urllib.request.urlopen(f"{url or self.url}{path}", timeout=10) as resp:
            return resp.read().decode()

    def exchange(self, data: bytes, timeout: float = 10.0) -> bytes:
        """Send raw bytes on a fresh connection; everything the hook answers until it closes (or ``timeout``)."""
        with socket.create_connection((self.host, self.port), timeout=timeout) as sock:
            sock.sendall(data)
            return read_until_closed(sock, timeout)


def read_until_closed(sock: socket.socket, timeout: float) -> bytes:
    """What ``sock`` receives until the peer closes it or ``timeout`` s pass (then ``b"<open>"`` is appended)."""
    deadline = time.monotonic() + timeout
    out = b""
    while time.monotonic() < deadline:
        sock.settimeout(max(0.01, deadline - time.monotonic()))
        try:
            chunk = sock.recv(65536)
        except TimeoutError:
            break
        except ConnectionResetError:
            return out
        if not chunk:
            return out
        out += chunk
    return out + b"<open>"


def counter(metrics_text: str, name: str, **labels: str) -> float:
    """The value of one sample of the Prometheus text ``metrics_text`` (0 when absent)."""
    from prometheus_client.parser import text_string_to_metric_families

    for family in text_string_to_metric_families(metrics_text):
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                return sample.value
    return 0.0
