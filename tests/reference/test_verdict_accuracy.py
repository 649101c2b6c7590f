"""``kvpilot diagnose`` held to vLLM's own ground truth on the committed scenario recordings.

Each case is one recording of ``tests/fixtures/recordings/vllm/verdicts/`` (vLLM 0.29.0's stat logger while its
scheduler ran the scenario), one window (``--end``, ``--window``) and one way of running diagnose: with the
server's flags or with none. The verdict must be one that names the window's ground truth (the limit vLLM's
scheduler refused the head of its queue with over most of the window: ``verdict_scenarios.expected_verdicts``).
Reads committed files only (no vLLM needed).

Cases today's rules get wrong are marked ``xfail(strict=True)`` with the cause of issue 20 they share; a rule
change that makes one pass turns it into a failure until its mark is removed.
"""

from __future__ import annotations

import pytest

from tests.reference.verdict_accuracy import cases, diagnose_case, evidence_limit
from tests.reference.verdict_scenarios import OUT, SCENARIOS, expected_verdicts, load_truths


def _ids(scenario: str, mode: str, *windows: str) -> list[str]:
    """Case ids of ``scenario`` in ``mode`` at ``windows`` ("END/WINDOW" in seconds)."""
    return [f"{scenario}@{w.split('/')[0]}s/{w.split('/')[1]}s-{mode}" for w in windows]


_ALL = ("120/300", "210/300", "300/300")
_CAUSE_1 = (
    "issue 20 cause 1: the running gauge, sampled as requests finish and are replaced, averages 41.4-45.1 (max 48) "
    "of --max-num-seqs 48, not 'pinned' (N - 0.5), so the queue goes to the nearest limit, the KV cache at 92 %, "
    "which vLLM never asks while the running cap is reached"
)
_CAUSE_1_BARE = (
    "issue 20 cause 1: without flags max_num_seqs 48 is not inferred (running averages 41.4-45.1, max 48, as "
    "requests finish and are replaced) and the ~1,400-token prefills make the mean step (~380 tokens) read as a budget"
)
_CAUSE_2 = (
    "issue 20 cause 2: without flags a request waiting a few % of the time reads as a standing queue, and the "
    "mean step as a budget of that size"
)
_CAUSE_3_HOT = (
    "issue 20 cause 3: a token-level hit rate of 2.5 % with the cache turned over reads as thrash, while the one "
    "system prompt is found by every request that re-uses it"
)
_CAUSE_3_THRASH = (
    "issue 20 cause 3: 30 % of tokens hit (above the 25 % turnover threshold), so no finding, while the shared "
    "prefixes are found by only ~35 % of the requests re-using them"
)
_CAUSE_4 = (
    "issue 20 cause 4: requests deferred because their adapter cannot join the batch (--max-loras 2, "
    "vllm:num_requests_waiting_by_reason deferred, vllm:lora_requests_info) read as the nearest engine limit"
)
_CAUSE_5 = (
    "issue 20 cause 5: requests waiting on remote KV transfers (deferred) with slots, budget and KV free read as "
    "the nearest limit, the KV cache, where no limit binds (unexplained_queue)"
)
_CAUSE_5_CONTROL = (
    "issue 20 cause 5: the KV connector's loads of remotely prefilled prompts count as external prefix-cache "
    "hits (every queried token), read as a GPU cache that evicted them"
)
_CAUSE_1_SPEC = (
    "issue 20 cause 1: without flags max_num_seqs 16 is not inferred (running 14.7-15.4, max 16): speculative decoding "
    "puts 1 + 4 draft tokens per running request in each decode step, which reads as prefill, so the nearest limit "
    "named is KV at 10 %"
)
_CAUSE_1_SHIFT = (
    "issue 20 cause 1: without flags max_num_seqs 32 is not inferred (running 31.2, max 32, as the long answers "
    "finish and are replaced), so the nearest limit named is KV at 13 %"
)
_CAUSE_6 = (
    "issue 20 cause 6: without flags on an H100 the evidence reasons with vLLM's small-GPU default 256 while "
    "measuring more running than that (max 1,021 of 256; 1,484-1,497 in the control), not with the large GPU's 1,024"
)
_CAUSE_6_CONTROL = (
    "issue 20 cause 6: without flags, 1,360-1,383 running of --max-num-seqs 2048 read as 'pinned at max_num_seqs: "
    "max 1,484 of 256 (default)' while vLLM refused the queue with the KV cache and the token budget"
)

