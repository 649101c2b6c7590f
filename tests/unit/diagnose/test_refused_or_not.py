"""A limit is named only where vLLM's scheduler can have refused the head of its queue with it (hand-worked values).

- KV: ``KVCacheManager.allocate_slots`` refuses the head when its prompt's blocks exceed the free ones, so the KV
  usage from which it refuses is 1 less a long prompt's share of the cache: the window's p90 prompt
  (``vllm:request_prompt_tokens``), not twice a running request's footprint.
- Preemptions while no queue costs time refused nobody for long (vLLM re-queues the preempted request at the head
  and admits it as blocks free): a secondary finding at warning, not the verdict.
"""

from __future__ import annotations

import pytest

from kvpilot.diagnose.facts import kv_ceiling
from kvpilot.diagnose.limits import resolve_limits
from kvpilot.diagnose.rules import diagnose_target
from tests.unit.diagnose.test_rules import make

#: 200 finished requests' prompts, all in vLLM's (1000, 2000] bucket: p90 interpolated 1000 + 0.9 x 1000 = 1900
PROMPTS = [(500.0, 0.0), (1000.0, 0.0), (2000.0, 200.0), (5000.0, 200.0), (float("inf"), 200.0)]
#: a standing, growing queue: 20 waiting on average, +0.1 req/s x 300 s = +30
QUEUE = dict(waiting_avg=20, waiting_max=40, waiting_median=20, waiting_trend_per_s=0.1)
#: 4 running hold 60 % of an 11,120-token cache (15 % each: prompt and output so far)
FOUR = dict(running_avg=4, running_max=4, kv_usage_avg=0.6)


def _signals(**values):
    sig = make(**values)
    sig.buckets["prompt_tokens"] = PROMPTS
    return sig


def test_the_kv_ceiling_is_one_less_the_p90_prompt_share():
    lim = resolve_limits(cli={"kv_cache_tokens": 11120})
    ceiling, how = kv_ceiling(_signals(kv_usage_max=0.7, **FOUR), lim)
    assert ceiling == pytest.approx(1 - 1900 / 11120)
    assert "p90 prompt" in how
    # without the prompt histogram: twice a running request's share, 1 - 2 x 0.15
    assert kv_ceiling(make(kv_usage_max=0.7, **FOUR), lim)[0] == pytest.approx(0.7)


def test_a_kv_peak_below_where_the_head_is_refused_is_not_exhaustion():
    lim = resolve_limits(cli={"kv_cache_tokens": 11120, "max_num_seqs": 16, "max_num_batched_tokens": 8192})
    # KV peaked at 75 %: above twice a request's share below 1.0 (70 %), below 1 - 1,900 / 11,120 = 82.9 %
    d = diagnose_target(_signals(kv_usage_max=0.75, **FOUR, **QUEUE), lim)
    assert d.verdict != "kv_cache_exhaustion"
    # at 85 % a 1,900-token head no longer fits: KV
    d = diagnose_target(_signals(kv_usage_max=0.85, **FOUR, **QUEUE), lim)
    assert d.verdict == "kv_cache_exhaustion"


def test_preemptions_without_a_queue_are_a_warning_beside_the_verdict():
    lim = resolve_limits(cli={"kv_cache_tokens": 11120, "max_num_seqs": 16, "max_num_batched_tokens": 8192})
    quiet = dict(waiting_avg=0.1, waiting_max=1, waiting_median=0, waiting_trend_per_s=0.0)
    d = diagnose_target(_signals(kv_usage_max=1.0, preemptions_increase=3, **FOUR, **quiet), lim)
    assert (d.verdict, d.severity) == ("healthy", "warning")
    note = [f for f in d.findings if f.verdict == "kv_cache_exhaustion"]
    assert note
    assert "3 preemptions" in note[0].evidence[0]
    # the same preemptions with a queue: the verdict, critical (work thrown away while work waits)
    d = diagnose_target(_signals(kv_usage_max=1.0, preemptions_increase=3, **FOUR, **QUEUE), lim)
    assert (d.verdict, d.severity) == ("kv_cache_exhaustion", "critical")


