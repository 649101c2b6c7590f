"""Prediction speed: the replay and what-ifs of one target over a 5-minute window (prints figures, not a test).

Run: .venv/bin/python benchmarks/what_if.py [--repeat 3]

For each recording vLLM 0.29.0's own scheduler and stat logger made (tests/fixtures/recordings/vllm/, 300 s each)
with a queue verdict: the diagnosis alone, then the replay (with its step-time calibration) and three candidate
what-ifs (the defaults for the binding limit, then replicas=2; no replicas search), each timed in wall and CPU
seconds, with the
engine's simulated seconds per wall second. Target: three candidates for one target within 2 s on
this 2-core machine, which needs the engine at or above 1,000x real time. Say the load (``uptime``) beside any
figure: the machine is shared.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

from kvpilot.advice.advise import Simulated, _calibrated_replay, _default_changes, _simulate
from kvpilot.advice.fit import fit_workload
from kvpilot.advice.observe import observed_binding
from kvpilot.advice.server import engine_config, step_time_prior
from kvpilot.advice.whatif import Change
from kvpilot.diagnose.run import Options, run

RECORDINGS = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "recordings" / "vllm"
#: recording -> (the flags the server ran with, its GPU): tests/integration/diagnose/scenario_flags.py
CASES = {
    "token-budget-cap.om": ({"max_num_seqs": 128, "max_num_batched_tokens": 256}, "H100"),
    "max-num-seqs-cap.om": ({"max_num_seqs": 4}, "H100"),
    "kv-exhaustion.om": ({"max_num_seqs": 256, "max_num_batched_tokens": 2048}, "L4"),
    "compute-bound.om": ({"max_num_batched_tokens": 65000}, "H100"),
}


def _clock() -> tuple[float, float]:
    return time.perf_counter(), time.process_time()


def bench(name: str, cli: dict[str, int], gpu: str) -> None:
    w0, c0 = _clock()
    opts = Options(recording=str(RECORDINGS / name), use_kube=False, cli_limits=cli, gpu_name=gpu, fit_signals=True)
    (diag,) = run(opts).targets
    w1, c1 = _clock()
    assert diag.basis is not None
    signals, limits = diag.basis.signals, diag.basis.limits
    step = step_time_prior(limits, str(diag.target.get("model_name")))
    config = engine_config(limits, step)
    fit = fit_workload(signals, limits, config.max_model_len)
    replay, step, config = _calibrated_replay(signals, limits, step, {}, config, fit, None, 0)
    w2, c2 = _clock()
    binding = observed_binding(signals, config.max_num_seqs, config.max_num_batched_tokens, None, diag.verdict)
    changes = [*_default_changes(diag, True, binding, config, True), Change.of(replicas=2)][:3]
    runs: list[Simulated] = [_simulate(c, config, limits, fit, None, 0) for c in changes]
    w3, c3 = _clock()
    simulated = fit.window_seconds * (step.runs + len(runs))
    print(
        f"{name}: {diag.verdict}; diagnosis {w1 - w0:.2f} s wall / {c1 - c0:.2f} s CPU; replay {w2 - w1:.2f} s wall / "
        f"{c2 - c1:.2f} s CPU ({step.runs} run(s), {replay.steps:,} steps, "
        f"{step.runs * fit.window_seconds / (c2 - c1):.0f}x real time per CPU s); "
        f"{len(runs)} what-ifs ({', '.join(r.change.text() for r in runs)}) {w3 - w2:.2f} s wall / "
        f"{c3 - c2:.2f} s CPU; "
        f"replay + what-ifs {w3 - w1:.2f} s wall / {c3 - c1:.2f} s CPU for {simulated:.0f} simulated s "
        f"({simulated / (c3 - c1):.0f}x real time per CPU s)"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=1)
    args = parser.parse_args()
    print(f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    for _ in range(args.repeat):
        for name, (cli, gpu) in CASES.items():
            bench(name, cli, gpu)
    print(f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
