"""``make alert-walkthrough`` keeps working: its ``--shortened`` run (marked shortened copies of the rules, the
shipped Alertmanager configuration) gets VLLMMaxNumSeqsCap and VLLMTTFTHigh to the hook, and stops every process
it started. The shipped rules' own timing is measured by running it without ``--shortened`` (docs/alerting.md).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import require_tool

pytestmark = pytest.mark.prometheus
SCRIPT = Path(__file__).resolve().parents[3] / "scripts" / "alert-walkthrough.py"


def test_the_shortened_walkthrough_reaches_the_hook():
    require_tool("prometheus")
    require_tool("prometheus-alertmanager")
    out = subprocess.run(
        [sys.executable, str(SCRIPT), "--shortened", "--timeout", "4m"], capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert "rules: SHORTENED COPIES" in out.stdout
    for alert in ("VLLMMaxNumSeqsCap", "VLLMTTFTHigh"):
        (line, *_) = [ln for ln in out.stdout.splitlines() if alert in ln and "at the hook" in ln]
        # the hook's answer, as its log line carries it: the verdict, the change from the scenario's cap of 4
        # (kvpilot/engine/scenarios.py, max-num-seqs-cap) and the predicted effect
        assert "at the hook: max_num_seqs_cap (critical): change --max-num-seqs 4 -> " in line, line
        assert "; predicted requests/s " in line, line
    # the fallback without the operator's metric, and the critical variant of each (the queue grows)
    assert "limit_source=heuristic" in out.stdout
    assert "critical firing in Prometheus" in out.stdout
    logs = next(line.rsplit("logs in ", 1)[1] for line in out.stdout.splitlines() if "logs in " in line)
    alive = subprocess.run(["pgrep", "-f", logs], capture_output=True, text=True).stdout.split()
    assert alive == [], f"processes left running: {alive}"