def test_a_queue_whose_admitted_requests_waited_little_still_costs_time_by_littles_law():
    # LoRA deferral: 10 waiting on average while 60 requests were first scheduled in 300 s (0.2/s), each after
    # 0.01 s = 0.2 of a 50 ms step; Little's law puts the queue's mean wait at 10 / 0.2 = 50 s = 1,000 steps
    lim = resolve_limits(cli={"max_num_seqs": 16, "max_num_batched_tokens": 8192, "max_loras": 1})
    lora = dict(
        running_avg=2,
        running_max=3,
        kv_usage_avg=0.1,
        kv_usage_max=0.2,
        waiting_avg=10,
        waiting_max=13,
        waiting_median=10,
        waiting_trend_per_s=0.0,
        waiting_deferred_avg=9.0,
        lora_max_loras=1.0,
        lora_adapters_max=1.0,
        queue_time_sum_increase=0.6,
        queue_time_count_increase=60.0,
        itl_sum_increase=50.0,
        itl_count_increase=1000.0,
    )
    d = diagnose_target(make(**lora), lim)
    assert d.signals["queue_step_times"] == pytest.approx(0.2)
    assert d.verdict == "lora_slot_cap"
    # the same queue admitted 12,000 times (40/s): 10 / 40 = 0.25 s = 5 steps by Little's law, 0.2 by the
    # histogram: still a queue that costs time; at 400,000 admissions (1,333/s) 0.15 steps: none
    assert diagnose_target(make(**(lora | {"queue_time_count_increase": 12000.0})), lim).verdict == "lora_slot_cap"
    quick = lora | {"queue_time_count_increase": 400000.0, "queue_time_sum_increase": 4000.0}
    assert diagnose_target(make(**quick), lim).verdict == "healthy"


def test_preemptions_beside_a_pinned_cap_below_the_kv_ceiling_are_the_cap():
    # 8 of 8 running, 2 preemptions, KV peaked at 75 % of a ceiling of 1 - 1900 / 11120 = 82.9 %: a preempting step
    # admits nobody, but every other step stops at `num_running >= max_num_running_reqs` before asking for blocks,
    # and below the ceiling the blocks were there (vLLM 0.29: a cap of 8, 1-3 preemptions, the cap refused the head
    # in 100 % of the queued time) -> max_num_seqs_cap, the preemptions a secondary KV finding
    lim = resolve_limits(cli={"kv_cache_tokens": 11120, "max_num_seqs": 8})
    pinned = dict(running_avg=8, running_max=8, kv_usage_avg=0.6, preemptions_increase=2, **QUEUE)
    d = diagnose_target(_signals(kv_usage_max=0.75, **pinned), lim)
    assert d.verdict == "max_num_seqs_cap"
    assert [f.verdict for f in d.findings] == ["kv_cache_exhaustion"]
    assert "the cap held the queue, not the KV cache" in " ".join(d.findings[0].evidence)
    # KV at its ceiling (0.83 >= 0.829): the KV cache ran out too, preemptions first
    assert diagnose_target(_signals(kv_usage_max=0.83, **pinned), lim).verdict == "kv_cache_exhaustion"
    # slots free (6 of 8): nothing refused the head before the KV cache
    free = {**pinned, "running_avg": 6, "running_max": 7}
    assert diagnose_target(_signals(kv_usage_max=0.75, **free), lim).verdict == "kv_cache_exhaustion"


