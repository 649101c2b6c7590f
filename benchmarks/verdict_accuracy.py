"""Accuracy against vLLM's own ground truth: kvpilot diagnose (with and without flags) and vllm-doctor 0.6.0.

For every ground-truth recording of ``tests/fixtures/recordings/vllm/verdicts/`` (vLLM 0.29.0's stat logger while
its scheduler ran the scenario; ``tests/reference/verdict_scenarios.py``) and every evaluated window of its
``NAME.truth.json`` (an ``--end`` and a ``--window``):

1. ``kvpilot diagnose --recording FILE --end T --window W`` with the flags the server ran with, and with none
   (``tests/reference/verdict_accuracy.py``, the accuracy test's own code);
2. the recording up to T, its timestamps moved so that T is now, backfilled with ``promtool tsdb
   create-blocks-from openmetrics`` into a fresh Prometheus 2.42 on 127.0.0.1, and ``vllm-doctor diagnose URL
   --since Ws -o json`` (installed with pip into its own venv, default /tmp/kvpilot-vllm-doctor-venv) read as
   ``benchmarks/compare_vllm_doctor.py`` reads it (its first fired check that maps onto a kvpilot verdict);
3. a markdown table: the ground truth (the limit vLLM refused the queue's head with over most of the window and
   its share of the queued time), the verdicts that name it, each tool's answer, right or wrong, and the totals.

Run from the repository root:

    .venv/bin/python benchmarks/verdict_accuracy.py [--no-doctor] [--write docs/diagnosis.md]

``--write`` replaces the table between ``<!-- verdict-accuracy:start -->`` and ``<!-- verdict-accuracy:end -->``.
Needs PyPI for the first run (pip install vllm-doctor==0.6.0) and promtool/prometheus for vllm-doctor's column.

Randomly drawn scenarios instead (``tests/reference/random_scenarios.py``: vLLM's scheduler as the judge, each
scenario diagnosed at three window ends with the server's flags and without; accuracy per expected verdict, the
confusion matrices and every miss):

    .venv/bin/python benchmarks/verdict_accuracy.py --random 200 [--seed N] [--vllm-version 0.33.0] \
        [--write docs/diagnosis.md]

``--write`` then replaces the section between ``<!-- random-accuracy-VERSION:start -->`` and its ``:end``.

vLLM's runs take most of the time (a minute or more per 5 scenarios on 2 cores); the diagnoses a tenth of it. To
change kvpilot and judge it again on the same runs, keep them:

    .venv/bin/python benchmarks/verdict_accuracy.py --random 30 --seed N --runs /tmp/kvpilot-runs

saves each scenario's driver result (its steps with vLLM's refusals, its metric snapshots) as
``/tmp/kvpilot-runs/vllm-VERSION/random-SEED.json``; the same command again runs vLLM only for scenarios not
saved there, and re-judges the rest with the current code (the truth from the saved steps, the recording from the
saved snapshots). Empty the folder when ``tests/reference/vllm_driver.py`` or the scenario generator changes. Judge
a fresh seed you have not tuned on before quoting a figure.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.compare_vllm_doctor import ensure_doctor, run_doctor  # noqa: E402
from tests.conftest import vllm_venv  # noqa: E402
from tests.reference.random_scenarios import EVALUATIONS, Outcome, draw, judge, report, seeds  # noqa: E402
from tests.reference.verdict_accuracy import Case, cases, diagnose_case  # noqa: E402
from tests.reference.verdict_scenarios import OUT, SCENARIOS, load_truths  # noqa: E402
from tests.support.prom import PrometheusServer, backfill  # noqa: E402

START, STOP = "<!-- verdict-accuracy:start -->", "<!-- verdict-accuracy:end -->"


def shifted(recording: Path, end_unix: float, now: float, dest: Path) -> None:
    """``recording``'s samples up to ``end_unix``, each timestamp moved by ``now - end_unix``, into ``dest``."""
    delta = now - end_unix
    out = []
    for line in recording.read_text(encoding="utf-8").splitlines():
        if not line or line.startswith("#"):
            out.append(line)
            continue
        head, ts = line.rsplit(" ", 1)
        t = float(ts)
        if t <= end_unix + 1e-6:
            out.append(f"{head} {t + delta:.3f}")
    dest.write_text("\n".join(out) + "\n", encoding="utf-8")


