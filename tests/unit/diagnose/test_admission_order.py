"""Two limits at once: the rules run in vLLM's admission order, the runner-up is named, "pinned" is relative.

vLLM 0.29's ``Scheduler.schedule`` (vllm/v1/core/sched/scheduler.py) checks, for a waiting request, the token
budget (``while ... token_budget > 0``), then the running cap (``num_running >= max_num_running_reqs: break``),
then deferrals (LoRA slots), and allocates KV blocks last (``allocate_slots``); a step that preempted admits
nobody. So with running at the cap and no preemption the cap refused the queue, whatever the KV usage.

Pinned: vLLM sets the running gauge after each step once its finished requests left the running list, so at a
pinned cap a scrape reads the cap less the requests that finished in the step before it: on average requests
finished per step (vllm:request_success_total / vllm:iteration_tokens_total_count), allowed
0.5 + dip + 3 x sqrt(dip / samples) (docs/diagnosis.md). Expected values are worked by hand below.
"""

from __future__ import annotations

from kvpilot.diagnose.facts import pinned_slack, running_dip
from kvpilot.diagnose.limits import resolve_limits
from kvpilot.diagnose.rules import diagnose_target
from tests.unit.diagnose.test_rules import make

#: a standing, growing queue: 20 waiting on average, +0.1 req/s x 300 s = +30
QUEUE = dict(waiting_avg=20, waiting_max=40, waiting_trend_per_s=0.1)


def finished_per_step(dip: float, steps: float = 1000.0) -> dict:
    """Counters giving ``dip`` requests finished per engine step."""
    return dict(requests_finished_increase=dip * steps, iteration_steps_increase=steps)


def test_running_at_the_cap_with_kv_at_its_ceiling_is_the_cap_with_kv_the_runner_up():
    # 48 of 48 running, KV peaked at 97 % with no preemption; one request holds 0.9 / 48 = 1.875 % -> ceiling
    # 1 - 2 x 0.01875 = 0.9625 <= 0.97: KV at its ceiling too. vLLM breaks on the running cap before it
    # allocates any KV: max_num_seqs_cap (read: 0.9), KV named as the runner-up
    sig = make(running_avg=48, running_max=48, kv_usage_avg=0.9, kv_usage_max=0.97, **QUEUE)
    d = diagnose_target(sig, resolve_limits(cli={"max_num_seqs": 48, "max_num_batched_tokens": 8192}))
    assert (d.verdict, d.confidence) == ("max_num_seqs_cap", 0.9)
    text = " ".join(d.evidence)
    assert "Runner-up: the KV cache binds too (KV usage peaked at 97.0 % of an admission ceiling of 96.2 %" in text
    # no slot to give: the KV bound (0.9 / 1.875 % = 48 requests) holds no more than now -> no --max-num-seqs
    assert all(r.flag != "--max-num-seqs" for r in d.recommendations)
    # the same KV with slots free (40 of 48): the KV cache refused the queue
    free = make(running_avg=40, running_max=44, kv_usage_avg=0.9, kv_usage_max=0.97, **QUEUE)
    d = diagnose_target(free, resolve_limits(cli={"max_num_seqs": 48, "max_num_batched_tokens": 8192}))
    assert d.verdict == "kv_cache_exhaustion"
    # pinned with KV at 30 % (ceiling 1 - 2 x 0.25 / 48 = 0.9896): the cap, KV only the next nearest
    room = make(running_avg=48, running_max=48, kv_usage_avg=0.25, kv_usage_max=0.3, **QUEUE)
    d = diagnose_target(room, resolve_limits(cli={"max_num_seqs": 48, "max_num_batched_tokens": 8192}))
    assert d.verdict == "max_num_seqs_cap"
    assert "Runner-up: the KV cache, the next nearest to binding" in " ".join(d.evidence)


def test_preemptions_still_come_first():
    # a step that preempted admits nobody (Scheduler.schedule: `if not preempted_reqs`): KV, even at the cap
    sig = make(running_avg=48, running_max=48, kv_usage_avg=0.9, kv_usage_max=0.97, preemptions_increase=3, **QUEUE)
    d = diagnose_target(sig, resolve_limits(cli={"max_num_seqs": 48}))
    assert d.verdict == "kv_cache_exhaustion"
    assert "binds first" in " ".join(d.evidence)


