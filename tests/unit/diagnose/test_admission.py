"""vLLM's admission logic as the arbiter: each rule on both sides of each threshold, hand-worked values.

vLLM V1 admits a waiting request only when fewer than max_num_seqs run, the step's token budget has
room and the whole prompt's KV blocks fit (vllm/v1/core/sched/scheduler.py, Scheduler.schedule,
vLLM 0.29). Thresholds: steps full at mean >= 90 % of max_num_batched_tokens; full steps below
8,192 tokens (vLLM's large-GPU default, EngineArgs.get_batch_defaults) are a token-budget cap, at or
above compute-bound, and so are full steps past twice a named GPU's roofline knee (weighed by their time when
prompts are chunked by the budget); pinned = running_avg >= max_num_seqs - 0.5 when no request finishes;
between half of a limit in use and its threshold the limit is graded, not dropped (docs/diagnosis.md).
"""

from __future__ import annotations

import math

from kvpilot.diagnose.limits import resolve_limits
from kvpilot.diagnose.rules import diagnose_target
from tests.unit.diagnose.test_rules import make

#: a standing, growing queue with KV room: 20 waiting on average, +0.1 req/s x 300 s = +30
QUEUE = dict(waiting_avg=20, waiting_max=40, waiting_trend_per_s=0.1, kv_usage_avg=0.1, kv_usage_max=0.12)


def steps(tokens_per_step: float, n: float = 1000.0) -> dict:
    """``vllm:iteration_tokens_total`` _sum/_count increases giving a mean of ``tokens_per_step``."""
    return dict(iteration_tokens_sum_increase=tokens_per_step * n, iteration_steps_increase=n)


def diag(limits: dict, gpu_name: str | None = None, **values):
    return diagnose_target(make(**values), resolve_limits(cli=limits, gpu_name=gpu_name))


def test_full_steps_below_8192_are_a_budget_cap_at_8192_compute_bound():
    # budget 8,191, mean step 7,400: 7,400 / 8,191 = 90.3 % >= 90 %: full, below 8,192 -> token_budget_cap
    d = diag(
        {"max_num_seqs": 256, "max_num_batched_tokens": 8191}, running_avg=10, running_max=12, **QUEUE, **steps(7400)
    )
    assert d.verdict == "token_budget_cap"
    # budget 8,192, mean step 7,400: 7,400 / 8,192 = 90.3 %: full at vLLM's large-GPU default -> compute_bound
    d = diag(
        {"max_num_seqs": 256, "max_num_batched_tokens": 8192}, running_avg=10, running_max=12, **QUEUE, **steps(7400)
    )
    assert d.verdict == "compute_bound"
    assert "a larger budget makes steps longer" in " ".join(d.evidence)
    assert all(r.flag != "--max-num-batched-tokens" for r in d.recommendations)


def test_fill_threshold_90_percent():
    lim = {"max_num_seqs": 256, "max_num_batched_tokens": 4096}
    # 3,687 / 4,096 = 90.01 %: full -> token_budget_cap
    assert diag(lim, running_avg=10, running_max=12, **QUEUE, **steps(3687)).verdict == "token_budget_cap"
    # 3,686 / 4,096 = 89.99 %: just short of full, in the budget's grey zone (50 % to 90 %) at its top: still the
    # budget, its confidence scaled by (0.89990 - 0.5) / 0.4 = 0.9998 (0.8 x 0.9998 = 0.80), never a different
    # cause a hair away
    d = diag(lim, running_avg=10, running_max=12, **QUEUE, **steps(3686))
    assert (d.verdict, d.severity, d.confidence) == ("token_budget_cap", "critical", 0.8)
    assert "Graded reading" in " ".join(d.evidence)
    # 2,048 / 4,096 = 50 %: half the budget free on average, slots free (10 of 256), KV room: no admission limit
    # near binding, so something outside them holds the queue: unexplained_queue with every ratio; both limits
    # were read, so 0.7 and no "pass the flags"
    d = diag(lim, running_avg=10, running_max=12, **QUEUE, **steps(2048))
    assert (d.verdict, d.severity, d.confidence) == ("unexplained_queue", "critical", 0.7)
    text = " ".join(d.evidence)
    assert "no admission limit measured as binding" in text
    assert "running 10 of max_num_seqs 256 (cli) = 3.9 %" in text
    assert "steps averaged 2,048 tokens of the 4,096-token budget (cli) = 50.0 %" in text
    assert "Chunked prefill switched off" in text
    assert "--scheduling-policy priority" in text
    assert "Not read" not in text


