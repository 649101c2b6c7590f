"""Signal computation from samples: metric-name realities (docs/metrics.md), bad values, captures.

Expected values are worked out by hand in each test.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from kvpilot.diagnose.signals import TargetKey, compute_signals, legacy_or_escaped, spellings
from kvpilot.metrics.exposition import Sample, parse_exposition

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
L = {"model_name": "m", "engine": "0"}
T0 = 1_000_000.0


def series(name, values, labels=L, start=T0, step=10.0):
    """Samples of one series at start, start+step, ..."""
    return [Sample(name, labels, v, start + i * step) for i, v in enumerate(values)]


def only(signals):
    assert len(signals) == 1, signals.keys()
    return next(iter(signals.values()))


def test_gauge_average_max_last_and_trend():
    # waiting 0, 10, 20, 30 at 0..30 s: avg 15, max 30, last 30, slope 1 req/s
    s = only(compute_signals(series("vllm:num_requests_waiting", [0, 10, 20, 30]), 30.0))
    assert (s.get("waiting_avg"), s.get("waiting_max"), s.get("waiting_last")) == (15.0, 30.0, 30.0)
    assert s.get("waiting_trend_per_s") == pytest.approx(1.0)


def test_counter_rate_with_reset_in_the_window():
    # preemptions 0, 10, 20, reset, 5, 15 at 0..40: increase 15 + 20 = 35 over 40 s -> 0.875/s
    s = only(compute_signals(series("vllm:num_preemptions_total", [0, 10, 20, 5, 15]), 40.0))
    assert s.get("preemptions_increase") == pytest.approx(35.0)
    assert s.get("preemptions_per_s") == pytest.approx(35.0 / 40.0)


def test_escaped_colon_names_are_read():
    # prometheus_client >= 0.22 answering an OpenMetrics request writes vllm_ instead of vllm:
    samples = series("vllm_kv_cache_usage_perc", [0.5, 0.7]) + series("vllm_num_requests_running", [2, 2])
    s = only(compute_signals(samples, 10.0))
    assert s.get("kv_usage_avg") == pytest.approx(0.6)
    assert s.spelling["vllm:kv_cache_usage_perc"] == "vllm_kv_cache_usage_perc"
    assert legacy_or_escaped(s) == {
        "vllm:kv_cache_usage_perc": "vllm_kv_cache_usage_perc",
        "vllm:num_requests_running": "vllm_num_requests_running",
    }


def test_new_name_wins_over_legacy_when_both_exist():
    # v0.10 exposes gpu_cache_usage_perc and kv_cache_usage_perc side by side; the new one is read
    samples = series("vllm:gpu_cache_usage_perc", [0.1, 0.1]) + series("vllm:kv_cache_usage_perc", [0.9, 0.9])
    s = only(compute_signals(samples, 10.0))
    assert s.get("kv_usage_avg") == pytest.approx(0.9)
    assert legacy_or_escaped(s) == {}


def test_legacy_only_names_are_read_and_flagged():
    samples = series("vllm:gpu_prefix_cache_queries_total", [0, 100]) + series(
        "vllm:gpu_prefix_cache_hits_total", [0, 25]
    )
    s = only(compute_signals(samples, 10.0))
    assert s.get("prefix_hit_rate") == pytest.approx(0.25)  # 25 / 100, units cancel (blocks before 0.9)
    assert set(legacy_or_escaped(s)) == {"vllm:prefix_cache_queries", "vllm:prefix_cache_hits"}


def test_counter_without_total_suffix_is_not_a_counter_sample():
    # rules querying vllm:num_preemptions (no _total) match nothing: the family's samples end in _total
    s = only(
        compute_signals(series("vllm:num_preemptions", [0, 5]) + series("vllm:num_requests_running", [1, 1]), 10.0)
    )
    assert s.get("preemptions_increase") is None


def test_pid_label_series_combine_by_max():
    # 0.9-0.11 multiprocess KV gauge with a pid label per process: same target, max of the series
    a = series("vllm:kv_cache_usage_perc", [0.2, 0.2], {**L, "pid": "11"})
    b = series("vllm:kv_cache_usage_perc", [0.8, 0.8], {**L, "pid": "12"})
    s = only(compute_signals(a + b, 10.0))
    assert s.get("kv_usage_max") == pytest.approx(0.8)


def test_no_engine_label_before_0_8_3_is_its_own_target():
    samples = series("vllm:num_requests_running", [3, 3], {"model_name": "m"})
    key = next(iter(compute_signals(samples, 10.0)))
    assert key == TargetKey(model_name="m")
    assert key.engine == ""


def test_created_samples_are_ignored():
    samples = series("vllm:num_preemptions_created", [1.7e9, 1.7e9]) + series("vllm:num_preemptions_total", [0, 4])
    s = only(compute_signals(samples, 10.0))
    assert s.get("preemptions_increase") == pytest.approx(4.0)


def test_exact_duplicate_series_count_once():
    # the same series twice in a scrape (same labels, same timestamp): last value wins, nothing doubles
    samples = series("vllm:num_requests_running", [4, 4]) * 2
    s = only(compute_signals(samples, 10.0))
    assert s.get("running_avg") == 4.0
    assert s.get("samples_in_window") == 2.0


def test_nan_and_inf_become_unknown_not_numbers():
    samples = (
        series("vllm:kv_cache_usage_perc", [math.nan, math.nan])
        + series("vllm:num_requests_waiting", [math.inf, 1.0])
        + series("vllm:num_requests_running", [1, 1])
    )
    s = only(compute_signals(samples, 10.0))
    assert s.get("kv_usage_avg") is None
    assert s.get("kv_usage_max") is None
    assert s.get("waiting_avg") is None  # avg over +Inf is +Inf -> unknown
    assert s.get("running_avg") == 1.0


def test_histogram_quantile_with_bucket_bounds_and_sum_before_bucket():
    # TTFT buckets at two scrapes; increase per bucket: le=0.5: 0, le=1: 10, le=2.5: 18, le=+Inf: 20
    # p50 -> rank 10 in (0.5, 1] holding 10 -> 1.0; p99 -> rank 19.8 > 18 -> +Inf bucket -> 2.5, "(2.5, +Inf]"
    name = "vllm:time_to_first_token_seconds_bucket"
    samples = series("vllm:time_to_first_token_seconds_sum", [0, 30])  # _sum before _bucket (several API servers)
    for le, inc in (("0.5", 0), ("1.0", 10), ("2.5", 18), ("+Inf", 20)):
        samples += series(name, [100, 100 + inc], {**L, "le": le})
    samples += series("vllm:num_requests_running", [1, 1])
    s = only(compute_signals(samples, 10.0))
    assert s.get("ttft_p50_s") == pytest.approx(1.0)
    assert s.quantiles["ttft_p99_s"].bounds_text() == "(2.5, +Inf] s"


def test_spellings_cover_both_generations_both_escapings():
    assert spellings("vllm:kv_cache_usage_perc") == (
        "vllm:kv_cache_usage_perc",
        "vllm_kv_cache_usage_perc",
        "vllm:gpu_cache_usage_perc",
        "vllm_gpu_cache_usage_perc",
    )


def test_target_down_inputs_last_sample_age():
    # running reported every 10 s until t=50, then the recording continues with another series to t=200
    samples = series("vllm:num_requests_running", [1] * 6) + series("vllm:num_requests_waiting", [0] * 21)
    s = only(compute_signals(samples, 300.0))
    assert s.get("last_sample_age_s") == pytest.approx(150.0)  # 200 - 50
    assert s.get("samples_in_window") == 6.0


def test_bad_window_is_refused():
    with pytest.raises(ValueError, match="window"):
        compute_signals([], 0)


@pytest.mark.parametrize("capture", sorted(p.name for p in (FIXTURES / "metrics").glob("*.txt")))
def test_every_capture_parses_and_yields_signals(capture):
    """Every real /metrics capture, scraped twice 10 s apart, gives the families it holds as signals."""
    text = (FIXTURES / "metrics" / capture).read_text()
    first, second = parse_exposition(text, default_timestamp=T0), parse_exposition(text, default_timestamp=T0 + 10)
    signals = compute_signals(first + second, 60.0, T0 + 10)
    families = {s.name for s in first if s.name.startswith(("vllm:", "vllm_")) and not s.name.endswith("_created")}
    if not families:
        assert signals == {}  # 51163.txt holds only a comment (a line cut inside its label set)
        return
    assert signals, f"{capture}: no target"
    seen = {spelling for sig in signals.values() for spelling in sig.spelling.values()}
    # every family of the capture that kvpilot reads (running, waiting, KV, counters, histograms) shows up
    assert seen, f"{capture}: no family read"
    for sig in signals.values():
        assert any(v is not None for v in sig.values.values()) or sig.buckets


def test_impossible_values_are_unknowns_and_never_evidence():
    # a KV gauge in percent (45 = 45 %, another exporter's vllm_kv_cache_usage_perc) beside a server with 4 of 4
    # slots busy and 10 waiting: read as a fraction, 45 would be "45x full" and a KV shortage
    from kvpilot.diagnose.limits import resolve_limits
    from kvpilot.diagnose.rules import diagnose_target

    samples = (
        series("vllm_kv_cache_usage_perc", [45.0] * 4)
        + series("vllm:num_requests_running", [4] * 4)
        + series("vllm:num_requests_waiting", [10] * 4)
        + series("vllm:num_preemptions_total", [0] * 4)
    )
    s = only(compute_signals(samples, 30.0))
    assert s.get("kv_usage_max") is None
    assert s.get("kv_usage_avg") is None
    assert "kv_usage" in s.rejected
    d = diagnose_target(s, resolve_limits(cli={"max_num_seqs": 4}))
    assert d.verdict == "max_num_seqs_cap"
    assert d.confidence < 0.9
    assert any("kv_usage ignored: 45 is outside 0-1" in e for e in d.evidence)
    # negative request counts: nothing usable, so no verdict rather than "healthy"
    neg = only(
        compute_signals(
            series("vllm:num_requests_running", [-4] * 4) + series("vllm:num_requests_waiting", [-1] * 4), 30.0
        )
    )
    assert neg.get("running_avg") is None
    assert neg.get("waiting_max") is None
    assert diagnose_target(neg, resolve_limits(cli={"max_num_seqs": 4})).verdict == "no_data"
    # exactly full (1.0) is a fraction, kept
    full = only(
        compute_signals(
            series("vllm:kv_cache_usage_perc", [1.0] * 4) + series("vllm:num_requests_running", [4] * 4), 30.0
        )
    )
    assert full.get("kv_usage_max") == 1.0
    assert not full.rejected


def test_fit_signals_only_when_asked_and_the_value_at_the_window_start():
    # running 1, 2, ..., 11 at 0..100 s; waiting 5 at 0..100 s
    samples = series("vllm:num_requests_running", range(1, 12)) + series("vllm:num_requests_waiting", [5] * 11)
    assert only(compute_signals(samples, 50.0)).fit == {}
    s = only(compute_signals(samples, 50.0, fit=True))
    assert s.fit["running_first"] == 6.0  # the sample at end - 50 = 50 s
    assert s.fit["waiting_first"] == 5.0
    # a window starting between samples: the last one at or before its start (PromQL `offset`): 45 s -> 40 s
    assert only(compute_signals(samples, 55.0, fit=True)).fit["running_first"] == 5.0
    # a window starting before the series: nothing at or before its start (Prometheus answers no row)
    assert only(compute_signals(samples, 100.5, fit=True)).fit["running_first"] is None
    # a window starting more than 5 minutes after the last sample before it: the lookback ends
    late = series("vllm:num_requests_running", [3, 4], step=400.0)
    assert only(compute_signals(late, 10.0, fit=True)).fit["running_first"] is None


def test_fit_histogram_sums_counts_and_buckets():
    # two requests of 100 and 300 prompt tokens finish between 0 and 10 s
    def hist(name, le_counts, total, count):
        out = []
        for le, n in le_counts:
            out += series(name + "_bucket", [0, n], {**L, "le": le})
        return out + series(name + "_sum", [0, total]) + series(name + "_count", [0, count])

    samples = hist("vllm:request_prompt_tokens", [("100", 1), ("200", 1), ("500", 2), ("+Inf", 2)], 400, 2)
    samples += series("vllm:num_requests_running", [1, 1])
    s = only(compute_signals(samples, 10.0, fit=True))
    assert (s.fit["prompt_len_sum_increase"], s.fit["prompt_len_count_increase"]) == (400.0, 2.0)
    # the buckets are the diagnosis' own prompt_tokens histogram (one evaluation, not a second for the fit)
    assert s.buckets["prompt_tokens"] == [(100.0, 1.0), (200.0, 1.0), (500.0, 2.0), (math.inf, 2.0)]
    assert "prompt_len" not in s.fit_buckets
    assert s.fit["ttft_sum_increase"] is None  # not exported here: unknown, not 0


def test_signal_names_are_exactly_what_the_computation_produces():
    # SignalName types every rule's lookup (a misspelt name is a mypy error); it must hold every name
    # compute_signals + finish_signals produce and nothing else, or a typed name could still be unknown
    from kvpilot.diagnose.signals import HISTOGRAMS, SIGNAL_DEFS, SIGNAL_NAMES, Signals, finish_signals

    produced = set(finish_signals(Signals(values={})).values) | {sd.name for sd in SIGNAL_DEFS if sd.fn != "buckets"}
    assert produced == SIGNAL_NAMES
    assert {sd.name for sd in SIGNAL_DEFS if sd.fn == "buckets"} == set(HISTOGRAMS)
    # a recording's target carries every measured name (None when unknown), as the Prometheus source does
    s = only(compute_signals(series("vllm:num_requests_running", [1, 2]), 30.0))
    assert {sd.name for sd in SIGNAL_DEFS if sd.fn != "buckets"} <= set(s.values)


def test_waiting_median_and_queue_time_in_step_times():
    # waiting 0, 0, 0, 4, 6 (a burst): mean 2, median 0 (Prometheus quantile_over_time(0.5, ...): the third of five)
    s = only(compute_signals(series("vllm:num_requests_waiting", [0, 0, 0, 4, 6]), 40.0))
    assert (s.get("waiting_avg"), s.get("waiting_median")) == (2.0, 0.0)
    # queue time: 3 s over 100 requests = 0.03 s; inter-token gaps: 2 s over 200 = 0.01 s -> 3 step times
    samples = series("vllm:request_queue_time_seconds_sum", [0.0, 3.0])
    samples += series("vllm:request_queue_time_seconds_count", [0.0, 100.0])
    samples += series("vllm:inter_token_latency_seconds_sum", [0.0, 2.0])
    samples += series("vllm:inter_token_latency_seconds_count", [0.0, 200.0])
    s = only(compute_signals(samples, 10.0))
    assert s.get("queue_time_mean_s") == pytest.approx(0.03)
    assert s.get("queue_step_times") == pytest.approx(3.0)


def test_a_request_gauge_beyond_any_server_is_an_unknown_on_both_sides_of_the_bound():
    """vllm:num_requests_running at 1e308 (a fuzzed recording) became a 309-digit int of slots needed, and the
    recommendation's arithmetic an OverflowError (internal error); above 2^31 - 1 a count is impossible.
    """
    from kvpilot.diagnose.limits import resolve_limits
    from kvpilot.diagnose.rules import diagnose_target
    from kvpilot.diagnose.signals import MAX_REQUEST_GAUGE

    assert MAX_REQUEST_GAUGE == 2**31 - 1
    at = only(compute_signals(series("vllm:num_requests_running", [float(2**31 - 1)] * 4), 30.0))
    assert at.get("running_max") == 2**31 - 1
    assert not at.rejected
    huge = only(
        compute_signals(
            series("vllm:num_requests_running", [1e308] * 4) + series("vllm:num_requests_waiting", [2.0**31] * 4), 30.0
        )
    )
    assert huge.get("running_max") is None
    assert huge.get("waiting_avg") is None
    assert "more requests than any server holds" in huge.rejected["running"]
    assert "waiting" in huge.rejected
    assert diagnose_target(huge, resolve_limits(cli={"max_num_seqs": 4})).verdict == "no_data"