def doctor_answer(exe: Path, case: Case, workdir: Path) -> tuple[str, list[str]]:
    """vllm-doctor on ``case``'s window, through a Prometheus holding the recording up to its end, moved to now."""
    doc = load_truths(OUT)[case.scenario]
    ev = next(e for e in doc["evaluations"] if e["end"] == case.end and e["window"] == case.window)
    sdir = workdir / f"{case.scenario}-{case.end:g}-{case.window:g}"
    sdir.mkdir()
    rec = sdir / "rec.om"
    shifted(OUT / doc["recording"], ev["end_unix"], time.time() - 1.0, rec)
    backfill(rec, sdir / "data")
    with PrometheusServer(sdir / "prom", data_dir=sdir / "data") as prom:
        return run_doctor(exe, prom.url, sdir, since=f"{case.window:g}s")


def rows(doctor: Path | None) -> list[dict]:
    out: list[dict] = []
    windows = sorted(
        {(c.scenario, c.end, c.window) for c in cases()}, key=lambda w: (list(SCENARIOS).index(w[0]), w[1])
    )
    with tempfile.TemporaryDirectory(prefix="kvpilot-verdict-accuracy-") as tmp:
        for scenario, end, window in windows:
            flags = diagnose_case(Case(scenario, end, window, "flags"))
            bare = diagnose_case(Case(scenario, end, window, "bare"))
            row = {
                "scenario": scenario,
                "cause": SCENARIOS[scenario].cause,
                "control": bool(SCENARIOS[scenario].control_of),
                "end": end,
                "window": window,
                "truth": flags["truth"],
                "expected": flags["expected"],
                "flags": flags["verdict"],
                "bare": bare["verdict"],
            }
            if doctor is not None:
                row["doctor"], row["doctor_checks"] = doctor_answer(
                    doctor, Case(scenario, end, window, "doctor"), Path(tmp)
                )
            out.append(row)
    return out


def _truth(t: dict) -> str:
    b = t["binding"]
    if b["limit"] == "none":
        text = f"none (queue {b['queued_share']:.0%} of the time)"
        share = t["prefix"]["shared_prefix_hit_share"]
        if share is not None:
            text += f", shared prefix found by {share:.0%}"
        return text
    sat = ", GPU saturated" if b["limit"] == "token_budget" and t["gpu_saturated"] else ""
    return f"{b['limit']} ({b['shares'][b['limit']]:.0%} of the queued time{sat})"


def table(data: list[dict]) -> str:
    doctor = all("doctor" in r for r in data)
    head = (
        "| scenario | cause | --end / --window | vLLM's ground truth | expected | kvpilot (server's flags) "
        "| kvpilot (no flags) |"
    )
    sep = "|---|---|---|---|---|---|---|"
    if doctor:
        head += " vllm-doctor 0.6.0 (fired checks -> read as) |"
        sep += "---|"
    lines = [head, sep]

    def mark(got: str, want: tuple[str, ...]) -> str:
        return f"`{got}` {'right' if got in want else '**wrong**'}"

    for r in data:
        cause = r["cause"] + (" (control)" if r["control"] else "")
        line = (
            f"| {r['scenario']} | {cause} | {r['end']:g} s / {r['window']:g} s | {_truth(r['truth'])} | "
            f"{' or '.join(f'`{v}`' for v in r['expected'])} | {mark(r['flags'], r['expected'])} | "
            f"{mark(r['bare'], r['expected'])} |"
        )
        if doctor:
            fired = ", ".join(r["doctor_checks"]) or "(none)"
            line += f" {fired} -> {mark(r['doctor'], r['expected'])} |"
        lines.append(line)
    n = len(data)
    right = Counter()
    for r in data:
        for k in ("flags", "bare", "doctor"):
            if k in r and r[k] in r["expected"]:
                right[k] += 1
    totals = f"Right: kvpilot with the server's flags {right['flags']}/{n}, kvpilot without flags {right['bare']}/{n}"
    totals += f", vllm-doctor {right['doctor']}/{n}." if doctor else "."
    return "\n".join([*lines, "", totals])


