"""The KV-capacity line in every vLLM log format (lines written by hand from docs/background.md §2 and
the format strings of vllm/v1/core/kv_cache_utils.py).
"""

from __future__ import annotations

import pytest

from kvpilot.vllm.startup_log import KVCacheReport, parse_kv_cache_report

# 21,520 tokens at max_model_len 8,192: 21520 / 8192 = 2.6269... -> vLLM prints "%.2fx" = 2.63x
EXPECTED = KVCacheReport(kv_cache_tokens=21520, max_concurrency=2.63, max_model_len=8192, device="GPU")

TWO_LINES_V027 = """\
INFO 11-30 12:00:00 [gpu_worker.py:276] Available KV cache memory: 0.58 GiB
INFO 11-30 12:00:00 [kv_cache_utils.py:1087] GPU KV cache size: 21,520 tokens
INFO 11-30 12:00:00 [kv_cache_utils.py:1091] Maximum concurrency for 8,192 tokens per request: 2.63x
"""
ONE_LINE_V028 = (
    "INFO 11-30 12:00:00 [kv_cache_utils.py:1134] GPU KV cache size: 21,520 tokens, "
    "Maximum concurrency for 8,192 tokens per request: 2.63x\n"
)
ENGINE_PREFIX_V030 = (
    "(EngineCore_DP0 pid=123) INFO 11-30 12:00:00 [kv_cache_utils.py:1245] GPU KV cache size: "
    "21,520 tokens, Maximum concurrency for 8,192 tokens per request: 2.63x\n"
)


@pytest.mark.parametrize(
    "log",
    [TWO_LINES_V027, ONE_LINE_V028, ENGINE_PREFIX_V030],
    ids=["two-lines-v0.27", "one-line-v0.28", "engine-prefix-v0.30"],
)
def test_every_format_gives_the_same_numbers(log):
    assert parse_kv_cache_report(log) == EXPECTED


def test_device_prefix_other_than_gpu():
    line = (
        "(EngineCore_DP0 pid=9) INFO XPU KV cache size: 131,072 tokens, Maximum concurrency for 32,768 "
        "tokens per request: 4.00x"
    )
    assert parse_kv_cache_report(line) == KVCacheReport(131072, 4.0, 32768, "XPU")


def test_counts_without_thousands_separators():
    # platform plugins print str(n): "Spyre KV cache size: 8192 tokens" and "... for 2048 tokens ..."
    log = "Spyre KV cache size: 8192 tokens\nMaximum concurrency for 2048 tokens per request: 4.00x\n"
    assert parse_kv_cache_report(log) == KVCacheReport(8192, 4.0, 2048, "Spyre")


def test_found_among_many_later_lines():
    log = ONE_LINE_V028 + "".join(f"INFO Route: /v1/x{i}\n" for i in range(500))
    assert parse_kv_cache_report(log).kv_cache_tokens == 21520


def test_size_line_without_concurrency_line():
    assert parse_kv_cache_report("GPU KV cache size: 1,024 tokens\n") == KVCacheReport(1024, None, None, "GPU")


@pytest.mark.parametrize(
    "log", ["", "INFO Loading weights took 3.1 seconds\n", "Maximum concurrency for 8,192 tokens per request: 2.63x\n"]
)
def test_no_report_yet(log):
    assert parse_kv_cache_report(log) is None
