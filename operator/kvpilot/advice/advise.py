"""Diagnose, then predict: replay a target's window in the engine model, check it, simulate changes, advise.

For one diagnosed target (:func:`predict_target`; docs/diagnosis.md, "Predictions"):

1. fit the window's workload (:mod:`kvpilot.advice.fit`) and the server's flags and step time
   (:mod:`kvpilot.advice.server`);
2. **replay** it (:mod:`kvpilot.advice.simulate`), calibrating the step time to the window's mean inter-token
   gap, and check the replay against the window (:func:`kvpilot.advice.prediction.compare`: throughput,
   tokens, running, waiting, KV peak, queue time, binding limit, each within :data:`~kvpilot.advice.prediction.
   TOLERANCES`). A replay that misses withholds every prediction and says which key missed by how much;
3. **what-if**: the changes asked for (``--what-if``) and, by default, the candidates for the binding limit
   (:func:`kvpilot.advice.whatif.candidates`, with the rules' own suggestions), each simulated on the same
   arrivals (one seed: the differences are the change's, not the draw's);
4. **advise**: the smallest change whose predicted queue does not grow (flags before replicas; the fewest flags,
   then the smallest factor from today's value: :func:`change_size`); when the binding flag's best value leaves
   another limit binding, that limit's first fix together with it; when no flag change keeps up, the fewest replicas
   that do (searched upwards from the arrivals over what one server served). The rules' recommendations that were
   simulated carry their prediction instead of their rule of thumb, and one predicted to make things worse (fewer
   requests served and no shorter queue: :func:`makes_worse`) is dropped (its what-if stays in the report); the
   others say they were not simulated. A change whose KV cache cannot hold the window's longest prompt is not
   simulated: vLLM would start only with a ``max_model_len`` that rejects those prompts.

Everything is bounded by a wall-clock ``deadline``: what does not fit is reported as not simulated.

Pure logic on the engine model; the only clock read is the deadline's.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from kvpilot.advice.fit import FitError, WorkloadFit, fit_workload
from kvpilot.advice.limits import finish_rate_problem
from kvpilot.advice.observe import observed_binding, observed_prediction, sampling_slack
from kvpilot.advice.prediction import TOLERANCES as TOLERANCES
from kvpilot.advice.prediction import allowed_text, compare
from kvpilot.advice.server import CALIBRATED, MAX_CALIBRATIONS, StepTime, engine_config, step_time_prior
from kvpilot.advice.simulate import BudgetExceededError, SimResult, simulate
from kvpilot.advice.whatif import (
    FLAGS,
    MAX_REPLICAS,
    Change,
    ChangeError,
    apply_change,
    candidates,
    replicas_for,
)
from kvpilot.diagnose.limits import Limits
from kvpilot.diagnose.model import (
    BindingLimit,
    ChangeValue,
    Diagnosis,
    Prediction,
    Recommendation,
    Replay,
    Verdict,
    WhatIf,
)
from kvpilot.diagnose.recommend import platform
from kvpilot.diagnose.signals import Signals
from kvpilot.engine.config import EngineConfig, EngineFlags
from kvpilot.kv.spec import ModelConfig
from kvpilot.text.numbers import count, number, percent, significant

#: verdicts whose window holds a queue a change could shorten: predictions run for them by default
QUEUE_VERDICTS: frozenset[Verdict] = frozenset(
    {
        "kv_cache_exhaustion",
        "max_num_seqs_cap",
        "token_budget_cap",
        "compute_bound",
        "lora_slot_cap",
        "unexplained_queue",
    }
)
#: verdicts with nothing to replay
NO_REPLAY: frozenset[Verdict] = frozenset({"no_data", "target_down", "idle"})
#: default candidates simulated per target (the replicas search comes on top when no flag keeps up)
DEFAULT_CANDIDATES = 3
#: a flag change "helps" a queue that was not growing when it at least halves the replay's mean queue time
QUEUE_TIME_GAIN = 0.5

#: a change "makes things worse" when it serves more than this share fewer requests and queues no shorter
WORSE_SERVED = 0.02

#: recommendation flag (kvpilot.diagnose.recommend) -> what-if key
_REC_KEYS = {v: k for k, v in FLAGS.items()}


@dataclass
class Simulated:
    """One what-if simulated: the change, its flags, its result or why there is none."""

    change: Change
    config: EngineConfig | None = None
    result: SimResult | None = None
    reason: str = ""
    notes: tuple[str, ...] = field(default=())

    def shown(self) -> WhatIf:
        """As the report shows it (``Diagnosis.what_if``)."""
        predicted = self.result.prediction if self.result else None
        return WhatIf(self.change.items, predicted, self.reason, self.notes)


def _inferred(diag: Diagnosis) -> EngineFlags:
    """The limits the rules inferred from the gauges, as engine flags."""
    out: EngineFlags = {}
    seqs, budget = diag.signals.get("inferred_max_num_seqs"), diag.signals.get("inferred_max_num_batched_tokens")
    if seqs is not None:
        out["max_num_seqs"] = int(seqs)
    if budget is not None:
        out["max_num_batched_tokens"] = int(budget)
    return out


def predict_target(
    diag: Diagnosis,
    *,
    what_ifs: Sequence[Change] = (),
    defaults: bool = True,
    deadline: float | None = None,
    seed: int = 0,
    model_config: ModelConfig | None = None,
) -> None:
    """Replay ``diag``'s window, simulate what-ifs and rewrite its recommendations (module docstring);
    ``model_config``: the served model's config.json (its own engine profile).

    Sets ``diag.replay`` and ``diag.what_if`` and updates ``diag.recommendations`` in place; a target that
    cannot be replayed gets ``replay`` with ``matches: false`` and the reason.
    """
    basis = diag.basis
    if basis is None:
        return
    signals, limits = basis.signals, basis.limits
    inferred = _inferred(diag)
    try:
        step = step_time_prior(limits, str(diag.target.get("model_name") or ""), model_config, signals)
        config = engine_config(limits, step, inferred)
        fit = fit_workload(signals, limits, config.max_model_len)
        most_seqs = config.batch_limits().max_num_seqs
    except (FitError, ValueError) as exc:
        withhold(diag, what_ifs, f"not replayed: {exc}")
        return
    finished = signals.fit_series.get("finished") or []
    implausible = finish_rate_problem(finished, fit.window_seconds, fit.sample_interval, most_seqs)
    if implausible is not None:  # no server's counter: nothing a replay could reproduce (advice/limits.py)
        withhold(diag, what_ifs, f"not replayed: {implausible}")
        return
    seqs, budget = config.max_num_seqs, config.max_num_batched_tokens
    binding = observed_binding(signals, seqs, budget, diag.signals.get("kv_admission_ceiling"), diag.verdict)
    observed = observed_prediction(signals, binding)
    try:
        replay, step, config = _calibrated_replay(signals, limits, step, inferred, config, fit, deadline, seed)
    except BudgetExceededError:
        withhold(diag, what_ifs, "not replayed: the what-if budget ran out (--what-if-budget)")
        return
    except ValueError as exc:
        withhold(diag, what_ifs, f"not replayed: {exc}")
        return
    misses = compare(replay.prediction, observed, sampling_slack(signals))
    diag.replay = Replay(
        replay.prediction,
        observed,
        matches=not misses,
        misses=tuple(m.sentence() for m in misses),
        notes=(fit.describe(), step.describe(), *fit.notes, *step.notes),
        tolerances={k: allowed_text(*t) for k, t in TOLERANCES.items()} | {"binding_limit": "equal"},
        workload=fit,
        step_time=step,
        cost=(replay.simulated_s, replay.wall_s),
    )
    if misses:
        reason = "withheld: the replay does not reproduce the window (" + "; ".join(m.sentence() for m in misses) + ")"
        diag.what_if = [Simulated(c, reason=reason).shown() for c in what_ifs]
        unreplayed(diag, "the replay did not reproduce the window")
        return
    graphs = platform(limits)[0] == "gpu"
    own = _default_changes(diag, defaults, replay.prediction.binding_limit, config, graphs)
    runs = [
        _simulate(c, config, limits, fit, deadline, seed) for c in [*what_ifs, *(c for c in own if c not in what_ifs)]
    ]
    # the advice is the default changes' alone: a --what-if adds its prediction, never another recommendation
    mine = [r for r in runs if r.change in own]
    extra = _follow_up(mine, replay, config, limits, fit, deadline, seed, defaults, graphs)
    runs.extend(extra)
    diag.what_if = [r.shown() for r in runs]
    _advise(diag, replay, runs, fit, config, frozenset([*own, *(r.change for r in extra)]))


def withhold(diag: Diagnosis, what_ifs: Sequence[Change], reason: str) -> None:
    """No predictions for ``diag``: its replay says ``reason``, and so does each what-if asked for."""
    diag.replay = Replay(None, None, matches=False, misses=(reason,))
    diag.what_if = [Simulated(c, reason=reason).shown() for c in what_ifs]
    unreplayed(diag, reason.removeprefix("not replayed: "))


def unreplayed(diag: Diagnosis, why: str) -> None:
    """Say on each of ``diag``'s recommendations that it is sized from the window's measurements (the rules'
    arithmetic: the shortfall, Little's law), not from a replay, and ``why`` none ran.
    """
    for rec in diag.recommendations:
        rec.expected_effect += f" (Sized from the window's measurements; not replayed: {why}.)"


def _calibrated_replay(
    signals: Signals,
    limits: Limits,
    step: StepTime,
    inferred: EngineFlags,
    config: EngineConfig,
    fit: WorkloadFit,
    deadline: float | None,
    seed: int,
) -> tuple[SimResult, StepTime, EngineConfig]:
    """The replay, re-run with the step time scaled until its mean inter-token gap is the window's."""
    observed = signals.get("itl_mean_s")
    runs = 0
    while True:
        result = simulate(config, fit, seed=seed, deadline=deadline)
        runs += 1
        if observed is None or result.itl_mean_s is None or runs >= MAX_CALIBRATIONS:
            break
        if not (0 < observed < float("inf") and result.itl_mean_s > 0):  # an ITL _sum of 0: nothing to scale by
            break
        ratio = observed / result.itl_mean_s
        if abs(ratio - 1) <= CALIBRATED:
            break
        step = dataclasses.replace(step, scale=step.scale * ratio)
        config = engine_config(limits, step, inferred)
    step = dataclasses.replace(step, observed_s=observed, replayed_s=result.itl_mean_s, runs=runs)
    return result, step, config


def _rule_changes(diag: Diagnosis) -> list[Change]:
    out = []
    for rec in diag.recommendations:
        key = _REC_KEYS.get(rec.flag)
        if key is None or rec.suggested is None or key == "replicas":
            continue
        out.append(Change(((key, rec.suggested),)))
    return out


def _default_changes(
    diag: Diagnosis, defaults: bool, binding: BindingLimit | None, config: EngineConfig, graphs: bool
) -> list[Change]:
    """The changes simulated by default (whatever ``--what-if`` asks): the candidates for the binding limit and the
    rules' suggestions, at most :data:`DEFAULT_CANDIDATES`.
    """
    if not defaults or diag.verdict in NO_REPLAY or binding in (None, "none"):
        return []
    suggested = {c.items[0][0]: c.items[0][1] for c in _rule_changes(diag)}
    picked: list[Change] = []
    for change in [*candidates(binding, config, suggested, graphs=graphs), *_rule_changes(diag)]:
        if change not in picked:
            picked.append(change)
    return picked[:DEFAULT_CANDIDATES]


def _simulate(
    change: Change, config: EngineConfig, limits: Limits, fit: WorkloadFit, deadline: float | None, seed: int
) -> Simulated:
    try:
        applied = apply_change(change, config, limits)
    except ChangeError as exc:  # the line names the change already: the reason without its "--what-if X: "
        return Simulated(change, reason=str(exc).removeprefix(f"--what-if {change.text()}: "))
    longest = fit.prompt.max
    if applied.config.max_model_len <= longest:  # Engine.add_request's rule: a prompt must be shorter
        return Simulated(
            change,
            applied.config,
            reason=f"not simulated: vLLM would start only with max_model_len {count(applied.config.max_model_len)} "
            f"or less and reject the window's prompts of up to {count(longest)} tokens",
            notes=applied.notes,
        )
    try:
        result = simulate(applied.config, fit, replicas=applied.replicas, seed=seed, deadline=deadline)
    except BudgetExceededError:
        return Simulated(change, applied.config, reason="not simulated: the what-if budget ran out (--what-if-budget)")
    except ValueError as exc:
        return Simulated(change, applied.config, reason=f"not simulated: {exc}")
    return Simulated(change, applied.config, result, notes=applied.notes)


def keeps_up(prediction: Prediction, replay: Prediction) -> bool:
    """The change's queue does not grow, and, when the window's queue did not grow either, its mean queue time is
    at most :data:`QUEUE_TIME_GAIN` of the replay's.
    """
    if prediction.queue_growing is not False:
        return False
    if replay.queue_growing:
        return True
    before, after = replay.queue_time_mean_s, prediction.queue_time_mean_s
    return before is None or after is None or after <= QUEUE_TIME_GAIN * before


def _follow_up(
    runs: list[Simulated],
    replay: SimResult,
    config: EngineConfig,
    limits: Limits,
    fit: WorkloadFit,
    deadline: float | None,
    seed: int,
    defaults: bool,
    graphs: bool,
) -> list[Simulated]:
    """When no flag change keeps up: the binding flag's best value with the next limit's first fix; then the
    fewest replicas that keep up (``runs``: the default changes' runs; ``graphs``: the server has CUDA graphs).
    """
    if not defaults or replay.prediction.binding_limit in (None, "none"):
        return []
    done = [r for r in runs if r.result is not None and not r.change.mixed]
    if any(keeps_up(r.result.prediction, replay.prediction) for r in done if r.result):
        return []
    extra: list[Simulated] = []
    flags = [(r, r.result, r.config) for r in done if r.result and r.config and r.change.replicas == 1]
    if flags:
        best, result, applied = max(flags, key=lambda f: f[1].prediction.requests_finished_per_s or 0.0)
        nxt = next_limit(result.prediction, replay.prediction.binding_limit)
        fixes = candidates(nxt, applied, {}, graphs=graphs) if nxt else []
        if fixes:
            own = best.change.as_dict()
            combined = Change(best.change.items + tuple(i for i in fixes[0].items if i[0] not in own))
            run = _simulate(combined, config, limits, fit, deadline, seed)
            extra.append(run)
            if run.result and keeps_up(run.result.prediction, replay.prediction):
                return extra
    start = replicas_for(fit.arrival_rate, replay.prediction.requests_finished_per_s or 0.0) or 2
    tried = {r.change.replicas for r in runs if not r.change.mixed}
    n = start
    while n <= MAX_REPLICAS:
        if n in tried:
            n += 1
            continue
        run = _simulate(Change.of(replicas=n), config, limits, fit, deadline, seed)
        extra.append(run)
        if run.result is None or keeps_up(run.result.prediction, replay.prediction):
            break
        n += 1
    return extra


def next_limit(prediction: Prediction, previous: BindingLimit | None) -> BindingLimit | None:
    """The limit that refused the queue longest in ``prediction`` other than ``previous`` (None: no other did)."""
    others = {k: v for k, v in prediction.binding_shares.items() if k not in (previous, "none") and v > 0}
    if not others:
        return None
    return max(others, key=others.__getitem__)


def effect_text(before: Prediction, after: Prediction, replicas: int = 1) -> str:
    """Before -> after of one change, in a sentence (the replay's window against the change's); with ``replicas``
    the rates are all replicas' and the gauges (running, KV peak) one replica's, which the sentence says.
    """
    each = " per replica" if replicas > 1 else ""

    def rate(p: Prediction) -> str:
        return number(p.requests_finished_per_s, 2)

    def secs(v: float | None) -> str:
        return significant(v, 3, "s") if v is not None else "unknown"

    parts = [
        f"requests finished {rate(before)} -> {rate(after)} req/s",
        f"mean queue time {secs(before.queue_time_mean_s)} -> {secs(after.queue_time_mean_s)}",
        f"mean TTFT {secs(before.ttft_mean_s)} -> {secs(after.ttft_mean_s)}",
        f"running {number(before.mean_running, 1)} -> {number(after.mean_running, 1)}{each}",
        f"KV peak {percent(before.max_kv_usage)} -> {percent(after.max_kv_usage)}{each}",
    ]
    if (after.preemptions_per_s or 0) > 0 or (before.preemptions_per_s or 0) > 0:
        parts.append(f"preemptions {number(before.preemptions_per_s, 2)} -> {number(after.preemptions_per_s, 2)} /s")
    if after.queue_growing:
        queue = f"the queue still grows ({number(after.waiting_trend_per_s, 2, 'req/s')})"
    elif before.queue_growing:
        queue = "the queue stops growing"
    else:
        queue = f"waiting {number(before.mean_waiting, 1)} -> {number(after.mean_waiting, 1)}"
    bound = after.binding_limit or "unknown"
    if bound == "none":
        top = next_limit(after, None)
        binds = "requests wait less than half the window" + (f" ({top} refuses them when they do)" if top else "")
    elif bound == before.binding_limit:
        binds = f"{bound} still binds"
    else:
        binds = f"{bound} binds next"
    return "Predicted over the window: " + ", ".join(parts) + f"; {queue}; {binds}."


def _value(value: ChangeValue | None) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _current(config: EngineConfig) -> dict[str, ChangeValue | None]:
    """Each what-if key's value in ``config`` (the server as it runs)."""
    return {
        "max_num_seqs": config.max_num_seqs,
        "max_num_batched_tokens": config.max_num_batched_tokens,
        "kv_cache_tokens": config.kv_cache_tokens_resolved(),
        "gpu_memory_utilization": config.gpu_memory_utilization,
        "kv_cache_dtype": config.kv_cache_dtype,
        "enable_prefix_caching": config.enable_prefix_caching,
        "replicas": 1,
    }


def change_size(change: Change, config: EngineConfig) -> tuple[int, float]:
    """How big a change is, for picking the smallest: (flags changed, the largest factor by which a value moves,
    as ``|log2(new / now)|``; a switch such as ``kv_cache_dtype=fp8``, which halves a token's bytes, or a prefix
    cache turned on or off counts 1, a doubling).
    """
    current = _current(config)
    biggest = 0.0
    for key, value in change.items:
        now = current.get(key)
        if isinstance(value, bool) or isinstance(now, bool) or isinstance(value, str) or isinstance(now, str):
            factor = 0.0 if value == now else 1.0
        elif isinstance(value, (int, float)) and isinstance(now, (int, float)) and value > 0 and now > 0:
            factor = abs(math.log2(value / now))
        else:
            factor = 1.0
        biggest = max(biggest, factor)
    return len(change.items), biggest


def makes_worse(before: Prediction, after: Prediction) -> bool:
    """``after`` serves fewer requests than ``before`` (by more than :data:`WORSE_SERVED`) without a shorter mean
    queue time: a change not worth recommending.
    """
    b, a = before.requests_finished_per_s, after.requests_finished_per_s
    if b is None or a is None or a >= b * (1 - WORSE_SERVED):
        return False
    qb, qa = before.queue_time_mean_s, after.queue_time_mean_s
    return qb is None or qa is None or qa >= qb


def _rec_for(change: Change, config: EngineConfig) -> Recommendation:
    """A recommendation for a change the rules did not make (its flags, current and suggested values)."""
    current = _current(config)
    keys = [k for k, _ in change.items]
    flag = " and ".join(FLAGS[k] for k in keys)
    if len(keys) == 1:
        return Recommendation(flag, current[keys[0]], change.items[0][1], "")
    now = ", ".join(str(current[k]) for k in keys)
    then = ", ".join(str(v) for _, v in change.items)
    return Recommendation(flag, now, then, "")


def backlog_note(before: Prediction, after: Prediction, fit: WorkloadFit) -> str:
    """A sentence for a change that stops the queue growing without shortening the window's queue time (not
    below :data:`QUEUE_TIME_GAIN` of it) while the window opened on a queue: in a window this short, that queue's
    wait is most of the mean; "" otherwise.
    """
    b, a = before.queue_time_mean_s, after.queue_time_mean_s
    if fit.waiting_start < 1 or not b or a is None or a <= QUEUE_TIME_GAIN * b or after.queue_growing is not False:
        return ""
    return (
        f" The window opens on {count(round(fit.waiting_start))} waiting requests, which its "
        f"{number(fit.window_seconds, 0)} s cannot drain: their wait is most of the mean queue time, before and "
        "after; a longer --window shows the change's effect on it."
    )


def _simulated_rules(
    rules: list[Recommendation], before: Prediction, by_change: dict[Change, Simulated]
) -> list[Recommendation]:
    """The rules' recommendations with their predictions where they were simulated; those predicted to make things
    worse dropped (:func:`makes_worse`: their what-ifs say so).
    """
    recs: list[Recommendation] = []
    for rec in rules:
        change = _rec_change(rec)
        run = by_change.get(change) if change else None
        if run is not None and run.result is not None:
            if makes_worse(before, run.result.prediction):
                continue
            rec.expected_effect = effect_text(before, run.result.prediction)
            rec.predicted = run.result.prediction
        else:
            rec.expected_effect += " (Not simulated.)"
        recs.append(rec)
    return recs


def _advise(
    diag: Diagnosis,
    replay: SimResult,
    runs: list[Simulated],
    fit: WorkloadFit,
    config: EngineConfig,
    own: frozenset[Change],
) -> None:
    """Rewrite ``diag.recommendations`` from the predictions (module docstring, step 4); the lead is picked among
    the changes kvpilot simulates by default (``own``), so the ``--what-if``s asked never change it.
    """
    before = replay.prediction
    by_change = {r.change: r for r in runs}
    recs = _simulated_rules(diag.recommendations, before, by_change)
    every_fix = [r for r in runs if r.result is not None and keeps_up(r.result.prediction, before)]
    fixes = [r for r in every_fix if r.change in own]
    fixes.sort(key=lambda r: change_size(r.change, config))  # stable: equal sizes keep the order simulated
    flag_fix = next((r for r in fixes if r.change.replicas == 1), None)
    # replicas alone: a change of flags and replicas together is a what-if, never named as replicas only
    scale_fix = next((r for r in fixes if r.change.replicas > 1 and not r.change.mixed), None)
    simulated_flags = [r for r in runs if r.result is not None and r.change.replicas == 1 and r.change in own]
    lead: Recommendation | None = None
    if flag_fix is not None and flag_fix.result is not None:
        lead = next((rec for rec in recs if rec.predicted is not None and _rec_change(rec) == flag_fix.change), None)
        if lead is None:
            lead = _rec_for(flag_fix.change, config)
            lead.expected_effect = effect_text(before, flag_fix.result.prediction)
            lead.predicted = flag_fix.result.prediction
        lead.expected_effect = "The smallest change simulated that keeps up with the arrivals. " + lead.expected_effect
        lead.expected_effect += "".join(f" ({note})" for note in flag_fix.notes)
        lead.expected_effect += backlog_note(before, flag_fix.result.prediction, fit)
        if len(flag_fix.change.items) > 1:
            alone = by_change.get(Change(flag_fix.change.items[:1]))
            if alone is not None and alone.result is not None:
                key, value = flag_fix.change.items[0]
                lead.expected_effect += f" {FLAGS[key]} {_value(value)} alone does not keep up: " + effect_text(
                    before, alone.result.prediction
                ).removeprefix("Predicted over the window: ")
    elif before.binding_limit not in (None, "none") and simulated_flags:
        tried = "; ".join(r.change.text() for r in simulated_flags)
        if scale_fix is not None and scale_fix.result is not None:
            n = scale_fix.change.replicas
            lead = Recommendation("replicas (scale out)", 1, n, "")
            lead.expected_effect = (
                f"No flag change on this GPU stops the queue growing (simulated: {tried}); {n} replicas would, each "
                f"taking 1/{n} of the {number(fit.arrival_rate, 2)} req/s arriving. "
                + effect_text(before, scale_fix.result.prediction, n)
            )
            lead.predicted = scale_fix.result.prediction
            both = [r for r in every_fix if r.change.mixed]
            if both:
                lead.expected_effect += f" As asked, {both[0].change.text()} keeps up too (its what-if below)."
        else:
            lead = Recommendation(
                "replicas (scale out)",
                1,
                None,
                f"No flag change on this GPU stops the queue growing (simulated: {tried}); no replica count was "
                "found within the what-if budget (--what-if-budget).",
            )
    if lead is not None:
        recs = [
            lead,
            *(r for r in recs if r is not lead and not (r.flag == lead.flag and lead.flag.startswith("replicas"))),
        ]
    diag.recommendations = recs


def _rec_change(rec: Recommendation) -> Change | None:
    """The what-if a rule's recommendation is (None: a flag no what-if sets, or no value suggested)."""
    key = _REC_KEYS.get(rec.flag)
    return Change(((key, rec.suggested),)) if key and rec.suggested is not None else None
