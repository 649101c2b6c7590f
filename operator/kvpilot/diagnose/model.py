"""The diagnosis data model: verdicts, severities, findings, recommendations (docs/diagnosis.md).

These dataclasses are what ``-o json`` serialises; names and shapes are a contract (see
docs/diagnose-output.schema.json). Pure data, no I/O.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Literal, Protocol, get_args

from kvpilot.diagnose.limits import Limits
from kvpilot.diagnose.signals import Signals, TargetKey
from kvpilot.text.documents import JsonObject

#: the verdict vocabulary (lowercase; docs/diagnosis.md, "Verdicts")
Verdict = Literal[
    "kv_cache_exhaustion",
    "max_num_seqs_cap",
    "token_budget_cap",
    "lora_slot_cap",
    "compute_bound",
    "unexplained_queue",
    "prefix_cache_ineffective",
    "healthy",
    "idle",
    "no_data",
    "target_down",
    "metrics_schema_mismatch",
]
VERDICTS: tuple[Verdict, ...] = get_args(Verdict)
#: how bad a verdict is (docs/diagnosis.md, "Severity"); the exit status follows it
Severity = Literal["ok", "warning", "critical", "unknown"]
SEVERITIES: tuple[Severity, ...] = get_args(Severity)

#: Marks around a part of an evidence sentence that says how a figure was derived (a formula, a ceiling's
#: terms): JSON and ``--verbose`` show it, the text and Markdown reports leave it out. Control characters, so
#: any path that prints evidence through :func:`kvpilot.text.safe.one_line` drops the marks, never the text.
DETAIL_OPEN, DETAIL_CLOSE = "\x1e", "\x1f"


def detail(text: str) -> str:
    """``text`` marked as a derivation (:data:`DETAIL_OPEN`): in JSON and ``--verbose`` only."""
    return f"{DETAIL_OPEN}{text}{DETAIL_CLOSE}"


def evidence_text(text: str, details: bool = True) -> str:
    """An evidence sentence without the marks of :func:`detail`; ``details=False`` drops the marked parts too."""
    if DETAIL_OPEN not in text:
        return text
    if details:
        return text.replace(DETAIL_OPEN, "").replace(DETAIL_CLOSE, "")
    out, rest = [], text
    while DETAIL_OPEN in rest:
        head, _, tail = rest.partition(DETAIL_OPEN)
        out.append(head)
        rest = tail.partition(DETAIL_CLOSE)[2]
    return "".join(out) + rest


#: the limits a queue waits on (vLLM's admission checks, docs/diagnosis.md)
QueueLimit = Literal["max_num_seqs", "token_budget", "kv_cache", "lora"]
#: the values ``binding_limit`` takes: a queue's limit, or ``none`` (no queue over half the window)
BindingLimit = QueueLimit | Literal["none"]
BINDING_LIMITS: tuple[BindingLimit, ...] = ("kv_cache", "max_num_seqs", "token_budget", "lora", "none")
#: the limits a queue waits on, in the order a tie between their shares is broken (vLLM checks them in the
#: order max_num_seqs, token budget, KV cache; LoRA slots are a skip)
QUEUE_LIMITS: tuple[QueueLimit, ...] = get_args(QueueLimit)


@dataclass(frozen=True)
class Prediction:
    """One ``P``: what a window did, observed or predicted (``kvpilot.advice.prediction`` for each field; None:
    unknown).
    """

    requests_finished_per_s: float | None = None
    prompt_tokens_per_s: float | None = None
    generation_tokens_per_s: float | None = None
    queue_time_mean_s: float | None = None
    ttft_mean_s: float | None = None
    mean_running: float | None = None
    max_kv_usage: float | None = None
    preemptions_per_s: float | None = None
    binding_limit: BindingLimit | None = None
    mean_waiting: float | None = None
    waiting_trend_per_s: float | None = None
    queue_growing: bool | None = None
    binding_shares: dict[BindingLimit, float] = field(default_factory=dict)

    def rounded(self) -> Prediction:
        """As the report shows it: numbers to 6 significant figures (shares to 4 places), non-finite ones unknown."""
        return Prediction(
            requests_finished_per_s=_round(self.requests_finished_per_s),
            prompt_tokens_per_s=_round(self.prompt_tokens_per_s),
            generation_tokens_per_s=_round(self.generation_tokens_per_s),
            queue_time_mean_s=_round(self.queue_time_mean_s),
            ttft_mean_s=_round(self.ttft_mean_s),
            mean_running=_round(self.mean_running),
            max_kv_usage=_round(self.max_kv_usage),
            preemptions_per_s=_round(self.preemptions_per_s),
            binding_limit=self.binding_limit,
            mean_waiting=_round(self.mean_waiting),
            waiting_trend_per_s=_round(self.waiting_trend_per_s),
            queue_growing=self.queue_growing,
            binding_shares={k: round(v, 4) for k, v in self.binding_shares.items()},
        )

    def to_json(self) -> JsonObject:
        """The ``P`` object of the JSON schema: :meth:`rounded`, unknowns null."""
        shown = self.rounded()
        return {f.name: getattr(shown, f.name) for f in fields(shown)}


def _round(value: float | None) -> float | None:
    """6 significant figures; a whole number stays one, an unknown or non-finite number is None."""
    if not isinstance(value, float):
        return value
    if not math.isfinite(value):
        return None
    if value == 0:
        return 0.0
    return float(f"{value:.6g}")


#: exit status of ``kvpilot diagnose`` (docs/diagnosis.md)
EXIT_OK, EXIT_WARNING, EXIT_CRITICAL, EXIT_NO_DIAGNOSIS, EXIT_USAGE = 0, 1, 2, 3, 64


@dataclass
class Recommendation:
    """A flag change: ``flag`` (``--max-num-seqs``), ``current``/``suggested`` (as text or number),
    ``expected_effect`` (one sentence with numbers).

    ``predicted``: what the engine model predicts the window would have been with the change (the
    ``P`` object of docs/diagnose-output.schema.json, ``kvpilot.advice``), None when not simulated.
    """

    flag: str
    current: str | float | int | None
    suggested: str | float | int | None
    expected_effect: str
    predicted: Prediction | None = None

    def to_json(self) -> JsonObject:
        """The ``recommendations[]`` object of the JSON schema."""
        out: JsonObject = {
            "flag": self.flag,
            "current": self.current,
            "suggested": self.suggested,
            "expected_effect": self.expected_effect,
        }
        if self.predicted is not None:
            out["predicted"] = self.predicted.to_json()
        return out


class Described(Protocol):
    """What a replay was made of (its fitted workload, its step time), shown as ``-o json`` shows it."""

    def to_json(self) -> JsonObject:
        """The JSON object (``replay.workload``, ``replay.step_time``)."""
        ...


@dataclass(frozen=True)
class Replay:
    """The engine model's replay of a target's window against what the window showed (``kvpilot.advice``).

    Attributes:
        predicted / observed: the replay's ``P`` and the window's; None when no replay ran.
        matches: the replay reproduces the window within the tolerances (else every prediction is withheld).
        misses: a sentence per key outside its tolerance, or why no replay ran.
        notes: how the workload and the step time were fitted, and their caveats.
        tolerances: key -> the allowed gap, as the report states it (a replay that ran).
        workload / step_time: what the replay ran (a replay that ran).
        cost: ``(simulated seconds, wall-clock seconds)`` of the replay (a replay that ran).
    """

    predicted: Prediction | None
    observed: Prediction | None
    matches: bool
    misses: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    tolerances: Mapping[str, str] | None = None
    workload: Described | None = None
    step_time: Described | None = None
    cost: tuple[float, float] | None = None

    def to_json(self) -> JsonObject:
        """The ``replay`` object of ``-o json``."""
        out: JsonObject = {
            "predicted": None if self.predicted is None else self.predicted.to_json(),
            "observed": None if self.observed is None else self.observed.to_json(),
            "matches": self.matches,
            "misses": list(self.misses),
        }
        if self.tolerances is not None:
            out["tolerances"] = dict(self.tolerances)
        if self.workload is not None:
            out["workload"] = dict(self.workload.to_json())
        if self.step_time is not None:
            out["step_time"] = dict(self.step_time.to_json())
        out["notes"] = list(self.notes)
        if self.cost is not None:
            out["cost"] = {"simulated_s": round(self.cost[0], 3), "wall_s": round(self.cost[1], 3)}
        return out


#: a what-if key's value: a count, a fraction, a dtype or a switch (``kvpilot.advice.whatif``)
ChangeValue = int | float | str | bool


@dataclass(frozen=True)
class WhatIf:
    """One change simulated on the replay's arrivals: ``change`` (``(key, value)`` pairs applied together), its
    ``predicted`` ``P`` or the ``reason`` there is none, and ``notes`` on how it was applied.
    """

    change: tuple[tuple[str, ChangeValue], ...]
    predicted: Prediction | None = None
    reason: str = ""
    notes: tuple[str, ...] = ()

    @property
    def replicas(self) -> int:
        """The replicas the change asks for (1 when it changes none)."""
        value = dict(self.change).get("replicas", 1)
        return value if isinstance(value, int) else 1

    def to_json(self) -> JsonObject:
        """One ``what_if[]`` element of ``-o json``."""
        out: JsonObject = {
            "change": dict(self.change),
            "predicted": None if self.predicted is None else self.predicted.to_json(),
        }
        if self.reason:
            out["reason"] = self.reason
        if self.notes:
            out["notes"] = list(self.notes)
        return out


@dataclass(frozen=True)
class DiagnosisBasis:
    """What a diagnosis was made from, kept for predictions (``kvpilot.advice``); never serialised.

    Attributes:
        key: the target's label values.
        signals: what its source read over the window.
        limits: its server's limits, with where each came from.
    """

    key: TargetKey
    signals: Signals
    limits: Limits


@dataclass
class Finding:
    """One verdict with its reasons (primary or secondary).

    Attributes:
        verdict: one of :data:`VERDICTS`.
        severity: one of :data:`SEVERITIES`.
        confidence: 0-1, how sure the rule is (lower when inputs were defaults or missing).
        evidence: sentences with numbers.
        recommendations: flag changes, never contradicting the evidence.
    """

    verdict: Verdict
    severity: Severity
    confidence: float
    evidence: list[str] = field(default_factory=list)
    recommendations: list[Recommendation] = field(default_factory=list)

    def to_json(self) -> JsonObject:
        """The finding as in ``findings[]`` (verdict, severity, confidence, evidence, recommendations)."""
        return {
            "verdict": self.verdict,
            "severity": self.severity,
            "confidence": round(self.confidence, 3),
            "evidence": [evidence_text(e) for e in self.evidence],
            "recommendations": [r.to_json() for r in self.recommendations],
        }


@dataclass
class Diagnosis(Finding):
    """The primary finding for one target plus its signals, queries and secondary findings.

    Attributes (besides :class:`Finding`'s):
        target: ``{namespace, pod, server, model_name, engine}`` (plus ``instance``/``job`` when known).
        signals: ``{name: number | None}``.
        queries: the PromQL (or computations) that produced the signals.
        findings: secondary findings, same shape as the primary one.
        replay: the engine model's replay of the window against what the window showed (``kvpilot.advice``),
            None when not run.
        what_if: the changes simulated.
        basis: the signals and limits the diagnosis read (:class:`DiagnosisBasis`), not serialised.
    """

    target: dict[str, str] = field(default_factory=dict)
    signals: dict[str, float | None] = field(default_factory=dict)
    queries: list[str] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)
    replay: Replay | None = None
    what_if: list[WhatIf] = field(default_factory=list)
    basis: DiagnosisBasis | None = field(default=None, repr=False, compare=False)

    def to_json(self) -> JsonObject:
        """One ``targets[]`` element of ``diagnose -o json`` (docs/diagnose-output.schema.json)."""
        out: JsonObject = {"target": dict(self.target)}
        out.update(super().to_json())
        out["signals"] = dict(self.signals)
        out["queries"] = list(self.queries)
        out["findings"] = [f.to_json() for f in self.findings]
        if self.replay is not None:
            out["replay"] = self.replay.to_json()
            out["what_if"] = [w.to_json() for w in self.what_if]
        return out


@dataclass
class Report:
    """A whole diagnosis run: ``source`` (text), ``window_seconds``, ``targets`` and notes.

    ``notes`` are sentences about the run as a whole (``--quick`` used, limits' sources, source
    errors); the text and markdown renderings show them, JSON carries them under ``notes``.
    ``short_data``: the one of them saying the data covers less than the window (its covered span), which the
    text and markdown reports show above everything else; not serialised apart from ``notes``.
    """

    source: str
    window_seconds: float
    targets: list[Diagnosis] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    short_data: str | None = None

    def to_json(self) -> JsonObject:
        """The ``diagnose -o json`` document (docs/diagnose-output.schema.json)."""
        return {
            "source": self.source,
            "window_seconds": self.window_seconds,
            "targets": [t.to_json() for t in self.targets],
            "notes": list(self.notes),
        }

    def exit_code(self) -> int:
        """0 no bottleneck, 1 warning, 2 critical, 3 could not diagnose (nothing but unknowns)."""
        severities = {t.severity for t in self.targets}
        if "critical" in severities:
            return EXIT_CRITICAL
        if "warning" in severities:
            return EXIT_WARNING
        if not severities or severities == {"unknown"}:  # per target: one unknown beside diagnosed ones is not 3
            return EXIT_NO_DIAGNOSIS
        return EXIT_OK
