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
``--against DIR`` also runs every command from another checkout (e.g. ``git worktree add /tmp/old main``;
its ``operator/`` goes first on ``PYTHONPATH``), interleaved in the same loop, and prints its CPU
time beside: a before/after comparison at the same load. ``--phases`` prints instead where one
``render`` of the example spends its CPU, step by step (imports, validator build, template compile).
Target: every command <= 100 ms on an idle machine.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
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
#: ``--phases``: where one ``render`` of the example spends its CPU, in a fresh interpreter, step by step
#: (each import includes only what the steps before it did not load; a first and a second call of
#: the same function: the difference is what the first call builds, validators or templates).
PHASES = """
import json, sys, time
clock = time.process_time
marks = [("interpreter start-up", clock())]
def mark(what):
    marks.append((what, clock()))
import click; mark("import click")
import kvpilot.cli; mark("import kvpilot.cli")
import yaml; mark("import yaml")
import jinja2; mark("import jinja2")
from pydantic import BaseModel; mark("from pydantic import BaseModel")
import importlib.metadata; mark("import importlib.metadata (pydantic's plugin loader, at a model's first build)")
list(importlib.metadata.entry_points(group="pydantic")); mark("the plugin scan (what PYDANTIC_DISABLE_PLUGINS skips)")
import pydantic.alias_generators, pydantic.fields, pydantic.functional_validators, pydantic.main
mark("import the rest of pydantic the models use")
import kvpilot.api.models; mark("import kvpilot.api.models (its classes; validators deferred)")
from kvpilot.api import parse_resource; import kvpilot.api.validation; mark("import kvpilot.api validation, rules")
from kvpilot.render import render_objects; mark("import kvpilot.render")
with open(sys.argv[1], encoding="utf-8") as fh:
    doc = [d for d in yaml.safe_load_all(fh.read()) if d is not None][0]
mark("read the example (yaml.safe_load_all, as the command)")
name, namespace, spec = parse_resource(doc); mark("parse_resource, 1st call (builds the validators)")
parse_resource(doc); mark("parse_resource, 2nd call")
items = render_objects(name, namespace or "default", spec); mark("render_objects, 1st call (compiles the templates)")
render_objects(name, namespace or "default", spec); mark("render_objects, 2nd call")
yaml.safe_dump({"items": items}, sort_keys=False, width=120); mark("yaml.safe_dump of the result")
rows = [(b, (y - x) * 1000) for (_, x), (b, y) in zip(marks, marks[1:])]
print(json.dumps([("interpreter start-up", marks[0][1] * 1000), *rows]))
"""

#: command -> the library floor it is compared with
LIBRARY_FLOOR = {" ".join(RENDER): "render's libraries", " ".join(KV): "kv's libraries"}


def child_env(pycache: str, source: Path | None = None) -> dict[str, str]:
    """The environment of every child: bytecode read from and written to ``pycache`` (see the module doc);
    ``source``: a checkout whose ``operator/`` package is imported instead of the installed one.
    """
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPYCACHEPREFIX"] = pycache
    if source is not None:
        env["PYTHONPATH"] = os.pathsep.join([str(source / "operator"), *filter(None, [env.get("PYTHONPATH")])])
    return env


def timed(argv: list[str], env: dict[str, str]) -> tuple[float, float]:
    """``(seconds from spawn to exit, CPU seconds user+system)`` of ``argv`` (output discarded).

    The exit is awaited with a blocking ``os.wait4``, which returns the moment the child ends and gives its
    own resource usage. Not ``subprocess.run(..., timeout=...)``: with a timeout, ``Popen.wait`` polls with
    sleeps that double from 0.5 ms up to 50 ms, so a child ending at 65 ms was seen at 113.5 ms and every
    wall time came out rounded up to 31.5, 63.5, 113.5, 163.5 ms, ... (CPython ``Lib/subprocess.py``,
    ``Popen._wait``). A timer kills a child still running after 60 s.
    """
    t0 = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    killer = threading.Timer(60, proc.kill)
    killer.start()
    try:
        _, status, usage = os.wait4(proc.pid, 0)
    finally:
        killer.cancel()
    elapsed = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)  # reaped here: Popen must not wait for it again
    return elapsed, usage.ru_utime + usage.ru_stime


