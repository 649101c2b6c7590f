"""A `kvpilot simulate --serve` or `vllm serve` subprocess on 127.0.0.1, stopped by its PID."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

from tests.support.waiting import stop_process

BIN = Path(sys.executable).parent

#: the Accept header Prometheus 2.42 sends (scrape/scrape.go, scrapeAcceptHeader)
PROMETHEUS_ACCEPT = (
    "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,"
    "text/plain;version=0.0.4;q=0.5,*/*;q=0.1"
)


def get(url: str, accept: str | None = None, timeout: float = 5) -> tuple[int, dict, bytes]:
    """GET ``url``; returns (status, headers, body); status 0 when nothing listens."""
    req = urllib.request.Request(url, headers={"Accept": accept} if accept else {})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, dict(r.headers), r.read()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read()
    except OSError:
        return 0, {}, b""


class Server:
    """Context manager: run ``argv`` and wait until ``/health`` answers 200 (bounded)."""

    def __init__(self, argv: list[str], port: int, workdir: Path, timeout: float = 30, env: dict | None = None):
        self.argv = argv
        self.env = {**os.environ, **(env or {})}
        self.url = f"http://127.0.0.1:{port}"
        self.workdir = workdir
        self.timeout = timeout
        self.proc: subprocess.Popen | None = None

    def __enter__(self) -> Server:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.log = open(self.workdir / "server.log", "w")
        self.proc = subprocess.Popen(
            self.argv, stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True, env=self.env
        )
        deadline = time.monotonic() + self.timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited {self.proc.returncode}: {self.output()[-2000:]}")
            if get(self.url + "/health", timeout=1)[0] == 200:
                return self
            time.sleep(0.1)
        self.__exit__()
        raise TimeoutError(f"{self.argv} did not answer /health within {self.timeout}s")

    def output(self) -> str:
        if not self.log.closed:
            self.log.flush()
        return (self.workdir / "server.log").read_text()

    def __exit__(self, *exc) -> None:
        stop_process(self.proc)
        self.log.close()
