"""The KV gauge at its admission ceiling reads below it by the requests a step finishes (hand-worked values).

vLLM 0.29 sets ``vllm:kv_cache_usage_perc`` after each step once that step's finished requests freed their
blocks (``Scheduler.update_from_output`` then ``make_stats``), as it does the running gauge: a pool held at
its ceiling reads the ceiling less the finished requests' share. And a max_num_seqs known only as at least
the running maximum (vLLM's default contradicted) is where running stopped, which a KV cache at its ceiling
explains as well: it is pinned only with KV room.
"""

from __future__ import annotations

import math

import pytest

from kvpilot.diagnose.facts import kv_ceiling
from kvpilot.diagnose.limits import resolve_limits
from kvpilot.diagnose.rules import diagnose_target
from tests.unit.diagnose.test_rules import make

#: a standing, growing queue: 20 waiting on average, +0.1 req/s x 300 s = +30
QUEUE = dict(waiting_avg=20, waiting_max=40, waiting_trend_per_s=0.1)

#: 100 running hold half the pool (0.5 % each); 500 finished over 100 steps = 5 a step, 25 samples
POOL = dict(
    running_avg=100,
    running_max=104,
    kv_usage_avg=0.5,
    requests_finished_increase=500.0,
    iteration_steps_increase=100.0,
    iteration_tokens_sum_increase=100.0 * 150,
    samples_in_window=25.0,
)


def test_the_ceiling_is_read_less_the_finished_requests_share():
    # 1 - 2 x 0.005 = 0.99 at admission; the gauge is set after 5 finished requests a step freed theirs, plus
    # 3 sd of their mean over 25 samples, 3 x sqrt(5 / 25) = 1.342: (5 + 1.342) x 0.005 = 0.0317 below it
    freed = (5 + 3 * math.sqrt(5 / 25)) * 0.005
    ceiling, how = kv_ceiling(make(kv_usage_max=0.9, **POOL), resolve_limits())
    assert ceiling == pytest.approx(1 - 0.01 - freed)
    assert round(ceiling, 4) == 0.9583
    assert "requests a step finishes, freed before the gauge is set" in how
    # without the counters the dip is unknown: the admission ceiling itself
    bare = {k: v for k, v in POOL.items() if k != "requests_finished_increase"}
    assert kv_ceiling(make(kv_usage_max=0.9, **bare), resolve_limits())[0] == pytest.approx(0.99)


def test_a_queue_at_the_read_ceiling_is_kv_and_below_it_no_limit():
    lim = resolve_limits(cli={"max_num_seqs": 2048, "max_num_batched_tokens": 8192, "kv_cache_tokens": 100000})
    # peak 96 % >= 95.83 %: KV at its ceiling as the gauge reads it (below 99 %, which it never shows)
    d = diagnose_target(make(kv_usage_max=0.96, **POOL, **QUEUE), lim)
    assert d.verdict == "kv_cache_exhaustion"
    # peak 95.8 % < 95.83 %: KV had room; 100 of 2,048 running, steps of 150 of 8,192: no limit binds
    d = diagnose_target(make(kv_usage_max=0.958, **POOL, **QUEUE), lim)
    assert d.verdict == "unexplained_queue"


def test_a_contradicted_default_cap_is_pinned_only_with_kv_room():
    # no flags: running sat at 300, above vLLM's default 256, so max_num_seqs is at least 300; 300 running hold
    # 90 % (0.3 % each): ceiling 1 - 2 x 0.003 = 0.994 (no finishes counted)
    flat = dict(running_avg=300, running_max=300, running_median=300, kv_usage_avg=0.9, **QUEUE)
    flat |= dict(iteration_tokens_sum_increase=300.0 * 1000, iteration_steps_increase=1000.0)
    # KV peaked at 99 % < 99.4 %: KV had room, so running flat at its maximum is the cap
    d = diagnose_target(make(kv_usage_max=0.99, **flat), resolve_limits())
    assert d.verdict == "max_num_seqs_cap"
    assert "at least 300" in d.evidence[0]
    # KV peaked at 99.5 % >= 99.4 %: the KV cache explains where running stopped; vLLM's last check refused it
    d = diagnose_target(make(kv_usage_max=0.995, **flat), resolve_limits())
    assert d.verdict == "kv_cache_exhaustion"
