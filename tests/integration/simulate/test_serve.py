"""`kvpilot simulate --serve` scraped by a real Prometheus, and the `vllm` shim's endpoints.

Prometheus 2.42 asks for OpenMetrics; prometheus_client 0.26 then escapes ``:`` to ``_`` in sample
names (HELP/TYPE keep the colon), so Prometheus stores only ``vllm_...`` names — as it does when
scraping a real vLLM server (docs/metrics.md, "Escaping"). The expected names below are written out by hand
from docs/background.md §8 for vLLM 0.33.
"""

from __future__ import annotations

import json
import time

import pytest

from kvpilot.metrics.exposition import parse_exposition
from tests.integration.simulate._server import BIN, PROMETHEUS_ACCEPT, Server, get
from tests.support.prom import PrometheusServer, free_port

pytestmark = pytest.mark.prometheus

GAUGES = [
    "vllm_num_requests_running",
    "vllm_num_requests_waiting",
    "vllm_num_requests_waiting_by_reason",
    "vllm_kv_cache_usage_perc",
    "vllm_cache_config_info",
]
COUNTERS = [
    "vllm_num_preemptions",
    "vllm_prefix_cache_queries",
    "vllm_prefix_cache_hits",
    "vllm_external_prefix_cache_queries",
    "vllm_external_prefix_cache_hits",
    "vllm_prompt_tokens",
    "vllm_generation_tokens",
    "vllm_request_success",
]
HISTOGRAMS = [
    "vllm_iteration_tokens_total",
    "vllm_time_to_first_token_seconds",
    "vllm_inter_token_latency_seconds",
    "vllm_e2e_request_latency_seconds",
    "vllm_request_queue_time_seconds",
    "vllm_request_prefill_time_seconds",
    "vllm_request_decode_time_seconds",
    "vllm_request_prompt_tokens",
    "vllm_request_generation_tokens",
]
EXPECTED_033 = (
    set(GAUGES) | {c + "_total" for c in COUNTERS} | {h + s for h in HISTOGRAMS for s in ("_bucket", "_count", "_sum")}
)


def _series(result: list[dict]) -> set[tuple]:
    return {tuple(sorted((k, v) for k, v in r["metric"].items() if k not in ("job", "instance"))) for r in result}


def test_serve_scraped_by_prometheus_stores_every_series(tmp_path):
    port = free_port()
    argv = [
        str(BIN / "kvpilot"),
        "simulate",
        "healthy",
        "--serve",
        f"127.0.0.1:{port}",
        "--speed",
        "5",
        "--duration",
        "2h",
        "--model-name",
        "Qwen/Qwen2.5-1.5B-Instruct",
    ]
    with Server(argv, port, tmp_path / "sim") as sim:
        # a plain GET (no Accept) gets the 0.0.4 text format with colon names
        status, headers, body = get(sim.url + "/metrics")
        assert status == 200
        assert headers["Content-Type"].startswith("text/plain; version=0.0.4")
        assert "\nvllm:num_requests_running{" in body.decode()
        # Prometheus's own Accept header gets OpenMetrics with escaped sample names
        status, headers, body = get(sim.url + "/metrics", accept=PROMETHEUS_ACCEPT)
        text = body.decode()
        assert headers["Content-Type"].startswith("application/openmetrics-text")
        assert "# TYPE vllm:num_requests_running gauge" in text
        assert "\nvllm_num_requests_running{" in text

        with PrometheusServer(tmp_path / "prom", scrape_targets=[f"127.0.0.1:{port}"]) as prom:
            prom.wait_for_series('vllm_num_requests_running{job="vllm"}', timeout=60)
            stored = prom.query('{__name__=~"vllm[:_].+", job="vllm"}')
            names = {r["metric"]["__name__"] for r in stored}
            assert names >= EXPECTED_033, sorted(EXPECTED_033 - names)
            assert not any(":" in n for n in names)  # only the escaped spelling is stored
            # every series of one direct scrape (same Accept header) is in Prometheus
            _, _, body = get(sim.url + "/metrics", accept=PROMETHEUS_ACCEPT)
            scraped = {tuple(sorted({"__name__": s.name, **s.labels}.items())) for s in parse_exposition(body.decode())}
            missing = scraped - _series(stored)
            assert not missing, sorted(missing)[:5]
            # labels as vLLM sets them
            running = prom.query('vllm_num_requests_running{job="vllm"}')
            assert running[0]["metric"]["model_name"] == "Qwen/Qwen2.5-1.5B-Instruct"
            assert running[0]["metric"]["engine"] == "0"
            info = prom.query('vllm_cache_config_info{job="vllm"}')
            assert "model_name" not in info[0]["metric"]
            assert info[0]["metric"]["block_size"] == "16"
            # the simulation advances: prompt tokens grow between two Prometheus evaluations (polled)
            prom.wait_for_series('increase(vllm_prompt_tokens_total{job="vllm"}[30s]) > 0', timeout=60)

        status, headers, body = get(sim.url + "/v1/models")
        assert status == 200
        assert json.loads(body)["data"][0]["id"] == "Qwen/Qwen2.5-1.5B-Instruct"
        assert get(sim.url + "/nope")[0] == 404
    assert sim.proc.returncode == 0  # SIGTERM stops it cleanly


def test_serve_stops_after_duration(tmp_path):
    # 20 simulated seconds at 4x: the server exits by itself after ~5 s of wall time. The window
    # must outlast Server's wait for the first /health 200 on a loaded machine (at 10x it was 2 s,
    # and a first poll delayed that long would find the process already gone).
    port = free_port()
    argv = [
        str(BIN / "kvpilot"),
        "simulate",
        "idle",
        "--serve",
        f"127.0.0.1:{port}",
        "--speed",
        "4",
        "--duration",
        "20s",
    ]
    with Server(argv, port, tmp_path / "sim") as sim:
        assert sim.proc.wait(timeout=60) == 0
    assert get(sim.url + "/health", timeout=1)[0] == 0  # nothing listens any more


def _running(url: str) -> float:
    _, _, body = get(url + "/metrics")
    (sample,) = [s for s in parse_exposition(body.decode()) if s.name == "vllm:num_requests_running"]
    assert sample.labels["model_name"] == "acme/tiny-model"
    return sample.value


def test_vllm_shim_serves_health_models_and_metrics(tmp_path):
    port = free_port()
    # vLLM's own command line; --max-num-seqs 3 differs from the scenario's 4, so the cap seen must
    # come from these flags. KVPILOT_* pick the scenario and run it 20x faster than real time.
    argv = [
        str(BIN / "kvpilot-vllm-shim"),
        "serve",
        "acme/tiny-model",
        "--max-num-seqs",
        "3",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
    ]
    env = {"KVPILOT_SCENARIO": "max-num-seqs-cap", "KVPILOT_SPEED": "20", "KVPILOT_DURATION": "1h"}
    with Server(argv, port, tmp_path / "shim", env=env) as shim:
        status, _, body = get(shim.url + "/health")
        assert status == 200
        assert body == b""
        status, _, body = get(shim.url + "/v1/models")
        models = json.loads(body)
        assert status == 200
        assert models["object"] == "list"
        assert [m["id"] for m in models["data"]] == ["acme/tiny-model"]
        seen = []
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and (not seen or seen[-1] != 3):
            seen.append(_running(shim.url))
            time.sleep(0.1)
        assert seen[-1] == 3, seen
        assert max(seen) == 3
    assert "serving http://127.0.0.1:" in shim.output()
