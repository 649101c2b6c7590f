"""The rules: which admission limit binds, one function per verdict, on facts derived once (docs/diagnosis.md).

:func:`kvpilot.diagnose.facts.derive_facts` turns signals and limits into :class:`Facts` once;
each rule below reads them and returns a :class:`Finding` or ``None``. vLLM's admission logic is
the arbiter (facts module docstring): a request waits only when ``max_num_seqs``, the token budget
or the KV cache refused it (or it was deferred), so a standing queue always names the limit that
binds, or the limits it cannot tell apart; compute speed alone never makes a request wait.

Order (first match is the primary verdict; a KV shortage wins over a coinciding
``running == max_num_seqs``):

1. ``no_data`` - no running/waiting gauge for the target in the window;
2. ``target_down`` - the series stopped before the window's end;
3. ``kv_cache_exhaustion`` - preemptions, or a queue with KV at its admission ceiling, or
   requests waiting for capacity while sequence slots are free;
4. ``max_num_seqs_cap`` - running pinned at ``max_num_seqs`` (known, or inferred from a flat
   running gauge) with a queue and KV room;
5. ``token_budget_cap`` - steps full at a budget below 8192 with a queue, free slots, KV room (or at
   any budget when the measured step time stays flat as tokens per step grow);
6. ``compute_bound`` - steps full at a budget of 8192 or more with a queue, free slots, KV room, or at
   any budget when the measured step time grows in proportion to tokens per step
   (kvpilot.diagnose.steptime): raising the budget only lengthens the steps;
7. a standing queue no measured limit explains - the nearest limit is named, with the others it
   cannot be told apart from and what would tell them apart (lower confidence);
8. ``prefix_cache_ineffective`` - low hit rate with a reason to expect hits;
9. ``no_data`` - one of the two gauges missing;
10. ``idle`` / ``healthy``.

Secondary findings: ``prefix_cache_ineffective`` beside another verdict (a low-severity one for
near-zero hits on a cache that turned over many times), and ``metrics_schema_mismatch`` when only
legacy names exist (escaped ones are one report note, :func:`escaped_names_note`).

Pure functions, no I/O.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from typing import Any

from kvpilot.diagnose.facts import LARGE_BUDGET, PREFILL_SPLIT_STEPS, Facts, derive_facts
from kvpilot.diagnose.limits import Limits
from kvpilot.diagnose.model import Diagnosis, Finding
from kvpilot.diagnose.recommend import Inputs, recommend
from kvpilot.diagnose.severity import FIXED, kv_severity, queue_severity
from kvpilot.diagnose.signals import Signals, legacy_or_escaped
from kvpilot.diagnose.steptime import STEP_TIME_FLAT, STEP_TIME_GROWS
from kvpilot.text.numbers import count, fig, number, percent, significant, times
from kvpilot.vllm.defaults import DEFAULT_BLOCK_SIZE

#: a prefix hit rate below this means most queried prompt tokens were recomputed; the prefix rule
#: fires only with a reason to expect hits (see _prefix_finding).
LOW_HIT_RATE = 0.5

#: With only circumstantial evidence of LRU thrash (the cache turned over in the window, no external
#: cache or block-granularity reason), the hit rate must be below this. A busy server turns its cache
#: over on any long window, and a hot shared prefix (system prompt) then still hits at the share of
#: prompt tokens it covers, often 30-60 %; thrash instead drives hits towards 0. Half of
#: :data:`LOW_HIT_RATE` keeps the thrash cases (0-15 %) and leaves shared-prefix traffic alone.
LRU_THRASH_HIT_RATE = LOW_HIT_RATE / 2

#: a hit rate below this is "near 0" for the low-severity prefix finding
NEAR_ZERO_HIT_RATE = 0.01

#: the tokens written to the cache in the window (queried - hits) must exceed the KV capacity this
#: many times for near-zero hits to be reported: a cyclic re-read of 2.3x the capacity hits 0 tokens
#: under LRU (the seed-lru scenario), so 2x keeps that case and leaves windows that wrote less than two
#: caches' worth (reuse could still come) silent.
TURNOVER_MANY = 2.0

_APPROACH = (
    "vLLM admits a waiting request only when fewer than max_num_seqs run, the step's token budget has "
    "room, and its whole prompt's KV blocks fit"
)


def _queue_rule_confidence(f: Facts, base: float) -> float:
    """``base`` less 0.2 without a KV gauge, 0.2 for an inferred limit, and 0.2 when the budget is vLLM's
    default assumed (its size decides between token_budget_cap and compute_bound).
    """
    return round(
        base
        - (0.0 if f.kv_known else 0.2)
        - (0.2 if f.inferred else 0.0)
        - (0.2 if f.budget_how == "default" else 0.0),
        2,
    )


def rule_no_data(f: Facts) -> Finding | None:
    """``no_data``: neither ``vllm:num_requests_running`` nor ``_waiting`` in the window."""
    if f.run_avg is not None or f.wait_avg is not None:
        return None
    return Finding(
        "no_data",
        "unknown",
        1.0,
        [
            f"No vllm:num_requests_running or vllm:num_requests_waiting sample (any spelling) in the last "
            f"{fig(f.window)} s; nothing to diagnose."
        ],
    )


def rule_target_down(f: Facts) -> Finding | None:
    """``target_down``: the last sample is older than 3 average sample intervals (or missing)."""
    samples, age = f.s("samples_in_window"), f.s("last_sample_age_s")
    if not samples:
        return None
    interval = f.window / samples
    if age is not None and age <= 3 * interval:
        return None
    last = (
        "no sample at the window's end (series marked stale or older than 5 m)"
        if age is None
        else f"the last sample is {fig(age, 1)} s old"
    )
    return Finding(
        "target_down",
        FIXED["target_down"],
        0.9,
        [
            f"The target's series stopped: {last}, while it reported every {fig(interval, 1)} s on average "
            f"({fig(samples)} samples in {fig(f.window)} s); a live target is at most 3 intervals behind."
        ],
    )


def rule_kv_cache_exhaustion(f: Facts) -> Finding | None:
    """``kv_cache_exhaustion``: a preemption, or a queue with KV at its admission ceiling."""
    if not (f.preempt >= 1 or (f.queued and (f.at_ceiling or f.capacity_blocked))):
        return None
    ev = []
    if f.preempt >= 1:
        total = f.s("preemptions_last")
        ev.append(
            f"{number(f.preempt)} preemptions in the window ({fig(f.s('preemptions_per_s'))}/s"
            + (f"; vllm:num_preemptions_total reached {fig(total)}" if total is not None else "")
            + "): running requests needed KV blocks and none were free, so vLLM freed and will "
            "recompute them (Scheduler.schedule, vllm/v1/core/sched/scheduler.py)."
        )
    if f.kv_max is not None:
        ev.append(f"KV cache usage peaked at {percent(f.kv_max)} (average {percent(f.kv_avg)}); {f.ceiling_how}.")
    if f.capacity_blocked:
        ev.append(
            f"{fig(f.s('waiting_capacity_avg'), 1)} requests on average waited for KV capacity "
            f'(vllm:num_requests_waiting_by_reason{{reason="capacity"}}) while only {fig(f.run_avg, 1)} of '
            f"{fig(f.n_seqs)} sequence slots were used: the KV admission ceiling binds below 1.0."
        )
    if f.queued:
        ev.append(f"{f.evidence_queue}; {_APPROACH}: here the KV cache refused them.")
    if f.pinned:
        ev.append(
            f"Running requests also sat at max_num_seqs ({fig(f.run_avg, 1)} of {fig(f.n_seqs)}), but the "
            "KV shortage binds first: raising max_num_seqs would add preemptions."
        )
    severity = kv_severity(f.preempt >= 1, f.queued, f.growing)
    conf = 0.95 if f.preempt >= 1 and f.at_ceiling else 0.85
    return Finding("kv_cache_exhaustion", severity, conf, ev, recommend("kv_cache_exhaustion", _inputs(f)))


def rule_max_num_seqs_cap(f: Facts) -> Finding | None:
    """``max_num_seqs_cap``: running pinned at max_num_seqs (known or inferred), queued, KV room."""
    if not (f.pinned and f.queued and f.kv_room):
        return None
    inferred = "max_num_seqs" in f.inferred
    ev = [
        f"Running requests pinned at max_num_seqs: average {fig(f.run_avg)}, max {fig(f.run_max)} of "
        f"{fig(f.n_seqs)} ({f.n_seqs_how}).",
        f"{f.evidence_queue}; {_APPROACH}: here every slot was taken.",
        (
            f"KV cache has room: usage peaked at {percent(f.kv_max)} ({f.ceiling_how}), no preemptions."
            if f.kv_known
            else "KV usage unknown (no KV gauge in any spelling); no preemptions, so no sign of a KV shortage."
        ),
    ]
    ev.extend(_kv_headroom_evidence(f.signals, f.limits))
    base = 0.6 if inferred else 0.9 if f.limits.max_num_seqs.source != "default" else 0.7
    return Finding(
        "max_num_seqs_cap",
        queue_severity(f.growing),
        round(base - (0 if f.kv_known else 0.2), 2),
        ev,
        recommend("max_num_seqs_cap", _inputs(f), max_num_seqs=f.n_seqs),
    )


def _steps_evidence(f: Facts) -> str:
    parts = []
    if f.tokens_per_step is not None and f.budget:
        parts.append(
            f"steps averaged {number(f.tokens_per_step)} tokens ({percent(f.fill)} of the budget; "
            "vllm:iteration_tokens_total _sum / _count)"
        )
    if f.share is not None:
        parts.append(
            f"{percent(f.share)} of steps recorded more than {fig(f.share_edge)} tokens (the budget's bucket; "
            "vLLM records a prefill chunk only in the step its prefill completes, so this share understates "
            "full steps under chunked prefill)"
        )
    if f.full_by_elimination:
        parts.append(
            "steps not measured (no vllm:iteration_tokens_total), but with a standing queue, free sequence "
            "slots and KV room the budget is the only admission limit left that can have refused the queue, "
            "so it was used up in every step (inferred by elimination)"
        )
    return "; ".join(parts) if parts else "token-budget use unknown (no vllm:iteration_tokens_total)"


def _full_steps_budget(f: Facts) -> int | None:
    """The budget when steps are full with a queue, free slots and KV room (else None)."""
    return f.budget if f.full and f.queued and f.free_slots and f.kv_room else None


def _budget_is_the_cap(f: Facts, budget: int) -> bool:
    """Full steps are a budget cap (True) or compute-bound (False): the step-time fit decides when it
    measured either side of its thresholds (kvpilot.diagnose.steptime), else the budget's size
    (below :data:`LARGE_BUDGET`: a cap).
    """
    if f.step_fit.grows or f.step_fit.flat:
        return f.step_fit.flat
    return budget < LARGE_BUDGET


def _prefill_evidence(f: Facts) -> str | None:
    """Mean prefill time per request against the step time: many step times = prompts chunked across steps
    by the budget (vLLM: ``prefill_time = first_token_ts - scheduled_ts``, ``vllm/v1/metrics/stats.py``).
    """
    pre, itl, ratio = f.s("prefill_time_mean_s"), f.s("itl_mean_s"), f.s("prefill_step_times")
    if pre is None:
        return None
    line = (
        f"Prefill took {significant(pre, 3)} s per request on average (vllm:request_prefill_time_seconds "
        "_sum / _count, first scheduling to first token)"
    )
    if ratio is None or itl is None:
        return line + "; the step time is unknown (no vllm:inter_token_latency_seconds)."
    line += f" = {number(ratio, 1)} step times of {significant(itl, 3)} s (mean inter-token latency)"
    prompt, d = f.s("prompt_tokens_per_request"), f.decode_per_step
    expected = (
        f"; a {number(prompt)}-token prompt at {count(f.budget)} - {number(d, 1)} decode tokens per step takes "
        f"ceil({number(prompt)} / {number(f.budget - d, 1)}) = {count(math.ceil(prompt / (f.budget - d)))} steps"
        if prompt and d is not None and f.budget and f.budget > d
        else ""
    )
    if ratio >= PREFILL_SPLIT_STEPS:
        return line + f": prompts are prefilled across several steps (chunked by the budget){expected}."
    return line + f": a prompt is prefilled in about one step, the budget does not split it{expected}."


def _step_fit_evidence(f: Facts) -> str:
    """The step-time test in one sentence: its points, fit and reading, or why there is no data."""
    fit = f.step_fit
    source = (
        "mean seconds per step = vllm:inter_token_latency_seconds _sum / _count, tokens per step = "
        "vllm:iteration_tokens_total _sum / _count, per sub-window"
    )
    if fit.elasticity is None:
        return f"Step time against tokens per step: no data ({fit.reason}; {source})."
    lo, hi = min(n for n, _ in fit.points), max(n for n, _ in fit.points)
    reading = (
        f"step time grows in proportion to tokens per step (E >= {fig(STEP_TIME_GROWS)}): throughput is flat, the "
        "GPU is compute-bound"
        if fit.grows
        else f"step time stays flat as steps carry more tokens (E <= {fig(STEP_TIME_FLAT)}): more tokens per step "
        "cost almost nothing, the budget binds"
        if fit.flat
        else f"between {fig(STEP_TIME_FLAT)} and {fig(STEP_TIME_GROWS)}: not decided by this test"
    )
    return (
        f"Step time against tokens per step over {count(len(fit.points))} sub-windows ({number(lo)} to "
        f"{number(hi)} tokens per step): seconds per step = {significant(fit.intercept_s, 3)} s + "
        f"{significant(fit.slope_s_per_token, 3)} s per token, elasticity E = {number(fit.elasticity, 2)}: "
        f"{reading} ({source})."
    )


def rule_token_budget_cap(f: Facts) -> Finding | None:
    """``token_budget_cap``: steps full at a budget below :data:`LARGE_BUDGET`, queued, free slots, KV room."""
    budget = _full_steps_budget(f)
    if budget is None or not _budget_is_the_cap(f, budget):
        return None
    ev = [
        f"max_num_batched_tokens = {count(f.budget)} ({f.budget_how}) fills the steps: {_steps_evidence(f)}.",
        f"{f.evidence_queue}; {_APPROACH}: here the budget was used up in every step.",
        f"Running {fig(f.run_avg, 1)} on average, below max_num_seqs {fig(f.n_seqs)}; KV usage peaked at "
        f"{percent(f.kv_max)}, no preemptions.",
        (
            f"A budget of {count(f.budget)} is below vLLM's large-GPU default of {count(LARGE_BUDGET)} "
            "(vLLM's tuning guide recommends more than 8192 for throughput on small models and large GPUs)."
            if budget < LARGE_BUDGET
            else f"A budget of {count(f.budget)} is at or above vLLM's large-GPU default of {count(LARGE_BUDGET)}, "
            "but the measured step time does not grow with the tokens per step (below), so a larger budget "
            "still adds tokens per second."
        ),
        _step_fit_evidence(f),
    ]
    prefill = _prefill_evidence(f)
    if prefill:
        ev.append(prefill)
    if budget >= 2 * f.knee:
        ev.append(
            f"Caveat: steps of {count(f.budget)} tokens are past twice this GPU's compute knee of {number(f.knee)} "
            f"tokens per step ({f.knee_how}): the GPU is near its compute limit, so a larger budget also "
            "lengthens each step and TTFT improves less than the step count suggests."
        )
    return Finding(
        "token_budget_cap",
        queue_severity(f.growing),
        _queue_rule_confidence(f, 0.8),
        ev,
        recommend("token_budget_cap", _inputs(f), max_num_batched_tokens=f.budget),
    )


def _served_evidence(f: Facts) -> str | None:
    served, offered = f.s("prompt_tokens_per_s"), f.s("offered_prompt_tokens_per_s")
    if served is None:
        return None
    line = f"Served {number(served)} prompt tok/s"
    if offered is not None:
        line += (
            f"; offered about {number(offered)} prompt tok/s (served + {fig(f.trend, 3)} req/s queue growth x "
            f"{number(f.s('prompt_tokens_per_request'))} prompt tokens per request)"
        )
    return line


def rule_compute_bound(f: Facts) -> Finding | None:
    """``compute_bound``: steps full at a budget of :data:`LARGE_BUDGET` or more, queued, free slots, KV room."""
    budget = _full_steps_budget(f)
    if budget is None or _budget_is_the_cap(f, budget):
        return None
    why = (
        f"at {count(f.budget)} tokens, at or above vLLM's large-GPU default of {count(LARGE_BUDGET)}, a step "
        f"already carries {times(budget / f.knee)} the {number(f.knee)} tokens at which compute binds "
        f"({f.knee_how})"
        if budget >= LARGE_BUDGET
        else f"at {count(f.budget)} tokens, below vLLM's large-GPU default of {count(LARGE_BUDGET)}, the measured "
        "step time already grows in proportion to the tokens per step (below)"
    )
    ev = [
        f"Steps are full at max_num_batched_tokens {count(f.budget)} ({f.budget_how}): {_steps_evidence(f)}.",
        f"{f.evidence_queue}; {_APPROACH}: here the budget was used up in every step, but {why}: a larger "
        "budget makes steps longer, not the engine faster.",
        f"Running {fig(f.run_avg, 1)} on average, below max_num_seqs {fig(f.n_seqs)} "
        f"({f.limits.max_num_seqs.source}); KV usage peaked at {percent(f.kv_max)} ({f.ceiling_how}); no "
        "preemptions.",
    ]
    if f.step_rate:
        ev.append(
            f"{fig(f.step_rate, 2)} steps/s with output = {fig(1 / f.step_rate, 3)} s per step at "
            f"{number(f.tokens_per_step)} tokens per step."
        )
    ev.append(_step_fit_evidence(f))
    served = _served_evidence(f)
    if served:
        ev.append(served + ": the engine computes as fast as it can; more budget or slots will not help.")
    return Finding(
        "compute_bound",
        queue_severity(f.growing),
        _queue_rule_confidence(f, 0.8),
        ev,
        recommend("compute_bound", _inputs(f)),
    )


def rule_unexplained_queue(f: Facts) -> Finding | None:
    """A standing queue that no measured limit explains: name the nearest limit and the ones it cannot be told from.

    By vLLM's admission logic one of the limits refused the queue in every step, so the averages
    hide when it bound (a burst), or a limit is not what kvpilot assumed. The verdict is the limit
    nearest to refusing: the largest of running / max_num_seqs, mean step / budget and KV usage /
    ceiling; confidence 0.4.
    """
    if not f.standing:
        return None
    candidates = []
    if f.n_seqs and f.run_avg is not None:
        candidates.append(
            (
                f.run_avg / f.n_seqs,
                "max_num_seqs_cap",
                f"running {fig(f.run_avg, 1)} of max_num_seqs {count(f.n_seqs)} "
                f"({f.n_seqs_how}) = {percent(f.run_avg / f.n_seqs)}",
            )
        )
    if f.fill is not None:
        candidates.append(
            (
                f.fill,
                "token_budget_cap",
                f"steps averaged {number(f.tokens_per_step)} tokens of the "
                f"{count(f.budget)}-token budget ({f.budget_how}) = {percent(f.fill)}",
            )
        )
    if f.kv_max is not None and f.ceiling:
        candidates.append(
            (
                f.kv_max / f.ceiling,
                "kv_cache_exhaustion",
                f"KV usage peaked at {percent(f.kv_max)} of an "
                f"admission ceiling of {percent(f.ceiling)} = {percent(f.kv_max / f.ceiling)}",
            )
        )
    if not candidates:
        return None
    candidates.sort(key=lambda c: c[0], reverse=True)
    nearest = candidates[0]
    deferred = f.s("waiting_deferred_avg")
    ev = [
        f"{f.evidence_queue}; {_APPROACH}, so one of them refused these requests, yet none measured as binding "
        "over the window: " + "; ".join(c[2] for c in candidates) + ".",
        f"Nearest to binding: {nearest[1]}; it cannot be told apart from "
        + (", ".join(c[1] for c in candidates[1:]) or "a burst the window's averages hide")
        + ". What tells them apart: the server's flags (--max-num-seqs, --max-num-batched-tokens; or --pod to "
        "read them from the pod), a shorter --window around the queue, and the KV usage at the queue's peak.",
    ]
    if deferred:
        ev.append(
            f"{fig(deferred, 1)} requests on average were deferred "
            '(vllm:num_requests_waiting_by_reason{reason="deferred"}: LoRA slots or KV transfer), which no '
            "engine limit explains."
        )
    return Finding(
        nearest[1],
        queue_severity(f.growing),
        0.4,
        ev,
        [],
    )


def rule_prefix_cache_ineffective(f: Facts) -> Finding | None:
    """``prefix_cache_ineffective`` as the primary verdict (no queue problem): see :func:`_prefix_finding`."""
    return _prefix_finding(f.signals, f.limits, low_severity=False)


def rule_partial_data(f: Facts) -> Finding | None:
    """``no_data``: one of the running/waiting gauges is missing, so a queue cannot be ruled out."""
    unknown = [name for name, value in (("running", f.run_max), ("waiting", f.wait_max)) if value is None]
    if not unknown:
        return None
    return Finding(
        "no_data",
        "unknown",
        0.9,
        [
            f"{' and '.join(unknown).capitalize()} unknown in the last {fig(f.window)} s (no "
            f"vllm:num_requests_{'running' if unknown[0] == 'running' else 'waiting'} value in any "
            "spelling, or "
            f"its query failed) while running averaged {fig(f.run_avg, 1)} and waiting {fig(f.wait_avg, 1)}: "
            "a queue cannot be ruled out, so the server is not called healthy or idle."
        ],
    )


def rule_idle(f: Facts) -> Finding | None:
    """``idle``: nothing ran or waited."""
    if (f.run_max or 0) != 0 or (f.wait_max or 0) != 0:
        return None
    return Finding(
        "idle", "ok", 0.9, [f"No request ran or waited in the last {fig(f.window)} s (running and waiting both 0)."]
    )


def rule_healthy(f: Facts) -> Finding | None:
    """``healthy``: requests ran (or waited briefly) and no rule above matched."""
    ev = [
        f"Running {fig(f.run_avg, 1)} on average (max {fig(f.run_max)}) of max_num_seqs {fig(f.n_seqs)}; "
        f"{fig(f.wait_avg, 1)} waiting on average; KV usage peaked at {percent(f.kv_max)}; "
        f"{number(f.preempt)} preemptions."
    ]
    ev.extend(_latency_evidence(f.signals))
    return Finding("healthy", "ok", 0.8 if f.kv_known else 0.6, ev)


#: the rules in order; the first that returns a finding is the primary verdict (module docstring)
RULES: tuple[Callable[[Facts], Finding | None], ...] = (
    rule_no_data,
    rule_target_down,
    rule_kv_cache_exhaustion,
    rule_max_num_seqs_cap,
    rule_token_budget_cap,
    rule_compute_bound,
    rule_unexplained_queue,
    rule_prefix_cache_ineffective,
    rule_partial_data,
    rule_idle,
    rule_healthy,
)

#: rules after which no secondary prefix finding or latency evidence is added
_TERMINAL = {rule_no_data, rule_target_down}
#: rules that diagnose a queue: latency evidence and a secondary prefix finding are added
_QUEUE_RULES = {
    rule_kv_cache_exhaustion,
    rule_max_num_seqs_cap,
    rule_token_budget_cap,
    rule_compute_bound,
    rule_unexplained_queue,
}


def _inputs(f: Facts) -> Inputs:
    return Inputs(signals=f.signals, limits=f.limits, model_config=f.model_config)


def diagnose_target(
    signals: Signals,
    limits: Limits,
    target: dict[str, Any] | None = None,
    queries: list[str] | None = None,
    model_config: dict[str, Any] | None = None,
) -> Diagnosis:
    """Diagnose one target: derive the facts, run :data:`RULES` in order, attach secondary findings.

    Args:
        signals: the target's :class:`Signals` (any source).
        limits: resolved :class:`Limits` with sources.
        target: the ``target`` object of the JSON report (namespace, pod, server, model_name, engine).
        queries: the PromQL/computations behind the signals (copied into the report).
        model_config: the served model's config.json (optional): bytes per KV token for
            quantified recommendations.

    Returns:
        a :class:`Diagnosis` whose ``verdict``/``severity``/``confidence``/``evidence``/
        ``recommendations`` are the primary finding and ``findings`` the secondary ones.

    Source of each rule and threshold: docs/diagnosis.md (one section per verdict).
    """
    facts = derive_facts(signals, limits)
    facts.model_config = model_config
    out_signals = dict(signals.values)
    out_signals["budget_full_step_share"] = facts.share
    out_signals["kv_admission_ceiling"] = facts.ceiling
    out_signals["inferred_max_num_seqs"] = facts.n_seqs if "max_num_seqs" in facts.inferred else None
    out_signals["inferred_max_num_batched_tokens"] = (
        facts.budget if "max_num_batched_tokens" in facts.inferred else None
    )
    diag = Diagnosis(
        verdict="healthy",
        severity="ok",
        confidence=0.8,
        target=dict(target or {}),
        signals=out_signals,
        queries=list(queries or []),
    )
    findings: list[Finding] = []
    schema = _schema_finding(signals)
    if schema:
        findings.append(schema)
    rule, primary = next((r, p) for r in RULES if (p := r(facts)) is not None)  # rule_healthy always matches
    if rule not in _TERMINAL:
        if rule in _QUEUE_RULES:
            primary.evidence.extend(_latency_evidence(signals))
        if rule is not rule_prefix_cache_ineffective:
            prefix = _prefix_finding(signals, limits, low_severity=True)
            if prefix is not None:
                findings.append(prefix)
    return _finish(diag, primary, findings, signals)


def _finish(diag: Diagnosis, primary: Finding, findings: list[Finding], signals: Signals) -> Diagnosis:
    diag.verdict, diag.severity, diag.confidence = primary.verdict, primary.severity, primary.confidence
    rejected = [f"{name} ignored: {why}; treated as unknown." for name, why in sorted(signals.rejected.items())]
    if rejected:
        rejected.insert(
            0,
            "Impossible values were discarded (vLLM's KV usage is a fraction 0-1, request counts are "
            "never negative): is another exporter's series matched by the vllm[:_] name?",
        )
    diag.evidence, diag.recommendations = primary.evidence + rejected, primary.recommendations
    diag.findings = findings
    return diag


def _latency_evidence(signals: Signals) -> list[str]:
    out = []
    # what one observation of each histogram is: a request's first token, or one gap between output tokens
    for name, label, unit in (
        ("ttft_p99_s", "p99 TTFT", "requests"),
        ("ttft_p50_s", "p50 TTFT", "requests"),
        ("itl_p99_s", "p99 ITL", "inter-token gaps"),
        ("queue_time_p99_s", "p99 queue time", "requests"),
    ):
        q = signals.quantiles.get(name)
        if q is not None:
            out.append(
                f"{label} in {q.bounds_text('s')} (Prometheus interpolates {fig(q.value, 3)} s; "
                f"histogram quantiles are only as fine as the bucket edges; {number(q.observations)} {unit})."
            )
    return out


def _kv_headroom_evidence(signals: Signals, limits: Limits) -> list[str]:
    kv_tokens, max_len = limits.value("kv_cache_tokens"), limits.value("max_model_len")
    out = []
    kv_avg, run_avg = signals.get("kv_usage_avg"), signals.get("running_avg")
    if kv_avg and run_avg:
        out.append(
            f"Each running request holds about {percent(kv_avg / run_avg)} of KV: the pool holds "
            f"{number(1 / (kv_avg / run_avg))} such requests, {fig((1 / kv_avg), 1)}x the current use."
        )
    if kv_tokens and max_len:
        out.append(
            f"KV capacity {fig(kv_tokens)} tokens ({limits.kv_cache_tokens.source}) holds "
            f"{fig(math.floor(kv_tokens / max_len))} requests of max_model_len {fig(max_len)}."
        )
    return out


def _escaped(odd: dict[str, str]) -> list[tuple[str, str]]:
    return sorted((f, u) for f, u in odd.items() if u.startswith("vllm_"))


def _schema_finding(signals: Signals) -> Finding | None:
    """``metrics_schema_mismatch`` when only legacy names supplied a family (case C19): this server's vLLM
    exposes names of an older generation, which dashboards and rules written for today's names miss.

    Names escaped by the scrape (``vllm_`` for ``vllm:``) are not the server's doing and are the same for
    every target of one Prometheus: :func:`escaped_names_note` says it once per report instead.
    One line: how many families, and one example (the first by canonical name).
    """
    odd = legacy_or_escaped(signals)
    legacy = sorted((f, u) for f, u in odd.items() if not u.startswith("vllm_"))
    if not legacy:
        return None
    family, used = legacy[0]
    one = len(legacy) == 1
    return Finding(
        "metrics_schema_mismatch",
        FIXED["metrics_schema_mismatch"],
        0.95,
        [
            f"Only under legacy names: {len(legacy)} metric famil{'y' if one else 'ies'}, e.g. {used} for {family} "
            "(an older vLLM). Dashboards and alert rules written for today's names see no data for this server "
            "(kvpilot reads both generations, so its numbers are unaffected)."
        ],
    )


def escaped_names_note(signals: Iterable[Signals]) -> str | None:
    """One report note when the source stores vLLM's names with ``_`` for ``:`` (``vllm_num_requests_running``).

    That is Prometheus 2.x scraping prometheus_client >= 0.22 (vLLM's exporter escapes the colon when asked
    for OpenMetrics without ``escaping=``): every vLLM series of that Prometheus is stored so, whatever
    the server. kvpilot reads both spellings; the user's own dashboards and rules need them too.
    """
    escaped = sorted({f for sig in signals for f, _ in _escaped(legacy_or_escaped(sig))})
    if not escaped:
        return None
    example = escaped[0]
    return (
        f"This source stores vLLM's metrics with '_' for ':' ({len(escaped)} famil"
        f"{'y' if len(escaped) == 1 else 'ies'}, e.g. {example.replace(':', '_')} for {example}): Prometheus 2.x "
        "scraping vLLM's prometheus_client >= 0.22 does this to every vLLM series. kvpilot reads both spellings and "
        "its alert rules match vllm[:_]; dashboards and rules of your own that query vllm:... see no data here: "
        'select {__name__=~"vllm[:_]..."}, or scrape with Prometheus 3.x, which keeps the colons.'
    )


def _prefix_finding(signals: Signals, limits: Limits, low_severity: bool) -> Finding | None:
    """The prefix-cache finding, or None.

    ``warning`` when prefix-cache queries happened, the (preemption-discounted) hit rate is below
    :data:`LOW_HIT_RATE`, and there is a reason to expect hits that did not come: an external
    (connector) cache hits more than the GPU cache, prompts are shorter than one block (block
    granularity, case C17), or some hits came, fewer than :data:`LRU_THRASH_HIT_RATE`, while the
    tokens written to the cache in the window exceed the KV capacity (reuse further apart than the
    cache: LRU thrash).

    With ``low_severity``, also an ``ok``-severity finding (exit status unchanged) when the hit rate
    is near 0 (below :data:`NEAR_ZERO_HIT_RATE`) while the tokens written exceed the KV capacity
    :data:`TURNOVER_MANY` times or more: that is what a cyclic re-read larger than the cache looks
    like (0 hits), and also what traffic with nothing to share looks like, so it lists the three
    causes to check rather than warning on every non-sharing workload.
    """
    s = signals.get
    queries, hits = s("prefix_queries_increase"), s("prefix_hits_increase")
    if not queries or queries <= 0 or hits is None:
        return None
    block = limits.value("block_size") or DEFAULT_BLOCK_SIZE
    per_request = s("prompt_tokens_per_request")
    finished = s("requests_finished_increase")
    if finished and finished > 0:
        per_request = queries / finished
    preempt = s("preemptions_increase") or 0.0
    recompute = preempt * per_request if per_request else 0.0
    adjusted = max(0.0, hits - recompute)
    rate = adjusted / queries
    if rate >= LOW_HIT_RATE:
        return None
    ev = [
        f"Prefix cache hit rate {percent(rate)}: {number(hits)} of {number(queries)} queried tokens hit in the window"
        + (
            f" (discounted {number(min(hits, recompute))} hits that preemption recompute of {number(preempt)} "
            "requests would produce)"
            if recompute > 0 and hits > 0
            else ""
        )
        + "."
    ]
    reason = False
    ext_q, ext_h = s("external_prefix_queries_increase"), s("external_prefix_hits_increase")
    if ext_h and ext_h > hits:
        ev.append(
            f"The external KV cache hit {number(ext_h)} of {number(ext_q)} tokens: the traffic does repeat, but "
            "the GPU cache had evicted it."
        )
        reason = True
    if per_request and per_request < block:
        ev.append(
            f"Prompts average {number(per_request)} tokens, shorter than one {fig(block)}-token block "
            f"(block_size, {limits.block_size.source}): only full blocks are cached, so no prompt can hit, "
            "whatever it shares (hits = 0 with queries > 0 is not proof of no sharing). Shorten the "
            "cache's match unit or lengthen the shared prefix to at least one block."
        )
        reason = True
    kv_tokens = limits.value("kv_cache_tokens")
    # LRU can only have evicted a reused prefix if the cache turned over in the window: the tokens that
    # missed (and were written to the cache) exceed its capacity. Tokens queried would count the hits
    # too, so a hot shared prefix on busy traffic would look like thrash over any long enough window.
    written = queries - hits
    turnover = written / kv_tokens if kv_tokens else None
    remembered = (
        f"; the cache holds the new tokens of only the last {number(kv_tokens / (written / finished))} requests"
        if kv_tokens and finished and finished > 0 and written > 0
        else ""
    )
    if turnover is not None and turnover > 1 and 0 < rate < LRU_THRASH_HIT_RATE:
        ev.append(
            f"{number(written)} prompt tokens missed the cache and were written to it in the window, "
            f"{times(turnover)} the KV capacity of {count(kv_tokens)} tokens{remembered}: traffic that "
            "reuses prefixes further apart than that always finds them evicted under LRU. Offload KV to CPU "
            "(LMCache) or reorder requests so reuse comes sooner."
        )
        reason = True
    if reason:
        ev.append(
            "If requests are meant to share prefixes, also look for variable tokens (timestamps, request ids) "
            "at the front of prompts: one differing early token changes every later block hash."
        )
        return Finding(
            "prefix_cache_ineffective",
            FIXED["prefix_cache_ineffective"],
            0.7,
            ev,
            recommend("prefix_cache_ineffective", Inputs(signals=signals, limits=limits)),
        )
    if low_severity and turnover is not None and turnover >= TURNOVER_MANY and rate < NEAR_ZERO_HIT_RATE:
        ev.append(
            f"{number(written)} prompt tokens were written to the cache in the window, {times(turnover)} its "
            f"capacity of {count(kv_tokens)} tokens (turnover){remembered}. Reported at low severity: near-zero "
            "hits are also what traffic with nothing to share gets. Check the three causes: (1) no shared "
            "prefixes in the traffic; (2) varying tokens at the front of prompts (timestamps, request ids: one "
            "differing early token changes every later block hash); (3) reuse further apart than the cache "
            f"holds (a prefix re-read after more than {count(kv_tokens)} new tokens is evicted under LRU: "
            "offload KV to CPU, e.g. LMCache, or reorder requests)."
        )
        return Finding("prefix_cache_ineffective", "ok", 0.5, ev, [])
    return None
