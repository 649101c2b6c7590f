"""VLLMMetrics: per-version names, labels, units and exposition (expected sets written by hand
from docs/background.md §8, the rename notes of the catalog and the captures in tests/fixtures/metrics).
"""

from __future__ import annotations

import pytest

from kvpilot.engine.exporter import VLLMMetrics, request_token_buckets
from kvpilot.metrics.exposition import parse_exposition

CACHE = {
    "block_size": "16",
    "num_gpu_blocks": "1345",
    "gpu_memory_utilization": "0.6",
    "enable_prefix_caching": "True",
    "kv_cache_size_tokens": "21520",
    "kv_cache_max_concurrency": "2.63",
}

# Present in every V1 release modelled (0.8 on), as TYPE names of the 0.0.4 text format.
COMMON = {
    "vllm:num_requests_running",
    "vllm:num_requests_waiting",
    "vllm:num_preemptions_total",
    "vllm:prompt_tokens_total",
    "vllm:generation_tokens_total",
    "vllm:request_success_total",
    "vllm:iteration_tokens_total",
    "vllm:time_to_first_token_seconds",
    "vllm:e2e_request_latency_seconds",
    "vllm:request_queue_time_seconds",
    "vllm:request_prefill_time_seconds",
    "vllm:request_decode_time_seconds",
    "vllm:request_prompt_tokens",
    "vllm:request_generation_tokens",
    "vllm:cache_config_info",
}
OLD_KV_PREFIX = {"vllm:gpu_cache_usage_perc", "vllm:gpu_prefix_cache_queries_total", "vllm:gpu_prefix_cache_hits_total"}
NEW_KV_PREFIX = {"vllm:kv_cache_usage_perc", "vllm:prefix_cache_queries_total", "vllm:prefix_cache_hits_total"}
EXTERNAL = {"vllm:external_prefix_cache_queries_total", "vllm:external_prefix_cache_hits_total"}
TPOT = {"vllm:time_per_output_token_seconds"}
ITL = {"vllm:inter_token_latency_seconds"}
BY_REASON = {"vllm:num_requests_waiting_by_reason"}
# families vLLM 0.29.0's PrometheusStatLogger exposes besides the ones above (read off its registry by the
# reference tier, tests/reference/)
NEW_029 = {
    "vllm:prompt_tokens_by_source_total",
    "vllm:prompt_tokens_cached_total",
    "vllm:request_prefill_kv_computed_tokens",
    "vllm:request_inference_time_seconds",
    "vllm:request_time_per_output_token_seconds",
    "vllm:request_max_num_generation_tokens",
    "vllm:request_params_n",
    "vllm:request_params_max_tokens",
    "vllm:engine_sleep_state",
    "vllm:estimated_flops_per_gpu_total",
    "vllm:estimated_read_bytes_per_gpu_total",
    "vllm:estimated_write_bytes_per_gpu_total",
    "vllm:mm_cache_queries_total",
    "vllm:mm_cache_hits_total",
}

EXPECTED = {
    "0.8.0": COMMON | OLD_KV_PREFIX | TPOT,
    "0.8.3": COMMON | OLD_KV_PREFIX | TPOT,
    "0.9.0": COMMON | OLD_KV_PREFIX | TPOT,
    "0.10.1": COMMON | OLD_KV_PREFIX | NEW_KV_PREFIX | TPOT | ITL,  # both generations side by side
    "0.11.0": COMMON | NEW_KV_PREFIX | EXTERNAL | TPOT | ITL,  # old KV/prefix names hidden
    "0.15.0": COMMON | NEW_KV_PREFIX | EXTERNAL | ITL,  # time_per_output_token removed
    "0.20.0": COMMON | NEW_KV_PREFIX | EXTERNAL | ITL | BY_REASON,
    "0.29.0": COMMON | NEW_KV_PREFIX | EXTERNAL | ITL | BY_REASON | NEW_029,
    "0.33.0": COMMON | NEW_KV_PREFIX | EXTERNAL | ITL | BY_REASON | NEW_029,
}


def _metrics(version: str) -> VLLMMetrics:
    return VLLMMetrics(vllm_version=version, model_name="Qwen/Qwen2.5-1.5B-Instruct", cache_config=CACHE)


def _text(m: VLLMMetrics) -> str:
    body, content_type = m.exposition("text/plain")
    assert content_type.startswith("text/plain; version=0.0.4")
    return body.decode()


