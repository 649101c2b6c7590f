"""Every verdict right on recordings made by vLLM 0.29.0's own Scheduler, OutputProcessor and stat logger.

tests/fixtures/recordings/vllm/PROVENANCE.md: each file is vLLM's own Prometheus output while its V1
scheduler ran one engine scenario's flags. The verdict must be the scenario's with the flags the server
runs with, and without any limit flag (limits inferred from the gauges, at lower confidence).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from kvpilot.cli import cli
from tests.integration.diagnose.scenario_flags import EXPECTED, scenario_cli_args
from tests.reference.vllm_recordings import VERDICT_SCENARIOS

VLLM = Path(__file__).resolve().parents[2] / "fixtures" / "recordings" / "vllm"
#: recording file -> engine scenario (the generator's own table, PROVENANCE.md)
FILES = VERDICT_SCENARIOS


def diagnose(path: Path, *flags: str) -> dict:
    result = CliRunner().invoke(
        cli, ["diagnose", "--no-what-if", "--recording", str(path), "--no-kube", "-o", "json", *flags]
    )
    return json.loads(result.output)["targets"][0]


@pytest.mark.parametrize("name", sorted(FILES))
def test_vllm_recording_with_the_servers_flags(name):
    target = diagnose(VLLM / f"{name}.om", *scenario_cli_args(FILES[name]))
    assert target["verdict"] == EXPECTED[FILES[name]], target["evidence"]
    assert "inferred" not in " ".join(target["evidence"])


@pytest.mark.parametrize("name", sorted(FILES))
def test_vllm_recording_without_limit_flags(name):
    target = diagnose(VLLM / f"{name}.om")
    assert target["verdict"] == EXPECTED[FILES[name]], target["evidence"]


def test_budget_cap_on_vllm_output_is_told_apart_by_the_mean_step():
    # vLLM records a prefill chunk only when its prefill completes, so no step sits in the budget's bucket;
    # the mean step (_sum / _count) is still the budget: 256 with the flag, and the inferred budget without
    target = diagnose(VLLM / "token-budget-cap.om")
    assert target["signals"]["inferred_max_num_batched_tokens"] == 256
    assert target["signals"]["tokens_per_step_avg"] == pytest.approx(256, rel=0.01)
    assert target["confidence"] == 0.6
    # max_num_seqs 4 inferred from running flat at 4 with decode-only steps
    target = diagnose(VLLM / "max-num-seqs-cap.om")
    assert target["signals"]["inferred_max_num_seqs"] == 4
    assert "max_num_seqs 4 (inferred; vLLM's default 256 not read)" in " ".join(target["evidence"])
