"""The workload fit: lengths from vLLM's 1-2-5 histograms, arrivals by conservation, the shared prefix.

Expected values are worked out by hand in each test.
"""

from __future__ import annotations

import math
import random

import pytest

from kvpilot.advice.fit import FitError, LengthDistribution, arrival_profile, fit_workload, length_distribution
from kvpilot.diagnose.limits import resolve_limits
from kvpilot.diagnose.signals import Signals


def test_fixed_lengths_come_back_exactly():
    # 100 requests of 4,000 tokens: all in (2,000, 5,000], sum 400,000
    d = length_distribution([(2000.0, 0.0), (5000.0, 100.0), (math.inf, 100.0)], 400_000, 100, None, 16384)
    assert (d.values, d.weights, d.mean, d.source) == ((4000,), (1.0,), 4000.0, "histogram")


def test_every_bucket_gets_the_same_relative_place_and_the_mean_is_kept():
    # 1,800-2,200 tokens, half in (1,000, 2,000] and half in (2,000, 5,000], mean 2,000: lengths 1,001 + a x 999
    # and 2,001 + a x 2,999 with a = (2,000 - (1,001 + 2,001) / 2) / ((999 + 2,999) / 2) = 499 / 1,999 = 0.2496
    d = length_distribution(
        [(1000.0, 0.0), (2000.0, 50.0), (5000.0, 100.0), (math.inf, 100.0)], 200_000, 100, None, 8192
    )
    assert d.values == (1250, 2750)
    assert d.weights == (0.5, 0.5)


def test_bimodal_traffic_keeps_both_modes_and_the_mean():
    # 80 chats of 200 tokens in (100, 200], 20 documents of 8,000 in (5,000, 10,000]: mean (16,000 + 160,000) / 100 =
    # 1,760; a = (1,760 - (0.8 x 101 + 0.2 x 5,001)) / (0.8 x 99 + 0.2 x 4,999) = 679 / 1,079 = 0.629
    rows = [(100.0, 0.0), (200.0, 80.0), (5000.0, 80.0), (10000.0, 100.0), (math.inf, 100.0)]
    d = length_distribution(rows, 176_000, 100, None, 16384)
    assert d.values == (163, 8147)
    assert d.weights == (0.8, 0.2)
    mean = 0.8 * 163 + 0.2 * 8147
    assert mean == pytest.approx(1760, abs=1)


def test_the_inf_bucket_ends_at_max_model_len_and_extrapolated_counts_are_clamped():
    # 10 requests above the last edge (10,000) of a server with max_model_len 12,000, mean 11,000
    d = length_distribution([(10000.0, 0.0), (math.inf, 10.0)], 110_000, 10, None, 12000)
    assert d.values == (11000,)
    # PromQL extrapolation can make a cumulative count dip: no negative mass
    d = length_distribution([(100.0, 5.2), (200.0, 5.1), (math.inf, 10.0)], 1_000.0, 10, None, 8192)
    assert min(d.weights) > 0
    assert sum(d.weights) == pytest.approx(1.0)


def test_without_buckets_the_mean_is_a_fixed_length_and_nothing_is_none():
    d = length_distribution(None, None, None, 512.4, 8192)
    assert (d.values, d.source) == ((512,), "mean")
    assert length_distribution(None, None, None, None, 8192) is None


def _signals(**fit) -> Signals:
    values = {
        "requests_finished_increase": 100.0,
        "requests_finished_per_s": 1.0,
        "running_last": 5.0,
        "waiting_last": 10.0,
        "prompt_tokens_per_request": 1000.0,
        "generation_tokens_per_s": 50.0,
        "prefix_hit_rate": 0.5,
        "samples_in_window": 11.0,
    }
    return Signals(values=values, window_seconds=100.0, fit={"running_first": 2.0, "waiting_first": 0.0, **fit})


