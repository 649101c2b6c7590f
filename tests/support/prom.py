"""A real Prometheus (Debian package) for tests: started on 127.0.0.1, stopped by its PID.

Usage::

    from tests.support.prom import PrometheusServer, backfill
    with PrometheusServer(tmp_path, scrape_targets=["127.0.0.1:8123"]) as prom:
        prom.wait_for_series('up{job="vllm"}')
        prom.url  # http://127.0.0.1:PORT

    backfill(recording_path, tmp_path / "data")   # promtool tsdb create-blocks-from openmetrics
    with PrometheusServer(tmp_path, data_dir=tmp_path / "data") as prom: ...

Facts (Prometheus 2.42 from Debian, measured on the CI machines): ready ~0.2 s after start; the first
scraped sample arrives ~6 s after start even with a 1 s scrape interval, so tests wait for data by
polling, never by sleeping.
"""

from __future__ import annotations

import json
import socket
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import yaml

from tests.conftest import require_tool
from tests.support.waiting import stop_process


def free_port() -> int:
    """A free TCP port on 127.0.0.1."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def backfill(openmetrics_file: Path, data_dir: Path) -> str:
    """Backfill a recording into TSDB blocks with ``promtool tsdb create-blocks-from openmetrics``.

    Returns promtool's output; raises ``subprocess.CalledProcessError`` when promtool rejects the file.
    """
    promtool = require_tool("promtool")
    data_dir.mkdir(parents=True, exist_ok=True)
    out = subprocess.run(
        [promtool, "tsdb", "create-blocks-from", "openmetrics", str(openmetrics_file), str(data_dir)],
        check=True,
        capture_output=True,
        text=True,
        timeout=120,
    )
    return out.stdout + out.stderr


class LoopbackServer:
    """What the test servers share: ``url``, ``workdir``, a log, GET, a bounded wait, instant queries."""

    name = "server"
    logname = "server.log"
    get_timeout = 5.0  # seconds for each GET
    url: str
    workdir: Path
    proc: subprocess.Popen | None

    def _get(self, path: str) -> tuple[int, bytes]:
        try:
            with urllib.request.urlopen(self.url + path, timeout=self.get_timeout) as r:
                return r.status, r.read()
        except urllib.error.HTTPError as e:
            return e.code, e.read()
        except OSError:
            return 0, b""

    def _wait(self, predicate, timeout: float, message: str) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc and self.proc.poll() is not None:
                raise RuntimeError(f"{self.name} exited: {(self.workdir / self.logname).read_text()[-2000:]}")
            if predicate():
                return
            time.sleep(0.2)
        raise TimeoutError(message)

    def query(self, promql: str, at: float | None = None) -> list[dict]:
        """Instant query; returns ``data.result``."""
        params = {"query": promql}
        if at is not None:
            params["time"] = str(at)
        status, body = self._get("/api/v1/query?" + urllib.parse.urlencode(params))
        if status != 200:
            raise RuntimeError(f"query {promql!r} failed: {status} {body[:300]!r}")
        return json.loads(body)["data"]["result"]


class PrometheusServer(LoopbackServer):
    """Context manager running a real ``prometheus`` on loopback with a fresh config."""

    name = "prometheus"
    logname = "prometheus.log"

    def __init__(
        self,
        workdir: Path,
        scrape_targets: list[str] | None = None,
        data_dir: Path | None = None,
        scrape_interval: str = "1s",
        job: str = "vllm",
        extra_args: list[str] | None = None,
        extra_config: dict | None = None,
    ):
        """``extra_config``: top-level keys merged into the generated prometheus.yml (``rule_files``,
        ``alerting``, more ``scrape_configs`` appended to the one of ``scrape_targets``).
        """
        self.binary = require_tool("prometheus")
        self.workdir = Path(workdir)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.data_dir = Path(data_dir) if data_dir else self.workdir / "prom-data"
        self.scrape_targets = scrape_targets or []
        self.scrape_interval = scrape_interval
        self.job = job
        self.extra_args = extra_args or []
        self.extra_config = extra_config or {}
        self.proc: subprocess.Popen | None = None

    def __enter__(self) -> PrometheusServer:
        self.workdir.mkdir(parents=True, exist_ok=True)
        config = {"global": {"scrape_interval": self.scrape_interval, "evaluation_interval": self.scrape_interval}}
        if self.scrape_targets:
            config["scrape_configs"] = [{"job_name": self.job, "static_configs": [{"targets": self.scrape_targets}]}]
        for key, value in self.extra_config.items():
            if key == "scrape_configs":
                config.setdefault("scrape_configs", []).extend(value)
            elif key == "global":
                config["global"].update(value)
            else:
                config[key] = value
        cfg = self.workdir / "prometheus.yml"
        cfg.write_text(yaml.safe_dump(config))
        self.log = open(self.workdir / "prometheus.log", "w")
        self.proc = subprocess.Popen(
            [
                self.binary,
                f"--config.file={cfg}",
                f"--storage.tsdb.path={self.data_dir}",
                f"--web.listen-address=127.0.0.1:{self.port}",
                "--storage.tsdb.retention.time=3650d",
                *self.extra_args,
            ],
            stdout=self.log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self._wait(lambda: self._get("/-/ready")[0] == 200, 30, "Prometheus did not become ready")
        return self

    def __exit__(self, *exc) -> None:
        stop_process(self.proc)
        self.log.close()

    def wait_for_series(self, promql: str, timeout: float = 60, at: float | None = None) -> list[dict]:
        """Poll until ``promql`` returns at least one series (scrapes take ~6 s to land)."""
        result: list[dict] = []

        def ready() -> bool:
            nonlocal result
            result = self.query(promql, at)
            return bool(result)

        self._wait(ready, timeout, f"no data for {promql!r} within {timeout}s")
        return result
