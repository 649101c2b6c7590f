"""Misbehaving servers on loopback: diagnose finishes within its deadline, with exit 3, in bounded memory.

Each case runs the real ``kvpilot diagnose`` in a child process against a server on 127.0.0.1
that trickles, hangs, sends an endless body, a gzip bomb, 100,000 series or malformed rows. The
child's wall time and peak RSS (``os.wait4``'s ``ru_maxrss``, KiB on Linux) are measured.

Bounds asserted: the whole-request deadline is ``--timeout`` (2 s here, 20 s for the size limits of a
Prometheus answer: ``SIZE_TIMEOUT_S``); the run's deadline is
3 x timeout for ``--prometheus`` and the scraping time + 2 x timeout for ``--metrics-url --quick``;
the wall-time bound adds 10 s for the interpreter start-up and the imports on a loaded machine.
Memory: 400 MiB for a scrape (kvpilot's imports take ~90 MiB; a scrape body is capped at 16 MiB);
for Prometheus 8 queries in flight x 64 MiB + 200 MiB = 712 MiB. Without the caps the endless body
and the gzip bomb reach gigabytes.
"""

from __future__ import annotations

import contextlib
import functools
import gzip
import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from tests.support.child import run_measured

TIMEOUT_S = 2.0
MAX_RSS_KIB = 400 * 1024
MAX_RSS_PROMETHEUS_KIB = (8 * 64 + 200) * 1024
#: 2 MiB of gzip holding 2 GiB of zeros (gzip's deflate compresses zeros about 1000:1).
_BOMB_CHUNK = gzip.compress(b"\0" * (16 * 2**20), compresslevel=9)


class Hostile:
    """An HTTP server on 127.0.0.1 misbehaving as ``mode`` for every GET."""

    def __init__(self, mode: str):
        self.mode = mode
        self.stop = threading.Event()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self) -> None:  # http.server's naming
                with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                    outer.serve(self)

            def log_message(self, *args) -> None:
                pass

        class Server(ThreadingHTTPServer):
            request_queue_size = 128
            daemon_threads = True

        self.server = Server(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def serve(self, h: BaseHTTPRequestHandler) -> None:  # noqa: C901
        mode = self.mode
        if mode == "hang":
            self.stop.wait(60)
            return
        if mode == "trickle-headers":
            for byte in b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n":
                if self.stop.wait(0.5):
                    return
                h.wfile.write(bytes([byte]))
                h.wfile.flush()
            return
        h.send_response(200)
        h.send_header("Content-Type", "application/json" if "prom" in mode else "text/plain")
        if mode == "gzip-bomb":
            h.send_header("Content-Encoding", "gzip")
            h.send_header("Content-Length", str(len(_BOMB_CHUNK) * 128))
            h.end_headers()
            for _ in range(128):  # 128 concatenated gzip members: 2 GiB decompressed
                if self.stop.is_set():
                    return
                h.wfile.write(_BOMB_CHUNK)
            return
        if mode in ("trickle", "endless"):
            h.end_headers()  # no length: the body ends when the connection closes (never)
            line = b'vllm:num_requests_running{model_name="m"} 1\n'
            while not self.stop.is_set():
                if mode == "trickle":
                    h.wfile.write(line[:1])
                    h.wfile.flush()
                    self.stop.wait(0.5)
                else:
                    h.wfile.write(line * 4096)
            return
        body = self.body(mode)
        h.send_header("Content-Length", str(len(body)))
        h.end_headers()
        h.wfile.write(body)

    @staticmethod
    @functools.lru_cache(maxsize=4)
    def body(mode: str) -> bytes:
        if mode == "many-series":  # a /metrics body with 100,000 series (about 7 MB)
            return "".join(
                f'vllm:num_requests_running{{model_name="m",pod="p{i}"}} 1\n' for i in range(100_000)
            ).encode()
        if mode == "prom-many-series":  # a Prometheus answer with 100,000 rows to every query
            rows = [
                {"metric": {"namespace": "llm", "pod": f"p{i}", "model_name": "m"}, "value": [1.0, "1"]}
                for i in range(100_000)
            ]
            return json.dumps({"status": "success", "data": {"resultType": "vector", "result": rows}}).encode()
        if mode == "prom-malformed":  # rows whose metric is a string, null, or has list/number labels
            rows = [
                {"metric": "pod", "value": [1, "1"]},
                {"metric": None, "value": [1, "1"]},
                {"metric": {"pod": ["a"], "namespace": 3}, "value": [1, "1"]},
                {"metric": {"pod": "p"}, "value": "1"},
                {"metric": {"pod": "p"}, "value": [1, "1" * 400]},
            ]
            return json.dumps({"status": "success", "data": {"resultType": "vector", "result": rows}}).encode()
        raise AssertionError(mode)

    def __enter__(self) -> Hostile:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=10)


