"""kvpilot diagnose vs vllm-doctor 0.6.0 on every engine scenario, through the same real Prometheus.

For each scenario of kvpilot.engine.scenarios this script:
1. records 5 minutes of the simulated server's metrics ending now (``kvpilot simulate S --record``);
2. backfills them with ``promtool tsdb create-blocks-from openmetrics`` and starts Prometheus 2.42
   on 127.0.0.1 (tests/support/prom.py);
3. runs ``kvpilot diagnose --prometheus URL`` with the flags the server runs with (what an operator
   knows: max_num_seqs, max_num_batched_tokens, max_model_len, GPU) and once without any flag;
4. runs ``vllm-doctor diagnose URL --since 5m -o json`` (installed with pip into its own venv,
   default /tmp/kvpilot-vllm-doctor-venv, HOME pointed at a temporary folder for its SQLite file);
5. prints a markdown table: expected verdict, each tool's answer, right or wrong.

How vllm-doctor's answer is read (its 0.6.0 source, vllm_doctor/rules/*.py): it has no verdict, it
fires checks sorted by severity then confidence. The first fired check that maps onto a kvpilot
verdict is its answer: ``kv_cache_pressure`` / ``preemption_pressure`` -> kv_cache_exhaustion;
``queue_pressure`` ("add replicas") -> compute_bound (a generous reading: it never names
max_num_seqs or the token budget); ``prefix_cache_efficiency`` -> prefix_cache_ineffective;
``low_throughput`` -> idle; latency checks (``ttft_bottleneck``, ``tpot_bottleneck``,
``queue_latency``) name a symptom, not a cause, and are skipped; nothing fired -> healthy.

Run from the repository root:  .venv/bin/python benchmarks/compare_vllm_doctor.py [--write docs/comparison.md]
Needs network access to PyPI for the first run (pip install vllm-doctor==0.6.0).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.integration.diagnose.scenario_flags import EXPECTED, scenario_cli_args  # noqa: E402
from tests.support.prom import PrometheusServer, backfill  # noqa: E402

KVPILOT = ROOT / ".venv" / "bin" / "kvpilot"
DOCTOR_VERSION = "0.6.0"
DOCTOR_MAP = {
    "kv_cache_pressure": "kv_cache_exhaustion",
    "preemption_pressure": "kv_cache_exhaustion",
    "queue_pressure": "compute_bound",
    "prefix_cache_efficiency": "prefix_cache_ineffective",
    "low_throughput": "idle",
}
ORDER = [
    "kv-exhaustion",
    "max-num-seqs-cap",
    "token-budget-cap",
    "compute-bound",
    "prefix-thrash",
    "seed-lru",
    "healthy",
    "idle",
]


def ensure_doctor(venv: Path) -> Path:
    """Create the venv and install vllm-doctor==0.6.0 unless already there; returns its executable."""
    exe = venv / "bin" / "vllm-doctor"
    if exe.exists():
        out = subprocess.run(
            [str(venv / "bin" / "python"), "-c", "import importlib.metadata as m; print(m.version('vllm-doctor'))"],
            capture_output=True,
            text=True,
        )
        if out.stdout.strip() == DOCTOR_VERSION:
            return exe
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    subprocess.run([str(venv / "bin" / "pip"), "install", "-q", f"vllm-doctor=={DOCTOR_VERSION}"], check=True)
    return exe


def run_kvpilot(url: str, end: float, flags: list[str]) -> str:
    out = subprocess.run(
        [
            str(KVPILOT),
            "diagnose",
            "--prometheus",
            url,
            "--no-kube",
            "--end",
            f"{end:.3f}",
            "--window",
            "300s",
            "-o",
            "json",
            *flags,
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    doc = json.loads(out.stdout)
    return ",".join(t["verdict"] for t in doc["targets"])


def run_doctor(exe: Path, url: str, home: Path, since: str = "5m") -> tuple[str, list[str]]:
    """vllm-doctor's answer read as a kvpilot verdict (module docstring) and its fired checks, most severe first.

    ``since``: its window, a PromQL range (``5m``, ``300s``), ending now.
    """
    env = dict(os.environ, HOME=str(home))
    out = subprocess.run(
        [str(exe), "diagnose", url, "--since", since, "-o", "json"],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        cwd=home,
    )
    if out.returncode != 0:
        return f"error: {out.stderr.strip().splitlines()[-1] if out.stderr.strip() else out.returncode}", []
    doc = json.loads(out.stdout)
    fired = [c["id"] for c in doc["checks"] if c.get("finding")]
    mapped = next((DOCTOR_MAP[c] for c in fired if c in DOCTOR_MAP), "healthy")
    return mapped, fired


def compare(exe: Path, workdir: Path) -> list[dict]:
    rows = []
    for scenario in ORDER:
        sdir = workdir / scenario
        sdir.mkdir()
        rec = sdir / "rec.om"
        subprocess.run(
            [str(KVPILOT), "simulate", scenario, "--record", str(rec), "--duration", "300s", "--interval", "10s"],
            check=True,
            capture_output=True,
            timeout=600,
        )
        stamps = [float(ln.rsplit(" ", 1)[1]) for ln in rec.read_text().splitlines() if ln and not ln.startswith("#")]
        end = max(stamps)
        backfill(rec, sdir / "data")
        with PrometheusServer(sdir / "prom", data_dir=sdir / "data") as prom:
            kv_flags = run_kvpilot(prom.url, end, scenario_cli_args(scenario))
            kv_bare = run_kvpilot(prom.url, end, [])
            doctor, fired = run_doctor(exe, prom.url, sdir)
        rows.append(
            {
                "scenario": scenario,
                "expected": EXPECTED[scenario],
                "kvpilot": kv_flags,
                "kvpilot_bare": kv_bare,
                "doctor": doctor,
                "doctor_checks": fired,
                "age_s": time.time() - end,
            }
        )
    return rows


def table(rows: list[dict]) -> str:
    def mark(got: str, want: str) -> str:
        return "right" if got == want else "wrong"

    lines = [
        "| scenario | expected | kvpilot (server's flags) | | kvpilot (no flags) | | vllm-doctor 0.6.0: fired checks "
        "(most severe first) | vllm-doctor read as | |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['scenario']} | `{r['expected']}` | `{r['kvpilot']}` | {mark(r['kvpilot'], r['expected'])} | "
            f"`{r['kvpilot_bare']}` | {mark(r['kvpilot_bare'], r['expected'])} | "
            f"{', '.join(r['doctor_checks']) or '(none)'} | `{r['doctor']}` | {mark(r['doctor'], r['expected'])} |"
        )
    right = {k: sum(r[k] == r["expected"] for r in rows) for k in ("kvpilot", "kvpilot_bare", "doctor")}
    lines.append("")
    lines.append(
        f"Right: kvpilot with the server's flags {right['kvpilot']}/{len(rows)}, kvpilot without flags "
        f"{right['kvpilot_bare']}/{len(rows)}, vllm-doctor {right['doctor']}/{len(rows)}."
    )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--venv", default="/tmp/kvpilot-vllm-doctor-venv", help="where vllm-doctor is installed")
    parser.add_argument("--write", metavar="FILE", help="also replace the table between the markers in FILE")
    args = parser.parse_args()
    exe = ensure_doctor(Path(args.venv))
    with tempfile.TemporaryDirectory(prefix="kvpilot-compare-") as tmp:
        rows = compare(exe, Path(tmp))
    out = table(rows)
    print(out)
    if args.write:
        path = Path(args.write)
        text = path.read_text()
        start, stop = "<!-- table:start -->", "<!-- table:end -->"
        head, rest = text.split(start, 1)
        _, tail = rest.split(stop, 1)
        path.write_text(f"{head}{start}\n{out}\n{stop}{tail}")


if __name__ == "__main__":
    main()