def _type_names(text: str) -> set[str]:
    return {
        line.split()[2]
        for line in text.splitlines()
        if line.startswith("# TYPE") and not line.split()[2].endswith("_created")
    }


@pytest.mark.parametrize("version", sorted(EXPECTED))
def test_family_names_per_version(version):
    assert _type_names(_text(_metrics(version))) == EXPECTED[version]


def test_engine_label_only_from_083():
    for version, has_engine in [("0.8.0", False), ("0.8.2", False), ("0.8.3", True), ("0.33.0", True)]:
        samples = parse_exposition(_text(_metrics(version)))
        running = [s for s in samples if s.name == "vllm:num_requests_running"]
        assert len(running) == 1
        assert ("engine" in running[0].labels) is has_engine, version
        assert running[0].labels["model_name"] == "Qwen/Qwen2.5-1.5B-Instruct"


def test_cache_config_info_labels_by_version():
    def info(version):
        samples = parse_exposition(_text(_metrics(version)))
        (s,) = [s for s in samples if s.name == "vllm:cache_config_info"]
        return s

    old = info("0.23.0")
    assert old.value == 1.0
    assert "kv_cache_size_tokens" not in old.labels
    assert "model_name" not in old.labels
    assert old.labels["num_gpu_blocks"] == "1345"
    assert old.labels["engine"] == "0"
    new = info("0.24.0")
    assert new.labels["kv_cache_size_tokens"] == "21520"
    assert new.labels["kv_cache_max_concurrency"] == "2.63"


def _value(m: VLLMMetrics, name: str, **labels) -> float:
    hits = [
        s.value
        for s in parse_exposition(_text(m))
        if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())
    ]
    assert len(hits) == 1, (name, labels, hits)
    return hits[0]


def test_prefix_counters_in_blocks_before_090():
    # Two steps of 40 queried / 32 hit tokens with 16-token blocks: totals 80 and 64 tokens
    # -> 80 // 16 = 5 queried blocks, 64 // 16 = 4 hit blocks. From 0.9.0 the counters are tokens.
    for version, queries, hits in [("0.8.5", 5.0, 4.0), ("0.9.0", 80.0, 64.0)]:
        m = _metrics(version)
        for _ in range(2):
            m.record_step(
                num_tokens=40, prompt_tokens=40, generation_tokens=0, preemptions=0, prefix_queries=40, prefix_hits=32
            )
        assert _value(m, "vllm:gpu_prefix_cache_queries_total") == queries
        assert _value(m, "vllm:gpu_prefix_cache_hits_total") == hits


def test_step_and_queue_accounting_033():
    m = _metrics("0.33.0")
    m.set_queue(running=4, waiting=7, waiting_capacity=5, waiting_deferred=2, kv_cache_usage=0.25)
    m.record_step(
        num_tokens=2048,
        prompt_tokens=2044,
        generation_tokens=4,
        preemptions=1,
        prefix_queries=2044,
        prefix_hits=1024,
        external_queries=1020,
        external_hits=512,
    )
    m.record_step(num_tokens=4, prompt_tokens=0, generation_tokens=4, preemptions=2, prefix_queries=0, prefix_hits=0)
    assert _value(m, "vllm:num_requests_running") == 4
    assert _value(m, "vllm:num_requests_waiting") == 7
    assert _value(m, "vllm:num_requests_waiting_by_reason", reason="capacity") == 5
    assert _value(m, "vllm:num_requests_waiting_by_reason", reason="deferred") == 2
    assert _value(m, "vllm:kv_cache_usage_perc") == 0.25
    assert _value(m, "vllm:num_preemptions_total") == 3
    assert _value(m, "vllm:prompt_tokens_total") == 2044
    assert _value(m, "vllm:generation_tokens_total") == 8
    assert _value(m, "vllm:prefix_cache_hits_total") == 1024
    assert _value(m, "vllm:external_prefix_cache_hits_total") == 512
    # steps of 2048 and 4 tokens: bucket le=4 does not exist; le=8 holds 1, le=1024 holds 1, le=2048 holds 2
    assert _value(m, "vllm:iteration_tokens_total_bucket", le="8.0") == 1
    assert _value(m, "vllm:iteration_tokens_total_bucket", le="1024.0") == 1
    assert _value(m, "vllm:iteration_tokens_total_bucket", le="2048.0") == 2
    assert _value(m, "vllm:iteration_tokens_total_sum") == 2052


