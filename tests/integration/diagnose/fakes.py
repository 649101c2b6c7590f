"""Loopback HTTP servers for diagnose tests: a scripted Prometheus, a recording proxy, a Kubernetes API.

All listen on 127.0.0.1 in a thread of the test process, record every request's method and path,
and are stopped by the context manager (server shutdown, thread joined).
"""

from __future__ import annotations

import json
import threading
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

Response = tuple[int, dict | str]


class LoopbackServer:
    """Serve ``handle(method, path, query, body) -> (status, json-or-text)`` on 127.0.0.1.

    ``requests`` lists ``(method, path)`` of everything received. ``stop`` is an Event a handler
    may wait on (a "slow" server waits on it with a timeout, so shutdown is immediate).
    """

    def __init__(self, handle: Callable[[str, str, dict, bytes], Response]):
        self.handle = handle
        self.requests: list[tuple[str, str]] = []
        self.stop = threading.Event()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def _any(self) -> None:
                url = urllib.parse.urlsplit(self.path)
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                query = dict(urllib.parse.parse_qsl(url.query))
                if body and self.headers.get("Content-Type", "").startswith("application/x-www-form-urlencoded"):
                    query.update(urllib.parse.parse_qsl(body.decode()))
                outer.requests.append((self.command, url.path))
                try:
                    status, payload = outer.handle(self.command, url.path, query, body)
                except Exception as exc:  # noqa: BLE001 - any handler bug becomes a 599 the test sees
                    status, payload = 599, f"handler error: {exc!r}"
                data = payload.encode() if isinstance(payload, str) else json.dumps(payload).encode()
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "text/plain" if isinstance(payload, str) else "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass

            do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = _any

            def log_message(self, *args) -> None:  # keep test output clean
                pass

        class Server(ThreadingHTTPServer):
            request_queue_size = 128  # the default 5 drops connections when kvpilot sends 8 queries at once

        self.server = Server(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> LoopbackServer:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=10)


def proxy_to(upstream: str) -> Callable[[str, str, dict, bytes], Response]:
    """A handler forwarding every request to ``upstream`` (a recording proxy when used by LoopbackServer)."""

    def handle(method: str, path: str, query: dict, _body: bytes) -> Response:
        url = upstream + path + ("?" + urllib.parse.urlencode(query) if query and method == "GET" else "")
        data = urllib.parse.urlencode(query).encode() if method == "POST" else None
        req = urllib.request.Request(url, data=data, method=method)
        try:
            with urllib.request.urlopen(req, timeout=30) as r:
                return r.status, json.loads(r.read())
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read() or b"{}")

    return handle


def prom_vector(rows: list[tuple[dict, str]], at: float = 0.0, warnings: list[str] | None = None) -> dict:
    """A Prometheus ``/api/v1/query`` success body with ``rows`` of ``(labels, value-string)``."""
    body = {
        "status": "success",
        "data": {"resultType": "vector", "result": [{"metric": m, "value": [at, v]} for m, v in rows]},
    }
    if warnings:
        body["warnings"] = warnings
    return body


def prom_matrix(rows: list[tuple[dict, list[tuple[float, str]]]]) -> dict:
    """A Prometheus ``/api/v1/query_range`` success body with ``rows`` of ``(labels, [(time, value-string)])``."""
    return {
        "status": "success",
        "data": {"resultType": "matrix", "result": [{"metric": m, "values": [list(p) for p in v]} for m, v in rows]},
    }


def kubeconfig(path, server_url: str) -> str:
    """Write a kubeconfig pointing at ``server_url`` (no auth) and return its path."""
    import yaml

    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "current-context": "loop",
                "clusters": [{"name": "loop", "cluster": {"server": server_url}}],
                "contexts": [{"name": "loop", "context": {"cluster": "loop", "user": "u", "namespace": "llm"}}],
                "users": [{"name": "u", "user": {}}],
            }
        )
    )
    return str(path)