def test_full_steps_past_twice_a_named_gpus_knee_are_compute_bound():
    # H100 knee 989e12 / 3.35e12 = 295.2 tokens; full steps of a 4,096 budget are past 2 x 295.2 = 590.4: the
    # roofline's compute term is over twice the weight read, a larger budget only lengthens the steps
    lim = {"max_num_seqs": 256, "max_num_batched_tokens": 4096}
    d = diag(lim, gpu_name="H100", running_avg=10, running_max=12, **QUEUE, **steps(4000))
    assert d.verdict == "compute_bound"
    # both sides of 590.4: a budget of 590 is a cap, 591 compute-bound
    for budget, verdict in ((590, "token_budget_cap"), (591, "compute_bound")):
        lim = {"max_num_seqs": 256, "max_num_batched_tokens": budget}
        assert diag(lim, gpu_name="H100", running_avg=10, running_max=12, **QUEUE, **steps(budget)).verdict == verdict
    # a 512 budget is below 590.4: a cap; the same 4,096 budget on an unnamed GPU too (below 8,192)
    lim = {"max_num_seqs": 256, "max_num_batched_tokens": 512}
    d = diag(lim, gpu_name="H100", running_avg=10, running_max=12, **QUEUE, **steps(500))
    assert d.verdict == "token_budget_cap"
    assert "near its compute limit" not in " ".join(d.evidence)
    lim = {"max_num_seqs": 256, "max_num_batched_tokens": 4096}
    assert diag(lim, running_avg=10, running_max=12, **QUEUE, **steps(4000)).verdict == "token_budget_cap"


def test_budget_recommendation_quantifies_prefill_steps_and_ttft():
    # budget 512; 30,000 steps in 300 s = 100 steps/s (10 ms per step); 1,200 generated tok/s -> 12 decode
    # tokens per step; prefill per step 512 - 12 = 500 -> 1,024 - 12 = 1,012; a 2,000-token prompt
    # (2,000 prompt tok/s / 1 req/s) prefills in ceil(2,000 / 500) = 4 steps -> ceil(2,000 / 1,012) = 2:
    # 40 ms -> 20 ms at 10 ms per step
    d = diag(
        {"max_num_seqs": 256, "max_num_batched_tokens": 512},
        running_avg=10,
        running_max=12,
        generation_tokens_per_s=1200.0,
        prompt_tokens_per_s=2000.0,
        requests_finished_per_s=1.0,
        **QUEUE,
        **steps(500, n=30000),
    )
    r = d.recommendations[0]
    assert (r.flag, r.current, r.suggested) == ("--max-num-batched-tokens", 512, 1024)
    assert "prefill tokens per step 500 -> 1,012" in r.expected_effect
    assert "prefills in 2 steps instead of 4" in r.expected_effect
    assert "about 40 -> 20 ms of TTFT at 10 ms per step" in r.expected_effect


def test_pinned_threshold_half_a_request_below_max_num_seqs():
    lim = {"max_num_seqs": 4, "max_num_batched_tokens": 2048}
    # 3.5 >= 4 - 0.5: pinned -> max_num_seqs_cap; steps of 4 tokens (decode only)
    assert diag(lim, running_avg=3.5, running_max=4, **QUEUE, **steps(4)).verdict == "max_num_seqs_cap"
    # 3.49 < 3.5 with no finished-request counter (the dip below a pinned cap unknown): not pinned, but in the
    # cap's grey zone (50 % to 87.5 % of it in use) near its top: the cap with its confidence scaled by
    # (0.8725 - 0.5) / (0.875 - 0.5) = 0.993, 0.9 x 0.993 = 0.89, never a different cause a hair away
    d = diag(lim, running_avg=3.49, running_max=4, **QUEUE, **steps(4))
    assert (d.verdict, d.confidence) == ("max_num_seqs_cap", 0.89)
    assert "87.2 %" in " ".join(d.evidence)
    # 2 of 4 (half the slots free on average; steps 0.1 % of the budget, KV room): no limit near binding ->
    # unexplained_queue at its full 0.7, listing every ratio
    d = diag(lim, running_avg=2, running_max=4, **QUEUE, **steps(2))
    assert (d.verdict, d.confidence) == ("unexplained_queue", 0.7)
    assert "running 2 of max_num_seqs 4 (cli) = 50.0 %" in " ".join(d.evidence)