#: case id -> why today's rules miss it (issue 20's causes)
XFAIL: dict[str, str] = {
    **dict.fromkeys(_ids("cap-with-kv-full", "flags", *_ALL), _CAUSE_1),
    **dict.fromkeys(_ids("cap-with-kv-full", "bare", *_ALL), _CAUSE_1_BARE),
    **dict.fromkeys(_ids("near-limits-healthy", "bare", "210/300", "300/300"), _CAUSE_2),
    **dict.fromkeys(_ids("thrash-short-waits", "bare", *_ALL), _CAUSE_2),
    **dict.fromkeys(_ids("thrash-short-waits", "flags", *_ALL), _CAUSE_3_THRASH),
    **dict.fromkeys(_ids("system-prompt-hot", "flags", *_ALL) + _ids("system-prompt-hot", "bare", *_ALL), _CAUSE_3_HOT),
    **dict.fromkeys(_ids("lora-deferred", "flags", *_ALL) + _ids("lora-deferred", "bare", *_ALL), _CAUSE_4),
    **dict.fromkeys(_ids("remote-kv-wait", "flags", *_ALL) + _ids("remote-kv-wait", "bare", *_ALL), _CAUSE_5),
    **dict.fromkeys(
        _ids("remote-kv-wait-control", "flags", *_ALL) + _ids("remote-kv-wait-control", "bare", *_ALL),
        _CAUSE_5_CONTROL,
    ),
    **dict.fromkeys(_ids("speculative-cap", "bare", *_ALL), _CAUSE_1_SPEC),
    **dict.fromkeys(_ids("shift-cap-to-budget", "bare", "180/120"), _CAUSE_1_SHIFT),
    **dict.fromkeys(_ids("default-cap-1024-control", "bare", "30/300", "45/300"), _CAUSE_6_CONTROL),
}
#: case id -> why today's evidence reasons with a max_num_seqs below the running count it measured
XFAIL_EVIDENCE: dict[str, str] = dict.fromkeys(
    _ids("default-cap-1024", "bare", "30/300", "45/300", "60/300")
    + _ids("default-cap-1024-control", "bare", "30/300", "45/300", "60/300"),
    _CAUSE_6,
)

CASES = cases()


def _params(xfail: dict[str, str]) -> list[object]:
    return [
        pytest.param(c, id=c.id, marks=[pytest.mark.xfail(strict=True, reason=xfail[c.id])] if c.id in xfail else [])
        for c in CASES
    ]


@pytest.mark.parametrize("case", _params(XFAIL))
def test_diagnose_names_the_limit_vllm_refused_the_queue_with(case):
    r = diagnose_case(case)
    binding = r["truth"]["binding"]
    assert r["right"], (
        f"{case.id}: vLLM's scheduler refused the queue's head with {binding['limit']} "
        f"({binding['shares']}, queue {binding['queued_share']:.0%} of the window), expected "
        f"{' or '.join(r['expected'])}, kvpilot said {r['verdict']}: {' | '.join(r['evidence'][:3])}"
    )


@pytest.mark.parametrize("case", _params(XFAIL_EVIDENCE))
def test_the_max_num_seqs_diagnose_reasons_with_is_never_below_the_running_it_measured(case):
    # issue 20 cause 6: "pinned ... max 1,013 of 256 (default)" contradicts itself; a running maximum above the
    # limit means the limit is not what the server runs with (vLLM never runs more than max_num_seqs)
    r = diagnose_case(case)
    limit = evidence_limit(r["evidence"], "max_num_seqs")
    running = r["signals"].get("running_max")
    assert limit is not None and running is not None, f"{case.id}: no max_num_seqs in the evidence"
    assert limit[0] >= running, f"{case.id}: running max {running:g} above max_num_seqs {limit[0]} ({limit[1]})"


def test_every_committed_scenario_is_diagnosed_and_every_xfail_names_a_case():
    assert {c.scenario for c in CASES} == set(SCENARIOS)
    ids = {c.id for c in CASES}
    assert set(XFAIL) <= ids and set(XFAIL_EVIDENCE) <= ids
    assert all(reason.startswith("issue 20 cause ") for reason in [*XFAIL.values(), *XFAIL_EVIDENCE.values()])


def _refused_share(ev: dict, reason: str) -> float:
    """Share of the window during which ``reason`` kept the head of the queue waiting."""
    return ev["binding"]["queued_share"] * ev["binding"]["shares"].get(reason, 0.0)


