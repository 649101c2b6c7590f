"""parse_exposition on every real capture (values read off each file by eye) and on the
real-world oddities (docs/metrics.md) written out by hand.
"""

from __future__ import annotations

import math

import pytest

from kvpilot.metrics.exposition import ExpositionError, Sample, is_openmetrics, parse_exposition
from tests.conftest import FIXTURES

CAPTURES = FIXTURES / "metrics"


def _read(name: str) -> str:
    return (CAPTURES / name).read_text()


def _find(samples, name, **labels):
    hits = [s for s in samples if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())]
    assert hits, f"no sample {name} {labels}"
    return hits


@pytest.mark.parametrize("path", sorted(CAPTURES.glob("*.txt")), ids=lambda p: p.name)
def test_every_capture_parses_and_has_provenance(path):
    text = path.read_text()
    assert text.startswith("# source: https://")
    samples = parse_exposition(text)
    sample_lines = [ln for ln in text.splitlines() if ln.strip() and not ln.startswith("#")]
    assert len(samples) == len(sample_lines)


def test_v1_without_engine_label_request_success():
    # 12579.txt: three lines, stop=2, length=199, abort=0, no engine label.
    samples = parse_exposition(_read("12579.txt"))
    by_reason = {s.labels["finished_reason"]: s.value for s in samples}
    assert by_reason == {"stop": 2.0, "length": 199.0, "abort": 0.0}
    assert all("engine" not in s.labels for s in samples)
    assert all(s.name == "vllm:request_success_total" for s in samples)


def test_multi_api_server_sum_before_bucket():
    # 22227.txt: _sum lines come before _bucket lines; two engines.
    samples = parse_exposition(_read("22227.txt"))
    assert samples[0].name == "vllm:request_prompt_tokens_sum"
    assert _find(samples, "vllm:request_prompt_tokens_sum", engine="0")[0].value == 78.0
    assert _find(samples, "vllm:request_prompt_tokens_sum", engine="1")[0].value == 26.0
    # old and new ITL names side by side
    assert _find(samples, "vllm:time_per_output_token_seconds_count", engine="1")[0].value == 243.0
    assert _find(samples, "vllm:inter_token_latency_seconds_sum", engine="0")[0].value == pytest.approx(
        13.223765562288463
    )
    assert _find(samples, "vllm:inter_token_latency_seconds_bucket", engine="0", le="0.025")[0].value == 954.0
    inf = _find(samples, "vllm:request_decode_time_seconds_bucket", engine="1", le="+Inf")
    assert inf[0].value == 1.0


def test_v0_ttft_buckets_end_at_10():
    samples = parse_exposition(_read("8819.txt"))
    les = [s.labels["le"] for s in samples]
    assert les[0] == "0.01"
    assert les[-2] == "10.0"
    assert les[-1] == "+Inf"
    assert len(samples) == 15
    assert _find(samples, "vllm:time_to_first_token_seconds_bucket", le="0.01")[0].value == 0.0
    assert _find(samples, "vllm:time_to_first_token_seconds_bucket", le="0.02")[0].value == 1.0


def test_production_stack_318_old_names_and_process_metrics():
    samples = parse_exposition(_read("production-stack-318.txt"))
    assert _find(samples, "process_start_time_seconds")[0].value == 1.74262400557e9
    assert _find(samples, "process_max_fds")[0].value == 1048576.0
    assert _find(samples, "vllm:gpu_cache_usage_perc")[0].value == 0.0
    assert _find(samples, "vllm:request_prompt_tokens_bucket", le="10000.0")[0].value == 31.0
    assert _find(samples, "vllm:request_prompt_tokens_bucket", le="10.0")[0].value == 2.0
    # counter sample name stays as exposed (the 0.0.4 parser's _total munging must not leak)
    assert _find(samples, "process_cpu_seconds_total")[0].value == pytest.approx(439.72)


def test_v010_created_and_old_new_names():
    samples = parse_exposition(_read("production-stack-617.txt"))
    names = [s.name for s in samples]
    assert names == [
        "vllm:gpu_prefix_cache_queries_created",
        "vllm:gpu_prefix_cache_hits_total",
        "vllm:gpu_prefix_cache_hits_created",
        "vllm:kv_cache_usage_perc",
        "vllm:prefix_cache_queries_total",
    ]
    assert samples[0].value == pytest.approx(1.7537953269352946e9)
    assert samples[3].value == pytest.approx(9.75010481363281e-06)
    assert samples[4].value == 32.0
    assert samples[4].labels == {"engine": "0", "model_name": "zai-org/GLM-4.5"}


def test_comment_only_fragment_gives_no_samples():
    # 51163.txt: the cache_config_info line is cut inside its labels and kept only as comments.
    assert parse_exposition(_read("51163.txt")) == []