def test_unknown_max_num_seqs_inferred_from_running_flat_at_n():
    # max_num_seqs unknown (vLLM's default 256 assumed); running flat at 8 (avg 8 >= 8 - 0.5), steps of 12
    # tokens <= 2 x 8 (decode only: no prefill for the budget to refuse), queue, KV room -> max_num_seqs = 8
    d = diag({}, running_avg=8, running_max=8, **QUEUE, **steps(12))
    assert d.verdict == "max_num_seqs_cap"
    assert d.confidence == 0.6
    assert "inferred: running sat at 8" in d.evidence[0]  # what to do about it: limits.confirm_inferred
    assert d.recommendations
    assert d.recommendations[0].current == 8
    # never compute_bound / scale out for an unknown limit
    assert all("replicas" not in r.flag for r in d.recommendations)
    # running 7.4 < 8 - 0.5 is not flat at 8: not inferred as max_num_seqs
    d = diag({}, running_avg=7.4, running_max=8, **QUEUE, **steps(12))
    assert "inferred: running sat" not in " ".join(d.evidence)


def test_unknown_budget_inferred_from_steps_pinned_at_one_size():
    # budget unknown (vLLM's default 2,048 on an unknown GPU); steps average 600 tokens, far more than the
    # 12 running (prefill in every step: 600 > 2 x 12), below 90 % of 2,048 = 1,843.2, with a queue, free slots
    # and KV room; 2,000-token prompts prefilled over 4.0 step times (>= 2: chunked across steps by a budget):
    # a budget of 600 -> token_budget_cap at 600, inferred, confidence 0.8 - 0.2 (inferred) = 0.6
    d = diag({"max_num_seqs": 256}, running_avg=10, running_max=12, **QUEUE, **steps(600), **prefill(2000, 4.0))
    assert d.verdict == "token_budget_cap"
    assert d.confidence == 0.6
    assert "max_num_batched_tokens = 600 (inferred: steps averaged 600 tokens" in d.evidence[0]
    assert "prefilled over 4.0 step times" in d.evidence[0]
    # the inferred budget is the mean step, so the evidence never quotes the steps as 100 % of it
    assert "100.0 % of the budget" not in d.evidence[0]
    assert d.recommendations[0].current == 600
    assert d.recommendations[0].suggested == 1200
    # the same mean step with no prefill time exported and no step histogram: a budget of 600 would rest on
    # the mean alone (which it fills by definition): not inferred, the queue is unexplained and the flag asked for
    d = diag({"max_num_seqs": 256}, running_avg=10, running_max=12, **QUEUE, **steps(600))
    assert d.verdict == "unexplained_queue"
    assert d.signals["inferred_max_num_batched_tokens"] is None
    assert "Not read, vLLM's default assumed: --max-num-batched-tokens" in " ".join(d.evidence)
    # prompts prefilled in 1.9 step times (< 2): not chunked, the budget held them: not inferred either
    d = diag({"max_num_seqs": 256}, running_avg=10, running_max=12, **QUEUE, **steps(600), **prefill(2000, 1.9))
    assert d.verdict == "unexplained_queue"


def test_unknown_budget_inferred_from_steps_of_one_size_without_prefill_time():
    # no prefill time; the step histogram: 80 of 100 steps in (512, 1,024], the bucket holding the 600-token
    # mean: steps of one size, as a cap makes them (80 % >= 50 %) -> a budget of 600 inferred
    buckets = [(256.0, 5.0), (512.0, 15.0), (1024.0, 95.0), (math.inf, 100.0)]
    values = dict(running_avg=10, running_max=12, **QUEUE, **steps(600), iteration_buckets=buckets)
    d = diag({"max_num_seqs": 256}, **values)
    assert d.verdict == "token_budget_cap"
    assert "80.0 % of steps recorded a size in the one bucket" in d.evidence[0]
    # 49 of 100 in it (< 50 %): no evidence beyond the mean, not inferred
    buckets = [(256.0, 5.0), (512.0, 46.0), (1024.0, 95.0), (math.inf, 100.0)]
    d = diag({"max_num_seqs": 256}, **{**values, "iteration_buckets": buckets})
    assert d.verdict == "unexplained_queue"


