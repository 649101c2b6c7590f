"""A real single-node VictoriaMetrics (Debian package ``victoria-metrics``) for tests: 127.0.0.1, stopped by PID.

Usage::

    from tests.support.vm import VictoriaMetricsServer
    with VictoriaMetricsServer(tmp_path) as vm:
        vm.import_openmetrics(recording_path)   # POST /api/v1/import/prometheus, then flush
        vm.url  # http://127.0.0.1:PORT, the Prometheus querying API (/api/v1/query)

Facts (VictoriaMetrics 1.79 from Debian; https://docs.victoriametrics.com/Single-server-VictoriaMetrics.html):

- ``/api/v1/import/prometheus`` takes the Prometheus text exposition format, each sample with a
  timestamp in **milliseconds** (OpenMetrics recordings carry seconds: :func:`to_prometheus_text`
  converts); samples older than ``-retentionPeriod`` (default one month) are dropped, so the
  server runs with 100 years;
- imported samples become searchable after ``/internal/force_flush``; an instant query at ``time``
  ignores nothing of historical data (``-search.latencyOffset``, 30 s, only hides the last 30 s
  before *now*);
- ``-search.maxUniqueTimeseries`` (default 300,000) is the most series one query may select.
"""

from __future__ import annotations

import subprocess
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterable, Iterator
from pathlib import Path

from tests.conftest import require_tool
from tests.support.prom import LoopbackServer, free_port
from tests.support.waiting import stop_process


def to_prometheus_text(lines: Iterable[str]) -> Iterator[bytes]:
    """OpenMetrics sample lines (timestamps in seconds) as Prometheus text lines (milliseconds).

    Comment lines (``# TYPE``, ``# EOF``) and blank lines are dropped: the import API needs none.
    A sample without a timestamp is kept as it is (VictoriaMetrics stamps it with the import time).
    """
    for line in lines:
        if not line or line.startswith("#"):
            continue
        close = line.rfind("}")
        name_labels, rest = (line[: close + 1], line[close + 1 :]) if close >= 0 else line.split(" ", 1)
        fields = rest.split()
        if len(fields) == 2:
            yield f"{name_labels} {fields[0]} {round(float(fields[1]) * 1000)}\n".encode()
        else:
            yield (line + "\n").encode()


class VictoriaMetricsServer(LoopbackServer):
    """Context manager running ``victoria-metrics`` on loopback with a fresh storage directory."""

    name = "victoria-metrics"
    logname = "victoria-metrics.log"
    get_timeout = 60.0  # a flush or a query over 10,000 pods takes seconds

    def __init__(self, workdir: Path, extra_args: list[str] | None = None) -> None:
        self.binary = require_tool("victoria-metrics")
        self.workdir = Path(workdir)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.extra_args = extra_args or []
        self.proc: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> VictoriaMetricsServer:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.log = open(self.workdir / "victoria-metrics.log", "w")
        self.proc = subprocess.Popen(
            [
                self.binary,
                f"-storageDataPath={self.workdir / 'vm-data'}",
                f"-httpListenAddr=127.0.0.1:{self.port}",
                "-retentionPeriod=100y",
                "-search.disableCache",  # every query evaluated afresh, as Prometheus does
                *self.extra_args,
            ],
            stdout=self.log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            self._wait(lambda: self._get("/health")[0] == 200, 30, "VictoriaMetrics did not become ready")
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        stop_process(self.proc)
        self.log.close()

    def import_lines(self, body: Iterable[bytes]) -> None:
        """POST Prometheus text lines (millisecond timestamps) to ``/api/v1/import/prometheus``, then flush."""
        request = urllib.request.Request(
            self.url + "/api/v1/import/prometheus",
            data=_chunked(body),
            method="POST",
            headers={"Content-Type": "text/plain"},
        )
        with urllib.request.urlopen(request, timeout=1800) as r:
            if r.status != 204:
                raise RuntimeError(f"import failed: {r.status} {r.read()[:300]!r}")
        status, text = self._get("/internal/force_flush")
        if status != 200:
            raise RuntimeError(f"force_flush failed: {status} {text[:300]!r}")

    def import_openmetrics(self, recording: Path) -> None:
        """Load an OpenMetrics recording (second timestamps) through the import API."""
        with open(recording) as fp:
            self.import_lines(to_prometheus_text(line.rstrip("\n") for line in fp))


def _chunked(body: Iterable[bytes], size: int = 1 << 20) -> Iterator[bytes]:
    """Lines joined into ~1 MiB chunks (urllib sends an iterable body chunk-encoded)."""
    buf: list[bytes] = []
    n = 0
    for part in body:
        buf.append(part)
        n += len(part)
        if n >= size:
            yield b"".join(buf)
            buf, n = [], 0
    if buf:
        yield b"".join(buf)