def test_arrivals_are_the_finished_plus_what_the_gauges_gained():
    # 100 finished + (5 - 2) running + (10 - 0) waiting = 113 arrived in 100 s
    fit = fit_workload(_signals(), resolve_limits(), 8192)
    assert fit.arrivals == 113
    assert fit.arrival_rate == pytest.approx(1.13)
    assert (fit.running_start, fit.waiting_start, fit.sample_interval) == (2.0, 0.0, 10.0)
    # prompts: no histogram, the counter's mean; outputs 50 tok/s / 1 req/s = 50
    assert fit.prompt.values == (1000,)
    assert fit.output.values == (50,)
    # a 50 % hit rate on 1,000-token prompts: a 500-token shared prefix, whole blocks of 16: 31 x 16 = 496
    assert fit.shared_prefix_tokens == 496


def test_the_shared_prefix_leaves_every_prompt_a_token_of_its_own():
    # hit rate 0.99 of 1,000: 990 -> 992 (62 blocks), but at most 95 % of the shortest prompt (950 -> 944)
    s = _signals()
    s.values["prefix_hit_rate"] = 0.99
    assert fit_workload(s, resolve_limits(), 8192).shared_prefix_tokens == 944


def test_what_is_missing_is_said():
    s = _signals()
    s.values["requests_finished_increase"] = None
    with pytest.raises(FitError, match="vllm:request_success"):
        fit_workload(s, resolve_limits(), 8192)
    empty = Signals(values={"requests_finished_increase": 0.0}, window_seconds=60.0, fit={})
    with pytest.raises(FitError, match="nothing to replay"):
        fit_workload(empty, resolve_limits(), 8192)
    no_start = _signals(running_first=None)
    assert "empty then" in " ".join(fit_workload(no_start, resolve_limits(), 8192).notes)


def test_arrivals_per_scrape_interval_by_conservation():
    # 60 s window, instants every 6 s (11 points), a scrape every 12 s that shows at the next instant:
    # between scrapes 0 -> 12 s: 5 finished, running 2 -> 4, waiting 0 -> 1: 5 + 2 + 1 = 8 arrived
    finished = [0, 0, 5, 5, 9, 9, 9, 9, 20, 20, 20]
    running = [2, 2, 4, 4, 4, 4, 4, 4, 3, 3, 3]
    waiting = [0, 0, 1, 1, 0, 0, 0, 0, 0, 0, 0]
    profile = arrival_profile({"finished": finished, "running": running, "waiting": waiting}, 60.0, 12.0)
    # stretches from one change to the next, at most a scrape interval (2 steps) long: 24-36 and 36-48 s have
    # nothing new (3 and 0 + 0 arrived), 48 s shows 11 finished, running 4 -> 3: 10 arrived
    assert profile == (
        (0.0, 12.0, 8),
        (12.0, 24.0, 3),  # 4 finished, waiting 1 -> 0: 4 - 1 = 3
        (24.0, 36.0, 0),
        (36.0, 48.0, 10),
        (48.0, 60.0, 0),
    )
    # a restarted counter (it went down) counts from 0; a missing point: no profile
    assert arrival_profile({"finished": [5, 2], "running": [0, 0], "waiting": [0, 0]}, 10.0, 10.0) == ((0.0, 10.0, 2),)
    assert arrival_profile({"finished": [0, None], "running": [0, 0], "waiting": [0, 0]}, 10.0, 10.0) == ()


def test_a_length_is_drawn_as_random_choices_draws_it():
    # the same stream of draws as the standard library's weighted choice, so a seed gives the same workload
    dist = LengthDistribution((155, 365, 7_750), (0.5, 0.3, 0.2), 1_735.0, "histogram")
    mine, stdlib = random.Random(7), random.Random(7)
    assert [dist.sample(mine) for _ in range(5_000)] == [
        stdlib.choices(dist.values, dist.weights)[0] for _ in range(5_000)
    ]
