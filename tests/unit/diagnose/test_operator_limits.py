"""The operator's limits metric (``kvpilot_vllmserver_limit``) as a limit source: its place in the resolution
order, its join on the vLLM pod, and its reading from a recording (pure parts; the Prometheus path is in
tests/integration/diagnose/test_operator_limit_metric.py).
"""

from __future__ import annotations

import dataclasses
import math

from kvpilot.diagnose.limits import GivenLimits, Limits, resolve_limits
from kvpilot.diagnose.signals import OperatorLimitIndex, TargetKey, compute_signals
from kvpilot.metrics.exposition import Sample

POD = {"namespace": "llm", "pod": "qwen-0"}


def test_operator_metric_sits_after_the_pod_log_and_before_cache_config_info():
    metric = {"max_num_seqs": 4.0, "max_num_batched_tokens": 512.0, "kv_cache_tokens": 21520.0}
    # alone it decides (not vLLM's default 256 / 2048)
    limits = resolve_limits(operator_metric=metric, cache_config={"num_gpu_blocks": "100", "block_size": "16"})
    assert (limits.max_num_seqs.value, limits.max_num_seqs.source) == (4, "kvpilot_vllmserver_limit")
    assert (limits.max_num_batched_tokens.value, limits.max_num_batched_tokens.source) == (
        512,
        "kvpilot_vllmserver_limit",
    )
    # kv_cache_tokens: the metric's 21,520 beats cache_config_info's 100 blocks x 16 = 1,600 (derived)
    assert (limits.kv_cache_tokens.value, limits.kv_cache_tokens.source) == (21520, "kvpilot_vllmserver_limit")
    assert "max_num_seqs 4 (kvpilot_vllmserver_limit)" in limits.describe()
    assert not any("max_num_seqs not configured" in n for n in limits.notes)
    # the pod's own log and args come first, the command line overrides everything
    assert resolve_limits(operator_metric=metric, pod_log={"max_num_seqs": 8}).max_num_seqs.source == "pod log"
    assert resolve_limits(operator_metric=metric, pod_args={"max_num_seqs": 8}).max_num_seqs.value == 8
    assert resolve_limits(operator_metric=metric, cli={"max_num_seqs": 16}).max_num_seqs.value == 16
    # cache_config_info comes after it
    both = resolve_limits(
        operator_metric={"gpu_memory_utilization": 0.6}, cache_config={"gpu_memory_utilization": "0.9"}
    )
    assert (both.gpu_memory_utilization.value, both.gpu_memory_utilization.source) == (0.6, "kvpilot_vllmserver_limit")


def test_index_joins_on_namespace_and_pod_and_drops_non_finite_values():
    rows = [
        ({**POD, "server": "qwen", "limit": "max_num_seqs"}, 4.0),
        ({**POD, "server": "qwen", "limit": "max_num_seqs"}, 6.0),  # later row wins
        ({**POD, "server": "qwen", "limit": "max_model_len"}, math.nan),
        ({"namespace": "other", "pod": "qwen-0", "limit": "max_num_seqs"}, 99.0),
        ({"namespace": "llm", "limit": "max_num_seqs"}, 7.0),  # no pod: joins nothing
    ]
    index = OperatorLimitIndex(rows)
    assert index.get(TargetKey(namespace="llm", pod="qwen-0")) == {"max_num_seqs": 6.0}
    assert index.get(TargetKey(namespace="other", pod="qwen-0")) == {"max_num_seqs": 99.0}
    assert index.get(TargetKey(namespace="llm", pod="")) == {}


def test_a_recording_s_last_limit_sample_in_the_window_is_read():
    vllm = {**POD, "model_name": "qwen", "engine": "0"}
    limit = {**POD, "server": "qwen", "limit": "max_num_seqs"}
    samples = [
        Sample("vllm:num_requests_running", vllm, 4.0, 100.0),
        Sample("vllm:num_requests_running", vllm, 4.0, 160.0),
        Sample("kvpilot_vllmserver_limit", limit, 2.0, 30.0),  # before the 120 s window [40, 160]: ignored
        Sample("kvpilot_vllmserver_limit", limit, 4.0, 100.0),
        Sample("kvpilot_vllmserver_limit", limit, 5.0, 150.0),
        Sample("kvpilot_vllmserver_limit", {**limit, "limit": "max_model_len"}, 8192.0, 150.0),  # same time
    ]
    [signals] = compute_signals(samples, 120.0, 160.0).values()
    assert signals.operator_limits == {"max_num_seqs": 5.0, "max_model_len": 8192.0}


def test_the_recording_reader_keeps_the_operator_s_limit(tmp_path):
    from kvpilot.diagnose.sources.recording import read_window

    path = tmp_path / "r.om"
    path.write_text(
        "# TYPE vllm:num_requests_running gauge\n"
        'vllm:num_requests_running{namespace="llm",pod="qwen-0",engine="0"} 4 100\n'
        "# TYPE kvpilot_vllmserver_limit gauge\n"
        'kvpilot_vllmserver_limit{namespace="llm",pod="qwen-0",server="qwen",limit="max_num_seqs"} 4 100\n'
        "# EOF\n"
    )
    [signals] = compute_signals(read_window(path, 300.0, 100.0).samples, 300.0, 100.0).values()
    assert signals.operator_limits == {"max_num_seqs": 4.0}


def test_the_command_line_can_give_every_limit():
    # GivenLimits names each Limit of Limits: the command line's mapping cannot hold a name resolve_limits ignores
    limits = {f.name for f in dataclasses.fields(Limits) if f.type == "Limit"}  # annotations are strings here
    assert set(GivenLimits.__annotations__) == limits
