"""The rules: which limit binds, from signals and the configured limits (docs/diagnosis.md).

Every threshold is derived from the limits or from the signals themselves (the per-request share
of KV, the bucket holding the token budget), never a fixed KV percentage: a KV admission ceiling
can sit well below 1.0, and a cap of 4 sequences is as binding as a cap of 1024.

Order (first match is the primary verdict; a KV shortage wins over a coinciding
``running == max_num_seqs``, issue 5 item 4):

1. ``no_data`` - no running/waiting gauge for the target in the window;
2. ``target_down`` - the series stopped before the window's end;
3. ``kv_cache_exhaustion`` - preemptions, or a queue with KV at its admission ceiling, or
   requests waiting for capacity while sequence slots are free;
4. ``max_num_seqs_cap`` - running pinned at ``max_num_seqs`` with a queue and KV room;
5. ``token_budget_cap`` - most steps at ``max_num_batched_tokens`` with a queue, running below
   the cap, KV room;
6. ``compute_bound`` - a queue (growing or standing) while no configured limit binds;
7. ``prefix_cache_ineffective`` - low hit rate with a reason to expect hits;
8. ``idle`` / ``healthy``.

Secondary findings: ``prefix_cache_ineffective`` beside another verdict, and
``metrics_schema_mismatch`` when only legacy or escaped names exist.

Pure functions, no I/O.
"""

from __future__ import annotations

import math

from kvpilot.diagnose.limits import Limits
from kvpilot.diagnose.model import Diagnosis, Finding
from kvpilot.diagnose.promql import share_above
from kvpilot.diagnose.recommend import Inputs, recommend
from kvpilot.diagnose.signals import Signals, legacy_or_escaped
from kvpilot.engine.hardware import GPU_PROFILES, gpu_profile
from kvpilot.text.numbers import fig, number, percent

#: share of engine steps in the token budget's bucket (or above) from which the budget binds: a
#: majority of steps. The bucket is found from max_num_batched_tokens (promql.share_above).
BUDGET_FULL_SHARE = 0.5

#: mean tokens per step / max_num_batched_tokens from which steps count as full (see budget_binds)
BUDGET_FULL_FILL = 0.9

#: a prefix hit rate below this means most queried prompt tokens were recomputed; the prefix rule
#: fires only with a reason to expect hits (see _prefix_finding).
LOW_HIT_RATE = 0.5

#: With only circumstantial evidence of LRU thrash (the cache turned over in the window, no external
#: cache or block-granularity reason), the hit rate must be below this. A busy server turns its cache
#: over on any long window, and a hot shared prefix (system prompt) then still hits at the share of
#: prompt tokens it covers, often 30-60 %; thrash instead drives hits towards 0 (background.md §9:
#: 0 tokens on a cyclic re-read). Half of :data:`LOW_HIT_RATE` keeps the §9 and prefix-thrash cases
#: (0-15 %) and leaves shared-prefix traffic alone.
LRU_THRASH_HIT_RATE = LOW_HIT_RATE / 2


def kv_ceiling(signals: Signals, limits: Limits) -> tuple[float | None, str]:
    """The KV usage at which new requests stop being admitted (ratio 0-1), and how it was derived.

    A new request needs room for its prompt (or, admitted in chunks, at least its share of a
    running request), so admission stops about two requests' worth below 1.0:
    ``ceiling = 1 - 2 x max(kv_avg / running_avg, prompt_tokens_per_request / kv_cache_tokens)``,
    clamped to [0.5, 1]. Source: V1 scheduler admission (background.md §6: a waiting request is
    admitted only when its blocks can be allocated; cached-but-evictable blocks count as free).

    Returns ``(None, reason)`` when KV usage is unknown.
    """
    kv_avg, run_avg = signals.get("kv_usage_avg"), signals.get("running_avg")
    if kv_avg is None:
        return None, "KV usage unknown"
    shares = []
    if run_avg and run_avg > 0:
        shares.append(kv_avg / run_avg)
    prompt, kv_tokens = signals.get("prompt_tokens_per_request"), limits.value("kv_cache_tokens")
    if prompt and kv_tokens:
        shares.append(prompt / kv_tokens)
    share = max(shares) if shares else 0.0
    ceiling = min(1.0, max(0.5, 1.0 - 2.0 * share))
    how = (
        f"admission ceiling {ceiling:.3f} = 1 - 2 x {share:.4f} (one request's share of KV)"
        if shares
        else "admission ceiling 1.0 (no running requests to size a request's share)"
    )
    return ceiling, how


