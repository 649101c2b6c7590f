"""Recordings for the ``VLLMMaxNumSeqsCap`` fallback, produced by vLLM 0.29.0's own scheduler and stat logger.

vLLM reports ``vllm:num_requests_running`` after a step removed its finished requests and before the next
step admits waiting ones (``Scheduler.update_from_output`` -> ``make_stats``,
``vllm/v1/core/sched/scheduler.py``), so a server pinned at ``max_num_seqs`` shows dips: one scrape in k
reads ``max_num_seqs - 1`` when requests finish often. These recordings put the rule's fallback (running
averaged within 0.5 of its window maximum, kvpilot.alerts.rules.Signals.pinned_flat) on both sides of
its threshold with traffic vLLM's scheduler ran, on one server: ``max_num_seqs 4``, Llama-3.1-8B on an L4
(a step of about 55 ms, kvpilot/engine/hardware.py), short outputs of 8-24 tokens (a request finishes
every few steps):

- ``pinned-dips``: Poisson arrivals at 6 req/s, above what 4 slots serve (about 4.5 req/s): running is
  at the cap in every step's schedule, the queue grows, and the gauge dips whenever a request just
  finished;
- ``bursts``: the same arrivals only in the first 20 s of each minute: a queue forms in every burst and
  drains after it, so running sits at the cap only part of each window (a burst, not a pinned cap).

Each file is the stat logger's registry read every 15 s for 600 simulated seconds (timestamps ending at
1,764,600,000), plus ``<name>.truth.json``: from vLLM's scheduler state, per 15 s sample, the share of
steps whose schedule ran ``max_num_seqs`` requests with others waiting (the ground truth of "pinned").

Regenerate (the vLLM venv from ``make vllm-ref``)::

    .venv/bin/python -m tests.reference.alert_recordings [--out tests/fixtures/recordings/vllm-alerts]
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import Any

from kvpilot.engine import scenarios
from tests.reference.harness import driver_spec, run_vllm
from tests.reference.vllm_recordings import snapshot_families

OUT = Path(__file__).resolve().parent.parent / "fixtures" / "recordings" / "vllm-alerts"
DURATION, INTERVAL, END = 600.0, 15.0, 1_764_600_000.0
CAP = 4
OVERRIDES: dict[str, Any] = {
    "gpu": "l4",
    "model": "llama-3.1-8b",
    "max_num_seqs": CAP,
    "max_model_len": 4096,
    "workload": {
        "type": "poisson",
        "rate": 6.0,
        "duration": DURATION,
        "seed": 7,
        "prompt_len": {"dist": "uniform", "min": 100, "max": 300},
        "output_len": {"dist": "uniform", "min": 8, "max": 24},
    },
}
#: name -> keeps an arrival at time t (seconds)
SHAPES = {"pinned-dips": lambda _t: True, "bursts": lambda t: t % 60.0 < 20.0}


def spec(name: str) -> dict[str, Any]:
    """The driver document for one recording."""
    engine, workload = scenarios.build(scenarios.resolve("max-num-seqs-cap", OVERRIDES))
    keep = SHAPES[name]
    requests = [r for r in workload.pop_arrivals(DURATION) if r.arrival_time <= DURATION and keep(r.arrival_time)]
    return driver_spec(name, engine, requests, served_model_name="llama", snapshot_interval=INTERVAL, until=DURATION)


def truth(result: dict[str, Any]) -> list[dict[str, float]]:
    """Per sample interval: the share of steps that scheduled ``CAP`` requests while others waited."""
    out = []
    for k in range(1, int(DURATION // INTERVAL) + 1):
        lo, hi = (k - 1) * INTERVAL, k * INTERVAL
        steps = [s for s in result["steps"] if lo <= s["start"] < hi]
        full = [s for s in steps if len(s["scheduled"]) >= CAP and s["waiting"] > 0]
        out.append(
            {"t": END - DURATION + hi, "steps": len(steps), "pinned_share": len(full) / len(steps) if steps else 0}
        )
    return out


def generate(python: str) -> dict[str, str]:
    """``{file name: text}``: each recording and its ground truth."""
    from kvpilot.metrics.recording import recording_text

    names = list(SHAPES)
    answer = run_vllm(python, [spec(n) for n in names], timeout=3600)
    files = {}
    for name, result in zip(names, answer["results"], strict=True):
        snaps = [
            (END - DURATION + t, snapshot_families(snap)) for t, snap in result["snapshots"] if t <= DURATION + 1e-9
        ]
        files[f"{name}.om"] = recording_text(snaps)
        files[f"{name}.truth.json"] = json.dumps({"vllm": answer["vllm_version"], "samples": truth(result)}, indent=1)
    return files


def main() -> None:
    """Write the recordings."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument(
        "--python",
        default=os.environ.get("KVPILOT_VLLM_PYTHON")
        or str(Path(os.environ.get("KVPILOT_VLLM_VENV") or Path.home() / ".cache/kvpilot/vllm-0.29.0") / "bin/python"),
    )
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    for name, text in generate(args.python).items():
        (args.out / name).write_text(text)


if __name__ == "__main__":
    main()
