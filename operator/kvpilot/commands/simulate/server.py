"""``kvpilot simulate --serve``: vLLM's HTTP endpoints (``/metrics``, ``/health``, ``/v1/models``,
``/version``) over a :class:`~kvpilot.commands.simulate.session.Simulation` advancing at ``--speed``.
"""

from __future__ import annotations

import json
import shutil
import signal
import sys
import textwrap
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import click

from kvpilot.commands._common import fail
from kvpilot.commands.simulate.session import Simulation
from kvpilot.text.numbers import fig

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

        def log_message(self, *_: Any) -> None:  # quiet access log
            return

    return Handler


def serve(sim: Simulation, host: str, port: int, speed: float, duration: float | None, version: str) -> None:
    """Serve ``sim`` on ``host:port`` while advancing it at ``speed`` × wall time.

    Stops after ``duration`` simulated seconds (``duration / speed`` wall seconds), or on SIGTERM/SIGINT;
    either way the command exits 0. Prints ``serving http://HOST:PORT (...)`` once the socket listens,
    then the lines of :func:`start_lines`, and one ``stopped: ...`` line at the end.
    """
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):  # before listening: a stop request is never lost
        signal.signal(sig, lambda *_: stop.set())
    try:
        httpd = ThreadingHTTPServer((host, port), _handler(sim, version))
    except OSError as exc:
        fail(
            f"--serve: cannot listen on {host}:{port} ({exc.strerror or exc}); give HOST:PORT of a local address, "
            "or PORT"
        )
    httpd.daemon_threads = True
    server_thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True)
    server_thread.start()
    bound_host, bound_port = httpd.server_address[:2]
    if isinstance(bound_host, bytes):  # AF_UNIX only; typeshed allows it
        bound_host = bound_host.decode()
    click.echo(
        f"serving http://{bound_host}:{bound_port} (model {sim.model_name}, vLLM {version}, speed {fig(speed, 3)}x)",
        err=False,
    )
    width = shutil.get_terminal_size().columns
    for line in start_lines(speed, duration):
        click.echo("\n".join(textwrap.wrap(line, width, subsequent_indent="  ", break_long_words=False)))
    sys.stdout.flush()
    wall0 = time.monotonic()
    reached = False
    try:
        while not stop.is_set():
            target = speed * (time.monotonic() - wall0)
            if duration is not None and target >= duration:
                sim.advance_to(duration)
                reached = True
                break
            sim.advance_to(target)
            stop.wait(TICK_SECONDS)
    finally:
        httpd.shutdown()
        httpd.server_close()
    wall = time.monotonic() - wall0
    if reached:
        click.echo(f"stopped: --duration {fig(duration, 1, 's')} of simulated time served ({fig(wall, 1, 's')} wall)")
    else:
        simulated = speed * wall if duration is None else min(speed * wall, duration)
        click.echo(f"stopped by a signal after {fig(simulated, 1, 's')} of simulated time (exit 0)")


def start_lines(speed: float, duration: float | None) -> list[str]:
    """What ``--serve`` says after its address: when it stops, and at ``--speed`` other than 1 what the
    served figures mean.

    The exporter serves vLLM's own semantics (counters in requests and tokens, histograms in seconds)
    advanced in simulated time; it does not rescale them. At ``--speed S`` a scraper's ``rate()`` is
    per wall-clock second, so it reads S times the simulated per-second rates, while latencies (TTFT,
    ITL, end-to-end, queue time) are simulated seconds and read as a real server's would.
    """
    lines = []
    if duration is None:
        lines.append("runs until stopped (SIGTERM or Ctrl-C; exit 0)")
    else:
        lines.append(
            f"stops after --duration {fig(duration, 1, 's')} of simulated time = {fig(duration / speed, 1, 's')} "
            "wall (exit 0)"
        )
    if speed != 1:
        lines.append(
            f"--speed {fig(speed, 3)}: {fig(speed, 3)} simulated seconds per wall-clock second: Prometheus "
            f"rate()s over the counters read {fig(speed, 3)}x the simulated per-second rates; latencies "
            "(TTFT, ITL, e2e, queue time) are in simulated seconds"
        )
    return lines
