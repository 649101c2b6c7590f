"""``kvpilot diagnose`` on scenarios drawn at random, held to vLLM's own scheduler: a fresh sample every run.

Each run draws a master seed (printed as ``random accuracy seed: N``; env ``KVPILOT_ACCURACY_SEED=N`` replays
it), draws :data:`SAMPLE` scenarios from it (``random_scenarios.draw``; env ``KVPILOT_ACCURACY_SAMPLE`` draws more),
runs them through vLLM's scheduler in one driver run and diagnoses every scenario at each of its window ends with the
server's flags and without. The goals: at least 97 % of the verdicts right with flags, 90 % without, and no verdict
naming a limit vLLM's scheduler never refused the head of its queue on in that window.
"""

from __future__ import annotations

import os
import secrets
import time

import pytest

from tests.conftest import require_vllm_python
from tests.reference.random_scenarios import Outcome, accuracy, draw, judge, report, seeds

pytestmark = pytest.mark.vllm_ref

SAMPLE = max(30, int(os.environ.get("KVPILOT_ACCURACY_SAMPLE") or 30))
GOALS = {"flags": 0.97, "bare": 0.90}


@pytest.fixture(scope="module")
def outcomes(request: pytest.FixtureRequest) -> list[Outcome]:
    python = require_vllm_python()
    env = os.environ.get("KVPILOT_ACCURACY_SEED")
    master = int(env) if env else secrets.randbelow(2**31)
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    line = f"random accuracy seed: {master} (replay: KVPILOT_ACCURACY_SEED={master})"
    if reporter is not None:
        reporter.write_line(line)
    t0 = time.perf_counter()
    result = judge(python, [draw(s) for s in seeds(master, SAMPLE)])
    elapsed = time.perf_counter() - t0
    if reporter is not None:
        reporter.write_line(f"{line}: {SAMPLE} scenarios judged in {elapsed:.0f} s")
    return result


def _detail(outcomes: list[Outcome], mode: str | None = None) -> str:
    sel = [o for o in outcomes if mode is None or o.mode == mode]
    return "\n" + report(sel)


@pytest.mark.parametrize("mode", ["flags", "bare"])
def test_random_scenarios_get_the_verdict_vllm_names(outcomes, mode):
    right, total = accuracy(outcomes, mode)
    assert total == SAMPLE * 3
    assert right / total >= GOALS[mode], f"{right}/{total} right {mode}:" + _detail(outcomes, mode)


def test_no_verdict_names_a_limit_the_scheduler_never_refused_on(outcomes):
    bad = [o for o in outcomes if o.names_unrefused_limit]
    assert not bad, "\n".join(f"{o.id}: {o.verdict}, refusals {dict(o.shares)}" for o in bad)


def test_the_sample_spans_several_truths(outcomes):
    # a sample that only ever drew healthy servers would pass the goals without testing a rule
    truths = {o.expected[0] for o in outcomes}
    assert len(truths) >= 3, truths
