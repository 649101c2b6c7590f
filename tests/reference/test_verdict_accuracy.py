"""``kvpilot diagnose`` held to vLLM's own ground truth on the committed scenario recordings.

Each case is one recording of ``tests/fixtures/recordings/vllm/verdicts/`` (vLLM 0.29.0's stat logger while its
scheduler ran the scenario), one window (``--end``, ``--window``) and one way of running diagnose: with the
server's flags or with none. The verdict must be one that names the window's ground truth (the limit vLLM's
scheduler refused the head of its queue with over most of the window: ``verdict_scenarios.expected_verdicts``).
Reads committed files only (no vLLM needed).

Cases today's rules get wrong are marked ``xfail(strict=True)`` with the cause (verdict_scenarios.py) they share; a rule
change that makes one pass turns it into a failure until its mark is removed.
"""

from __future__ import annotations

import pytest

from tests.reference.verdict_accuracy import cases, diagnose_case, evidence_limit, shared_prefix_tokens
from tests.reference.verdict_scenarios import OUT, SCENARIOS, expected_verdicts, load_truths


def _ids(scenario: str, mode: str, *windows: str) -> list[str]:
    """Case ids of ``scenario`` in ``mode`` at ``windows`` ("END/WINDOW" in seconds)."""
    return [f"{scenario}@{w.split('/')[0]}s/{w.split('/')[1]}s-{mode}" for w in windows]


_ALL = ("120/300", "210/300", "300/300")
_CAUSE_3_EVICTED = (
    "cause 3: 20 tenants' 256-token system prompts, 27 % of the requests finding theirs (70 tokens a "
    "request), read the same as one 70-token prompt every request finds: vLLM 0.29's counters and per-request "
    "histograms (a 256-token shift inside 8,000-12,000-token buckets) cannot tell them apart, so no warning; the "
    "finding at severity ok says so and that --shared-prefix-tokens tells them apart (the flags mode passes it)"
)

#: case id -> why today's rules miss it (the verdict scenarios' causes)
XFAIL: dict[str, str] = {
    **dict.fromkeys(
        _ids("system-prompts-evicted", "bare", *_ALL),
        _CAUSE_3_EVICTED,
    ),
}
#: case id -> why today's evidence reasons with a max_num_seqs below the running count it measured
XFAIL_EVIDENCE: dict[str, str] = {}

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
    # cause 6: "pinned ... max 1,013 of 256 (default)" contradicts itself; a running maximum above the
    # limit means the limit is not what the server runs with (vLLM never runs more than max_num_seqs)
    r = diagnose_case(case)
    limit = evidence_limit(r["evidence"], "max_num_seqs")
    running = r["signals"].get("running_max")
    assert limit is not None, f"{case.id}: no max_num_seqs in the evidence"
    assert running is not None, f"{case.id}: no max_num_seqs in the evidence"
    assert limit[0] >= running, f"{case.id}: running max {running:g} above max_num_seqs {limit[0]} ({limit[1]})"


_CAUSE_3_PAIR = [c for c in CASES if c.scenario in ("system-prompt-hot", "system-prompts-evicted")]
assert len({c.scenario for c in _CAUSE_3_PAIR}) == 2, "both of cause 3's recordings are committed"


@pytest.mark.parametrize("case", [c for c in _CAUSE_3_PAIR if c.mode == "bare"], ids=lambda c: c.id)
def test_where_the_metrics_cannot_tell_a_hot_prefix_from_evicted_ones_the_report_says_so(case):
    # cause 3: "say when the metrics cannot tell the two apart". vLLM's scheduler found the one hot
    # system prompt for nearly every request and the 20 tenants' prompts for about a quarter (the truth files'
    # shared_prefix_hit_share), yet both servers reuse a few hundred tokens a request amid unique documents: without
    # the shared prefix's length the prefix finding must neither warn on the hot one nor call either healthy reuse
    # without saying it cannot tell, and what would
    r = diagnose_case(case)
    share = r["truth"]["prefix"]["shared_prefix_hit_share"]
    assert (share > 0.9) if case.scenario == "system-prompt-hot" else (share < 0.5), f"{case.id}: truth {share}"
    prefix = [f for f in r["findings"] if f["verdict"] == "prefix_cache_ineffective"]
    assert len(prefix) == 1, f"{case.id}: {[f['verdict'] for f in r['findings']]}"
    assert prefix[0]["severity"] == "ok", f"{case.id}: {prefix[0]['severity']}"
    text = " ".join(prefix[0]["evidence"])
    assert "cannot tell them apart" in text, f"{case.id}: {text}"
    assert "--shared-prefix-tokens N" in text, f"{case.id}: {text}"


