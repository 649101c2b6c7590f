"""How the report words what it measured: a small share is never printed as 0.0 %, a figure
above its limit comes after the reason it can be, each worked by hand.
"""

from __future__ import annotations

from kvpilot.diagnose.limits import resolve_limits
from kvpilot.diagnose.recommend import Inputs, recommend
from kvpilot.diagnose.rules import diagnose_target
from tests.unit.diagnose.test_admission import QUEUE, steps
from tests.unit.diagnose.test_rules import make


def _seqs_cap(kv_usage_avg: float, **extra):
    # 4 of 4 slots pinned, a growing queue, KV nearly empty: max_num_seqs_cap
    values = {**QUEUE, "kv_usage_avg": kv_usage_avg, "kv_usage_max": kv_usage_avg, **extra}
    sig = make(running_avg=4, running_max=4, **values)
    return sig, diagnose_target(sig, resolve_limits(cli={"max_num_seqs": 4, "kv_cache_tokens": 2_598_016}))


def test_a_request_s_small_share_of_kv_keeps_two_figures():
    # 4 running hold 0.108 % of KV: 0.00108 / 4 = 0.027 % each, printed with two figures, not as "0.0 %"
    _, d = _seqs_cap(0.00108)
    assert d.verdict == "max_num_seqs_cap"
    text = " ".join(d.evidence)
    assert "Each running request holds about 0.027 % of KV" in text
    assert "0.0 % of KV" not in text


def test_the_recommendation_s_share_says_whose_it_is():
    # observed: 0.027 % each; at full length: 1,000 tokens a request (800 prompt + 200 generated per finished
    # request) / 2,598,016 = 0.0385 %, the larger: the bound uses it, and says it is the full-length share
    sig, _ = _seqs_cap(0.00108, prompt_tokens_per_s=800.0, generation_tokens_per_s=200.0, requests_finished_per_s=1.0)
    lim = resolve_limits(cli={"max_num_seqs": 4, "kv_cache_tokens": 2_598_016})
    (rec,) = [r for r in recommend("max_num_seqs_cap", Inputs(sig, lim)) if r.flag == "--max-num-seqs"]
    assert f"({rec.suggested} x 0.038 %, a request's KV at its full prompt + output)" in rec.expected_effect
    # without the lengths only the observed share is known, and it says so
    sig, _ = _seqs_cap(0.00108)
    (rec,) = [r for r in recommend("max_num_seqs_cap", Inputs(sig, lim)) if r.flag == "--max-num-seqs"]
    assert f"({rec.suggested} x 0.027 %, as the running requests held it)" in rec.expected_effect


def test_a_step_mean_above_the_budget_is_explained_before_its_figure():
    lim = resolve_limits(cli={"max_num_seqs": 256, "max_num_batched_tokens": 4096})
    # 4,100 / 4,096 = 100.1 %: the reason first (each completed prefill's first token), then the figure
    sig = make(running_avg=10, running_max=12, **QUEUE, **steps(4100))
    text = " ".join(diagnose_target(sig, lim).evidence)
    reason = text.index("a step that completes a prefill also samples that request's first token")
    assert reason < text.index("100.1 % of the budget")
    # 4,000 / 4,096 = 97.7 %: within the budget, no reason needed
    sig = make(running_avg=10, running_max=12, **QUEUE, **steps(4000))
    text = " ".join(diagnose_target(sig, lim).evidence)
    assert "97.7 % of the budget" in text
    assert "first token" not in text
