"""What ``kvpilot alert-hook`` answers for one alert, typed: the sinks and the hook's metrics read these objects, and
the HTTP answer is their :meth:`AlertResult.to_json`.

Pure data, no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kvpilot.alerts.payload import Target
from kvpilot.diagnose.model import Diagnosis, Report


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

    def to_json(self) -> dict[str, Any]:
        """``{"fingerprint", "alertname", "status", "target", "cached", "diagnosis", "error"}``."""
        return {
            "fingerprint": self.fingerprint,
            "alertname": self.alertname,
            "status": self.status,
            "target": None if self.target is None else self.target.to_json(),
            "cached": self.cached,
            "diagnosis": None if self.diagnosis is None else self.diagnosis.doc,
            "error": self.error,
        }