# --- hand-written real-world oddities (docs/metrics.md) ---

ESCAPED_OM = """\
# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm_num_requests_running{engine="0",model_name="m"} 4.0
# HELP vllm:num_preemptions Cumulative number of preemptions.
# TYPE vllm:num_preemptions counter
vllm_num_preemptions_total{engine="0",model_name="m"} 7.0
vllm_num_preemptions_created{engine="0",model_name="m"} 1.7e+09
# HELP vllm:gpu_cache_usage_perc GPU KV-cache usage.
# TYPE vllm:gpu_cache_usage_perc gauge
vllm_gpu_cache_usage_perc{engine="0",model_name="m",pid="4242"} 0.25
# EOF
"""


def test_openmetrics_with_escaped_sample_names_and_colon_help():
    assert is_openmetrics(ESCAPED_OM)
    samples = parse_exposition(ESCAPED_OM)
    assert [s.name for s in samples] == [
        "vllm_num_requests_running",
        "vllm_num_preemptions_total",
        "vllm_num_preemptions_created",
        "vllm_gpu_cache_usage_perc",
    ]
    assert samples[0].value == 4.0
    assert samples[1].value == 7.0
    assert samples[3].labels["pid"] == "4242"
    assert samples[3].value == 0.25


def test_nan_inf_and_duplicate_series_in_text_format():
    text = (
        "# TYPE vllm:kv_cache_usage_perc gauge\n"
        'vllm:kv_cache_usage_perc{engine="0",model_name="m"} NaN\n'
        'vllm:kv_cache_usage_perc{engine="0",model_name="m"} +Inf\n'
        'vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.5\n'
    )
    samples = parse_exposition(text)
    assert len(samples) == 3
    assert math.isnan(samples[0].value)
    assert samples[1].value == math.inf
    assert samples[2].value == 0.5


def test_openmetrics_refused_by_strict_parser_falls_back_linewise():
    # Interleaved series of one family, a duplicate, and NaN in a counter: the OpenMetrics parser
    # refuses the body ("Invalid metric grouping"); every sample must still come back, in order.
    text = (
        "# TYPE vllm:num_preemptions counter\n"
        'vllm:num_preemptions_total{engine="0"} 1 1700000000\n'
        'vllm:num_preemptions_total{engine="1"} 2 1700000000\n'
        'vllm:num_preemptions_total{engine="0"} 3 1700000001\n'
        'vllm:num_preemptions_total{engine="0"} 3 1700000001\n'
        'vllm:num_preemptions_total{engine="1"} NaN 1700000001\n'
        "# EOF\n"
    )
    samples = parse_exposition(text)
    assert [(s.labels["engine"], s.timestamp) for s in samples] == [
        ("0", 1700000000.0),
        ("1", 1700000000.0),
        ("0", 1700000001.0),
        ("0", 1700000001.0),
        ("1", 1700000001.0),
    ]
    assert [s.value for s in samples[:4]] == [1.0, 2.0, 3.0, 3.0]
    assert math.isnan(samples[4].value)


def test_text_timestamps_are_milliseconds_and_default_timestamp_applies():
    text = 'a_metric{x="1"} 5 1700000000500\nb_metric 6\n'
    samples = parse_exposition(text, default_timestamp=1700000009.0)
    assert samples[0].timestamp == 1700000000.5
    assert samples[1].timestamp == 1700000009.0


def test_counter_declared_without_total_keeps_exposed_name():
    samples = parse_exposition("# TYPE my_events counter\nmy_events 3\n")
    assert [(s.name, s.value) for s in samples] == [("my_events", 3.0)]


def test_malformed_type_comment_is_tolerated():
    # '# TYPE' without a type makes prometheus_client's text parser raise; the samples still parse.
    text = "# TYPE vllm:num_requests_waiting\nvllm:num_requests_waiting 2\n"
    assert parse_exposition(text) == [Sample("vllm:num_requests_waiting", {}, 2.0)]


def test_truncated_line_raises_with_line_number():
    text = 'ok_metric 1\nvllm:cache_config_info{block_size="16",user_specified_b\n'
    with pytest.raises(ExpositionError) as info:
        parse_exposition(text)
    assert info.value.line_no == 2


def test_sample_is_frozen_and_hashable():
    s = Sample("x", {"b": "2", "a": "1"}, 1, 5)
    assert s.timestamp == 5.0
    assert s.value == 1.0
    assert s.key == ("x", (("a", "1"), ("b", "2")))
    with pytest.raises(TypeError):
        s.labels["a"] = "3"  # type: ignore[index]
    assert hash(s) == hash(Sample("x", {"a": "1", "b": "2"}, 1.0, 5.0))