def budget_share(signals: Signals, limits: Limits) -> tuple[float | None, float | None]:
    """Share of engine steps in ``max_num_batched_tokens``' bucket or above, and that bucket's lower edge.

    ``(None, None)`` when unknown: no ``vllm:iteration_tokens_total`` buckets, or the budget lies
    beyond twice the largest finite bucket bound (vLLM's buckets end at 16,384: with a 65,000
    budget the ``+Inf`` bucket holds steps of 20,000 tokens as well as full ones).
    """
    budget = limits.value("max_num_batched_tokens")
    buckets = signals.buckets.get("iteration_tokens")
    if not budget or not buckets:
        return None, None
    finite_edges = [b for b, _ in buckets if not math.isinf(b)]
    if finite_edges and budget > 2 * max(finite_edges):
        return None, None
    result = share_above(buckets, float(budget))
    return (result[0], result[1]) if result else (None, None)


def steps_full(share: float | None, tokens_per_step: float | None, budget: int | None) -> bool:
    """True when the engine steps are full at the token budget.

    With requests waiting, the V1 scheduler hands what the running requests leave of
    ``max_num_batched_tokens`` to waiting prompts, chunking them (background.md §6), so a queue
    fills the steps. Full: the mean step carries at least :data:`BUDGET_FULL_FILL` of the budget
    (``vllm:iteration_tokens_total`` ``_sum``/``_count``); without those, a majority of steps
    (:data:`BUDGET_FULL_SHARE`) in the budget's bucket.
    """
    fill = tokens_per_step / budget if tokens_per_step is not None and budget else None
    if fill is not None:
        return fill >= BUDGET_FULL_FILL and (share is None or share >= BUDGET_FULL_SHARE)
    return share is not None and share >= BUDGET_FULL_SHARE


def compute_knee(limits: Limits) -> tuple[float, str]:
    """Tokens per step from which a step is compute-bound on this GPU, and where the figure comes from.

    A step of n tokens does about n FLOP per byte of weights read (background.md §1), so it turns
    compute-bound at n = peak FLOP/s / memory bandwidth (H100 SXM: 989e12 / 3.35e12 = 295 tokens).
    GPU profiles from kvpilot.engine.hardware (datasheet figures); unknown GPU: the largest knee of
    those profiles (L4: 121e12 / 300e9 = 403), so a budget is never called compute-bound too early.
    """
    if limits.gpu_name:
        try:
            gpu = gpu_profile(limits.gpu_name)
            return (
                gpu.peak_flops / gpu.bandwidth,
                f"{gpu.name}: {gpu.peak_flops / 1e12:g} TFLOP/s / {gpu.bandwidth / 1e12:g} TB/s",
            )
        except ValueError:
            pass
    knee = max(g.peak_flops / g.bandwidth for g in GPU_PROFILES.values())
    return knee, "GPU unknown: the largest knee of kvpilot's GPU profiles"


def budget_binds(share: float | None, tokens_per_step: float | None, budget: int | None, knee: float = 403.0) -> bool:
    """True when the token budget, not compute, limits the steps.

    The steps are full (:func:`steps_full`) and the budget is below twice the compute knee
    (:func:`compute_knee`): below the knee a step costs the same weight read whatever its size, so a
    larger budget adds tokens at no time cost; well past it, step time grows with the tokens and a
    larger budget only makes steps longer (the compute-bound case C12: 65,000-token steps).
    """
    return steps_full(share, tokens_per_step, budget) and budget is not None and budget < 2 * knee


