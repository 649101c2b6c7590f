"""A seeded sample of randomly drawn scenarios, judged by vLLM 0.29.0's scheduler: kvpilot diagnose's accuracy on
traffic no rule was written for (tests/reference/random_scenarios.py; the 200-scenario table is the benchmark's,
``benchmarks/verdict_accuracy.py --random 200``).

Every run draws a fresh master seed (printed in the header: ``verdict accuracy seed: N``;
``KVPILOT_ACCURACY_SEED=N`` replays it), so no fixed set of scenarios can be tuned to. Each scenario is diagnosed
at three window ends, with the server's flags and without; the figures (accuracy per mode, the confusion
matrices, every miss) are printed at the end of the run.

What holds on every seed: the sample is judged whole, and its accuracy stays above :data:`FLOOR`, three standard
deviations of a 30-scenario sample below the lowest fresh seed measured (a rule that breaks falls through it). The
goals - at least 97 % with flags and 90 % without, and no verdict naming a limit (``max_num_seqs_cap``,
``token_budget_cap``, ``kv_cache_exhaustion``, ``lora_slot_cap``) that refused the head of vLLM's queue in no step of
the window - are not met by today's rules on every seed (docs/diagnosis.md, "Randomly drawn scenarios"): their tests
are expected failures, reported as unexpected passes when a seed meets them.
"""

from __future__ import annotations

import pytest

from tests.conftest import ACCURACY_SEED, require_vllm_python
from tests.reference.random_scenarios import Outcome, accuracy, draw, judge, report, seeds
from tests.reference.refusals import REASONS

pytestmark = pytest.mark.vllm_ref

#: scenarios in the sample (each at 3 window ends x 2 modes); vLLM 0.29.0 runs them in one driver run
SAMPLE = 30
#: the goals: the share of verdicts right with the server's flags and without (docs/diagnosis.md)
GOAL = {"flags": 0.97, "bare": 0.90}
#: the floor: fresh seeds measured 85.6 % / 82.2 % (seed 1039271223) and 93.3 % / 81.1 % (seed 1323772726); a
#: 30-scenario sample's standard deviation at 85.6 % is sqrt(0.856 x 0.144 / 30) = 6.4 points (7.2 at 81.1 %), so
#: three of them below the lowest: 85.6 - 19.2 = 66 % and 81.1 - 21.5 = 60 %
FLOOR = {"flags": 0.65, "bare": 0.60}


@pytest.fixture(scope="module")
def outcomes(request: pytest.FixtureRequest) -> list[Outcome]:
    python = require_vllm_python("0.29.0")
    master = request.config.stash[ACCURACY_SEED]
    scenarios = [draw(s) for s in seeds(master, SAMPLE)]
    judged = judge(python, scenarios, expect_version="0.29.0")
    assert len(judged) == SAMPLE * 3 * 2  # every scenario, window and mode diagnosed
    return judged


def _figures(master: int, judged: list[Outcome]) -> str:
    title = (
        f"Verdict accuracy on {SAMPLE} scenarios drawn from seed {master} (replay with "
        f"KVPILOT_ACCURACY_SEED={master}), judged by vLLM 0.29.0's scheduler:"
    )
    return report(judged, title)


def _shares(outcomes: list[Outcome]) -> dict[str, float]:
    shares = {}
    for mode in GOAL:
        right, total = accuracy(outcomes, mode)
        shares[mode] = right / total
    return shares


def test_the_sample_is_judged_by_vllm_and_stays_above_the_floor(outcomes, request, record_property):
    master = request.config.stash[ACCURACY_SEED]
    record_property("verdict_accuracy", _figures(master, outcomes))
    # every window's truth is vLLM's: a binding limit among its refusal reasons, the shares of the queued time
    assert all(o.limit in REASONS for o in outcomes)
    assert all(abs(sum(o.shares.values()) - 1.0) < 1e-3 for o in outcomes if o.limit != "none")
    shares = _shares(outcomes)
    assert all(shares[m] >= FLOOR[m] for m in FLOOR), f"seed {master}: {shares} below the floor {FLOOR}"


@pytest.mark.xfail(strict=False, reason="not met on every seed yet: 7 of 180 on seed 1323772726 (docs/diagnosis.md)")
def test_no_verdict_names_a_limit_vllm_never_refused_the_queue_with(outcomes, request):
    master = request.config.stash[ACCURACY_SEED]
    wrong = [f"{o.id}: {o.verdict} ({o.description})" for o in outcomes if o.names_unrefused_limit]
    assert wrong == [], f"seed {master}: " + "; ".join(wrong)


@pytest.mark.xfail(strict=False, reason="the accuracy goal is not met on every seed yet (docs/diagnosis.md)")
def test_accuracy_reaches_the_goal(outcomes, request):
    master = request.config.stash[ACCURACY_SEED]
    shares = _shares(outcomes)
    assert all(shares[m] >= GOAL[m] for m in GOAL), f"seed {master}: {shares} against {GOAL}"