def diagnose(*args: str, budget: float, timeout: float = TIMEOUT_S) -> tuple[int, str, float, int]:
    """Run ``kvpilot diagnose ARGS`` in a child: ``(exit code, stderr, seconds, peak RSS KiB)``;
    the child is killed (and the test fails) when it outlives ``budget`` seconds.
    """
    run = run_measured(
        [
            sys.executable,
            "-m",
            "kvpilot.cli",
            "diagnose",
            "--no-what-if",
            "--no-kube",
            "--timeout",
            f"{timeout:g}s",
            *args,
        ],
        budget,
    )
    return run.code, run.stderr, run.seconds, run.rss_kib


#: The size-limit cases against ``--prometheus`` need the test's Python server to send 64 MiB (of each of
#: 8 answers in flight) before the request deadline: 2 s is too little on a loaded 2-core machine, where
#: the deadline then ends the request first ("no complete answer"). They get a 20 s request deadline.
SIZE_TIMEOUT_S = 20.0

# (mode, source flag, extra args, words in the one error line, request deadline in s, run deadline in s)
CASES = [
    ("trickle", "--metrics-url", ["--quick"], "no complete answer within", TIMEOUT_S, 3 + 2 * TIMEOUT_S),
    ("trickle-headers", "--metrics-url", ["--quick"], "no complete answer within", TIMEOUT_S, 3 + 2 * TIMEOUT_S),
    ("hang", "--metrics-url", ["--quick"], "no complete answer within", TIMEOUT_S, 3 + 2 * TIMEOUT_S),
    ("endless", "--metrics-url", ["--quick"], "larger than 16 MiB", TIMEOUT_S, 3 + 2 * TIMEOUT_S),
    ("gzip-bomb", "--metrics-url", ["--quick"], "larger than 16 MiB", TIMEOUT_S, 3 + 2 * TIMEOUT_S),
    ("trickle", "--prometheus", [], "no complete answer within", TIMEOUT_S, 3 * TIMEOUT_S),
    ("hang", "--prometheus", [], "no complete answer within", TIMEOUT_S, 3 * TIMEOUT_S),
    ("endless", "--prometheus", [], "larger than 64 MiB", SIZE_TIMEOUT_S, 3 * SIZE_TIMEOUT_S),
    ("gzip-bomb", "--prometheus", [], "larger than 64 MiB", SIZE_TIMEOUT_S, 3 * SIZE_TIMEOUT_S),
]


@pytest.mark.parametrize(
    ("mode", "flag", "extra", "words", "timeout", "deadline"), CASES, ids=[f"{c[0]}{c[1]}" for c in CASES]
)
def test_misbehaving_server_ends_within_the_deadline_exit_3(mode, flag, extra, words, timeout, deadline):
    url = None
    with Hostile(mode) as server:
        url = server.url + ("/metrics" if flag == "--metrics-url" else "")
        code, stderr, elapsed, rss = diagnose(flag, url, *extra, budget=deadline + 10, timeout=timeout)
    lines = stderr.strip().splitlines()
    assert code == 3, stderr
    assert len(lines) == 1, stderr
    assert lines[0].startswith("kvpilot: error:"), stderr
    assert words in lines[0], stderr
    assert rss < (MAX_RSS_KIB if flag == "--metrics-url" else MAX_RSS_PROMETHEUS_KIB), f"peak RSS {rss / 1024:.0f} MiB"


def test_100000_series_scrape_is_refused_before_parsing():
    with Hostile("many-series") as server:
        code, stderr, elapsed, rss = diagnose("--metrics-url", server.url + "/metrics", "--quick", budget=30)
    assert code == 3, stderr
    assert "100,000 lines in one scrape, more than the limit of 50,000" in stderr, stderr
    assert rss < MAX_RSS_KIB, f"peak RSS {rss / 1024:.0f} MiB"


def test_100000_series_prometheus_is_refused_before_parsing():
    with Hostile("prom-many-series") as server:
        # the test's Python server needs seconds to send 21 answers of 9 MB: a 20 s request deadline
        code, stderr, elapsed, rss = diagnose("--prometheus", server.url, "-o", "json", budget=90, timeout=20)
    assert code == 3, stderr
    assert "answer with 100,000 series, more than the limit of 50,000: narrow the selection" in stderr
    assert rss < MAX_RSS_PROMETHEUS_KIB, f"peak RSS {rss / 1024:.0f} MiB"


def test_malformed_prometheus_rows_are_skipped_not_a_crash():
    with Hostile("prom-malformed") as server:
        code, stderr, elapsed, rss = diagnose("--prometheus", server.url, budget=3 * TIMEOUT_S + 10)
    assert "Traceback" not in stderr, stderr
    assert "internal error" not in stderr, stderr
    assert code in (0, 1, 2, 3)
