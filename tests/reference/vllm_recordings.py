"""Recordings of metrics vLLM itself produced: vLLM 0.29.0's scheduler and stat logger, simulated time.

For every diagnosis verdict's scenario (``kvpilot.engine.scenarios``: its flags, its Poisson
arrivals, the step time of its GPU/model from ``kvpilot/engine/hardware.py``), the reference
driver (``vllm_driver.py``, in the vLLM venv) runs vLLM's own ``Scheduler``, ``OutputProcessor`` and
``PrometheusStatLogger`` for 300 simulated seconds and reads the stat logger's registry every 10 s;
the snapshots are written in the project's recording format (``kvpilot.metrics.recording``) with
timestamps ending at 1,764,600,000 (2025-12-01T14:40:00Z), like the engine's scenario recordings.

Regenerate (the vLLM venv from ``make vllm-ref``):

    .venv/bin/python -m tests.reference.vllm_recordings [--out tests/fixtures/recordings/vllm]

``tests/reference/test_vllm_recordings.py`` checks the committed files equal what this writes.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from prometheus_client.metrics_core import Metric

from kvpilot.engine import scenarios
from kvpilot.metrics.recording import recording_text
from tests.reference.harness import driver_spec, run_vllm

OUT = Path(__file__).resolve().parent.parent / "fixtures" / "recordings" / "vllm"

#: verdict -> scenario whose metrics show it
VERDICT_SCENARIOS = {
    "kv-exhaustion": "kv-exhaustion",
    "max-num-seqs-cap": "max-num-seqs-cap",
    "token-budget-cap": "token-budget-cap",
    "compute-bound": "compute-bound",
    "prefix-ineffective": "prefix-thrash",
    "healthy": "healthy",
    "idle": "idle",
}
DURATION = 300.0
INTERVAL = 10.0
END = 1_764_600_000.0


def scenario_spec(scenario: str) -> dict:
    """The driver document for one scenario: its engine's flags and step-time coefficients, its requests."""
    engine, workload = scenarios.build(scenarios.resolve(scenario, None))
    requests = [r for r in workload.pop_arrivals(DURATION) if r.arrival_time <= DURATION]
    return driver_spec(
        scenario,
        engine,
        requests,
        served_model_name=engine.config.model,
        snapshot_interval=INTERVAL,
        until=DURATION,
        record_steps=False,
    )


def snapshot_families(snapshot: list) -> list[Metric]:
    """A driver snapshot (``[[name, type, help, [[sample, labels, value], ...]], ...]``) as client families."""
    out = []
    for name, typ, doc, samples in snapshot:
        fam = Metric(name, doc, typ)
        for sample_name, labels, value in samples:
            fam.add_sample(sample_name, labels, value)
        out.append(fam)
    return out


def recording_from_result(result: dict) -> str:
    """A driver result's snapshots as recording text (timestamps ``END - DURATION + t``)."""
    snaps = [(END - DURATION + t, snapshot_families(snap)) for t, snap in result["snapshots"] if t <= DURATION + 1e-9]
    return recording_text(snaps)


def generate(python: str) -> dict[str, str]:
    """``{file name: recording text}`` for every verdict, from one driver run."""
    names = list(VERDICT_SCENARIOS.items())
    answer = run_vllm(python, [scenario_spec(sc) for _, sc in names], timeout=3600)
    return {
        f"{verdict}.om": recording_from_result(res) for (verdict, _), res in zip(names, answer["results"], strict=True)
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument(
        "--python",
        default=os.environ.get("KVPILOT_VLLM_PYTHON")
        or str(Path(os.environ.get("KVPILOT_VLLM_VENV") or Path.home() / ".cache/kvpilot/vllm-0.29.0") / "bin/python"),
    )
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    for name, text in generate(args.python).items():
        (args.out / name).write_text(text, encoding="utf-8")
        print(f"{args.out / name}: {len(text.splitlines())} lines")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
