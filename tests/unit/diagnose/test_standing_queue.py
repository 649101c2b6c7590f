"""A queue is more than one waiting sample: queue verdicts and inferred limits need a queue that costs time.

Standing: a request left waiting in at least half the samples (the waiting gauge's median >= 1) or a queue that
grew by a request or more; and requests waited at least one step time on average (a request admitted in the
first step after it arrives waits only for the running step to end: half a step on average; vLLM's own healthy
recording reads 0.49 step times, every limit-bound one 15 or more). docs/diagnosis.md, "Derived conditions".
"""

from __future__ import annotations

from kvpilot.diagnose.limits import resolve_limits
from kvpilot.diagnose.rules import diagnose_target
from tests.unit.diagnose.test_rules import make


def queue_time(step_times: float) -> dict:
    """Counters giving a mean queue time of ``step_times`` mean steps: 1,000 inter-token gaps of 10 ms and 100,000
    requests queued ``step_times`` x 10 ms each (333 admitted a second: 2 waiting on average is a wait of 0.6 steps
    by Little's law, as the histogram's mean says; far fewer admissions would make the gauge's queue a long one).
    """
    return dict(
        itl_sum_increase=10.0,
        itl_count_increase=1000.0,
        queue_time_sum_increase=step_times * 0.01 * 100000,
        queue_time_count_increase=100000.0,
    )


#: steps of 600 tokens with 12 running and 2,000-token prompts prefilled over 4 step times: what infers a
#: budget of 600 when one is inferred at all (tests/unit/diagnose/test_admission.py)
BUDGET_STEPS = dict(
    running_avg=10,
    running_max=12,
    kv_usage_avg=0.1,
    kv_usage_max=0.12,
    iteration_tokens_sum_increase=600000.0,
    iteration_steps_increase=1000.0,
    prompt_tokens_per_s=2000.0,
    requests_finished_per_s=1.0,
    prefill_time_sum_increase=0.04 * 100,
    prefill_time_count_increase=100.0,
)


def test_a_queue_that_costs_less_than_a_step_is_no_queue_verdict():
    # without flags, a standing queue (median 2) whose requests waited 0.99 step times on average: a healthy
    # server near its limits, no budget inferred (the mean step would be a budget by definition)
    d = diagnose_target(
        make(
            waiting_avg=2, waiting_max=5, waiting_median=2, waiting_trend_per_s=0.0, **BUDGET_STEPS, **queue_time(0.99)
        ),
        resolve_limits(cli={"max_num_seqs": 256}),
    )
    assert d.verdict == "healthy"
    assert d.signals["inferred_max_num_batched_tokens"] is None
    # 1.0 step times: requests are refused admission in later steps: the budget of 600 is inferred
    d = diagnose_target(
        make(
            waiting_avg=2, waiting_max=5, waiting_median=2, waiting_trend_per_s=0.0, **BUDGET_STEPS, **queue_time(1.0)
        ),
        resolve_limits(cli={"max_num_seqs": 256}),
    )
    assert d.verdict == "token_budget_cap"
    assert d.signals["inferred_max_num_batched_tokens"] == 600
    assert "each waiting 0.01 s on average = 1.0 step times" in " ".join(d.evidence)


def test_a_burst_is_not_a_standing_queue():
    # waiting averaged 3 (a burst of 30 in a tenth of the samples) but its median is 0 and it did not grow:
    # no request waited in most samples -> healthy, nothing inferred
    values = dict(waiting_avg=3, waiting_max=30, waiting_trend_per_s=0.0, **BUDGET_STEPS, **queue_time(40.0))
    d = diagnose_target(make(waiting_median=0, **values), resolve_limits(cli={"max_num_seqs": 256}))
    assert d.verdict == "healthy"
    # median 1: a request left waiting in at least half the samples -> a queue verdict
    d = diagnose_target(make(waiting_median=1, **values), resolve_limits(cli={"max_num_seqs": 256}))
    assert d.verdict == "token_budget_cap"


def test_a_growing_queue_empty_in_most_samples_is_not_standing():
    # median 0 (the queue formed late in the window) though it grew by 0.01 x 300 = 3 requests: vLLM's scheduler
    # left a request waiting in under half the window, which its ground truth calls no binding limit (vLLM 0.29, a
    # ramp: waiting 0.9 on average, median 0, grew to 3, queued 21 % of the window, 26 preemptions) -> healthy
    values = dict(waiting_avg=0.5, waiting_max=6, **BUDGET_STEPS, **queue_time(40.0))
    limits = resolve_limits(cli={"max_num_seqs": 256})
    assert diagnose_target(make(waiting_trend_per_s=0.01, waiting_median=0, **values), limits).verdict == "healthy"
    # median 1: a request waited in half the samples -> standing
    d = diagnose_target(make(waiting_trend_per_s=0.01, waiting_median=1, **values), limits)
    assert d.verdict == "token_budget_cap"
    # the median unknown (no quantile of the gauge): growth by 3 requests counts, 0.003 x 300 = 0.9 < 1 does not
    assert diagnose_target(make(waiting_trend_per_s=0.01, **values), limits).verdict == "token_budget_cap"
    assert diagnose_target(make(waiting_trend_per_s=0.003, **values), limits).verdict == "healthy"


def test_the_issue_healthy_server_near_its_limits():
    # a request waited 3 % of the time (waiting 0.03 on average, median 0), 14 ms in the queue with 30 ms steps
    # (0.47 step times), steps of 600 tokens: healthy without flags, never token_budget_cap by definition
    d = diagnose_target(
        make(
            waiting_avg=0.03,
            waiting_max=1,
            waiting_median=0,
            waiting_trend_per_s=0.0,
            **{**BUDGET_STEPS, **dict(itl_sum_increase=30.0, itl_count_increase=1000.0)},
            queue_time_sum_increase=1.4,
            queue_time_count_increase=100.0,
        ),
        resolve_limits(),
    )
    assert d.verdict == "healthy"
    assert d.signals["inferred_max_num_batched_tokens"] is None