def random_section(n: int, master: int, version: str, save: Path | None, runs: Path | None = None) -> str:
    """The random benchmark's markdown: ``n`` scenarios drawn from ``master``, judged by vLLM ``version``.

    ``save``: each batch's outcomes are appended there as JSON lines as they are known (``--report`` renders them).
    ``runs``: vLLM's driver results kept under ``runs/vllm-VERSION/`` and reused (module docstring).
    """
    python = str(vllm_venv(version) / "bin" / "python")
    timings: dict[str, float] = {}

    def keep(outcomes: list[Outcome]) -> None:
        if save is not None:
            with save.open("a", encoding="utf-8") as f:
                f.writelines(json.dumps(o.as_dict()) + "\n" for o in outcomes)

    scenarios = [draw(s) for s in seeds(master, n)]
    kept = runs / f"vllm-{version}" if runs is not None else None
    reused = sum(1 for sc in scenarios if kept is not None and (kept / f"{sc.name}.json").exists())
    outcomes = judge(
        python,
        scenarios,
        expect_version=version,
        timings=timings,
        batch=10,
        on_batch=keep,
        runs=kept,
    )
    saved = f" ({reused} of them saved by an earlier run, --runs)" if reused else ""
    title = (
        f"vLLM {version}, {n} scenarios drawn from seed {master} (`benchmarks/verdict_accuracy.py --random {n} "
        f"--seed {master} --vllm-version {version}`), each at {len(EVALUATIONS)} window ends; vLLM's runs "
        f"{timings['vllm']:.0f} s{saved}, the diagnoses {timings['diagnose']:.0f} s (wall, {os.cpu_count()} cores, "
        f"load {os.getloadavg()[0]:.1f} at the end):"
    )
    return report(outcomes, title)


def replace_between(path: Path, start: str, stop: str, body: str) -> None:
    """Replace the text between the markers ``start`` and ``stop`` of ``path`` with ``body``."""
    text = path.read_text(encoding="utf-8")
    head, rest = text.split(start, 1)
    _, tail = rest.split(stop, 1)
    path.write_text(f"{head}{start}\n{body}\n{stop}{tail}", encoding="utf-8")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--venv", default="/tmp/kvpilot-vllm-doctor-venv", help="where vllm-doctor is installed")
    parser.add_argument("--no-doctor", action="store_true", help="kvpilot's columns only (no Prometheus, no pip)")
    parser.add_argument("--write", metavar="FILE", help="also replace the table between the markers in FILE")
    parser.add_argument("--random", type=int, metavar="N", help="N scenarios drawn at random instead")
    parser.add_argument("--seed", type=int, default=None, help="the random scenarios' master seed (default: fresh)")
    parser.add_argument("--vllm-version", default="0.29.0", help="the reference venv judging random scenarios")
    parser.add_argument("--save", type=Path, help="append the random outcomes to this JSON-lines file as known")
    parser.add_argument("--report", type=Path, metavar="FILE", help="render outcomes saved with --save, run nothing")
    parser.add_argument(
        "--runs", type=Path, metavar="DIR", help="keep vLLM's runs in DIR and reuse them: re-judge without vLLM"
    )
    args = parser.parse_args()
    if args.random or args.report:
        if args.report:
            lines = args.report.read_text(encoding="utf-8").splitlines()
            outcomes = [Outcome.from_dict(json.loads(line)) for line in lines if line]
            n = len({o.scenario for o in outcomes})
            out = report(outcomes, f"vLLM {args.vllm_version}, {n} scenarios ({args.report.name}):")
        else:
            master = args.seed if args.seed is not None else secrets.randbelow(2**31)
            out = random_section(args.random, master, args.vllm_version, args.save, args.runs)
        print(out)
        if args.write:
            marker = f"random-accuracy-{args.vllm_version}"
            replace_between(Path(args.write), f"<!-- {marker}:start -->", f"<!-- {marker}:end -->", out)
        return
    exe = None if args.no_doctor else ensure_doctor(Path(args.venv))
    out = table(rows(exe))
    print(out)
    if args.write:
        replace_between(Path(args.write), START, STOP, out)


if __name__ == "__main__":
    main()
