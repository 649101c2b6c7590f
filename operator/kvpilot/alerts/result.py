"""What ``kvpilot alert-hook`` answers for one alert, typed: the sinks and the hook's metrics read these objects, and
the HTTP answer is their :meth:`AlertResult.to_json`.

Pure data, no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kvpilot.alerts.payload import Target
from kvpilot.diagnose.model import Diagnosis, Report
from kvpilot.diagnose.report import change_text, predicted_effect
from kvpilot.text.documents import JsonObject
from kvpilot.text.safe import one_line


@dataclass(frozen=True)
class Diagnosed:
    """One target's diagnosis as the hook answers it, shared by every alert about that target and cached.

    Attributes:
        report: the report with every external string made safe (:func:`kvpilot.diagnose.report.safe_report`).
        doc: its ``diagnose -o json`` document, every string made safe (:func:`kvpilot.alerts.hook.safe_json`),
            made once for all the answers that carry it.
    """

    report: Report
    doc: dict[str, Any]

    @property
    def primary(self) -> Diagnosis | None:
        """The first target's diagnosis (None: the run found no target)."""
        return self.report.targets[0] if self.report.targets else None


@dataclass
class AlertResult:
    """One element of the answer's ``results``: the alert, its target (its strings made safe), the diagnosis
    (None: resolved, or not diagnosed) and why there is none.
    """

    fingerprint: str
    alertname: str
    status: str
    target: Target | None = None
    cached: bool = False
    diagnosis: Diagnosed | None = None
    error: str | None = None

    @property
    def primary(self) -> Diagnosis | None:
        """The first target's diagnosis (None: resolved, or not diagnosed)."""
        return None if self.diagnosis is None else self.diagnosis.primary

    def answer(self) -> tuple[str | None, str | None]:
        """The change the diagnosis recommends first and its predicted effect, as the report's headline says them
        (:func:`kvpilot.diagnose.report.headline`): ``("--max-num-seqs 4 -> 16", "predicted requests/s 2.78 ->
        5.01, ...")``; ``(None, None)`` without a recommendation.
        """
        d = self.primary
        if d is None or not d.recommendations:
            return None, None
        rec = d.recommendations[0]
        now = d.replay.predicted if d.replay is not None and d.replay.matches else None
        return one_line(change_text(rec), 500), one_line(predicted_effect(rec, now), 500)

    def to_json(self) -> JsonObject:
        """``{"fingerprint", "alertname", "status", "target", "cached", "change", "predicted_effect", "diagnosis",
        "error"}``: the change and its effect are :meth:`answer`'s (null without a recommendation).
        """
        change, effect = self.answer()
        return {
            "fingerprint": self.fingerprint,
            "alertname": self.alertname,
            "status": self.status,
            "target": None if self.target is None else {**self.target.to_json()},
            "cached": self.cached,
            "change": change,
            "predicted_effect": effect,
            "diagnosis": None if self.diagnosis is None else self.diagnosis.doc,
            "error": self.error,
        }
