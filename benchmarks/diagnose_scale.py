"""Diagnose N targets in one real Prometheus (or VictoriaMetrics): wall time, peak RSS and number of queries.

Builds a synthetic recording of N pods: pod i replays the engine-scenario recording
``tests/fixtures/recordings/scenario_<S>.om`` for S = the i-th of the eight scenarios, with
``namespace="bench"``, ``pod="vllm-<i>"`` added to every series, keeping only the series diagnose
queries (the families of ``kvpilot.diagnose.signals.SIGNAL_DEFS`` and ``cache_config_info``:
2,449 samples a pod, 31 scrapes 10 s apart over the 300 s window). Loaded into

- ``prometheus``: backfilled with ``promtool tsdb create-blocks-from openmetrics``, then a fresh
  Prometheus on 127.0.0.1 serves the blocks;
- ``victoriametrics``: a fresh single-node VictoriaMetrics on 127.0.0.1, streamed through its
  ``/api/v1/import/prometheus`` API;

then ``kvpilot diagnose --prometheus URL --no-kube -n bench -o json`` runs once as a command (a new
process: imports included). Prints its wall time, the floor (the same queries, ``plan``, fetched by 8
threads and JSON-decoded, nothing else, right after), its peak RSS and CPU (GNU time's %M, %U + %S),
the server's CPU while diagnose ran (``/proc/PID/stat``), the number of queries the server counted on
its own /metrics, the load average, and the verdict counts, for each ``--pods`` count (the query
count must not grow). ``--per-query`` then sends each query alone, one after the other, and prints
its wall time, the server's CPU for it, its answer's size and rows.

Run from the repository root:  .venv/bin/python benchmarks/diagnose_scale.py --pods 1000 10000 [--backend both]
[--per-query] [--keep DIR]  (``--keep``: load each server's data into DIR once and reuse it on the next run)
Target: <= 5 s wall and <= 500 MiB (peak RSS of the diagnose process) for 10,000 targets; queries constant.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.support.prom import PrometheusServer  # noqa: E402
from tests.support.vm import VictoriaMetricsServer  # noqa: E402

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


def _wanted() -> set[str]:
    """Sample names diagnose queries: every spelling of each signal's family + suffix, and ``cache_config_info``."""
    from kvpilot.diagnose.signals import SIGNAL_DEFS, spellings

    names = {spelling + sd.suffix for sd in SIGNAL_DEFS for spelling in spellings(sd.family)}
    return names | set(spellings("vllm:cache_config_info"))


def _families(path: Path, wanted: set[str]) -> collections.OrderedDict[str, tuple[list[str], list[str]]]:
    """Family -> (HELP/TYPE lines, sample lines without their ``{``), in file order; only ``wanted`` samples."""
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
        elif line and current is not None and line.split("{", 1)[0] in wanted:
            out[current][1].append(line)
    return collections.OrderedDict((k, v) for k, v in out.items() if v[1])


def recording_chunks(pods: int, millis: bool = False) -> Iterator[str]:
    """The N-pod recording, one family of one pod per chunk: OpenMetrics (seconds, with TYPE lines and
    ``# EOF``) or, ``millis=True``, the Prometheus text of VictoriaMetrics' import API (milliseconds).
    Only the series diagnose queries (about 40 % of each scenario's samples).
    """
    wanted = _wanted()
    sources = {s: _families(RECORDINGS / f"scenario_{s}.om", wanted) for s in SCENARIOS}
    order: list[str] = []
    for fams in sources.values():
        order += [f for f in fams if f not in order]
    if millis:  # "name{labels} value 1764599700.0" -> "... 1764599700000"
        sources = {
            s: collections.OrderedDict(
                (
                    f,
                    (
                        meta,
                        [ln.rsplit(" ", 1)[0] + " " + str(round(float(ln.rsplit(" ", 1)[1]) * 1000)) for ln in lines],
                    ),
                )
                for f, (meta, lines) in fams.items()
            )
            for s, fams in sources.items()
        }
    for family in order:
        if not millis:
            yield "\n".join(next(f[family][0] for f in sources.values() if family in f)) + "\n"
        for i in range(pods):
            fams = sources[SCENARIOS[i % len(SCENARIOS)]]
            if family in fams:
                prefix = f'{{namespace="bench",pod="vllm-{i:05d}",'
                yield "".join(sample.replace("{", prefix, 1) + "\n" for sample in fams[family][1])
    if not millis:
        yield "# EOF\n"