def test_budget_used_up_comes_before_the_running_cap():
    # 256 of 256 running and 256-token steps with a 256-token budget: the waiting loop never starts
    # (token_budget is 0 after the running requests), so the budget refused the queue; the cap is the runner-up
    sig = make(
        running_avg=256,
        running_max=256,
        kv_usage_avg=0.2,
        kv_usage_max=0.25,
        iteration_tokens_sum_increase=256000.0,
        iteration_steps_increase=1000.0,
        **QUEUE,
    )
    d = diagnose_target(sig, resolve_limits(cli={"max_num_seqs": 256, "max_num_batched_tokens": 256}))
    assert d.verdict == "token_budget_cap"
    assert "Runner-up: max_num_seqs binds too (running 256 of max_num_seqs 256 (cli) = 100.0 %)" in " ".join(d.evidence)


def test_pinned_is_relative_to_how_vllms_running_gauge_dips():
    lim48 = resolve_limits(cli={"max_num_seqs": 48, "max_num_batched_tokens": 8192})
    common = dict(kv_usage_avg=0.1, kv_usage_max=0.12, running_max=48, **QUEUE)
    # 1,500 finished in 3,000 steps: 0.5 per step; 30 samples: slack 0.5 + 0.5 + 3 x sqrt(0.5 / 30) = 1.387
    sig = make(running_avg=47.4, **common, **finished_per_step(0.5, 3000.0))
    assert running_dip(sig) == 0.5
    assert round(pinned_slack(sig), 3) == 1.387
    # 47.4 of 48 is pinned (>= 46.613); so is 46.62; 46.6 is not
    assert diagnose_target(sig, lim48).verdict == "max_num_seqs_cap"
    assert diagnose_target(make(running_avg=46.62, **common, **finished_per_step(0.5, 3000.0)), lim48).verdict == (
        "max_num_seqs_cap"
    )
    assert diagnose_target(make(running_avg=46.6, **common, **finished_per_step(0.5, 3000.0)), lim48).verdict != (
        "max_num_seqs_cap"
    )
    # with no request finishing the allowance is the gauge's rounding alone: 47.4 < 48 - 0.5
    assert diagnose_target(make(running_avg=47.4, **common, **finished_per_step(0.0)), lim48).verdict != (
        "max_num_seqs_cap"
    )
    # 1,024 slots, 25.6 finished per step (requests of 40 tokens): slack 0.5 + 25.6 + 3 x sqrt(25.6 / 30) = 28.871
    lim = resolve_limits(cli={"max_num_seqs": 1024, "max_num_batched_tokens": 8192})
    big = dict(kv_usage_avg=0.1, kv_usage_max=0.12, running_max=1024, **QUEUE, **finished_per_step(25.6))
    assert round(pinned_slack(make(running_avg=999, **big)), 3) == 28.871
    d = diagnose_target(make(running_avg=999, **big), lim)
    # 999 of 1,024 is pinned at a cap that was read: confidence 0.9, never the 0.4 of a limit out of reach
    assert (d.verdict, d.confidence) == ("max_num_seqs_cap", 0.9)
    assert "25.60 per step here" in " ".join(d.evidence)
    assert diagnose_target(make(running_avg=995.2, **big), lim).verdict == "max_num_seqs_cap"
    assert diagnose_target(make(running_avg=995.1, **big), lim).verdict != "max_num_seqs_cap"


def test_a_flat_running_gauge_infers_max_num_seqs_relative_to_its_dip():
    # max_num_seqs unknown (default 256); running 47.4 with a max of 48 and 0.5 finished per step (slack
    # 1.387): flat at 48 with decode-only steps (60 tokens <= 2 x 48) -> max_num_seqs 48 inferred
    sig = make(
        running_avg=47.4,
        running_max=48,
        kv_usage_avg=0.1,
        kv_usage_max=0.12,
        iteration_tokens_sum_increase=60.0 * 3000,
        **QUEUE,
        **finished_per_step(0.5, 3000.0),
    )
    d = diagnose_target(sig, resolve_limits())
    assert d.verdict == "max_num_seqs_cap"
    assert d.signals["inferred_max_num_seqs"] == 48
