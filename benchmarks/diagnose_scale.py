"""Diagnose N targets in one real Prometheus: wall time, peak RSS and number of queries.

Builds a synthetic recording of N pods (default 10,000): pod i replays the engine-scenario recording
``tests/fixtures/recordings/scenario_<S>.om`` for S = the i-th of the eight scenarios, with
``namespace="bench"``, ``pod="vllm-<i>"`` added to every series. It is backfilled with
``promtool tsdb create-blocks-from openmetrics`` into a fresh Prometheus on 127.0.0.1, then
``kvpilot diagnose --prometheus`` runs once as a command (a new process: imports included). Prints
its wall time, the number of queries Prometheus counted (``prometheus_http_requests_total``), the
verdict counts, and repeats with N/10 pods to show the query count does
not grow with the number of targets.

Run from the repository root:  .venv/bin/python benchmarks/diagnose_scale.py [--pods 1000]
Target: <= 5 s wall and <= 500 MiB (peak RSS of the diagnose process, GNU time's %M) for 10,000
targets; queries constant.
"""

from __future__ import annotations

import argparse
import collections
import json
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.support.prom import PrometheusServer  # noqa: E402

RECORDINGS = ROOT / "tests" / "fixtures" / "recordings"
SCENARIOS = [
    "kv-exhaustion",
    "max-num-seqs-cap",
    "token-budget-cap",
    "compute-bound",
    "prefix-thrash",
    "healthy",
    "idle",
    "seed-lru",
]
END = 1_764_600_000.0


def _families(path: Path) -> collections.OrderedDict[str, tuple[list[str], list[str]]]:
    """Family -> (HELP/TYPE lines, sample lines), in file order."""
    out: collections.OrderedDict[str, tuple[list[str], list[str]]] = collections.OrderedDict()
    current = None
    for line in path.read_text().splitlines():
        if line.startswith("# EOF"):
            break
        if line.startswith("# HELP ") or line.startswith("# TYPE ") or line.startswith("# UNIT "):
            name = line.split(" ", 3)[2]
            if name not in out:
                out[name] = ([], [])
            current = name
            out[name][0].append(line)
        elif line and current is not None:
            out[current][1].append(line)
    return out


def build_recording(pods: int, path: Path) -> int:
    """Write the N-pod recording; returns the number of sample lines."""
    sources = {s: _families(RECORDINGS / f"scenario_{s}.om") for s in SCENARIOS}
    order: list[str] = []
    for fams in sources.values():
        order += [f for f in fams if f not in order]
    lines = 0
    with path.open("w") as fp:
        for family in order:
            meta = next(f[family][0] for f in sources.values() if family in f)
            fp.write("\n".join(meta) + "\n")
            for i in range(pods):
                fams = sources[SCENARIOS[i % len(SCENARIOS)]]
                if family not in fams:
                    continue
                prefix = f'{{namespace="bench",pod="vllm-{i:04d}",'
                for sample in fams[family][1]:
                    fp.write(sample.replace("{", prefix, 1) + "\n")
                    lines += 1
        fp.write("# EOF\n")
    return lines


def _query_count(prom: PrometheusServer) -> int:
    """Queries Prometheus itself counted: ``prometheus_http_requests_total`` of the query handlers (its /metrics)."""
    from kvpilot.metrics.exposition import parse_exposition

    with urllib.request.urlopen(prom.url + "/metrics", timeout=10) as r:
        samples = parse_exposition(r.read().decode())
    return int(
        sum(
            s.value
            for s in samples
            if s.name == "prometheus_http_requests_total"
            and s.labels.get("handler") in ("/api/v1/query", "/api/v1/query_range")
        )
    )


