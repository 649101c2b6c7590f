"""The demo's alert section on its own: a real Prometheus fires VLLMMaxNumSeqsCap, the hook diagnoses it."""

from __future__ import annotations

import contextlib
import io
import re

import pytest
from rich.console import Console

from kvpilot.commands.demo import DemoContext
from kvpilot.commands.demo_alerts import section_alerts
from tests.conftest import require_tool


@pytest.mark.prometheus
def test_the_alert_section_goes_from_rule_to_diagnosis():
    require_tool("prometheus")
    require_tool("promtool")
    out = io.StringIO()
    with contextlib.ExitStack() as stack:
        ctx = DemoContext(console=Console(file=out, width=100), stack=stack, pod_name="qwen-experiment-58343")
        section_alerts(ctx)
    text = " ".join(out.getvalue().split())
    [fired] = re.findall(r"VLLMMaxNumSeqsCap \((warning|critical):", text)
    assert "fired in a real Prometheus after" in text
    assert "limit_source=kvpilot_vllmserver_limit" in text
    # the scenario's cap is 4 (kvpilot.engine.scenarios) and the diagnosis says so
    # the alert that fired and the hook's diagnosis of it say one severity
    assert f"max_num_seqs_cap ({fired}, confidence" in text
    # and the change the hook's answer leads with: the cap of 4 raised
    assert re.search(r"change --max-num-seqs 4 -> \d+", text)
    assert "of 4" in text
    # read from the operator's limits metric in the same Prometheus, not inferred from the gauges
    assert "of 4 (kvpilot_vllmserver_limit)" in text
