"""A pinned cap on a real server: the running gauge reads far below it, the counters show it.

On a real vLLM server (0.32, CPU) with max_num_seqs 2, both slots sampled a token every step (2.00 generated tokens
per step) while the running gauge, scraped at 1 Hz, averaged 1.24-1.32: the gauge is set between steps and read
whenever the scrape comes, so its dip below a pinned cap is time-weighted and grows with contention. vLLM's counters
are not sampled: every request a step runs past its prompt samples one token (vllm:generation_tokens_total) and
every step with output is one observation of vllm:iteration_tokens_total, so their increases' ratio is the
requests run per step. The recordings below are built from that arithmetic (1 Hz, 120 s); the verdict must be the
cap at any cap, and say which evidence it used.
"""

from __future__ import annotations

import statistics

from kvpilot.diagnose.limits import resolve_limits
from kvpilot.diagnose.rules import diagnose_target
from kvpilot.diagnose.signals import compute_signals
from kvpilot.diagnose.sources.recording import read_window

T0 = 1_800_000_000
SECONDS = 120
LABELS = '{engine="0",model_name="m"}'
CAPACITY, DEFERRED = '{engine="0",model_name="m",reason="capacity"}', '{engine="0",model_name="m",reason="deferred"}'


def timeline(
    cap_gauge: list[float],
    batch: float,
    steps_per_s: float = 20.0,
    output_tokens: int = 64,
    prompt_tokens: int = 256,
    waiting: float = 82.0,
) -> str:
    """An OpenMetrics recording of a server whose steps each run ``batch`` requests past their prompts.

    ``cap_gauge``: the running gauge's samples, cycled over the seconds. Per second: ``steps_per_s`` steps, each
    sampling ``batch`` tokens; requests of ``output_tokens`` finish at ``batch x steps_per_s / output_tokens`` per
    second, each bringing its ``prompt_tokens`` prompt into a step (prefilled in one step: prefill time = one
    step); the queue grows by one request every 10 s from ``waiting``.
    """
    step_s = 1 / steps_per_s
    finished_per_s = batch * steps_per_s / output_tokens
    lines: list[str] = []

    def family(name: str, kind: str, rows: list[tuple[str, str, object]]) -> None:
        lines.append(f"# TYPE {name} {kind}")
        for t in range(SECONDS + 1):
            for sample, labels, per_s in rows:
                value = per_s(t) if callable(per_s) else per_s * t
                lines.append(f"{sample}{labels} {value} {T0 + t}")

    family(
        "vllm:num_requests_running",
        "gauge",
        [("vllm:num_requests_running", LABELS, lambda t: cap_gauge[t % len(cap_gauge)])],
    )
    family("vllm:num_requests_waiting", "gauge", [("vllm:num_requests_waiting", LABELS, lambda t: waiting + t // 10)])
    family(
        "vllm:num_requests_waiting_by_reason",
        "gauge",
        [
            ("vllm:num_requests_waiting_by_reason", CAPACITY, lambda t: waiting + t // 10),
            ("vllm:num_requests_waiting_by_reason", DEFERRED, lambda _: 0.0),
        ],
    )
    family("vllm:kv_cache_usage_perc", "gauge", [("vllm:kv_cache_usage_perc", LABELS, lambda _: 0.024)])
    family("vllm:num_preemptions", "counter", [("vllm:num_preemptions_total", LABELS, 0.0)])
    generated = batch * steps_per_s
    family("vllm:generation_tokens", "counter", [("vllm:generation_tokens_total", LABELS, generated)])
    family("vllm:prompt_tokens", "counter", [("vllm:prompt_tokens_total", LABELS, finished_per_s * prompt_tokens)])
    family("vllm:request_success", "counter", [("vllm:request_success_total", LABELS, finished_per_s)])
    tokens_per_s = batch * steps_per_s + finished_per_s * prompt_tokens
    inf = '{engine="0",model_name="m",le="+Inf"}'
    family(
        "vllm:iteration_tokens_total",
        "histogram",
        [
            ("vllm:iteration_tokens_total_bucket", inf, steps_per_s),
            ("vllm:iteration_tokens_total_count", LABELS, steps_per_s),
            ("vllm:iteration_tokens_total_sum", LABELS, tokens_per_s),
        ],
    )
    family(
        "vllm:inter_token_latency_seconds",
        "histogram",
        [
            ("vllm:inter_token_latency_seconds_bucket", inf, batch * steps_per_s),
            ("vllm:inter_token_latency_seconds_count", LABELS, batch * steps_per_s),
            ("vllm:inter_token_latency_seconds_sum", LABELS, batch * steps_per_s * step_s),
        ],
    )
    family(
        "vllm:request_prefill_time_seconds",
        "histogram",
        [
            ("vllm:request_prefill_time_seconds_bucket", inf, finished_per_s),
            ("vllm:request_prefill_time_seconds_count", LABELS, finished_per_s),
            ("vllm:request_prefill_time_seconds_sum", LABELS, finished_per_s * step_s),
        ],
    )
    lines.append("# EOF")
    return "\n".join(lines) + "\n"


def diagnose(tmp_path, text: str, limits: dict):
    path = tmp_path / "r.om"
    path.write_text(text)
    window = read_window(path, 120.0)
    [signals] = compute_signals(window.samples, 120.0, window.last_timestamp).values()
    return diagnose_target(signals, resolve_limits(cli=limits))


#: the real server's gauge at a cap of 2: 7 samples of 2 and 18 of 1 in every 25 = 1.28 average (median 1)
GAUGE_2 = [2.0] * 7 + [1.0] * 18
#: a cap of 64 whose gauge, read between steps on a contended server, averages 50 (median 50)
GAUGE_64 = [44.0, 47.0, 50.0, 53.0, 56.0]


def test_the_gauges_are_what_the_real_server_showed():
    assert statistics.mean(GAUGE_2) == 1.28
    assert statistics.mean(GAUGE_64) == 50.0


def test_a_cap_of_2_pinned_every_step_is_the_cap_from_the_counters(tmp_path):
    # 2.00 tokens per step: both slots ran every step; the gauge (1.28) alone is 64 % of the cap
    d = diagnose(tmp_path, timeline(GAUGE_2, batch=2.0), {"max_num_seqs": 2, "max_num_batched_tokens": 2048})
    assert (d.verdict, d.confidence) == ("max_num_seqs_cap", 0.9)
    text = " ".join(d.evidence)
    assert "Evidence used: the counters" in text
    assert "2.00 requests ran per step" in text


def test_a_cap_of_64_pinned_every_step_is_the_cap_from_the_counters(tmp_path):
    d = diagnose(tmp_path, timeline(GAUGE_64, batch=64.0), {"max_num_seqs": 64, "max_num_batched_tokens": 8192})
    assert (d.verdict, d.confidence) == ("max_num_seqs_cap", 0.9)
    assert "Evidence used: the counters" in " ".join(d.evidence)


def test_either_side_of_the_pinned_threshold_the_cause_stays_and_only_confidence_moves(tmp_path):
    # the counters' threshold is the cap less half a request (and the dip's noise, 3 sd of the finishes per step
    # over 121 samples: 3 x sqrt(0.033 / 121) = 0.05 at a cap of 2): 1.6 requests per step is pinned, 1.4 is not,
    # yet 1.4 of 2 is 70 % of the cap, in its grey zone above the midpoint: the cap at lower confidence
    lim = {"max_num_seqs": 2, "max_num_batched_tokens": 2048}
    above = diagnose(tmp_path, timeline(GAUGE_2, batch=1.6), lim)
    below = diagnose(tmp_path, timeline(GAUGE_2, batch=1.4), lim)
    assert (above.verdict, above.confidence) == ("max_num_seqs_cap", 0.9)
    assert below.verdict == "max_num_seqs_cap"
    assert 0.45 <= below.confidence < 0.9
    assert "nearly pinned" in " ".join(below.evidence)
    # a cap of 64: 63.6 per step pinned, 60 per step (93.8 %) nearly
    lim = {"max_num_seqs": 64, "max_num_batched_tokens": 8192}
    above = diagnose(tmp_path, timeline(GAUGE_64, batch=63.6), lim)
    below = diagnose(tmp_path, timeline(GAUGE_64, batch=60.0), lim)
    assert (above.verdict, above.confidence) == ("max_num_seqs_cap", 0.9)
    assert below.verdict == "max_num_seqs_cap"
    assert 0.45 <= below.confidence < 0.9


def test_half_the_slots_used_per_step_is_no_cap(tmp_path):
    # 32 of 64 requests per step and a gauge of 32: half the cap free on average -> not the cap
    d = diagnose(tmp_path, timeline([32.0], batch=32.0), {"max_num_seqs": 64, "max_num_batched_tokens": 8192})
    assert d.verdict == "unexplained_queue"