def samples_per_pod() -> float:
    """Sample lines per pod of the recording (the eight scenarios' mean)."""
    return sum(chunk.count("\n") for chunk in recording_chunks(len(SCENARIOS), millis=True)) / len(SCENARIOS)


def _query_count(url: str, metric: str, label: str) -> int:
    """Queries the server itself counted on its /metrics: ``metric`` of the query paths (``label``)."""
    from kvpilot.metrics.exposition import parse_exposition

    with urllib.request.urlopen(url + "/metrics", timeout=10) as r:
        samples = parse_exposition(r.read().decode())
    return int(
        sum(
            s.value
            for s in samples
            if s.name == metric and s.labels.get(label) in ("/api/v1/query", "/api/v1/query_range")
        )
    )


def floor_seconds(url: str, workers: int = 8) -> float:
    """The floor: the same queries diagnose sends for namespace ``bench`` (``plan``: instant and range
    queries), fetched by ``workers`` threads and JSON-decoded, nothing else (s).
    """
    import concurrent.futures
    import urllib.parse

    from kvpilot.diagnose.sources.prometheus import PlannedQuery, Selectors, plan

    queries = plan(300, Selectors(namespace="bench"))

    def fetch(query: PlannedQuery) -> int:
        params = urllib.parse.urlencode(query.params(END))
        with urllib.request.urlopen(f"{url}{query.path}?{params}", timeout=600) as r:
            return len(json.loads(r.read())["data"]["result"])

    t = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(workers) as pool:
        list(pool.map(fetch, queries))
    return time.monotonic() - t


def server_cpu(pid: int) -> float:
    """CPU seconds (user + system) process ``pid`` has used: fields 14 and 15 of ``/proc/PID/stat`` (proc(5))."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _diagnose(url: str, workdir: Path, tag: str) -> tuple[float, float, float, dict]:
    """``kvpilot diagnose --prometheus URL -n bench -o json`` as a new process: (wall s, peak RSS MiB,
    CPU s, JSON).
    """
    rss_file = workdir / f"rss-{tag}.txt"
    t = time.monotonic()
    result = subprocess.run(
        [
            "/usr/bin/time",
            "-f",
            "%M %U %S",
            "-o",
            str(rss_file),
            str(ROOT / ".venv" / "bin" / "kvpilot"),
            "diagnose",
            "--prometheus",
            url,
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
            "300s",
        ],
        capture_output=True,
        text=True,
        timeout=900,
    )
    wall = time.monotonic() - t
    if result.returncode not in (0, 1, 2):  # 0-2: verdicts (docs/diagnosis.md, exit status); 3: no data
        raise RuntimeError(f"diagnose exited {result.returncode}: {result.stderr[-2000:]}")
    rss_kib, user, system = rss_file.read_text().split()[-3:]  # GNU time's %M (peak RSS, KiB), %U, %S (s)
    return wall, int(rss_kib) / 1024, float(user) + float(system), json.loads(result.stdout)


def per_query(url: str, pid: int) -> list[dict]:
    """Each query of ``plan`` alone, one after the other: wall s, the server's CPU s, answer MiB, rows."""
    import urllib.parse

    from kvpilot.diagnose.sources.prometheus import Selectors, plan

    out = []
    for query in plan(300, Selectors(namespace="bench")):
        cpu, t = server_cpu(pid), time.monotonic()
        with urllib.request.urlopen(f"{url}{query.path}?{urllib.parse.urlencode(query.params(END))}", timeout=600) as r:
            body = r.read()
        wall, cpu = time.monotonic() - t, server_cpu(pid) - cpu
        name = (
            query.sd.name
            if query.sd
            else {"labels": "cache_config_info", "limit": "kvpilot_vllmserver_limit"}[query.kind]
        )
        if query.spelling:
            name += f" [{query.spelling}]"
        if query.step_seconds:
            name += " (range query)"
        rows = len(json.loads(body)["data"]["result"])
        out.append({"query": name, "wall_s": wall, "server_cpu_s": cpu, "mib": len(body) / 2**20, "rows": rows})
    return out


