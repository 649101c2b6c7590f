"""A window that covers only the start of an incident gives the incident's verdict, without the server's flags.

An alert fires minutes into an incident, so the diagnosis it asks for often sees a window that began before
the trouble did. Each scenario recording (the engine model's and vLLM 0.29.0's own, both in
tests/fixtures/recordings, 300 s ending at 1,764,600,000) is diagnosed with the 5 m default window ending
120 s, 210 s and 300 s into it, so the window holds the recording's first 120 s, 210 s or all of it.
Expected verdicts are the recordings' own (tests/fixtures/recordings/PROVENANCE.md and vllm/PROVENANCE.md).

The 210 s cut of max-num-seqs-cap once read ``token_budget_cap``: its steps averaged 8.04 tokens, just over
2 x its 4 running requests, so the decode-only test gave way to a budget of 8, though its 509-token prompts
were prefilled in 1.2 step times (docs/diagnosis.md, "Unknown limits").
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from kvpilot.cli import cli

RECORDINGS = Path(__file__).resolve().parents[2] / "fixtures" / "recordings"
START = 1_764_600_000.0 - 300
#: recording -> the verdict it shows
VERDICTS = {
    "scenario_kv-exhaustion.om": "kv_cache_exhaustion",
    "scenario_max-num-seqs-cap.om": "max_num_seqs_cap",
    "scenario_token-budget-cap.om": "token_budget_cap",
    "scenario_compute-bound.om": "compute_bound",
    "scenario_prefix-thrash.om": "prefix_cache_ineffective",
    "scenario_seed-lru.om": "prefix_cache_ineffective",
    "scenario_healthy.om": "healthy",
    "scenario_idle.om": "idle",
    "vllm/kv-exhaustion.om": "kv_cache_exhaustion",
    "vllm/max-num-seqs-cap.om": "max_num_seqs_cap",
    "vllm/token-budget-cap.om": "token_budget_cap",
    "vllm/compute-bound.om": "compute_bound",
    "vllm/prefix-ineffective.om": "prefix_cache_ineffective",
    "vllm/healthy.om": "healthy",
    "vllm/idle.om": "idle",
}


@pytest.mark.parametrize("seconds_in", [120, 210, 300])
@pytest.mark.parametrize("recording", sorted(VERDICTS))
def test_an_early_window_gives_the_recordings_verdict_without_flags(recording: str, seconds_in: int) -> None:
    result = CliRunner().invoke(
        cli,
        [
            "diagnose",
            "--no-what-if",
            "--recording",
            str(RECORDINGS / recording),
            "--end",
            str(START + seconds_in),
            "-o",
            "json",
        ],
    )
    assert result.exit_code in (0, 1, 2), result.output
    (target,) = json.loads(result.output)["targets"]
    assert target["verdict"] == VERDICTS[recording], target["evidence"]