def floor_seconds(url: str, workers: int = 8) -> float:
    """The floor: the same queries diagnose sends (its signal and cache-config queries for
    namespace ``bench``), fetched by ``workers`` threads and JSON-decoded, nothing else (s).
    """
    import concurrent.futures
    import urllib.parse

    from kvpilot.diagnose.signals import SIGNAL_DEFS
    from kvpilot.diagnose.sources.prometheus import Selectors, cache_config_query, signal_query

    selectors = Selectors(namespace="bench")
    queries = [signal_query(sd, 300, selectors) for sd in SIGNAL_DEFS] + [cache_config_query(300, selectors)]

    def fetch(query: str) -> int:
        params = urllib.parse.urlencode({"query": query, "time": f"{END:.3f}"})
        with urllib.request.urlopen(f"{url}/api/v1/query?{params}", timeout=600) as r:
            return len(json.loads(r.read())["data"]["result"])

    t = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(workers) as pool:
        list(pool.map(fetch, queries))
    return time.monotonic() - t


def run(pods: int, workdir: Path) -> dict:
    rec = workdir / f"bench-{pods}.om"
    t = time.monotonic()
    samples = build_recording(pods, rec)
    built = time.monotonic() - t
    t = time.monotonic()
    # promtool directly: tests.support's backfill stops after 120 s, 10,000 pods take longer
    subprocess.run(
        ["promtool", "tsdb", "create-blocks-from", "openmetrics", str(rec), str(workdir / f"data-{pods}")],
        check=True,
        capture_output=True,
        timeout=3600,
    )
    rec.unlink()  # gigabytes at 10,000 pods
    filled = time.monotonic() - t
    with PrometheusServer(workdir / f"prom-{pods}", data_dir=workdir / f"data-{pods}") as prom:
        # warm-up query so the measured run does not pay for loading the blocks
        prom.query('count(count by (pod) ({__name__=~"vllm[:_]num_requests_running"}))', at=END)
        before = _query_count(prom)
        t = time.monotonic()
        rss_file = workdir / f"rss-{pods}.txt"
        result = subprocess.run(
            [
                "/usr/bin/time",
                "-f",
                "%M",
                "-o",
                str(rss_file),
                str(ROOT / ".venv" / "bin" / "kvpilot"),
                "diagnose",
                "--prometheus",
                prom.url,
                "--no-kube",
                "--end",
                str(END),
                "--window",
                "300s",
                "-n",
                "bench",
                "-o",
                "json",
                "--timeout",
                "60s",
            ],
            capture_output=True,
            text=True,
            timeout=600,
        )
        wall = time.monotonic() - t
        rss_mib = int(rss_file.read_text().split()[-1]) / 1024  # GNU time's %M: peak RSS, KiB
        queries = _query_count(prom) - before
        floor = floor_seconds(prom.url)  # after the count: its queries are not diagnose's
        result.output = result.stdout
        result.exit_code = result.returncode
    doc = json.loads(result.output)
    verdicts = collections.Counter(t["verdict"] for t in doc["targets"])
    return {
        "pods": pods,
        "samples": samples,
        "build_s": built,
        "backfill_s": filled,
        "wall_s": wall,
        "floor_s": floor,
        "rss_mib": rss_mib,
        "queries": queries,
        "targets": len(doc["targets"]),
        "verdicts": dict(verdicts),
        "exit": result.exit_code,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pods", type=int, default=10000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="kvpilot-scale-") as tmp:
        results = []
        for pods in (max(1, args.pods // 10), args.pods):
            r = run(pods, Path(tmp))
            results.append(r)
            print(
                f"{r['pods']:>5} pods ({r['samples']:,} samples; backfill {r['backfill_s']:.1f} s): "
                f"diagnose wall {r['wall_s']:.2f} s (floor: its queries fetched and decoded "
                f"{r['floor_s']:.2f} s), peak RSS {r['rss_mib']:.0f} MiB, "
                f"{r['queries']} Prometheus queries, {r['targets']} targets, "
                f"verdicts {r['verdicts']}",
                flush=True,
            )
    small, big = results
    print(
        f"queries constant: {small['queries'] == big['queries']} ({small['queries']} for {small['pods']} pods, "
        f"{big['queries']} for {big['pods']})"
    )
    print(f"wall <= 5 s for {big['pods']} targets: {big['wall_s'] <= 5.0} ({big['wall_s']:.2f} s)")
    print(f"peak RSS <= 500 MiB: {big['rss_mib'] <= 500} ({big['rss_mib']:.0f} MiB)")


if __name__ == "__main__":
    main()
