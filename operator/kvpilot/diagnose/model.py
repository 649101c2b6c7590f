"""The diagnosis data model: verdicts, severities, findings, recommendations (docs/diagnosis.md).

These dataclasses are what ``-o json`` serialises; names and shapes are a contract (see
docs/diagnose-output.schema.json). Pure data, no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, get_args

from kvpilot.diagnose.limits import Limits
from kvpilot.diagnose.signals import Signals, TargetKey

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
    predicted: dict[str, Any] | None = None

    def to_json(self) -> dict[str, Any]:
        """The ``recommendations[]`` object of the JSON schema."""
        out: dict[str, Any] = {
            "flag": self.flag,
            "current": self.current,
            "suggested": self.suggested,
            "expected_effect": self.expected_effect,
        }
        if self.predicted is not None:
            out["predicted"] = dict(self.predicted)
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

    def to_json(self) -> dict[str, Any]:
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
        replay: ``{"predicted": P, "observed": P, ...}``: the engine model's replay of the window
            against what the window showed (``kvpilot.advice``), None when not run.
        what_if: ``[{"change": {KEY: VALUE}, "predicted": P}]``: the changes simulated.
        basis: the signals and limits the diagnosis read (:class:`DiagnosisBasis`), not serialised.
    """

    target: dict[str, Any] = field(default_factory=dict)
    signals: dict[str, float | None] = field(default_factory=dict)
    queries: list[str] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)
    replay: dict[str, Any] | None = None
    what_if: list[dict[str, Any]] = field(default_factory=list)
    basis: DiagnosisBasis | None = field(default=None, repr=False, compare=False)

    def to_json(self) -> dict[str, Any]:
        """One ``targets[]`` element of ``diagnose -o json`` (docs/diagnose-output.schema.json)."""
        out: dict[str, Any] = {"target": dict(self.target)}
        out.update(super().to_json())
        out["signals"] = dict(self.signals)
        out["queries"] = list(self.queries)
        out["findings"] = [f.to_json() for f in self.findings]
        if self.replay is not None:
            out["replay"] = dict(self.replay)
            out["what_if"] = [dict(w) for w in self.what_if]
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

    def to_json(self) -> dict[str, Any]:
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
