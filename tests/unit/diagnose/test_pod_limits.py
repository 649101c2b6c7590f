"""Limits from a vLLM pod: its container command line and its startup log (real vLLM output, pure parts).

Inputs are copied from public vLLM output (tests/fixtures/vllm-startup/PROVENANCE.md); expected
values are read off those lines by hand.
"""

from __future__ import annotations

from pathlib import Path

from kvpilot.diagnose.sources.kube import pod_limits_from, vllm_argv
from kvpilot.vllm.startup_log import parse_non_default_args, startup_limits

STARTUP = Path(__file__).resolve().parents[2] / "fixtures" / "vllm-startup"


def test_non_default_args_and_kv_lines_of_a_real_startup_log():
    log = (STARTUP / "club-3090-issue-295.log").read_text()
    # the line says: 'max_model_len': 262144, 'tensor_parallel_size': 2, 'kv_cache_dtype': 'fp8_e5m2',
    # 'enable_prefix_caching': True, 'max_num_batched_tokens': 8192, 'max_num_seqs': 2; KV 620,944 tokens
    assert startup_limits(log) == {
        "max_num_seqs": 2,
        "max_num_batched_tokens": 8192,
        "max_model_len": 262144,
        "kv_cache_dtype": "fp8_e5m2",
        "tensor_parallel_size": 2,
        "enable_prefix_caching": True,
        "kv_cache_tokens": 620944,
    }


def test_default_budget_from_the_chunked_prefill_line():
    log = (STARTUP / "vllm-pr-24162.log").read_text()
    # non-default args name only tensor_parallel_size 2; the budget line says 2048 (vLLM's default)
    assert startup_limits(log) == {"tensor_parallel_size": 2, "max_num_batched_tokens": 2048}


def test_non_default_args_is_read_as_a_literal_only():
    assert parse_non_default_args("INFO non-default args: {'max_num_seqs': __import__('os')}") is None
    assert parse_non_default_args("no such line") is None
    assert startup_limits("INFO non-default args: {'max_num_seqs': 'four', 'max_model_len': True}") == {}


def test_args_of_a_vllm_openai_image_container():
    # the image's entrypoint is `vllm serve`: a container with only args (vLLM issue 51041's command)
    args = (STARTUP / "vllm-issue-51041.args").read_text().split()
    pod = {
        "metadata": {"name": "ds-0"},
        "spec": {"containers": [{"name": "server", "image": "vllm/vllm-openai:v0.26.0-cu129", "args": args}]},
    }
    found = pod_limits_from(pod, None)
    assert found.container == "server"
    # --kv-cache-dtype fp8 --block-size 256 --tensor-parallel-size 4 --max-num-batched-tokens 8192
    # --gpu-memory-utilization 0.9 --max-num-seqs 32
    assert found.args == {
        "kv_cache_dtype": "fp8",
        "block_size": 256,
        "tensor_parallel_size": 4,
        "max_num_batched_tokens": 8192,
        "gpu_memory_utilization": 0.9,
        "max_num_seqs": 32,
    }


def test_vllm_argv_forms():
    assert vllm_argv({"command": ["vllm", "serve", "m", "--max-num-seqs", "4"]}) == [
        "serve",
        "m",
        "--max-num-seqs",
        "4",
    ]
    assert vllm_argv({"command": ["/bin/sh", "-c", "vllm serve m --max-num-seqs 8"]}) == [
        "serve",
        "m",
        "--max-num-seqs",
        "8",
    ]
    assert vllm_argv({"command": ["python3", "-m", "vllm.entrypoints.openai.api_server", "--model", "m"]}) == [
        "--model",
        "m",
    ]
    assert vllm_argv({"command": ["nginx"], "image": "nginx"}) is None
    found = pod_limits_from(
        {"metadata": {"name": "p"}, "spec": {"containers": [{"name": "x", "image": "nginx"}]}}, None
    )
    assert found.container == ""
    assert "no container runs vllm serve" in found.notes[0]
