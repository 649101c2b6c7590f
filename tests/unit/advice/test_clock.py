"""The server's own clock: where no GPU roofline describes the server (a CPU server), the replay's step time is
fitted from the window's metrics, a cost per step and a cost per token computed, and the report says which terms
were measured.

The window is the engine model's own server run with a clock of 8 ms a step + 0.15 ms a token (weights folded into
the step: ``weight_bytes`` 0; Qwen2.5-1.5B's 2 x 1.54e9 FLOP a token at 0.02076 of an H100's 989 TFLOP/s =
3.08e9 / 2.053e13 = 0.150 ms), loaded at 2, 6, 10, 4, 8 and 3 req/s a minute each so that tokens per step vary
across the sub-windows.
"""

from __future__ import annotations

import json
import random

import pytest
from click.testing import CliRunner

from kvpilot.cli import cli

PER_STEP_S, PER_TOKEN_S = 0.008, 0.150e-3


@pytest.fixture(scope="module")
def recording(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("clock")
    draw = random.Random(7)
    lines, t = [], 0.0
    for i, rate in enumerate([2, 6, 10, 4, 8, 3]):
        while True:
            t += draw.expovariate(rate)
            if t >= (i + 1) * 60.0:
                t = (i + 1) * 60.0
                break
            lines.append(
                {"arrival_time": t, "prompt_tokens": draw.randint(150, 250), "output_len": draw.randint(80, 120)}
            )
    (tmp / "trace.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    (tmp / "server.yaml").write_text(
        f"weight_bytes: 0\nstep_overhead: {PER_STEP_S}\ncompute_efficiency: 0.02076\nmodel: qwen2.5-1.5b\n"
        "gpu: h100-sxm\nmax_num_seqs: 64\nmax_num_batched_tokens: 2048\nkv_cache_tokens: 100000\n"
    )
    args = ["simulate", "--scenario-file", str(tmp / "server.yaml"), "--trace", str(tmp / "trace.jsonl")]
    args += ["--record", str(tmp / "w.om"), "--duration", "6m", "--interval", "5s", "--end", "1000000"]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    return tmp / "w.om"


def _replay(recording, gpu_name):
    args = ["diagnose", "--no-kube", "--recording", str(recording), "--window", "5m", "--gpu-name", gpu_name]
    args += ["--max-num-seqs", "64", "--max-num-batched-tokens", "2048", "--what-if-budget", "10m"]
    result = CliRunner().invoke(cli, [*args, "--what-if", "max_num_batched_tokens=4096", "-o", "json"])
    (target,) = json.loads(result.output)["targets"]
    return target["replay"]


def test_a_cpu_servers_clock_is_measured_from_its_window(recording):
    replay = _replay(recording, "cpu")
    step = replay["step_time"]
    assert step["source"] == "measured from the window"
    assert step["terms"] == {"per_step": "measured", "per_token": "measured", "per_context": "prior"}
    assert replay["matches"] is True, replay["misses"]
    (note,) = [n for n in replay["notes"] if n.startswith("Step time")]
    per_step_ms = float(note.split("windows of the window: ")[1].split(" ms a step")[0])
    per_token_us = float(note.split(" ms a step + ")[1].split(" us a token")[0])
    # the fit's per-step cost is the clock's 8 ms; its per-token cost the 150 us plus the attention each token's
    # context adds (up to ~300 tokens: 4 x 28 x 12 x 128 FLOP a pair at the same rate, about 2.5 us)
    assert per_step_ms == pytest.approx(PER_STEP_S * 1000, rel=0.1)
    assert per_token_us == pytest.approx(PER_TOKEN_S * 1e6, rel=0.15)


def test_the_measured_clock_reproduces_the_time_to_first_token_a_calibrated_roofline_misses(recording):
    # an H100 roofline (weights read once a step: flat) scaled to the same mean inter-token gap puts the prefill's
    # cost in the per-step part: its first tokens come far too early
    measured, roofline = _replay(recording, "cpu"), _replay(recording, "H100")
    assert roofline["step_time"]["terms"]["per_token"] == "calibrated"
    observed = measured["observed"]["ttft_mean_s"]
    assert measured["predicted"]["ttft_mean_s"] == pytest.approx(observed, rel=0.15)
    assert abs(roofline["predicted"]["ttft_mean_s"] - observed) > 0.5 * observed