def prefill(prompt_tokens: float, step_times: float) -> dict:
    """Raw signals giving ``prompt_tokens_per_request`` and ``prefill_step_times``: 1 request/s of
    ``prompt_tokens`` tokens; 1,000 inter-token gaps of 10 ms (mean step 0.01 s) and 100 prefills of
    ``step_times`` x 0.01 s each.
    """
    return dict(
        prompt_tokens_per_s=prompt_tokens,
        requests_finished_per_s=1.0,
        itl_sum_increase=10.0,
        itl_count_increase=1000.0,
        prefill_time_sum_increase=step_times * 0.01 * 100,
        prefill_time_count_increase=100.0,
    )


def test_whole_prompts_prefilled_in_one_step_rule_out_a_budget_of_the_mean_step():
    # Both limits unknown; running flat at 4 (avg 3.8 >= 4 - 0.5) with a queue and KV room; steps average
    # 8.04 tokens (printed "8") > 2 x 4 = 8, so the decode-only test alone would read a budget of 8. But
    # 509-token prompts are prefilled in 1.2 step times (< 2: not split): a budget that holds a whole
    # 509-token prompt is not a budget of 8, so the limit that refused the queue is max_num_seqs = 4.
    # (the engine model's max-num-seqs-cap recording with the window ending 210 s into it reads so:
    # tests/integration/diagnose/test_recording_windows.py)
    d = diag({}, running_avg=3.8, running_max=4, **QUEUE, **steps(8.04), **prefill(509, 1.2))
    assert d.verdict == "max_num_seqs_cap"
    assert d.confidence == 0.6
    assert "inferred: running sat at 4" in d.evidence[0]
    assert "prompts of 509 tokens were prefilled in 1.2 step times though steps averaged 8 tokens" in d.evidence[0]
    assert all(r.flag != "--max-num-batched-tokens" for r in d.recommendations)
    # 60-token prompts prefilled across 8.9 step times: a budget of 8 needs 60 / 8.04 = 7.5 steps (no decode
    # rate given), and 8.9 >= 0.8 x 7.5: chunked by a budget of that size, which stands. (The 509-token prompts
    # this used to take would need 63 steps at a budget of 8: prefilled in 8.9 step times, they refute it.)
    d = diag({}, running_avg=3.8, running_max=4, **QUEUE, **steps(8.04), **prefill(60, 8.9))
    assert d.verdict == "token_budget_cap"
    assert "max_num_batched_tokens = 8 (inferred" in d.evidence[0]
    # 509-token prompts in 8.9 step times: fewer steps than a budget of 8 needs (63): it refused none, the cap did
    d = diag({}, running_avg=3.8, running_max=4, **QUEUE, **steps(8.04), **prefill(509, 8.9))
    assert d.verdict == "max_num_seqs_cap"
    assert "a budget of that size would take 63.3 steps" in d.evidence[0]
    # prompts of 6 tokens prefilled in 1.2 step times: a budget of 8 with 3.8 decodes per step would leave 4.2
    # tokens and split a 6-token prompt over 2 steps; prefilled in under 2 step times, the prompts were not split,
    # so the budget refused none of them and running flat at 4 is the limit (the earlier expectation,
    # token_budget_cap with a budget of 8, rested on the mean step alone, which such a budget fills by definition)
    d = diag({}, running_avg=3.8, running_max=4, **QUEUE, **steps(8.04), **prefill(6, 1.2))
    assert d.verdict == "max_num_seqs_cap"
    assert d.signals["inferred_max_num_seqs"] == 4


def test_unknown_budget_below_steps_means_a_larger_budget():
    # steps average 30,000 tokens > 1.1 x the 2,048 default: the server runs a budget of at least 30,000,
    # which is >= 8,192 -> compute_bound (inferred, 0.8 - 0.2 = 0.6)
    d = diag({"max_num_seqs": 256}, running_avg=10, running_max=12, **QUEUE, **steps(30000))
    assert d.verdict == "compute_bound"
    assert d.confidence == 0.6
    assert "at least that mean" in d.evidence[0]