def test_each_issue_cause_has_a_scenario_and_a_control_where_its_limit_binds_less():
    # a control repeats its scenario's server or traffic with the limit raised: in every evaluated window vLLM's
    # scheduler refuses the queue with the scenario's main reason for less of the time (cause 3, the prefix
    # cache: the evicted prompts are found by fewer requests than the hot one)
    truths = load_truths(OUT)
    for cause in ("1", "2", "3", "4", "5", "6"):
        scs = [sc for sc in SCENARIOS.values() if sc.cause == cause]
        controls = [sc for sc in scs if sc.control_of]
        assert scs and controls, f"cause {cause}: a scenario and its control"
        for control in controls:
            pairs = zip(truths[control.control_of]["evaluations"], truths[control.name]["evaluations"], strict=True)
            for orig, ctl in pairs:
                if cause == "3":
                    hot, evicted = orig["prefix"]["shared_prefix_hit_share"], ctl["prefix"]["shared_prefix_hit_share"]
                    assert evicted < hot, f"{control.name} at {ctl['end']} s: {evicted} vs {hot}"
                    continue
                reason = max(orig["binding"]["shares"], key=orig["binding"]["shares"].get)
                assert _refused_share(ctl, reason) < _refused_share(orig, reason), (
                    f"{control.name} at {ctl['end']} s: {reason} {_refused_share(ctl, reason):.3f} vs "
                    f"{_refused_share(orig, reason):.3f} in {control.control_of}"
                )


def test_ground_truth_windows_lie_inside_their_recordings():
    for name, doc in load_truths(OUT).items():
        lines = (OUT / doc["recording"]).read_text(encoding="utf-8").splitlines()
        stamps = [float(ln.rsplit(" ", 1)[1]) for ln in lines if ln and not ln.startswith("#")]
        assert min(stamps) == doc["start_unix"] and max(stamps) == doc["end_unix"], name
        for ev in doc["evaluations"]:
            assert doc["start_unix"] < ev["end_unix"] <= doc["end_unix"], name
            assert ev["t1"] - ev["t0"] <= ev["window"], name
            assert (
                sum(ev["binding"]["shares"].values()) == pytest.approx(1.0, abs=1e-3)
                or not ev["binding"]["queued_share"]
            ), name


def _window(
    limit: str,
    *,
    saturated: bool = False,
    hit: float | None = None,
    served: bool = True,
    shares: dict[str, float] | None = None,
) -> dict:
    return {
        "binding": {"limit": limit, "shares": shares or {}},
        "gpu_saturated": saturated,
        "served": served,
        "prefix": {"shared_prefix_hit_share": hit},
    }


def test_expected_verdicts_map_each_ground_truth_onto_the_verdict_that_names_it():
    assert expected_verdicts(_window("max_num_seqs")) == ("max_num_seqs_cap",)
    assert expected_verdicts(_window("kv_cache")) == ("kv_cache_exhaustion",)
    assert expected_verdicts(_window("token_budget")) == ("token_budget_cap",)
    assert expected_verdicts(_window("token_budget", saturated=True)) == ("compute_bound",)
    assert expected_verdicts(_window("lora")) == ("lora_slot_cap",)
    assert expected_verdicts(_window("other")) == ("unexplained_queue",)
    # no queue: the prefix cache decides, a shared prefix found by fewer than half its re-users is evicted
    assert expected_verdicts(_window("none", hit=0.49)) == ("prefix_cache_ineffective",)
    assert expected_verdicts(_window("none", hit=0.5)) == ("healthy",)
    assert expected_verdicts(_window("none")) == ("healthy",)
    assert expected_verdicts(_window("none", served=False)) == ("idle",)
    # a queue limit wins over the prefix cache (its finding is secondary then)
    assert expected_verdicts(_window("kv_cache", hit=0.1)) == ("kv_cache_exhaustion",)
    # a second limit refusing the head for 40 % of the queued time binds too; 39 % does not
    split = {"kv_cache": 0.57, "token_budget": 0.43}
    assert expected_verdicts(_window("kv_cache", shares=split, saturated=True)) == (
        "kv_cache_exhaustion",
        "compute_bound",
    )
    assert expected_verdicts(_window("max_num_seqs", shares={"max_num_seqs": 0.61, "lora": 0.39})) == (
        "max_num_seqs_cap",
    )
