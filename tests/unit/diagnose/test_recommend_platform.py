"""Advice fits the platform the server reports: a CPU server whose KV is set in bytes gets bytes, no GPU memory
utilization, no CUDA-graph batch sizes and no tensor parallelism; a GPU server keeps them. Changes are sized from
the window's shortfall.

The CPU server is vLLM 0.32's on a 4-layer model (2 KV heads of 64, bf16: 2 x 4 x 2 x 64 x 2 = 2,048 bytes per
token), started with ``--kv-cache-memory-bytes`` and exporting it in ``vllm:cache_config_info`` with the CPU block
size 128: 6 MiB = 6,291,456 B / 2,048 = 3,072 tokens ("CPU KV cache size: 3,072 tokens"), 256-token prompts, 64
generated.
"""

from __future__ import annotations

from kvpilot.diagnose.limits import resolve_limits
from kvpilot.diagnose.recommend import Inputs, platform, recommend
from kvpilot.diagnose.signals import Signals, finish_signals
from kvpilot.kv.spec import ModelConfig
from tests.realserver.make_model import SHAPE

GIB = 2**30
MIB = 2**20
#: the served model's config.json: Qwen2 with 4 layers, 2 KV heads of 64
TINY = {"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", **SHAPE, "torch_dtype": "bfloat16"}
#: vllm:cache_config_info of the CPU server (labels as CacheConfig.metrics_info prints them)
CPU_INFO = {
    "block_size": "128",
    "kv_cache_memory_bytes": str(6 * MIB),
    "kv_cache_size_tokens": "3072",
    "num_gpu_blocks": "24",
    "gpu_memory_utilization": "0.92",
    "cache_dtype": "auto",
    "enable_prefix_caching": "True",
}
#: the same server on a GPU: KV sized by the utilization (kv_cache_memory_bytes unset), 16-token blocks
GPU_INFO = CPU_INFO | {"block_size": "16", "kv_cache_memory_bytes": "None", "num_gpu_blocks": "192"}


def signals(**values) -> Signals:
    return finish_signals(Signals(values=values, window_seconds=300.0, end=0.0))


def kv_bound(**extra) -> Signals:
    """KV full, preempting, 8 running, the queue growing by 2 req/s while 10 req/s finish (256 + 64 tokens each)."""
    values = {
        "running_avg": 8.0,
        "running_max": 8.0,
        "waiting_avg": 30.0,
        "waiting_max": 62.0,
        "waiting_trend_per_s": 2.0,
        "requests_finished_per_s": 10.0,
        "prompt_tokens_per_s": 2560.0,
        "generation_tokens_per_s": 640.0,
        "kv_usage_avg": 0.97,
        "kv_usage_max": 1.0,
    }
    return signals(**(values | extra))


def test_the_platform_is_read_from_the_cache_config_and_the_gpu_named():
    assert platform(resolve_limits(cache_config=CPU_INFO))[0] == "cpu"
    assert platform(resolve_limits(cache_config=GPU_INFO))[0] == "gpu"
    # bytes alone are no CPU: a GPU server may set them too (its block size is not the CPU's)
    assert platform(resolve_limits(cache_config=GPU_INFO | {"kv_cache_memory_bytes": str(6 * MIB)}))[0] == "gpu"
    # a GPU named wins; "cpu" named is a CPU whatever the labels
    assert platform(resolve_limits(cache_config=CPU_INFO, gpu_name="H100"))[0] == "gpu"
    assert platform(resolve_limits(cache_config=GPU_INFO, gpu_name="CPU"))[0] == "cpu"


def test_a_cpu_server_short_of_kv_gets_bytes_sized_from_the_shortfall():
    recs = recommend(
        "kv_cache_exhaustion", Inputs(kv_bound(), resolve_limits(cache_config=CPU_INFO), ModelConfig.read(TINY))
    )
    flags = [r.flag for r in recs]
    # 8 in KV x (10 + 2) / 10 = 9.6 keep up, x 1.25 = 12 requests x 320 tokens = 3,840 tokens x 2,048 B
    # = 7,864,320 B = 7.5 MiB -> 8 MiB
    first = recs[0]
    assert first.flag == "--kv-cache-memory-bytes"
    assert (first.current, first.suggested) == (6 * MIB, 8 * MIB)
    assert "3,840 KV tokens needed" in first.expected_effect
    assert "the node's RAM" in first.expected_effect
    assert "--gpu-memory-utilization" not in flags
    assert "--tensor-parallel-size" not in flags
    # fp8 doubles 3,072 to 6,144 tokens: it covers the 3,840 too
    assert "--kv-cache-dtype" in flags