def test_budget_full_by_elimination_when_steps_are_not_measured():
    # no vllm:iteration_tokens_total; 10 of 256 slots used, KV room, a standing queue: the budget is the only
    # admission limit left, so it was used up -> budget 4,096 < 8,192: token_budget_cap; 16,384: compute_bound
    d = diag({"max_num_seqs": 256, "max_num_batched_tokens": 4096}, running_avg=10, running_max=12, **QUEUE)
    assert d.verdict == "token_budget_cap"
    assert "elimination" in d.evidence[0]
    assert d.confidence == 0.8
    d = diag({"max_num_seqs": 256, "max_num_batched_tokens": 16384}, running_avg=10, running_max=12, **QUEUE)
    assert d.verdict == "compute_bound"
    assert d.confidence == 0.8


def test_transient_queue_is_not_a_limit():
    # waiting 0.5 on average (< 1) and not growing (trend 0): not a standing queue -> healthy
    d = diag(
        {"max_num_seqs": 256, "max_num_batched_tokens": 4096},
        running_avg=10,
        running_max=12,
        waiting_avg=0.5,
        waiting_max=2,
        waiting_trend_per_s=0.0,
        kv_usage_avg=0.1,
        kv_usage_max=0.12,
        **steps(100),
    )
    assert d.verdict == "healthy"


def test_zero_prefix_hits_over_many_turnovers_are_silent():
    # 0 hits of 120,000 queried tokens, 120,000 written = 2.4x the 50,000-token cache: traffic with nothing to
    # share reads exactly so, and so does a cyclic re-read larger than the cache; with no hit, no external cache
    # and prompts longer than a block there is no reason to expect hits, so nothing is printed (this used to be a
    # finding at severity ok on almost every report of non-sharing traffic)
    common = dict(running_avg=1, running_max=2, waiting_avg=0, waiting_max=0, kv_usage_avg=0.2, kv_usage_max=0.3)
    limits = resolve_limits(cli={"kv_cache_tokens": 50000})
    d = diagnose_target(make(prefix_queries_increase=120000.0, prefix_hits_increase=0.0, **common), limits)
    assert (d.verdict, d.severity) == ("healthy", "ok")
    assert not d.findings


def test_full_budget_steps_are_weighed_by_their_time_on_a_named_gpu():
    # A100-80GB knee 312e12 / 2.039e12 = 153.0 tokens; a 512-token step lasts 512 / 153.0 = 3.346 decode steps.
    # Prompts of 2,000 tokens need 2,000 / 512 = 3.9 steps of the budget: chunked, each chunk spends a step, the
    # others decode. Mean fill p as the share of steps at the budget: time share p r / (p r + 1 - p).
    # p = 0.73: 2.443 / (2.443 + 0.27) = 0.9005 >= 0.9: full; 512 >= 2 x 153.0: compute_bound at full confidence
    lim = {"max_num_seqs": 256, "max_num_batched_tokens": 512}
    # prompt tokens per request: 2,000 prompt tok/s over 1 finished req/s
    values = dict(running_avg=10, running_max=12, prompt_tokens_per_s=2000.0, requests_finished_per_s=1.0, **QUEUE)
    full = diag(lim, gpu_name="a100-80gb", **values, **steps(0.73 * 512))
    assert (full.verdict, full.confidence) == ("compute_bound", 0.8)
    assert "steps that spent the budget held about 90.0 % of the time" in " ".join(full.evidence)
    # p = 0.72: 2.409 / (2.409 + 0.28) = 0.8959 < 0.9: nearly full, graded (0.8959 - 0.5) / 0.4 = 0.99: the same
    # verdict a little less sure, never another cause
    near = diag(lim, gpu_name="a100-80gb", **values, **steps(0.72 * 512))
    assert near.verdict == "compute_bound"
    assert near.confidence == round(0.8 * (2.409 / 2.689 - 0.5) / 0.4, 2)
    # the GPU unnamed: the count of steps alone, 73 % graded (0.73 - 0.5) / 0.4 = 0.575: a budget cap
    bare = diag(lim, **values, **steps(0.73 * 512))
    assert (bare.verdict, bare.confidence) == ("token_budget_cap", round(0.8 * 0.575, 2))
    # prompts of 300 tokens (0.6 of a step of the budget): steps carry whole prompts, not chunks, so their fill
    # is not a share of steps spent: graded on the count, 0.575
    whole = diag(lim, gpu_name="a100-80gb", **{**values, "prompt_tokens_per_s": 300.0}, **steps(0.73 * 512))
    assert whole.confidence == round(0.8 * 0.575, 2)
