"""Every engine scenario's recording gets its verdict (tests/fixtures/recordings/scenario_*.om).

The expected verdicts are each scenario's signature (kvpilot/engine/scenarios.py docstring);
the limits are the flags the simulated server runs with, as an operator passes them.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from kvpilot.cli import cli
from tests.integration.diagnose.scenario_flags import EXPECTED, scenario_cli_args

RECORDINGS = Path(__file__).resolve().parents[2] / "fixtures" / "recordings"
#: exit status per verdict class: ok -> 0, warning -> 1, critical -> 2 (docs/user-guide.md)
OK = {"healthy", "idle"}


@pytest.mark.parametrize("scenario", sorted(EXPECTED))
def test_scenario_recording_gets_its_verdict(scenario):
    import json

    args = [
        "diagnose",
        "--no-what-if",
        "--recording",
        str(RECORDINGS / f"scenario_{scenario}.om"),
        "--no-kube",
        "-o",
        "json",
        *scenario_cli_args(scenario),
    ]
    result = CliRunner().invoke(cli, args)
    report = json.loads(result.output)
    verdicts = [t["verdict"] for t in report["targets"]]
    assert verdicts == [EXPECTED[scenario]], report["targets"][0]["evidence"]
    assert (result.exit_code == 0) == (EXPECTED[scenario] in OK)
    assert result.exit_code in (0, 1, 2)


def test_seed_lru_reproduces_the_reference_hits():
    """docs/background.md §9: 0, 0, 21,488 hit tokens over three passes -> 21,488 in the window."""
    import json

    args = [
        "diagnose",
        "--no-what-if",
        "--recording",
        str(RECORDINGS / "scenario_seed-lru.om"),
        "--no-kube",
        "-o",
        "json",
        *scenario_cli_args("seed-lru"),
    ]
    target = json.loads(CliRunner().invoke(cli, args).output)["targets"][0]
    assert target["signals"]["prefix_hits_increase"] == 21488
    assert "21,520 tokens" in " ".join(target["evidence"])  # the KV capacity it is compared with


@pytest.mark.parametrize("scenario", sorted(EXPECTED))
def test_scenario_recording_without_limit_flags_names_the_right_limit(scenario):
    """No limit flags: vLLM's defaults are assumed, and the binding limit is inferred from the gauges.

    max-num-seqs-cap: running flat at 4 (avg 3.87 >= 3.5) with 8-token steps (decode only) -> max_num_seqs 4;
    token-budget-cap: 256-token steps with 5 running, a queue and KV room -> a budget of 256;
    compute-bound: 63,927-token steps > the 8,192 default -> a budget of at least that, >= 8,192.
    """
    import json

    args = [
        "diagnose",
        "--no-what-if",
        "--recording",
        str(RECORDINGS / f"scenario_{scenario}.om"),
        "--no-kube",
        "-o",
        "json",
    ]
    target = json.loads(CliRunner().invoke(cli, args).output)["targets"][0]
    assert target["verdict"] == EXPECTED[scenario], target["evidence"]
    if scenario in ("max-num-seqs-cap", "token-budget-cap", "compute-bound"):
        assert "inferred" in " ".join(target["evidence"])
        assert target["confidence"] <= 0.6
