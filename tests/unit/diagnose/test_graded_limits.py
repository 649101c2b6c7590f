"""A limit nearly but not quite pinned or full is named with lowered confidence, never swapped for another cause.

vLLM admits a waiting request only while the token budget has room and fewer than max_num_seqs run
(Scheduler.schedule, vllm/v1/core/sched/scheduler.py). With a standing queue, free KV and nothing deferred,
the limit nearest to binding is what refused it; how near it measured grades the confidence (docs/diagnosis.md,
"Graded limits"): full confidence from the full/pinned threshold up, half at the midpoint of the grey zone
that runs down to half the limit in use, where the reading turns to unexplained_queue, which names the limit
as the other reading.
"""

from __future__ import annotations

from kvpilot.diagnose import facts
from kvpilot.diagnose.limits import resolve_limits
from kvpilot.diagnose.rules import diagnose_target
from tests.unit.diagnose.test_rules import make

#: 37,000 requests waiting and growing by 20 req/s over the 300 s window; KV at 30 %: room
BIG_QUEUE = dict(waiting_avg=37000, waiting_max=40000, waiting_trend_per_s=20.0, kv_usage_avg=0.3, kv_usage_max=0.31)
#: a queue of 20 growing by 30 over the window; KV at 12 %: room
QUEUE = dict(waiting_avg=20, waiting_max=40, waiting_trend_per_s=0.1, kv_usage_avg=0.1, kv_usage_max=0.12)


def steps(tokens_per_step: float, n: float = 1000.0) -> dict:
    """``vllm:iteration_tokens_total`` _sum/_count increases giving a mean of ``tokens_per_step``."""
    return dict(iteration_tokens_sum_increase=tokens_per_step * n, iteration_steps_increase=n)


def diag(limits: dict, **values):
    return diagnose_target(make(**values), resolve_limits(cli=limits))


def test_a_cap_of_1024_given_as_a_flag_at_97_6_percent_is_the_cap():
    # running averaged 999 (max 1,013) of --max-num-seqs 1024, 37,000 waiting and growing, decode-only steps of
    # 999 tokens (one per running request), budget 8,192 at 12 %: the cap is the only limit near binding.
    # 999 / 1,024 = 97.6 %: not within the 0.5 slack of a pinned cap with no finished-request counter, yet far
    # above half the cap in use: max_num_seqs_cap with lowered confidence, naming the other reading
    lim = {"max_num_seqs": 1024, "max_num_batched_tokens": 8192}
    d = diag(lim, running_avg=999, running_max=1013, **BIG_QUEUE, **steps(999))
    assert d.verdict == "max_num_seqs_cap"
    # 0.9 (read) x closeness: (0.9756 - 0.5) / (0.99951 - 0.5) = 0.952 -> 0.86
    assert d.confidence == 0.86
    text = " ".join(d.evidence)
    assert "97.6 %" in text
    assert "unexplained_queue" in text  # the other reading named
    # the same recording without flags: a cap of at least 1,013 (running above vLLM's default 256)
    d = diag({}, running_avg=999, running_max=1013, **BIG_QUEUE, **steps(999))
    assert d.verdict == "max_num_seqs_cap"


def test_steps_at_88_percent_of_a_256_token_budget_given_as_a_flag_are_the_budget():
    # steps averaged 226 of --max-num-batched-tokens 256 (88.3 %), 10 of 256 sequences running, KV room, a
    # standing queue: below the 90 % "full" threshold, far above half the budget in use -> token_budget_cap
    lim = {"max_num_seqs": 256, "max_num_batched_tokens": 256}
    d = diag(lim, running_avg=10, running_max=12, **QUEUE, **steps(226))
    assert d.verdict == "token_budget_cap"
    # 0.8 x (0.8828 - 0.5) / (0.9 - 0.5) = 0.8 x 0.957 = 0.77
    assert d.confidence == 0.77
    assert "unexplained_queue" in " ".join(d.evidence)


def _sweep(values: list[float], run) -> list[tuple[str, float]]:
    return [(d.verdict, d.confidence) for d in (run(v) for v in values)]


def test_budget_sweep_across_the_full_threshold_changes_confidence_not_cause():
    lim = {"max_num_seqs": 256, "max_num_batched_tokens": 4096}
    # 80 % to 100 % of 4,096 in steps of 1 %: the 90 % threshold is inside
    fills = [0.80 + i / 100 for i in range(21)]
    out = _sweep(fills, lambda f: diag(lim, running_avg=10, running_max=12, **QUEUE, **steps(f * 4096)))
    assert {v for v, _ in out} == {"token_budget_cap"}
    confidences = [c for _, c in out]
    assert confidences == sorted(confidences)  # never falls as the steps fill
    assert confidences[-1] == 0.8
    assert confidences[0] < confidences[-1]


def test_cap_sweep_across_the_pinned_threshold_changes_confidence_not_cause():
    # a cap of 64, running from 56 (87.5 %) to 64, no finished-request counter: slack 0.5, pinned from 63.5
    lim = {"max_num_seqs": 64, "max_num_batched_tokens": 8192}
    levels = [56 + i / 2 for i in range(17)]
    out = _sweep(levels, lambda r: diag(lim, running_avg=r, running_max=64, **QUEUE, **steps(r)))
    assert {v for v, _ in out} == {"max_num_seqs_cap"}
    confidences = [c for _, c in out]
    assert confidences == sorted(confidences)
    assert confidences[-1] == 0.9
    assert confidences[0] < confidences[-1]


def test_the_grey_zone_turns_at_its_midpoint_naming_both_readings():
    # budget 4,096: full at 90 %, half in use at 50 %: midpoint 70 %. 71 % -> the budget at half-ish
    # confidence; 69 % -> unexplained_queue at lowered confidence naming the budget as the other reading
    lim = {"max_num_seqs": 256, "max_num_batched_tokens": 4096}
    above = diag(lim, running_avg=10, running_max=12, **QUEUE, **steps(0.71 * 4096))
    below = diag(lim, running_avg=10, running_max=12, **QUEUE, **steps(0.69 * 4096))
    assert above.verdict == "token_budget_cap"
    assert below.verdict == "unexplained_queue"
    # 0.8 x 0.525 = 0.42; 0.7 x (1 - 0.475) = 0.37: both near half their base at the turn
    assert (above.confidence, below.confidence) == (0.42, 0.37)
    assert "token_budget_cap" in " ".join(below.evidence)
    # at or below half the budget in use: unexplained at full confidence, no other reading
    far = diag(lim, running_avg=10, running_max=12, **QUEUE, **steps(facts.GRADED_LOW * 4096))
    assert (far.verdict, far.confidence) == ("unexplained_queue", 0.7)


def test_closeness_is_linear_between_half_used_and_the_threshold():
    assert facts.closeness(0.9, 0.9) == 1.0
    assert facts.closeness(0.95, 0.9) == 1.0
    assert facts.closeness(0.5, 0.9) == 0.0
    assert facts.closeness(0.3, 0.9) == 0.0
    assert round(facts.closeness(0.7, 0.9), 6) == 0.5