def diagnose_target(
    signals: Signals,
    limits: Limits,
    target: dict | None = None,
    queries: list[str] | None = None,
    model_config: dict | None = None,
) -> Diagnosis:
    """Diagnose one target.

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
    s = signals.get
    n_seqs = limits.value("max_num_seqs")
    window = signals.window_seconds
    out_signals = {k: v for k, v in signals.values.items()}
    share, share_edge = budget_share(signals, limits)
    budget = limits.value("max_num_batched_tokens")
    knee, knee_how = compute_knee(limits)
    full = steps_full(share, s("tokens_per_step_avg"), budget)
    out_signals["budget_full_step_share"] = share
    ceiling, ceiling_how = kv_ceiling(signals, limits)
    out_signals["kv_admission_ceiling"] = ceiling
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

    run_avg, run_max, wait_avg, wait_max = s("running_avg"), s("running_max"), s("waiting_avg"), s("waiting_max")
    if run_avg is None and wait_avg is None:
        primary = Finding(
            "no_data",
            "unknown",
            1.0,
            [
                f"No vllm:num_requests_running or vllm:num_requests_waiting sample (any spelling) in the last "
                f"{fig(window)} s; nothing to diagnose."
            ],
        )
        return _finish(diag, primary, findings, signals)

    samples, age = s("samples_in_window"), s("last_sample_age_s")
    if samples:
        interval = window / samples
        if age is None or age > 3 * interval:
            last = (
                "no sample at the window's end (series marked stale or older than 5 m)"
                if age is None
                else f"the last sample is {fig(age, 1)} s old"
            )
            primary = Finding(
                "target_down",
                "critical",
                0.9,
                [
                    f"The target's series stopped: {last}, while it reported every {fig(interval, 1)} s on average "
                    f"({fig(samples)} samples in {fig(window)} s); a live target is at most 3 intervals behind."
                ],
            )
            return _finish(diag, primary, findings, signals)

    kv_avg, kv_max = s("kv_usage_avg"), s("kv_usage_max")
    preempt = s("preemptions_increase") or 0.0
    trend = s("waiting_trend_per_s")
    growth = trend * window if trend is not None else None
    queued = (wait_avg or 0) > 0 and (wait_max or 0) >= 1
    growing = growth is not None and growth >= 1.0
    free_slots = n_seqs is not None and run_avg is not None and run_avg < n_seqs - 0.5
    pinned = n_seqs is not None and run_avg is not None and run_avg >= n_seqs - 0.5
    cap_wait = s("waiting_capacity_avg")
    at_ceiling = kv_max is not None and ceiling is not None and kv_max >= ceiling
    # vLLM's reason="capacity" counts every ordinary waiting request (SchedulerStats.num_waiting_reqs:
    # short of KV, slots or budget), "deferred" the skipped ones (LoRA, KV transfer): alone it does not
    # name KV. With free slots and KV at the ceiling it shows the ceiling binding below 1.0.
    capacity_blocked = cap_wait is not None and cap_wait > 0 and free_slots and at_ceiling
    # no KV shortage in evidence; with the KV gauge missing this rests on preemptions alone (confidence drops)
    kv_room = not at_ceiling and preempt < 1
    kv_known = kv_max is not None
    if (
        not pinned
        and limits.max_num_seqs.source == "default"
        and queued
        and kv_room
        and run_max
        and s("running_min") == run_max
        and (s("samples_in_window") or 0) >= 3
    ):
        # max_num_seqs unknown: running flat at one value while requests wait and KV has room is a cap.
        n_seqs, pinned, free_slots = int(run_max), True, False
        inferred_cap = True
    else:
        inferred_cap = False

    evidence_queue = (
        f"{fig(wait_avg, 1)} requests waiting on average (max {fig(wait_max)}, "
        f"trend {fig(trend, 3)} req/s = {fig(growth, 1)} over {fig(window)} s)"
    )
    inputs = Inputs(signals=signals, limits=limits, model_config=model_config)

    if preempt >= 1 or (queued and (at_ceiling or capacity_blocked)):
        ev = []
        if preempt >= 1:
            total = s("preemptions_last")
            ev.append(
                f"{number(preempt)} preemptions in the window ({fig(s('preemptions_per_s'))}/s"
                + (f"; vllm:num_preemptions_total reached {fig(total)}" if total is not None else "")
                + "): running requests needed KV blocks and none were free, so vLLM freed and will "
                "recompute them (background.md §6)."
            )
        if kv_max is not None:
            ev.append(f"KV cache usage peaked at {percent(kv_max)} (average {percent(kv_avg)}); {ceiling_how}.")
        if capacity_blocked:
            ev.append(
                f"{fig(cap_wait, 1)} requests on average waited for KV capacity "
                f'(vllm:num_requests_waiting_by_reason{{reason="capacity"}}) while only {fig(run_avg, 1)} of '
                f"{fig(n_seqs)} sequence slots were used: the KV admission ceiling binds below 1.0."
            )
        if queued:
            ev.append(evidence_queue + ".")
        if pinned:
            ev.append(
                f"Running requests also sat at max_num_seqs ({fig(run_avg, 1)} of {fig(n_seqs)}), but the "
                "KV shortage binds first: raising max_num_seqs would add preemptions."
            )
        severity = "critical" if preempt >= 1 and (queued or growing) else "warning"
        conf = 0.95 if preempt >= 1 and at_ceiling else 0.85
        primary = Finding("kv_cache_exhaustion", severity, conf, ev, recommend("kv_cache_exhaustion", inputs))
    elif pinned and queued and kv_room:
        source = (
            "inferred: running never left this value while requests waited; vLLM's default would be "
            f"{fig(limits.value('max_num_seqs'))} - pass --max-num-seqs or --server to confirm"
            if inferred_cap
            else limits.max_num_seqs.source
        )
        ev = [
            f"Running requests pinned at max_num_seqs: average {fig(run_avg)}, max {fig(run_max)} of "
            f"{fig(n_seqs)} ({source}).",
            evidence_queue + ".",
            (
                f"KV cache has room: usage peaked at {percent(kv_max)} ({ceiling_how}), no preemptions."
                if kv_known
                else "KV usage unknown (no KV gauge in any spelling); no preemptions, so no sign of a KV shortage."
            ),
        ]
        ev.extend(_kv_headroom_evidence(signals, limits))
        primary = Finding(
            "max_num_seqs_cap",
            "critical" if growing else "warning",
            (0.6 if inferred_cap else 0.9 if limits.max_num_seqs.source != "default" else 0.7)
            - (0 if kv_known else 0.2),
            ev,
            recommend("max_num_seqs_cap", inputs, max_num_seqs=n_seqs),
        )
    elif budget_binds(share, s("tokens_per_step_avg"), budget, knee) and queued and free_slots and kv_room:
        ev = [
            f"max_num_batched_tokens = {fig(budget)} ({limits.max_num_batched_tokens.source}) fills the steps: "
            + (
                f"{percent(share)} of engine steps carried more than {fig(share_edge)} tokens (the budget's bucket of "
                "vllm:iteration_tokens_total; buckets are coarse, so 'full' means within one bucket)"
                if share is not None
                else ""
            )
            + ("; " if share is not None and s("tokens_per_step_avg") is not None else "")
            + (
                f"steps averaged {number(s('tokens_per_step_avg'))} tokens "
                f"({percent(s('tokens_per_step_avg') / budget)} of the budget)"
                if s("tokens_per_step_avg") is not None
                else ""
            )
            + ".",
            evidence_queue + ".",
            f"The budget is below twice the step size at which compute binds ({number(knee)} tokens; {knee_how}): "
            "a bigger budget adds tokens to each step at little extra step time.",
            f"Running {fig(run_avg, 1)} on average, below max_num_seqs {fig(n_seqs)}; KV usage peaked at "
            f"{percent(kv_max)}, no preemptions.",
        ]
        primary = Finding(
            "token_budget_cap",
            "critical" if growing else "warning",
            0.8 if kv_known else 0.6,
            ev,
            recommend("token_budget_cap", inputs),
        )
    elif queued and (growing or (wait_avg or 0) >= 1):
        ev = [
            evidence_queue + ".",
            f"No configured limit binds: running {fig(run_avg, 1)} on average of max_num_seqs {fig(n_seqs)} "
            f"({limits.max_num_seqs.source}); KV usage peaked at {percent(kv_max)} ({ceiling_how}); "
            f"{number(preempt)} preemptions"
            + (f"; {percent(share)} of steps near max_num_batched_tokens {fig(budget)}" if share is not None else "")
            + (
                f"; steps averaged {number(s('tokens_per_step_avg'))} tokens of the {fig(budget)}-token budget"
                if s("tokens_per_step_avg") is not None and budget
                else ""
            )
            + (
                "; token-budget use unknown (no vllm:iteration_tokens_total)"
                if share is None and s("tokens_per_step_avg") is None
                else ""
            )
            + ".",
        ]
        if full and budget:
            ev.append(
                f"Steps are full at max_num_batched_tokens {fig(budget)}, but that is past the compute knee of "
                f"{number(knee)} tokens per step ({knee_how}; background.md §1): each step is compute-bound, so a "
                "larger budget makes steps longer, not the engine faster."
            )
        served, offered = s("prompt_tokens_per_s"), s("offered_prompt_tokens_per_s")
        if served is not None:
            line = f"Served {number(served)} prompt tok/s"
            if offered is not None:
                line += (
                    f"; offered ≈ {number(offered)} prompt tok/s (served + {fig(trend, 3)} req/s queue growth x "
                    f"{number(s('prompt_tokens_per_request'))} prompt tokens per request)"
                )
            ev.append(line + ": the engine computes as fast as it can; more budget or slots will not help.")
        # unknown limits that could be what binds: the budget, and max_num_seqs when running sat flat
        flat = (
            run_max is not None
            and s("running_min") is not None
            and run_max == s("running_min")
            and (s("samples_in_window") or 0) >= 3
        )
        guessed = [
            name
            for name in ("max_num_seqs", "max_num_batched_tokens")
            if getattr(limits, name).source == "default" and (name != "max_num_seqs" or flat)
        ]
        if guessed:
            ev.append(
                f"{' and '.join(guessed)} unknown (vLLM's default assumed): a cap at the running count "
                f"(max {fig(run_max)}) or a small token budget would look the same; pass the server's flags "
                "(--max-num-seqs, --max-num-batched-tokens) or --server to tell them apart."
            )
        primary = Finding(
            "compute_bound",
            "critical" if growing else "warning",
            (0.8 if kv_max is not None else 0.6) - (0.3 if guessed else 0.0),
            ev,
            recommend("compute_bound", inputs),
        )
    else:
        prefix = _prefix_finding(signals, limits)
        unknown = [name for name, value in (("running", run_max), ("waiting", wait_max)) if value is None]
        if prefix is not None:
            primary = prefix
        elif unknown:
            # one of the two gauges is missing (or its query failed): a queue or load cannot be ruled out
            primary = Finding(
                "no_data",
                "unknown",
                0.9,
                [
                    f"{' and '.join(unknown).capitalize()} unknown in the last {fig(window)} s (no "
                    f"vllm:num_requests_{'running' if unknown[0] == 'running' else 'waiting'} value in any "
                    f"spelling, or its query failed) while running averaged {fig(run_avg, 1)} and waiting "
                    f"{fig(wait_avg, 1)}: "
                    "a queue cannot be ruled out, so the server is not called healthy or idle."
                ],
            )
        elif (run_max or 0) == 0 and (wait_max or 0) == 0:
            primary = Finding(
                "idle",
                "ok",
                0.9,
                [f"No request ran or waited in the last {fig(window)} s (running and waiting both 0)."],
            )
        else:
            ev = [
                f"Running {fig(run_avg, 1)} on average (max {fig(run_max)}) of max_num_seqs {fig(n_seqs)}; "
                f"{fig(wait_avg, 1)} waiting on average; KV usage peaked at {percent(kv_max)}; "
                f"{number(preempt)} preemptions."
            ]
            ev.extend(_latency_evidence(signals))
            primary = Finding("healthy", "ok", 0.8 if kv_max is not None else 0.6, ev)
        return _finish(diag, primary, findings, signals)

    prefix = _prefix_finding(signals, limits)
    if prefix is not None:
        findings.append(prefix)
    primary.evidence.extend(_latency_evidence(signals))
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


def _schema_finding(signals: Signals) -> Finding | None:
    """``metrics_schema_mismatch`` when only legacy or escaped names supplied a family (case C19)."""
    odd = legacy_or_escaped(signals)
    if not odd:
        return None
    ev = []
    escaped = {f: u for f, u in odd.items() if u.startswith("vllm_")}
    legacy = {f: u for f, u in odd.items() if f not in escaped}
    for kind, group in (("escaped (colon written as '_')", escaped), ("legacy", legacy)):
        if group:
            pairs = ", ".join(f"{used} for {family}" for family, used in sorted(group.items()))
            one = len(group) == 1
            ev.append(
                f"{len(group)} metric famil{'y exists' if one else 'ies exist'} here only under "
                f"{kind} names: {pairs}. Dashboards and alert rules written for the other spelling see no "
                "data (kvpilot matches vllm[:_] and both generations, so its numbers are unaffected)."
            )
    return Finding("metrics_schema_mismatch", "warning", 0.95, ev)


def _prefix_finding(signals: Signals, limits: Limits) -> Finding | None:
    """The prefix-cache finding, or None.

    Fires when prefix-cache queries happened, the (preemption-discounted) hit rate is below
    :data:`LOW_HIT_RATE`, and there is a reason to expect hits that did not come: an external
    (connector) cache hits more than the GPU cache, prompts are shorter than one block (block
    granularity, case C17), or some hits came, fewer than :data:`LRU_THRASH_HIT_RATE`, while the
    tokens written to the cache in the window exceed the KV capacity (reuse further apart than the
    cache: LRU thrash, background.md §9). A zero hit
    rate without such a reason may be traffic with nothing to share: no finding.
    """
    s = signals.get
    queries, hits = s("prefix_queries_increase"), s("prefix_hits_increase")
    if not queries or queries <= 0 or hits is None:
        return None
    block = limits.value("block_size") or 16
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
            f" (discounted {number(min(hits, recompute))} hits that preemption recompute of {number(preempt)} requests "
            "would produce)"
            if recompute > 0 and hits > 0
            else ""
        )
        + "."
    ]
    primary = False
    ext_q, ext_h = s("external_prefix_queries_increase"), s("external_prefix_hits_increase")
    if ext_h and ext_h > hits:
        ev.append(
            f"The external KV cache hit {number(ext_h)} of {number(ext_q)} tokens: the traffic does repeat, but "
            "the GPU cache had evicted it."
        )
        primary = True
    if per_request and per_request < block:
        ev.append(
            f"Prompts average {number(per_request)} tokens, shorter than one {fig(block)}-token block "
            f"(block_size, {limits.block_size.source}): only full blocks are cached, so no prompt can hit, "
            "whatever it shares (hits = 0 with queries > 0 is not proof of no sharing). Shorten the "
            "cache's match unit or lengthen the shared prefix to at least one block."
        )
        primary = True
    kv_tokens = limits.value("kv_cache_tokens")
    # LRU can only have evicted a reused prefix if the cache turned over in the window: the tokens that
    # missed (and were written to the cache) exceed its capacity. Tokens queried would count the hits
    # too, so a hot shared prefix on busy traffic would look like thrash over any long enough window.
    written = queries - hits
    if kv_tokens and written > kv_tokens and 0 < rate < LRU_THRASH_HIT_RATE:
        remembered = (
            f"; the cache holds the new tokens of only the last {number(kv_tokens / (written / finished))} requests"
            if finished and finished > 0
            else ""
        )
        ev.append(
            f"{number(written)} prompt tokens missed the cache and were written to it in the window, "
            f"{fig(written / kv_tokens, 1)}x the KV capacity of {fig(kv_tokens)} tokens{remembered}: traffic that "
            "reuses prefixes further apart than that always finds them evicted under LRU (background.md §9: a "
            "cyclic re-read of 2.3x the capacity hit 0 tokens). Offload KV to CPU (LMCache) or reorder "
            "requests so reuse comes sooner."
        )
        primary = True
    if not primary:
        return None  # a low hit rate alone may just be traffic without shared prefixes
    ev.append(
        "If requests are meant to share prefixes, also look for variable tokens (timestamps, request ids) at "
        "the front of prompts: one differing early token changes every later block hash (background.md §5)."
    )
    return Finding(
        "prefix_cache_ineffective",
        "warning",
        0.7,
        ev,
        recommend("prefix_cache_ineffective", Inputs(signals=signals, limits=limits)),
    )
