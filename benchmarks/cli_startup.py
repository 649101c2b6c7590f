"""CLI start-up: whole-process time of every ``kvpilot`` subcommand's ``--help``, ``--version``, and
``render`` and ``kv`` on an example, beside floors measured in the same run.

Each command runs ``--repeat`` times (default 7), interleaved with the floors; the median wall time
(spawn to exit) and CPU time (user + system of the child: it moves much less than wall time with
the machine's load) are printed with the number of modules the command imported
(``python -X importtime``) and the heavy third-party packages among them.

Floors, each a fresh interpreter:

- ``python -c pass``: the interpreter alone;
- ``import click``: the CLI library every command needs;
- per command, the third-party libraries its work needs and nothing of kvpilot (``render``: click,
  PyYAML, Jinja2 and a one-field pydantic model, whose first build loads pydantic's plugin
  discovery; ``kv``: click and rich's console and table). What a command costs above its library
  floor is kvpilot's own code and its use of those libraries.

Bytecode: the children run with a private ``PYTHONPYCACHEPREFIX`` (a temporary folder) and may
write it, and one untimed warm-up run of every command fills it first, so each module is read
from ``.pyc`` as in an installed wheel (pip compiles at install). A source checkout run under
``PYTHONDONTWRITEBYTECODE=1`` would otherwise compile kvpilot's modules on every start.

Run from the repository root:  .venv/bin/python benchmarks/cli_startup.py
Target: every command <= 100 ms on an idle machine.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
KVPILOT = [sys.executable, "-c", "from kvpilot.cli import main; main()"]  # what the console script runs
CONFIG = ROOT / "operator" / "kvpilot" / "data" / "Qwen2.5-1.5B-Instruct.config.json"
EXAMPLE = ROOT / "manifests" / "examples" / "experiment.yaml"
HEAVY = ("kopf", "kubernetes", "aiohttp", "pydantic", "jinja2", "yaml", "rich", "prometheus_client", "huggingface_hub")
SUBCOMMANDS = ("operator", "render", "kv", "simulate", "diagnose", "alert-hook", "demo")
RENDER = ["render", str(EXAMPLE)]
KV = ["kv", str(CONFIG), "--kv-memory", "2.5GiB", "--max-model-len", "8192"]
COMMANDS = [["--help"], ["--version"], *[[c, "--help"] for c in SUBCOMMANDS], RENDER, KV]
FLOORS = {
    "python -c pass": "pass",
    "import click": "import click",
    # pydantic's first model build is part of its own cost (plugin discovery through importlib.metadata)
    "render's libraries": "import click, yaml, jinja2\nfrom pydantic import BaseModel\nclass M(BaseModel):\n x: int",
    "kv's libraries": "import click, rich.console, rich.table",
}
#: command -> the library floor it is compared with
LIBRARY_FLOOR = {" ".join(RENDER): "render's libraries", " ".join(KV): "kv's libraries"}


def child_env(pycache: str) -> dict[str, str]:
    """The environment of every child: bytecode read from and written to ``pycache`` (see the module doc)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPYCACHEPREFIX"] = pycache
    return env


def timed(argv: list[str], env: dict[str, str]) -> tuple[float, float]:
    """``(seconds from spawn to exit, CPU seconds user+system)`` of ``argv`` (output discarded)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False, timeout=60, env=env)
    elapsed = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return elapsed, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def imported(argv: list[str], env: dict[str, str]) -> tuple[int, list[str]]:
    """``(modules imported, heavy top-level packages among them)`` of one run of ``argv``."""
    out = subprocess.run(
        [argv[0], "-X", "importtime", *argv[1:]], capture_output=True, text=True, check=False, timeout=60, env=env
    ).stderr
    names = [line.rsplit("|", 1)[1].strip() for line in out.splitlines() if line.startswith("import time:")][1:]
    return len(names), sorted({n.split(".")[0] for n in names if n.split(".")[0] in HEAVY})


def shown(cmd: list[str]) -> str:
    """``kvpilot ARGS`` with file paths shortened to their names."""
    return "kvpilot " + " ".join(c if "/" not in c else Path(c).name for c in cmd)


def main() -> None:
    """Measure and print the table: median wall and CPU ms, CPU above the floors, modules, heavy imports."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=7)
    args = ap.parse_args()
    runs: dict[str, list[tuple[float, float]]] = {}
    with tempfile.TemporaryDirectory(prefix="kvpilot-pycache-") as pycache:
        env = child_env(pycache)
        floors = {label: [sys.executable, "-c", code] for label, code in FLOORS.items()}
        commands = {" ".join(cmd): KVPILOT + cmd for cmd in COMMANDS}
        for argv in [*floors.values(), *commands.values()]:  # warm-up: fills the bytecode cache
            timed(argv, env)
        load_before = os.getloadavg()[0]
        for _ in range(args.repeat):
            for label, argv in [*floors.items(), *commands.items()]:
                runs.setdefault(label, []).append(timed(argv, env))
        load_after = os.getloadavg()[0]
        counts = {label: imported(argv, env) for label, argv in commands.items()}

    def med(label: str, i: int) -> float:
        return statistics.median(r[i] for r in runs[label]) * 1000

    base = med("python -c pass", 1)
    print(
        f"median of {args.repeat} (ms); load average {load_before:.1f} before, {load_after:.1f} after; "
        f"python {sys.version.split()[0]}"
    )
    print(f"{'':<44} {'wall':>6} {'CPU':>6} {'-pass':>6} {'-libs':>6} {'modules':>8}  heavy imports")
    for label in FLOORS:
        print(f"{'floor: ' + label:<44} {med(label, 0):>6.0f} {med(label, 1):>6.0f} {med(label, 1) - base:>6.0f}")
    for cmd in COMMANDS:
        label = " ".join(cmd)
        n, heavy = counts[label]
        libs = LIBRARY_FLOOR.get(label)
        above_libs = f"{med(label, 1) - med(libs, 1):>6.0f}" if libs else f"{'':>6}"
        cells = f"{med(label, 0):>6.0f} {med(label, 1):>6.0f} {med(label, 1) - base:>6.0f} {above_libs} {n:>8}"
        print(f"{shown(cmd)[:44]:<44} {cells}  {' '.join(heavy) or '-'}")
    print("-pass: CPU above the interpreter floor; -libs: CPU above the command's library floor")


if __name__ == "__main__":
    main()
