"""Metric-name realities (docs/background.md §8, case C19): both generations, escaped colons, suffixes."""

import pytest

from kvpilot.metrics.catalog import match_name, names_for_version


@pytest.mark.parametrize(
    ("exposed", "canonical", "suffix", "legacy", "escaped"),
    [
        ("vllm:num_requests_running", "vllm:num_requests_running", "", False, False),
        ("vllm_num_requests_running", "vllm:num_requests_running", "", False, True),
        ("vllm:num_preemptions_total", "vllm:num_preemptions", "_total", False, False),
        ("vllm:gpu_cache_usage_perc", "vllm:kv_cache_usage_perc", "", True, False),
        ("vllm_gpu_prefix_cache_hits_total", "vllm:prefix_cache_hits", "_total", True, True),
        ("vllm:time_per_output_token_seconds_bucket", "vllm:inter_token_latency_seconds", "_bucket", True, False),
        ("vllm:iteration_tokens_total_bucket", "vllm:iteration_tokens_total", "_bucket", False, False),
        ("vllm:prompt_tokens_created", "vllm:prompt_tokens", "_created", False, False),
        # vLLM's LoRA gauge: its family name ends in _info, which is not a suffix here
        ("vllm:lora_requests_info", "vllm:lora_requests_info", "", False, False),
        ("vllm_lora_requests_info", "vllm:lora_requests_info", "", False, True),
    ],
)
def test_match_name(exposed, canonical, suffix, legacy, escaped):
    m = match_name(exposed)
    assert m is not None
    assert (m.canonical, m.suffix, m.legacy, m.escaped) == (canonical, suffix, legacy, escaped)


def test_unknown_names_do_not_match():
    assert match_name("process_cpu_seconds_total") is None
    # "vllm:num_preemptions" without _total is what broken public rules query; it is a family
    # name, so it maps, but a scrape never exposes it bare for a counter.
    assert match_name("vllm:num_requests_swapped") is None


def test_names_for_version_follows_deprecation_policy():
    # docs/background.md §8 and case C19: deprecated 0.9.2 (both names side by side, as a 0.10 scrape
    # shows), hidden from 0.11 (the C19 scrape of 0.11.0 lacks vllm:gpu_cache_usage_perc).
    assert names_for_version("vllm:kv_cache_usage_perc", "0.8.5") == ("vllm:gpu_cache_usage_perc",)
    assert names_for_version("vllm:kv_cache_usage_perc", "0.10.1") == (
        "vllm:kv_cache_usage_perc",
        "vllm:gpu_cache_usage_perc",
    )
    assert names_for_version("vllm:kv_cache_usage_perc", "0.11.0") == ("vllm:kv_cache_usage_perc",)
    assert names_for_version("vllm:prefix_cache_hits", "0.11.0") == ("vllm:prefix_cache_hits",)
    assert names_for_version("vllm:kv_cache_usage_perc", "0.33.0") == ("vllm:kv_cache_usage_perc",)
    assert names_for_version("vllm:num_requests_waiting_by_reason", "0.10.0") == ()