def test_record_request_histograms_and_success():
    m = _metrics("0.10.1")
    m.record_step(
        num_tokens=4, prompt_tokens=0, generation_tokens=4, preemptions=0, prefix_queries=0, prefix_hits=0,
        ttfts=[0.3], itls=[0.02, 0.03, 0.2],
    )  # fmt: skip
    m.record_request(
        e2e=1.2,
        queue_time=0.1,
        prefill_time=0.2,
        decode_time=0.9,
        prompt_tokens=30,
        generation_tokens=4,
        finished_reason="length",
    )
    # TTFT 0.3 s: above the 0.25 edge, inside 0.5
    assert _value(m, "vllm:time_to_first_token_seconds_bucket", le="0.25") == 0
    assert _value(m, "vllm:time_to_first_token_seconds_bucket", le="0.5") == 1
    # 0.10 observes each gap in both the new and the deprecated histogram
    for name in ("vllm:inter_token_latency_seconds_count", "vllm:time_per_output_token_seconds_count"):
        assert _value(m, name) == 3
    assert _value(m, "vllm:inter_token_latency_seconds_bucket", le="0.025") == 1
    assert _value(m, "vllm:request_success_total", finished_reason="length") == 1
    assert _value(m, "vllm:request_success_total", finished_reason="stop") == 0
    # prompt 30 tokens: buckets 1, 2, 5, 10, 20, 50 -> in le=50 not le=20
    assert _value(m, "vllm:request_prompt_tokens_bucket", le="20.0") == 0
    assert _value(m, "vllm:request_prompt_tokens_bucket", le="50.0") == 1


def test_vllm_029_iteration_stats_semantics():
    # vLLM 0.29.0 (PrometheusStatLogger.record with IterationStats; proven step by step in tests/reference):
    m = _metrics("0.29.0")
    # a step that only ran a partial prefill chunk: no output, so no iteration-token observation
    m.record_step(num_tokens=2048, prompt_tokens=0, generation_tokens=0, preemptions=1, prefix_queries=0,
                  prefix_hits=0, preemptions_reported=0)  # fmt: skip
    assert _value(m, "vllm:iteration_tokens_total_count") == 0
    assert _value(m, "vllm:num_preemptions_total") == 0  # counted when the preempted request next produces output
    # a step completing a 3,000-token prompt of which 1,024 were cached and 512 loaded, plus 3 decodes:
    # observed 3,000 - 1,024 - 512 + 4 sampled = 1,468 tokens (bucket (1024, 2048])
    m.record_step(num_tokens=1467, prompt_tokens=3000, generation_tokens=4, preemptions=0, prefix_queries=0,
                  prefix_hits=0, prompt_cached=1024, prompt_external=512, preemptions_reported=1)  # fmt: skip
    assert _value(m, "vllm:iteration_tokens_total_count") == 1
    assert _value(m, "vllm:iteration_tokens_total_sum") == 1468
    assert _value(m, "vllm:iteration_tokens_total_bucket", le="1024.0") == 0
    assert _value(m, "vllm:num_preemptions_total") == 1
    assert _value(m, "vllm:prompt_tokens_total") == 3000
    assert _value(m, "vllm:prompt_tokens_by_source_total", source="local_compute") == 1464
    assert _value(m, "vllm:prompt_tokens_by_source_total", source="local_cache_hit") == 1024
    assert _value(m, "vllm:prompt_tokens_by_source_total", source="external_kv_transfer") == 512
    assert _value(m, "vllm:prompt_tokens_cached_total") == 1536
    m.record_request(e2e=2.0, queue_time=0.5, prefill_time=0.5, decode_time=1.0, inference_time=1.5,
                     prompt_tokens=3000, prompt_cached=1536, generation_tokens=5, max_tokens=5,
                     finished_reason="repetition")  # fmt: skip
    # per-request: 1.0 s of decode over 5 - 1 tokens = 0.25 s per output token (bucket (0.2, 0.3])
    assert _value(m, "vllm:request_time_per_output_token_seconds_sum") == 0.25
    assert _value(m, "vllm:request_time_per_output_token_seconds_bucket", le="0.2") == 0
    assert _value(m, "vllm:request_prefill_kv_computed_tokens_sum") == 3000 - 1536
    assert _value(m, "vllm:request_inference_time_seconds_sum") == 1.5
    assert _value(m, "vllm:request_params_n_sum") == 1
    assert _value(m, "vllm:request_params_max_tokens_sum") == 5
    assert _value(m, "vllm:request_max_num_generation_tokens_sum") == 5
    assert _value(m, "vllm:request_success_total", finished_reason="repetition") == 1
    for reason in ("stop", "length", "abort", "error"):  # FinishReason's five values, all exposed from the start
        assert _value(m, "vllm:request_success_total", finished_reason=reason) == 0
    assert _value(m, "vllm:engine_sleep_state", sleep_state="awake") == 1
    assert _value(m, "vllm:engine_sleep_state", sleep_state="discard_all") == 0