@contextlib.contextmanager
def _backend(kind: str, pods: int, workdir: Path) -> Iterator[tuple[str, float, Callable[[], int], int]]:
    """A server holding the N-pod recording: yields (URL, seconds spent loading, query counter, server PID).
    Data already in ``workdir`` (``--keep``) is reused: loading then takes 0 s.
    """
    if kind == "prometheus":
        data = workdir / f"data-{pods}"
        t = time.monotonic()
        if not (data.is_dir() and any(data.iterdir())):
            rec = workdir / f"bench-{pods}.om"
            with rec.open("w") as fp:
                for chunk in recording_chunks(pods):
                    fp.write(chunk)
            # promtool directly: tests.support's backfill stops after 120 s
            subprocess.run(
                ["promtool", "tsdb", "create-blocks-from", "openmetrics", str(rec), str(data)],
                check=True,
                capture_output=True,
                timeout=3600,
            )
            rec.unlink()
        loaded = time.monotonic() - t
        with PrometheusServer(workdir / f"prom-{pods}", data_dir=data) as prom:
            # warm-up query so the measured run does not pay for loading the blocks
            prom.query('count(count by (pod) ({__name__=~"vllm[:_]num_requests_running"}))', at=END)
            assert prom.proc is not None
            yield (
                prom.url,
                loaded,
                lambda: _query_count(prom.url, "prometheus_http_requests_total", "handler"),
                prom.proc.pid,
            )
    else:
        # VictoriaMetrics ends a query after -search.maxQueryDuration (default 30 s) and refuses one
        # (503) that waited -search.maxQueueDuration (10 s) for one of its -search.maxConcurrentRequests
        # slots: a 10,000-target histogram query on a loaded 2-core machine takes longer, so 300 s each;
        # 50,000 targets select 1,150,000 bucket series in one query (-search.maxUniqueTimeseries, 300,000)
        vm_args = [
            "-search.maxQueryDuration=300s",
            "-search.maxQueueDuration=300s",
            f"-search.maxUniqueTimeseries={max(300_000, 30 * pods)}",
        ]
        stored = workdir / f"vm-{pods}" / "vm-data"
        fresh = not stored.is_dir()
        with VictoriaMetricsServer(workdir / f"vm-{pods}", extra_args=vm_args) as vm:
            t = time.monotonic()
            if fresh:
                vm.import_lines(chunk.encode() for chunk in recording_chunks(pods, millis=True))
            loaded = time.monotonic() - t
            vm.query('count(count by (pod) ({__name__=~"vllm[:_]num_requests_running"}))', at=END)

            def count() -> int:
                time.sleep(1.5)  # VictoriaMetrics renders its /metrics at most once a second
                return _query_count(vm.url, "vm_http_requests_total", "path")

            assert vm.proc is not None
            yield vm.url, loaded, count, vm.proc.pid