def test_at_the_kv_ceiling_a_cap_full_in_most_samples_holds_the_queue_between_preemptions():
    # a cap of 8 pinned (7.6 running on average) at a KV peak of 0.83 >= its ceiling 0.829, 30 preemptions. vLLM
    # checks the cap before it asks the KV cache for blocks, so while the running list is full the cap refuses the
    # head and only in the steps between can the KV cache (vLLM 0.29, a drawn scenario: a cap of 8, 33 preemptions,
    # the gauge's median 8, the cap refused the head in 67 % of the queued time; a cap of 4 whose median was 3: the
    # KV cache refused it in 74 %)
    lim = resolve_limits(cli={"kv_cache_tokens": 11120, "max_num_seqs": 8})
    pinned = dict(running_avg=7.6, running_max=8, kv_usage_avg=0.7, kv_usage_max=0.83, preemptions_increase=30, **QUEUE)

    def at(median: float, **more):
        return diagnose_target(_signals(running_median=median, **{**pinned, **more}), lim)

    # full in most samples (median 8): the cap, at three quarters of its confidence (0.9 x 0.75 = 0.68), the KV
    # cache beside it
    d = at(8)
    assert d.verdict == "max_num_seqs_cap"
    assert d.confidence == pytest.approx(0.68)
    assert [f.verdict for f in d.findings] == ["kv_cache_exhaustion"]
    assert "sat full at 8 in most samples (median 8)" in " ".join(d.evidence)
    # exactly half the samples full (an even count's median 7.5) is still the cap: within the 0.5 slack
    assert at(7.5).verdict == "max_num_seqs_cap"
    # full in fewer than half (median 7): the KV cache, at three quarters of its confidence (0.95 x 0.75 = 0.71),
    # the cap named beside it
    d = at(7)
    assert d.verdict == "kv_cache_exhaustion"
    assert d.confidence == pytest.approx(0.71)
    assert "full at 8 in fewer than half the samples (median 7)" in " ".join(d.evidence)
    # KV still holds a ninth request at this usage (0.9 of the pool / (0.7 / 7.6) per request = 9.8): one more slot
    assert [(r.flag, r.suggested) for r in at(8).recommendations] == [("--max-num-seqs", 9)]
    # at 92 % average use a request holds 12.1 %, and 0.9 / 0.121 = 7.4 requests fit: the KV cache has to grow
    # before the cap can, so the finding carries the KV cache's changes
    d = at(8, kv_usage_avg=0.92, kv_usage_max=0.95)
    assert d.verdict == "max_num_seqs_cap"
    assert d.recommendations
    assert "--max-num-seqs" not in [r.flag for r in d.recommendations]
    # the median unknown: nothing measures the turns, and the preemptions decide, as before
    assert diagnose_target(_signals(**pinned), lim).verdict == "kv_cache_exhaustion"


def test_a_flat_batch_beside_a_kv_peak_is_a_cap_when_the_median_prompt_fits():
    # 4 running in every sample with a standing queue, nothing read of max_num_seqs (vLLM's default 256 assumed),
    # decode-only steps; the cache holds 11,120 tokens, prompts' median 1000 + 0.5 x 1000 = 1,500 tokens (13.5 %),
    # p90 1,900 (17.1 %): the long-prompt ceiling 1 - 0.171 = 0.829 is passed by the peak of 0.9
    lim = resolve_limits(cli={"kv_cache_tokens": 11120})
    steps = dict(iteration_tokens_sum_increase=4000.0, iteration_steps_increase=1000.0)
    flat = dict(FOUR, running_min=4, running_median=4, kv_usage_max=0.9)
    # average usage 60 %: 0.6 + 0.135 <= 1, the median head fit in most steps: the flat batch is a cap of 4
    d = diagnose_target(_signals(**QUEUE, **flat, **steps), lim)
    assert d.verdict == "max_num_seqs_cap"
    assert "room in the KV cache for the median prompt beside the batch at its plateau" in " ".join(d.evidence)
    # average usage 88 %: 0.88 + 0.135 > 1, the median head did not fit: the KV cache refused it
    d = diagnose_target(_signals(**QUEUE, **{**flat, "kv_usage_avg": 0.88}, **steps), lim)
    assert d.verdict == "kv_cache_exhaustion"
    # the batch at 4 in most samples but 3.5 on average: the usage that counts is the plateau's, where a cap would
    # refuse, 4 / 3.5 x the average. 0.7 x 4 / 3.5 = 0.8, + 0.135 <= 1: still a cap; 0.77 x 4 / 3.5 = 0.88,
    # + 0.135 > 1 (0.77 + 0.135 alone would fit): at the plateau the median head did not fit, so the KV cache stopped
    # the batch there (vLLM 0.29, a drawn scenario: 2,592-token prompts in a 7,776-token cache, running 1.29 on
    # average and 2 in most samples, read as a cap of 2 from the average usage; its scheduler refused the head on
    # the KV cache in 96 % of the queued time and never on max_num_seqs)
    dips = dict(flat, running_avg=3.5, running_median=4, running_min=2)
    d = diagnose_target(_signals(**QUEUE, **{**dips, "kv_usage_avg": 0.7}, **steps), lim)
    assert d.verdict == "max_num_seqs_cap"
    d = diagnose_target(_signals(**QUEUE, **{**dips, "kv_usage_avg": 0.77}, **steps), lim)
    assert d.verdict == "kv_cache_exhaustion"
