"""The advice's choices from predictions: which change is the smallest, which one makes things worse.

Sizes are worked out by hand: ``|log2(new / now)|`` of the value that moves most, a switch counting 1.
"""

from __future__ import annotations

import pytest

from kvpilot.advice.advise import WORSE_SERVED, change_size, makes_worse
from kvpilot.advice.whatif import Change
from kvpilot.diagnose.model import Prediction
from kvpilot.engine.config import EngineConfig

CONFIG = EngineConfig(max_num_seqs=4, max_num_batched_tokens=8192, kv_cache_tokens=100_000).resolved()


@pytest.mark.parametrize(
    ("change", "size"),
    [
        (Change.of(max_num_seqs=16), (1, 2.0)),  # 4 -> 16: two doublings
        (Change.of(max_num_seqs=10_000), (1, pytest.approx(11.2877, abs=1e-4))),  # log2(2,500)
        (Change.of(max_num_seqs=2), (1, 1.0)),  # halving is as big as doubling
        (Change.of(max_num_batched_tokens=16384), (1, 1.0)),
        (Change.of(kv_cache_dtype="fp8"), (1, 1.0)),  # a switch
        (Change.of(kv_cache_dtype="auto"), (1, 0.0)),  # what it is already
        (Change.of(enable_prefix_caching=False), (1, 1.0)),
        (Change.of(max_num_seqs=8, kv_cache_dtype="fp8"), (2, 1.0)),  # two flags: bigger than any one
    ],
)
def test_change_size(change, size):
    assert change_size(change, CONFIG) == size


def test_fewer_flags_come_first_then_the_smaller_factor():
    ordered = sorted(
        [Change.of(max_num_seqs=10_000), Change.of(max_num_seqs=8, kv_cache_dtype="fp8"), Change.of(max_num_seqs=16)],
        key=lambda c: change_size(c, CONFIG),
    )
    assert ordered == [
        Change.of(max_num_seqs=16),
        Change.of(max_num_seqs=10_000),
        Change.of(max_num_seqs=8, kv_cache_dtype="fp8"),
    ]


def _p(served: float, queue: float | None) -> Prediction:
    return Prediction(requests_finished_per_s=served, queue_time_mean_s=queue)


def test_makes_worse_needs_fewer_served_and_no_shorter_queue():
    before = _p(1.24, 91.1)
    # the reviewer's case: kv-exhaustion with max_num_seqs 256 -> 14
    assert makes_worse(before, _p(1.07, 100.0))
    # served less, queue no shorter (equal)
    assert makes_worse(before, _p(1.0, 91.1))
    # served less but the queue is shorter: a trade-off, not worse
    assert not makes_worse(before, _p(1.07, 50.0))
    # the same served (within 2 %) and a longer queue: not called worse on throughput noise
    edge = 1.24 * (1 - WORSE_SERVED)
    assert not makes_worse(before, _p(edge, 120.0))
    assert makes_worse(before, _p(edge - 1e-6, 120.0))
    # more served: never worse
    assert not makes_worse(before, _p(2.0, 200.0))
    # nothing queued after: no queue time to compare, fewer served is worse
    assert makes_worse(before, _p(1.0, None))


def test_predicted_gauges_print_with_their_fixed_decimal():
    # docs/diagnosis.md, "Numbers": a fixed number of decimals; 16.9677 and 17.0 side by side read 17.0 and 17.0,
    # never "17" beside "16.9" (the window's row against the replay's)
    from kvpilot.advice.advise import effect_text
    from kvpilot.diagnose.report import _p_text

    text = _p_text(Prediction(mean_running=17.0, mean_waiting=210.0, requests_finished_per_s=1.0))
    assert "running 17.0," in text
    assert "waiting 210.0," in text
    sentence = effect_text(_p(1.24, 91.1), Prediction(requests_finished_per_s=2.0, queue_time_mean_s=1.0))
    assert "requests finished 1.24 -> 2.00 req/s" in sentence
    before = Prediction(requests_finished_per_s=1.0, mean_running=16.9677, mean_waiting=3.0, queue_growing=False)
    after = Prediction(requests_finished_per_s=1.0, mean_running=17.0, mean_waiting=2.0, queue_growing=False)
    assert "running 17.0 -> 17.0" in effect_text(before, after)
    assert "waiting 3.0 -> 2.0" in effect_text(before, after)


def test_a_change_of_two_flags_reads_flag_by_flag():
    from kvpilot.diagnose.model import Recommendation
    from kvpilot.diagnose.report import change_text

    both = Recommendation("--max-num-seqs and --kv-cache-dtype", "48, auto", "96, fp8", "")
    assert change_text(both) == "--max-num-seqs 48 -> 96, --kv-cache-dtype auto -> fp8"
    assert change_text(Recommendation("--max-num-seqs", 4, 16, "")) == "--max-num-seqs 4 -> 16"