def imported(argv: list[str], env: dict[str, str]) -> tuple[int, list[str]]:
    """``(modules imported, heavy top-level packages among them)`` of one run of ``argv``."""
    out = subprocess.run(
        [argv[0], "-X", "importtime", *argv[1:]], capture_output=True, text=True, check=False, timeout=60, env=env
    ).stderr
    names = [line.rsplit("|", 1)[1].strip() for line in out.splitlines() if line.startswith("import time:")][1:]
    return len(names), sorted({n.split(".")[0] for n in names if n.split(".")[0] in HEAVY})


def phases(repeat: int, env: dict[str, str]) -> None:
    """Print :data:`PHASES`' median CPU ms per step over ``repeat`` fresh interpreters."""
    runs = [
        json.loads(
            subprocess.run(
                [sys.executable, "-c", PHASES, str(EXAMPLE)], capture_output=True, text=True, check=True, env=env
            ).stdout
        )
        for _ in range(repeat + 1)
    ][1:]  # the first run fills the bytecode cache
    print(f"render of {EXAMPLE.name}, step by step: median CPU ms of {repeat} runs")
    for i, (step, _) in enumerate(runs[0]):
        print(f"{statistics.median(run[i][1] for run in runs):7.1f}  {step}")
    print(f"{statistics.median(sum(ms for _, ms in run) for run in runs):7.1f}  total")


def shown(cmd: list[str]) -> str:
    """``kvpilot ARGS`` with file paths shortened to their names."""
    return "kvpilot " + " ".join(c if "/" not in c else Path(c).name for c in cmd)


def main() -> None:
    """Measure and print the table: median wall and CPU ms, CPU above the floors, modules, heavy imports."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--against", type=Path, metavar="DIR", help="another kvpilot checkout to compare with")
    ap.add_argument("--phases", action="store_true", help="only: where render's CPU goes, step by step")
    args = ap.parse_args()
    if args.phases:
        with tempfile.TemporaryDirectory(prefix="kvpilot-pycache-") as pycache:
            phases(args.repeat, child_env(pycache))
        return
    runs: dict[str, list[tuple[float, float]]] = {}
    with tempfile.TemporaryDirectory(prefix="kvpilot-pycache-") as pycache:
        env = child_env(pycache)
        floors = {label: [sys.executable, "-c", code] for label, code in FLOORS.items()}
        commands = {" ".join(cmd): KVPILOT + cmd for cmd in COMMANDS}
        cases = [(label, argv, env) for label, argv in [*floors.items(), *commands.items()]]
        if args.against is not None:
            other = child_env(pycache, args.against.resolve())
            cases += [("against " + label, argv, other) for label, argv in commands.items()]
        for _, argv, case_env in cases:  # warm-up: fills the bytecode cache
            timed(argv, case_env)
        load_before = os.getloadavg()[0]
        for _ in range(args.repeat):
            for label, argv, case_env in cases:
                runs.setdefault(label, []).append(timed(argv, case_env))
        load_after = os.getloadavg()[0]
        counts = {label: imported(argv, env) for label, argv in commands.items()}

    def med(label: str, i: int) -> float:
        return statistics.median(r[i] for r in runs[label]) * 1000

    base = med("python -c pass", 1)
    print(
        f"median of {args.repeat} (ms); load average {load_before:.1f} before, {load_after:.1f} after; "
        f"python {sys.version.split()[0]}"
    )
    against = f" {'CPU of ' + str(args.against)}" if args.against is not None else ""
    print(f"{'':<44} {'wall':>6} {'CPU':>6} {'-pass':>6} {'-libs':>6} {'modules':>8}  heavy imports{against}")
    for label in FLOORS:
        print(f"{'floor: ' + label:<44} {med(label, 0):>6.0f} {med(label, 1):>6.0f} {med(label, 1) - base:>6.0f}")
    for cmd in COMMANDS:
        label = " ".join(cmd)
        n, heavy = counts[label]
        libs = LIBRARY_FLOOR.get(label)
        above_libs = f"{med(label, 1) - med(libs, 1):>6.0f}" if libs else f"{'':>6}"
        cells = f"{med(label, 0):>6.0f} {med(label, 1):>6.0f} {med(label, 1) - base:>6.0f} {above_libs} {n:>8}"
        other_cpu = f"  {med('against ' + label, 1):.0f}" if args.against is not None else ""
        print(f"{shown(cmd)[:44]:<44} {cells}  {' '.join(heavy) or '-'}{other_cpu}")
    print("-pass: CPU above the interpreter floor; -libs: CPU above the command's library floor")


if __name__ == "__main__":
    main()
