"""``kvpilot simulate --serve``: vLLM's HTTP endpoints (``/metrics``, ``/health``, ``/v1/models``,
``/version``) over a :class:`~kvpilot.commands.simulate.session.Simulation` advancing at ``--speed``.
"""

from __future__ import annotations

import json
import signal
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import click

from kvpilot.commands._common import fail
from kvpilot.commands.simulate.session import Simulation

TICK_SECONDS = 0.05  # wall-clock granularity of the --serve simulation thread


def _handler(sim: Simulation, version: str) -> type[BaseHTTPRequestHandler]:
    models_body = json.dumps(
        {
            "object": "list",
            "data": [
                {
                    "id": sim.model_name,
                    "object": "model",
                    "created": int(time.time()),
                    "owned_by": "vllm",
                    "root": sim.model_name,
                    "parent": None,
                    "max_model_len": sim.max_model_len,
                }
            ],
        }
    ).encode()

    class Handler(BaseHTTPRequestHandler):
        server_version = "kvpilot-simulate"

        def _send(self, status: int, body: bytes, content_type: str) -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)

        def do_GET(self) -> None:
            path = self.path.split("?", 1)[0]
            if path == "/metrics":
                body, content_type = sim.metrics.exposition(self.headers.get("Accept"))
                self._send(200, body, content_type)
            elif path == "/health":
                self._send(200, b"", "text/plain")  # vLLM: 200 with an empty body
            elif path == "/v1/models":
                self._send(200, models_body, "application/json")
            elif path == "/version":
                self._send(200, json.dumps({"version": version}).encode(), "application/json")
            else:
                self._send(404, json.dumps({"detail": "Not Found"}).encode(), "application/json")

        do_HEAD = do_GET

        def log_message(self, *args: Any) -> None:  # quiet access log
            return

    return Handler


def serve(sim: Simulation, host: str, port: int, speed: float, duration: float | None, version: str) -> None:
    """Serve ``sim`` on ``host:port`` while advancing it at ``speed`` × wall time.

    Stops after ``duration`` simulated seconds (``duration / speed`` wall seconds), or on SIGTERM/SIGINT.
    Prints one line ``serving http://HOST:PORT`` once the socket listens.
    """
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):  # before listening: a stop request is never lost
        signal.signal(sig, lambda *_: stop.set())
    try:
        httpd = ThreadingHTTPServer((host, port), _handler(sim, version))
    except OSError as exc:
        fail(f"--serve: cannot listen on {host}:{port} ({exc.strerror or exc})")
    httpd.daemon_threads = True
    server_thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True)
    server_thread.start()
    bound_host, bound_port = httpd.server_address[:2]
    if isinstance(bound_host, bytes):  # AF_UNIX only; typeshed allows it
        bound_host = bound_host.decode()
    click.echo(
        f"serving http://{bound_host}:{bound_port} (model {sim.model_name}, vLLM {version}, speed {speed:g}x)",
        err=False,
    )
    sys.stdout.flush()
    wall0 = time.monotonic()
    try:
        while not stop.is_set():
            target = speed * (time.monotonic() - wall0)
            if duration is not None and target >= duration:
                sim.advance_to(duration)
                break
            sim.advance_to(target)
            stop.wait(TICK_SECONDS)
    finally:
        httpd.shutdown()
        httpd.server_close()