def test_a_gpu_server_short_of_kv_keeps_the_utilization_and_tensor_parallelism():
    limits = resolve_limits(cache_config=GPU_INFO, gpu_memory_bytes=1 * GIB)
    recs = {r.flag: r for r in recommend("kv_cache_exhaustion", Inputs(kv_bound(), limits, ModelConfig.read(TINY)))}
    assert "--kv-cache-memory-bytes" not in recs
    util = recs["--gpu-memory-utilization"]
    # 3,840 - 3,072 = 768 tokens x 2,048 B = 1,572,864 B = 0.00146 of 1 GiB: 0.92 -> 0.93 (rounded up)
    assert (util.current, util.suggested) == (0.92, 0.93)
    assert "--tensor-parallel-size" in recs


def test_no_flag_covers_the_shortfall_so_replicas_come_first():
    # the queue grows by 30 req/s on 10 served: 8 x 40 / 10 x 1.25 = 40 requests x 320 = 12,800 tokens, 9,728 more
    # than the 3,072 there are; fp8 gives 6,144; on a 256 MiB GPU 0.95 adds (0.95 - 0.92) x 256 MiB / 2,048 B =
    # 3,932 (it would take 0.92 + 9,728 x 2,048 / 256 MiB = 0.994): ceil(12,800 / 3,072) = 5 servers
    limits = resolve_limits(cache_config=GPU_INFO, gpu_memory_bytes=256 * MIB)
    recs = recommend("kv_cache_exhaustion", Inputs(kv_bound(waiting_trend_per_s=30.0), limits, ModelConfig.read(TINY)))
    assert (recs[0].flag, recs[0].suggested) == ("replicas (scale out)", 5)
    util = next(r for r in recs if r.flag == "--gpu-memory-utilization")
    assert util.suggested == 0.95
    assert "do not cover it" in util.expected_effect
    dtype = next(r for r in recs if r.flag == "--kv-cache-dtype")
    assert "short of the 12,800 needed" in dtype.expected_effect


def test_with_enough_gpu_memory_the_utilization_covers_it_and_comes_first():
    # the same shortfall on 1 GiB: 0.92 + 9,728 x 2,048 / 1 GiB = 0.9386 -> 0.94 covers it; no replicas
    limits = resolve_limits(cache_config=GPU_INFO, gpu_memory_bytes=1 * GIB)
    recs = recommend("kv_cache_exhaustion", Inputs(kv_bound(waiting_trend_per_s=30.0), limits, ModelConfig.read(TINY)))
    assert (recs[0].flag, recs[0].suggested) == ("--gpu-memory-utilization", 0.94)
    assert all(r.flag != "replicas (scale out)" for r in recs)


def test_a_cpu_server_at_its_seqs_cap_gets_the_slots_it_needs_without_cuda_graph_rounding():
    # max_num_seqs 2 pinned, 12 req/s offered, 10.9 served: 2 x 12 / 10.9 = 2.2 keep up, x 1.25 = 2.75 -> 3
    sig = signals(
        running_avg=2.0,
        running_max=2.0,
        waiting_avg=40.0,
        waiting_max=82.0,
        waiting_trend_per_s=1.1,
        requests_finished_per_s=10.9,
        prompt_tokens_per_s=10.9 * 256,
        generation_tokens_per_s=10.9 * 64,
        kv_usage_avg=0.024,
    )
    cpu = CPU_INFO | {"kv_cache_memory_bytes": str(64 * MIB), "kv_cache_size_tokens": "32768", "num_gpu_blocks": "256"}
    (on_cpu,) = recommend("max_num_seqs_cap", Inputs(sig, resolve_limits(cli={"max_num_seqs": 2}, cache_config=cpu)))
    assert (on_cpu.flag, on_cpu.current, on_cpu.suggested) == ("--max-num-seqs", 2, 3)
    assert "CUDA-graph" not in on_cpu.expected_effect
    gpu = GPU_INFO | {"kv_cache_size_tokens": "32768", "num_gpu_blocks": "2048"}
    (on_gpu,) = recommend("max_num_seqs_cap", Inputs(sig, resolve_limits(cli={"max_num_seqs": 2}, cache_config=gpu)))
    # vLLM's CUDA-graph batch sizes 1, 2, 4, 8...: 3 rounds up to 4
    assert on_gpu.suggested == 4
    assert "CUDA-graph batch size 4" in on_gpu.expected_effect
