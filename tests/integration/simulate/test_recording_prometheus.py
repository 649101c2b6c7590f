"""Recordings written by write_recording are accepted by the real promtool, and a Prometheus
started on the backfilled blocks returns the values written at the times written.
"""

from __future__ import annotations

import time

import pytest
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from kvpilot.metrics.recording import write_recording
from tests.support.prom import PrometheusServer, backfill

pytestmark = pytest.mark.prometheus


def _recording(path, end: float, minutes: int = 10, interval: float = 5.0) -> float:
    """10 minutes of samples every 5 s ending at ``end``; values are simple functions of the step i."""
    reg = CollectorRegistry()
    running = Gauge("vllm:num_requests_running", "Running.", ["model_name", "engine"], registry=reg)
    pre = Counter("vllm:num_preemptions", "Preemptions.", ["model_name", "engine"], registry=reg)
    hist = Histogram(
        "vllm:iteration_tokens_total", "Tokens per step.", ["model_name", "engine"], buckets=(1, 8, 16), registry=reg
    )
    steps = int(minutes * 60 / interval)
    start = end - (steps - 1) * interval
    snaps = []
    for i in range(steps):
        running.labels("m", "0").set(i % 7)  # 0..6 repeating
        pre.labels("m", "0").inc(2)  # +2 per 5 s -> rate 0.4/s
        hist.labels("m", "0").observe(10)  # one 10-token step per sample, in le=16
        snaps.append((start + i * interval, list(reg.collect())))
    write_recording(snaps, path)
    return start


def test_promtool_accepts_and_prometheus_returns_the_values(tmp_path):
    end = float(int(time.time()))
    rec = tmp_path / "rec.om"
    start = _recording(rec, end)
    out = backfill(rec, tmp_path / "data")
    assert "BLOCK ULID" in out
    with PrometheusServer(tmp_path / "prom", data_dir=tmp_path / "data") as prom:
        # the colon names are stored as written
        at = start + 10 * 5.0  # i = 10 -> running 10 % 7 = 3, preemptions 2 * 11 = 22
        res = prom.wait_for_series('vllm:num_requests_running{model_name="m",engine="0"}', timeout=30, at=at)
        assert float(res[0]["value"][1]) == 3.0
        res = prom.query("vllm:num_preemptions_total", at=at)
        assert float(res[0]["value"][1]) == 22.0
        # over the last 5 minutes the counter grows by 2 every 5 s: 0.4/s
        res = prom.query("rate(vllm:num_preemptions_total[5m])", at=end)
        assert float(res[0]["value"][1]) == pytest.approx(0.4, rel=1e-6)
        res = prom.query('vllm:iteration_tokens_total_bucket{le="8.0"}', at=end)
        assert float(res[0]["value"][1]) == 0.0
        res = prom.query('vllm:iteration_tokens_total_bucket{le="16.0"}', at=end)
        assert float(res[0]["value"][1]) == 120.0  # 10 min / 5 s = 120 observations