@pytest.mark.parametrize("case", [c for c in _CAUSE_3_PAIR if c.mode == "flags"], ids=lambda c: c.id)
def test_given_the_shared_prefix_length_diagnose_tells_a_hot_prefix_from_evicted_ones(case):
    # cause 3's missing input: with --shared-prefix-tokens 256 (the scenarios' prefix_len), the tokens
    # reused per request over 256 is the share of requests finding the prompt: nearly all for the hot one (a
    # healthy verdict, its low token hit rate explained at severity ok), under half for the 20 tenants' (the warning)
    r = diagnose_case(case)
    hot = case.scenario == "system-prompt-hot"
    assert r["verdict"] == ("healthy" if hot else "prefix_cache_ineffective"), f"{case.id}: {r['verdict']}"
    if hot:
        [finding] = [f for f in r["findings"] if f["verdict"] == "prefix_cache_ineffective"]
        assert finding["severity"] == "ok", f"{case.id}: {finding}"
        text = " ".join(finding["evidence"])
        assert "256-token shared prefix" in text, f"{case.id}: {text}"
        assert "at least half" in text, f"{case.id}: {text}"
    else:
        text = " ".join(r["evidence"])
        assert "256-token shared prefix" in text, f"{case.id}: {text}"
        assert "fewer than half" in text, f"{case.id}: {text}"


def test_the_flags_mode_gives_the_shared_prefix_length_of_traffic_that_has_one():
    # the scenarios' streams: one or 20 256-token system prompts (cause 3), 100 3,000-token prefixes (thrash),
    # no shared prefix (near-limits-healthy)
    assert shared_prefix_tokens("system-prompt-hot") == shared_prefix_tokens("system-prompts-evicted") == 256
    assert shared_prefix_tokens("thrash-short-waits") == shared_prefix_tokens("thrash-short-waits-control") == 3000
    assert shared_prefix_tokens("near-limits-healthy") is None


def test_every_committed_scenario_is_diagnosed_and_every_xfail_names_a_case():
    assert {c.scenario for c in CASES} == set(SCENARIOS)
    ids = {c.id for c in CASES}
    assert set(XFAIL) <= ids
    assert set(XFAIL_EVIDENCE) <= ids
    assert all(reason.startswith("cause ") for reason in [*XFAIL.values(), *XFAIL_EVIDENCE.values()])


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
        assert scs, f"cause {cause}: a scenario and its control"
        assert controls, f"cause {cause}: a scenario and its control"
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
        assert min(stamps) == doc["start_unix"], name
        assert max(stamps) == doc["end_unix"], name
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
    queued: float | None = None,
) -> dict:
    binding: dict = {"limit": limit, "shares": shares or {}}
    if queued is not None:
        binding["queued_share"] = queued
    return {
        "binding": binding,
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


def test_a_queued_share_near_the_line_is_named_by_both_readings_and_no_cliff():
    # the truth's line: a request left waiting over half the window; within 0.25 of it both readings are right,
    # each side's own first. Sweep the queued share: the set of right verdicts changes only at the grey zone's
    # edges, and the verdict of each side stays right across the line.
    kv = {"kv_cache": 0.9, "token_budget": 0.1}
    assert expected_verdicts(_window("none", shares=kv, queued=0.24)) == ("healthy",)
    assert expected_verdicts(_window("none", shares=kv, queued=0.25)) == ("healthy", "kv_cache_exhaustion")
    assert expected_verdicts(_window("none", shares=kv, queued=0.49, hit=0.1)) == (
        "prefix_cache_ineffective",
        "kv_cache_exhaustion",
    )
    assert expected_verdicts(_window("kv_cache", shares=kv, queued=0.5)) == ("kv_cache_exhaustion", "healthy")
    assert expected_verdicts(_window("kv_cache", shares=kv, queued=0.74)) == ("kv_cache_exhaustion", "healthy")
    assert expected_verdicts(_window("kv_cache", shares=kv, queued=0.75)) == ("kv_cache_exhaustion",)
    for q in [i / 100 for i in range(25, 75)]:
        limit = "kv_cache" if q >= 0.5 else "none"
        got = expected_verdicts(_window(limit, shares=kv, queued=q))
        assert {"healthy", "kv_cache_exhaustion"} <= set(got), q
    # nothing refused at all: no limit to name, however the line falls
    assert expected_verdicts(_window("none", queued=0.3)) == ("healthy",)


def test_a_spent_budget_between_the_step_time_thresholds_is_named_by_both_readings():
    # the compute term's share of the window's step time: from 0.7 compute-bound, up to 0.3 a cap (the step-time
    # test's E thresholds, docs/diagnosis.md); between them both, the nearer first (the midpoint 0.5)
    def budget(share: float) -> tuple[str, ...]:
        return expected_verdicts({**_window("token_budget"), "compute_share": share})

    assert budget(0.3) == ("token_budget_cap",)
    assert budget(0.31) == ("token_budget_cap", "compute_bound")
    assert budget(0.49) == ("token_budget_cap", "compute_bound")
    assert budget(0.5) == ("compute_bound", "token_budget_cap")
    assert budget(0.69) == ("compute_bound", "token_budget_cap")
    assert budget(0.7) == ("compute_bound",)
    # no cliff: across the sweep a verdict right on one side of a threshold stays right just past it
    for lo, hi in zip(range(0, 100), range(1, 101), strict=True):
        assert set(budget(lo / 100)) & set(budget(hi / 100)), (lo, hi)
    # a second reason keeps its place after the spent budget's readings
    both = {**_window("token_budget", shares={"token_budget": 0.55, "lora": 0.45}), "compute_share": 0.6}
    assert expected_verdicts(both) == ("compute_bound", "token_budget_cap", "lora_slot_cap")