def run(pods: int, backend: str, workdir: Path, queries_alone: bool = False) -> dict:
    with _backend(backend, pods, workdir) as (url, loaded, count, pid):
        before, load_before, cpu = count(), os.getloadavg()[0], server_cpu(pid)
        wall, rss_mib, client_cpu, doc = _diagnose(url, workdir, f"{backend}-{pods}")
        cpu = server_cpu(pid) - cpu
        queries = count() - before
        floor = floor_seconds(url)  # after the count: its queries are not diagnose's
        load_after = os.getloadavg()[0]
        alone = per_query(url, pid) if queries_alone else []
    verdicts = collections.Counter(t["verdict"] for t in doc["targets"])
    return {
        "backend": backend,
        "pods": pods,
        "samples": round(pods * samples_per_pod()),
        "load_s": loaded,
        "wall_s": wall,
        "floor_s": floor,
        "rss_mib": rss_mib,
        "client_cpu_s": client_cpu,
        "server_cpu_s": cpu,
        "loadavg": (load_before, load_after),
        "queries": queries,
        "targets": len(doc["targets"]),
        "verdicts": dict(sorted(verdicts.items())),
        "per_query": alone,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pods", type=int, nargs="+", default=[1000, 10000], help="target counts, in order")
    parser.add_argument("--backend", choices=["prometheus", "victoriametrics", "both"], default="prometheus")
    parser.add_argument("--per-query", action="store_true", help="then each query alone: time, server CPU, size")
    parser.add_argument("--keep", metavar="DIR", help="load the servers' data into DIR once, reuse it next time")
    args = parser.parse_args()
    backends = ["prometheus", "victoriametrics"] if args.backend == "both" else [args.backend]
    with contextlib.ExitStack() as stack:
        if args.keep:
            Path(args.keep).mkdir(parents=True, exist_ok=True)
            tmp = args.keep
        else:
            tmp = stack.enter_context(tempfile.TemporaryDirectory(prefix="kvpilot-scale-"))
        for backend in backends:
            results = []
            for pods in args.pods:
                r = run(pods, backend, Path(tmp), args.per_query)
                results.append(r)
                print(
                    f"{r['backend']}: {r['pods']:>6} pods ({r['samples']:,} samples, loaded in {r['load_s']:.1f} s): "
                    f"diagnose wall {r['wall_s']:.2f} s (floor: its queries fetched and decoded "
                    f"{r['floor_s']:.2f} s), peak RSS {r['rss_mib']:.0f} MiB, CPU {r['client_cpu_s']:.2f} s "
                    f"(server {r['server_cpu_s']:.2f} s), {r['queries']} queries, {r['targets']} targets, "
                    f"load average {r['loadavg'][0]:.1f}-{r['loadavg'][1]:.1f}, verdicts {r['verdicts']}",
                    flush=True,
                )
                for q in r["per_query"]:
                    print(
                        f"  {q['query']:<60} {q['wall_s']:6.3f} s  server CPU {q['server_cpu_s']:5.2f} s  "
                        f"{q['mib']:6.2f} MiB  {q['rows']:>7,} rows"
                    )
                if r["per_query"]:
                    total = {k: sum(q[k] for q in r["per_query"]) for k in ("wall_s", "server_cpu_s", "mib")}
                    label = f"all {len(r['per_query'])} queries, one at a time"
                    print(
                        f"  {label:<60} {total['wall_s']:6.3f} s  "
                        f"server CPU {total['server_cpu_s']:5.2f} s  {total['mib']:6.2f} MiB",
                        flush=True,
                    )
            counts = sorted({r["queries"] for r in results})
            print(f"{backend}: queries constant: {len(counts) == 1} ({', '.join(map(str, counts))})")
            for r in results:
                if r["pods"] >= 10000:
                    print(
                        f"{backend}: {r['pods']} targets: wall <= 5 s: {r['wall_s'] <= 5.0} ({r['wall_s']:.2f} s), "
                        f"peak RSS <= 500 MiB: {r['rss_mib'] <= 500} ({r['rss_mib']:.0f} MiB)"
                    )


if __name__ == "__main__":
    main()
