"""CLI start-up: whole-process wall time of every ``kvpilot`` subcommand's ``--help``, ``--version``,
``render`` and ``kv`` on an example, beside the interpreter's own start-up measured in the same run.

Each command runs ``--repeat`` times (default 7), interleaved with the floors, and the median is
printed with the number of modules it imported (``python -X importtime``, counted once per
command) and the heavy third-party packages among them. Floors: ``python -c pass`` (the
interpreter alone) and ``python -c "import click"`` (the CLI library every command needs).
The machine's load moves every figure; the differences to the floor are what the code controls.

Run from the repository root:  .venv/bin/python benchmarks/cli_startup.py
Target: every command <= 100 ms on an idle machine.
"""

from __future__ import annotations

import argparse
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
KVPILOT = [sys.executable, "-c", "from kvpilot.cli import main; main()"]  # what the console script runs
CONFIG = ROOT / "operator" / "kvpilot" / "data" / "Qwen2.5-1.5B-Instruct.config.json"
EXAMPLE = ROOT / "manifests" / "examples" / "experiment.yaml"
HEAVY = ("kopf", "kubernetes", "aiohttp", "pydantic", "jinja2", "yaml", "rich", "prometheus_client", "huggingface_hub")
COMMANDS = [
    ["--help"],
    ["--version"],
    *[[c, "--help"] for c in ("operator", "render", "kv", "simulate", "diagnose", "alert-hook", "demo")],
    ["render", str(EXAMPLE)],
    ["kv", str(CONFIG), "--kv-memory", "2.5GiB", "--max-model-len", "8192"],
]
FLOORS = {
    "python -c pass": [sys.executable, "-c", "pass"],
    "python -c 'import click'": [sys.executable, "-c", "import click"],
}


def wall(argv: list[str]) -> tuple[float, float]:
    """``(seconds from spawn to exit, CPU seconds user+system)`` of ``argv`` (output discarded).

    CPU time moves less than wall time with the machine's load (no waiting for a core).
    """
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False, timeout=60)
    elapsed = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return elapsed, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def imported(argv: list[str]) -> tuple[int, list[str]]:
    """``(modules imported, heavy top-level packages among them)`` of one run of ``argv``."""
    out = subprocess.run(
        [argv[0], "-X", "importtime", *argv[1:]], capture_output=True, text=True, check=False, timeout=60
    ).stderr
    names = [line.rsplit("|", 1)[1].strip() for line in out.splitlines() if line.startswith("import time:")][1:]
    return len(names), sorted({n.split(".")[0] for n in names if n.split(".")[0] in HEAVY})


def main() -> None:
    """Measure and print a table: command, median ms, ms above the interpreter floor, modules, heavy."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=7)
    args = ap.parse_args()
    runs: dict[str, list[tuple[float, float]]] = {}
    for _ in range(args.repeat):
        for label, argv in FLOORS.items():
            runs.setdefault(label, []).append(wall(argv))
        for cmd in COMMANDS:
            runs.setdefault(" ".join(cmd), []).append(wall(KVPILOT + cmd))

    def med(label: str, i: int) -> float:
        return statistics.median(r[i] for r in runs[label]) * 1000

    print(f"median of {args.repeat} (ms): wall, CPU (user+sys), CPU above the floor python -c pass")
    print(f"{'command':<40} {'wall':>6} {'CPU':>6} {'+floor':>7} {'modules':>8}  heavy imports")
    for label in FLOORS:
        print(
            f"{label:<40} {med(label, 0):>6.0f} {med(label, 1):>6.0f} {med(label, 1) - med('python -c pass', 1):>7.0f}"
        )
    for cmd in COMMANDS:
        label = " ".join(cmd)
        n, heavy = imported(KVPILOT + cmd)
        shown = "kvpilot " + " ".join(c if "/" not in c else Path(c).name for c in cmd)
        extra = med(label, 1) - med("python -c pass", 1)
        cells = f"{med(label, 0):>6.0f} {med(label, 1):>6.0f} {extra:>7.0f} {n:>8}"
        print(f"{shown[:40]:<40} {cells}  {' '.join(heavy) or '-'}")


if __name__ == "__main__":
    main()