def test_vllm_029_cache_config_info_has_every_cache_config_field():
    samples = parse_exposition(_text(_metrics("0.29.0")))
    (info,) = [s for s in samples if s.name == "vllm:cache_config_info"]
    # 32 CacheConfig fields + engine, as vLLM 0.29.0's log_engine_initialized exposes them
    assert len(info.labels) == 33
    # vLLM derives the capacity from the blocks: 1,345 / ceil(8,192 / 16) = 2.626953125 sequences of
    # max_model_len, int(2.626953125 * 8,192) = 21,520 tokens (get_kv_cache_capacity, kv_cache_utils.py)
    assert info.labels["kv_cache_max_concurrency"] == "2.626953125"
    assert info.labels["kv_cache_size_tokens"] == "21520"
    assert info.labels["prefix_caching_hash_algo"] == "sha256"
    assert info.labels["gpu_memory_utilization"] == "0.6"


def test_openmetrics_request_escapes_sample_names_but_not_help():
    m = _metrics("0.33.0")
    body, content_type = m.exposition("application/openmetrics-text;version=1.0.0;q=0.5,text/plain;q=0.1")
    text = body.decode()
    assert content_type.startswith("application/openmetrics-text")
    assert "# TYPE vllm:num_requests_running gauge" in text
    assert 'vllm_num_requests_running{engine="0",model_name="Qwen/Qwen2.5-1.5B-Instruct"} 0.0' in text
    assert "\nvllm:num_requests_running{" not in text
    assert text.endswith("# EOF\n")
    # and our parser reads it back
    assert any(s.name == "vllm_num_preemptions_total" for s in parse_exposition(text))


def test_request_token_buckets():
    assert request_token_buckets(8192) == (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000)
    assert request_token_buckets(1) == (1,)
    with pytest.raises(ValueError, match="max_model_len"):
        request_token_buckets(0)


def test_bad_version_and_block_size():
    with pytest.raises(ValueError, match="vllm_version"):
        VLLMMetrics(vllm_version="latest", model_name="m", cache_config={})
    with pytest.raises(ValueError, match="block_size"):
        VLLMMetrics(model_name="m", cache_config={"block_size": "x"})


def test_negative_counts_rejected():
    m = _metrics("0.33.0")
    with pytest.raises(ValueError, match="preemptions"):
        m.record_step(
            num_tokens=1, prompt_tokens=5, generation_tokens=1, preemptions=-1, prefix_queries=0, prefix_hits=0
        )
    assert _value(m, "vllm:prompt_tokens_total") == 0  # nothing applied


@pytest.mark.parametrize("version", ["0.10.1", "0.33.0"])
def test_grouped_inter_token_gaps_count_as_that_many_observations(version):
    # (0.03 s, 5) and (0.2 s, 1) are six observations: ITL buckets 0.01, 0.025, 0.05, ..., 0.15, 0.2 (vLLM
    # v1/metrics/loggers.py): 0.03 falls in le=0.05, 0.2 in le=0.2 (upper bounds inclusive); sum 5 x 0.03 + 0.2.
    grouped, single = _metrics(version), _metrics(version)
    base = dict(num_tokens=6, prompt_tokens=0, generation_tokens=6, preemptions=0, prefix_queries=0, prefix_hits=0)
    grouped.record_step(**base, itl_counts=[(0.03, 5), (0.2, 1)])
    single.record_step(**base, itls=[0.03] * 5 + [0.2])
    names = ["vllm:inter_token_latency_seconds"] + (["vllm:time_per_output_token_seconds"] if version < "0.11" else [])
    for name in names:
        for m in (grouped, single):
            assert _value(m, f"{name}_count", model_name="Qwen/Qwen2.5-1.5B-Instruct") == 6
            assert _value(m, f"{name}_bucket", le="0.025") == 0
            assert _value(m, f"{name}_bucket", le="0.05") == 5
            assert _value(m, f"{name}_bucket", le="0.15") == 5
            assert _value(m, f"{name}_bucket", le="0.2") == 6
            assert _value(m, f"{name}_sum") == pytest.approx(0.35, rel=1e-12)
