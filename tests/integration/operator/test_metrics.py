"""The operator's /metrics, scraped over HTTP while the real operator runs against the sandbox API."""

from __future__ import annotations

import copy
import datetime
import urllib.error
import urllib.request

import kubernetes.client
import pytest
from kopf.testing import KopfRunner
from prometheus_client.parser import text_string_to_metric_families

from kvpilot.controller.handlers import build_registry
from kvpilot.controller.metrics import OperatorMetrics, server_series
from kvpilot.controller.settings import make_settings
from tests.integration.operator.conftest import SERVERS, wait_for
from tests.integration.operator.test_operator import EXPERIMENT, VLLM_LOG


def _scrape(url: str) -> dict[tuple[str, tuple], float]:
    """``{(sample name, sorted labels): value}`` of one scrape of ``url``."""
    with urllib.request.urlopen(url, timeout=5) as resp:
        text = resp.read().decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def _limit(samples: dict, namespace: str, pod: str, limit: str) -> float | None:
    key = (
        "kvpilot_vllmserver_limit",
        tuple(sorted({"namespace": namespace, "server": "qwen", "pod": pod, "limit": limit}.items())),
    )
    return samples.get(key)


@pytest.fixture
def metrics_server():
    metrics = OperatorMetrics()
    server = metrics.serve("127.0.0.1", 0, "/metrics")
    yield metrics, server
    server.close()


def test_metrics_carry_the_servers_limits_phase_expiry_and_reconcile_counts(
    cluster, api, namespace, kubelet, metrics_server
):
    metrics, server = metrics_server
    runner = KopfRunner(
        ["run", "--standalone", "--namespace", namespace],
        registry=build_registry(cluster.configuration(), hub=False, metrics=metrics),
        settings=make_settings(),
        timeout=10,
    )
    with runner:
        kubernetes.client.CustomObjectsApi(api).create_namespaced_custom_object(
            *SERVERS, namespace, "vllmservers", copy.deepcopy(EXPERIMENT)
        )
        pod = wait_for(lambda: (cluster.list("v1/pods", namespace) or [None])[0], what="the pod")["metadata"]["name"]
        kubelet.schedule(namespace, pod)
        kubelet.start(namespace, pod, log=VLLM_LOG)
        kubelet.ready(namespace, pod)

        def ready_with_kv():
            samples = _scrape(server.url)
            return samples if _limit(samples, namespace, pod, "kv_cache_tokens") is not None else None

        samples = wait_for(ready_with_kv, timeout=15, what="kv_cache_tokens on /metrics")
    # EXPERIMENT's spec.engine: maxNumSeqs 4, maxModelLen 8192, gpuMemoryUtilization 0.6; the
    # log's "GPU KV cache size: 21,520 tokens"; maxNumBatchedTokens unset -> no series.
    assert _limit(samples, namespace, pod, "max_num_seqs") == 4
    assert _limit(samples, namespace, pod, "max_model_len") == 8192
    assert _limit(samples, namespace, pod, "gpu_memory_utilization") == 0.6
    assert _limit(samples, namespace, pod, "kv_cache_tokens") == 21520
    assert _limit(samples, namespace, pod, "max_num_batched_tokens") is None
    info = {
        dict(k[1])["phase"]
        for k in samples
        if k[0] == "kvpilot_vllmserver_info" and dict(k[1])["namespace"] == namespace
    }
    assert info == {"Ready"}
    status = cluster.get("kvpilot.dev/v1alpha1/vllmservers", namespace, "qwen")["status"]
    expected = datetime.datetime.fromisoformat(status["expiresAt"].replace("Z", "+00:00")).timestamp()
    key = (
        "kvpilot_vllmserver_expiry_timestamp_seconds",
        tuple(sorted({"namespace": namespace, "server": "qwen", "pod": pod}.items())),
    )
    assert samples[key] == expected
    successes = samples[("kvpilot_reconcile_total", (("handler", "reconcile"), ("outcome", "success")))]
    assert successes >= 1
    assert samples[("kvpilot_reconcile_duration_seconds_count", (("handler", "reconcile"),))] >= successes


def test_an_invalid_spec_counts_as_a_permanent_error(cluster, api, namespace, metrics_server):
    metrics, server = metrics_server
    body = copy.deepcopy(EXPERIMENT)
    body["spec"]["engine"]["extraArgs"] = ["--max-num-seqs=8"]  # a managed flag: refused
    with KopfRunner(
        ["run", "--standalone", "--namespace", namespace],
        registry=build_registry(cluster.configuration(), hub=False, metrics=metrics),
        settings=make_settings(),
        timeout=10,
    ):
        kubernetes.client.CustomObjectsApi(api).create_namespaced_custom_object(
            *SERVERS, namespace, "vllmservers", body
        )
        key = ("kvpilot_reconcile_total", (("handler", "reconcile"), ("outcome", "permanent_error")))
        assert wait_for(lambda: _scrape(server.url).get(key), what="a permanent_error count") == 1


def test_a_deleted_server_leaves_no_series():
    metrics = OperatorMetrics()
    body = {"metadata": {"namespace": "llm", "name": "qwen"}, "spec": {"model": "m", "engine": {"maxNumSeqs": 8}}}
    metrics.on_server_event({"type": "ADDED", "object": body})
    assert [s.limits for s in metrics.servers()] == [{"max_num_seqs": 8.0}]
    metrics.on_server_event({"type": "DELETED", "object": body})
    assert metrics.servers() == []


def test_server_series_ignores_non_numbers_and_reads_expiry():
    s = server_series(
        {
            "metadata": {"namespace": "n", "name": "s"},
            "spec": {"model": "m", "engine": {"maxNumSeqs": True, "maxModelLen": "8k"}},
            "status": {"phase": "Ready", "podName": "s-abcde", "expiresAt": "1970-01-01T01:00:00Z"},
        }
    )
    assert s.limits == {}
    assert s.pod == "s-abcde"
    assert s.phase == "Ready"
    assert s.expiry == 3600.0  # one hour after the epoch


def test_other_paths_are_404(metrics_server):
    _, server = metrics_server
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(server.url.replace("/metrics", "/other"), timeout=5)
    assert err.value.code == 404
