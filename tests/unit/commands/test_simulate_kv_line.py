"""The `vllm serve` stand-in logs vLLM's KV-capacity line, which the operator parses from the pod log."""

from __future__ import annotations

from kvpilot.commands.simulate.cli import kv_cache_log_line
from kvpilot.vllm.startup_log import parse_kv_cache_report


def test_line_is_what_vllm_logged_for_the_founding_experiment():
    # vLLM logged "GPU KV cache size: 21,520 tokens" and "Maximum concurrency for 8,192 tokens per
    # request: 2.63x" (docs/operator.md): 21,520 / 16 = 1,345 blocks; 8,192 / 16 = 512 blocks per
    # request; 1,345 / 512 = 2.627 -> 2.63x
    line = kv_cache_log_line(16, 1345, 8192)
    assert line.endswith("GPU KV cache size: 21,520 tokens, Maximum concurrency for 8,192 tokens per request: 2.63x")


def test_operator_reads_the_line_back():
    report = parse_kv_cache_report("loading\n" + kv_cache_log_line(16, 1345, 8192) + "\nApplication startup complete.")
    assert (report.kv_cache_tokens, report.max_concurrency, report.max_model_len, report.device) == (
        21520,
        2.63,
        8192,
        "GPU",
    )


def test_a_partial_last_block_per_request_counts_whole():
    # max_model_len 100 at block size 16 needs cdiv(100, 16) = 7 blocks: 70 blocks hold 10 requests, and
    # vLLM 0.29.0 logs int(10 x 100) = 1,000 tokens (get_kv_cache_capacity), not 70 x 16 = 1,120
    # (tests/unit/kv/test_vllm_oracle.py has vLLM's own figures for this pool)
    assert kv_cache_log_line(16, 70, 100).endswith(
        "1,000 tokens, Maximum concurrency for 100 tokens per request: 10.00x"
    )
