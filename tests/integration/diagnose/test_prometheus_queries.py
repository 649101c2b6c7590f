"""What ``diagnose --prometheus`` asks: bucket queries per spelling, sub-windows as range queries.

A scripted Prometheus on loopback answers exactly the queries of ``plan`` and records every
request's parameters, so each test sees both what kvpilot sent and what it made of the answer.
The expected figures are worked out by hand in each test.
"""

from __future__ import annotations

import math

from kvpilot.diagnose.signals import SIGNAL_DEFS, SUBWINDOW_DEFS, TargetKey, spellings
from kvpilot.diagnose.sources.prometheus import (
    PrometheusSource,
    Selectors,
    bucket_query,
    plan,
    subwindow_query,
)
from tests.integration.diagnose.fakes import LoopbackServer, prom_matrix, prom_vector

END = 1_764_600_000.0
WINDOW = 300.0
A = {"namespace": "llm", "pod": "a", "model_name": "m", "engine": "0"}
B = {"namespace": "llm", "pod": "b", "model_name": "m", "engine": "0"}
TTFT = next(sd for sd in SIGNAL_DEFS if sd.name == "ttft")


def recording_server(answer):
    """A loopback server answering ``answer(path, query_params)`` (None: an empty answer of the right type)."""
    seen: list[tuple[str, dict]] = []

    def handle(_method, path, query, _body):
        seen.append((path, query))
        got = answer(path, query)
        if got is not None:
            return 200, got
        return 200, prom_matrix([]) if path == "/api/v1/query_range" else prom_vector([])

    return LoopbackServer(handle), seen


def test_each_target_takes_its_buckets_from_the_first_spelling_that_has_them():
    colon, escaped = spellings(TTFT.family)[:2]  # vllm:time_to_first_token_seconds, vllm_time_to_first_token_seconds
    rows = {
        # target a exposes both spellings (with different counts), target b only the escaped one
        bucket_query(TTFT, colon, WINDOW): [
            ({**A, "le": "0.1"}, "5"),
            ({**A, "le": "1.0"}, "9"),
            ({**A, "le": "+Inf"}, "10"),
        ],
        bucket_query(TTFT, escaped, WINDOW): [
            ({**A, "le": "0.1"}, "0"),
            ({**A, "le": "1.0"}, "0"),
            ({**A, "le": "+Inf"}, "10"),
            ({**B, "le": "0.5"}, "2"),
            ({**B, "le": "+Inf"}, "4"),
        ],
    }
    server, _ = recording_server(lambda _path, q: prom_vector(rows[q["query"]]) if q["query"] in rows else None)
    with server as prom:
        result = PrometheusSource(prom.url, timeout=5).fetch(WINDOW, END)
    a, b = result.signals[TargetKey(**A)], result.signals[TargetKey(**B)]
    assert result.notes == []
    # a: the colon spelling's buckets (0.1: 5, 1: 9, +Inf: 10); p50 rank 0.5 x 10 = 5 reaches the first
    # bucket (count 5): 0 + (0.1 - 0) x 5 / 5 = 0.1, in (0, 0.1]
    assert a.buckets["ttft"] == [(0.1, 5.0), (1.0, 9.0), (math.inf, 10.0)]
    q = a.quantiles["ttft_p50_s"]
    assert (q.value, q.lower, q.upper, q.observations) == (0.1, 0.0, 0.1, 10.0)
    assert a.spelling[TTFT.family] == colon
    # b: only the escaped spelling; p50 rank 0.5 x 4 = 2 reaches le 0.5 (count 2): 0.5 x 2 / 2 = 0.5
    assert b.buckets["ttft"] == [(0.5, 2.0), (math.inf, 4.0)]
    assert b.quantiles["ttft_p50_s"].value == 0.5
    assert b.spelling[TTFT.family] == escaped


def test_sub_windows_are_one_range_query_each_and_land_in_their_sub_window():
    sub = WINDOW / 5  # 60 s: steps at END - 240, - 180, - 120, - 60, END
    start = END - 4 * sub
    by_query = {subwindow_query(sd, WINDOW): sd.name for sd in SUBWINDOW_DEFS}
    # per sub-window j (0 = oldest): tokens 100 (j + 1), steps 10, ITL seconds 0.5 (j + 1), gaps 10;
    # the server answers the steps out of order and sub-window 3 not at all
    values = {
        "iteration_tokens_sum_increase": lambda j: 100.0 * (j + 1),
        "iteration_steps_increase": lambda _j: 10.0,
        "itl_sum_increase": lambda j: 0.5 * (j + 1),
        "itl_count_increase": lambda _j: 10.0,
    }

    running = next(p.promql for p in plan(WINDOW) if p.sd is not None and p.sd.name == "running_avg")

    def answer(path, q):
        if q["query"] == running:  # a target is one a signal query returns
            return prom_vector([({**A, "kvpilot_name": "vllm:num_requests_running"}, "1")])
        name = by_query.get(q["query"])
        if path != "/api/v1/query_range" or name is None:
            return None
        points = [(start + j * sub, str(values[name](j))) for j in (4, 0, 2, 1)]
        return prom_matrix([({**A, "kvpilot_name": "x"}, points)])

    server, seen = recording_server(answer)
    with server as prom:
        result = PrometheusSource(prom.url, timeout=5).fetch(WINDOW, END)
    ranges = [q for path, q in seen if path == "/api/v1/query_range"]
    assert sorted(q["query"] for q in ranges) == sorted(by_query)
    assert {(q["start"], q["end"], q["step"], q["nocache"]) for q in ranges} == {
        (f"{start:.3f}", f"{END:.3f}", "60s", "1")
    }
    # (tokens / steps, seconds / gaps) = (10 (j + 1), 0.05 (j + 1)) for j = 0, 1, 2, 4, oldest first
    points = result.signals[TargetKey(**A)].step_points
    assert [(round(n, 9), round(s, 9)) for n, s in points] == [(10.0, 0.05), (20.0, 0.1), (30.0, 0.15), (50.0, 0.25)]


def test_the_number_of_queries_does_not_depend_on_the_targets():
    # one per non-histogram signal (39: the running, waiting and deferred gauges' medians and the queue time's
    # _sum and _count joined the 32, then the two prefix-cache counters at the window's start), one per histogram
    # and spelling (2 + 4 + 2, and 2 + 2 for the per-request prompt and computed tokens), one per sub-window signal
    # (4), cache_config_info, lora_requests_info, the operator's limits: 58, with or without selectors
    assert len(plan(WINDOW)) == 39 + 12 + 4 + 3 == 58
    assert len(plan(WINDOW, Selectors(namespace="llm", pod_regex="qwen(-.*)?"))) == 58
    server, seen = recording_server(lambda _path, _q: None)
    with server as prom:
        PrometheusSource(prom.url, timeout=5).fetch(WINDOW, END)
    assert len(seen) == 58
    assert {path for path, _ in seen} == {"/api/v1/query", "/api/v1/query_range"}
