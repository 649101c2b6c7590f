"""Operator burst: N VLLMServers created at once on the sandbox API; kvpilot's operator beside a bare kopf floor.

For each N (default 100, 500, 1,000) and each operator, ``--repeat`` times (default 3; the
figures printed are the medians):

1. a fresh :class:`kvpilot.sandbox.SandboxCluster` (in this process) with the VLLMServer CRD
   and a namespace ``bench``;
2. the operator as its own process: ``kvpilot operator -n bench --standalone`` (Hub offline)
   or the floor ``benchmarks/bare_kopf_operator.py`` (a kopf create handler that makes one
   Pod, nothing else: same kopf, same client, same persistence settings);
3. one warm-up VLLMServer and its Pod (imports, watches and first connections are not
   counted), then N VLLMServers created from 4 client threads;
4. until every Pod exists, then until the operator's CPU time stops growing (its status
   writes after the Pod count too).

Printed per operator: time from the first create to the last Pod, create->Pod latency p50/p99
(each VLLMServer's ADDED to its Pod's ADDED, timed inside the API), operator CPU (user+system,
``/proc/PID/stat``) per server, operator peak RSS (``VmHWM``), and the API requests it made per
server by verb (what a real API server would have to serve), and the CPU of the benchmark's own
process per server ("API ms/srv": the sandbox API and the 4 creating clients; it shares the 2
cores with the operator, so where it grows, the operator's latency does). No kubelet runs: Pods stay Pending.

Run from the repository root:
    .venv/bin/python benchmarks/operator_burst.py                 # 100, 500, 1000 x 3
    .venv/bin/python benchmarks/operator_burst.py --servers 10000 --repeat 1
    .venv/bin/python benchmarks/operator_burst.py --operators kvpilot --kopf execution.max_workers=6
    KVPILOT_BENCH_PROFILE=prof.txt .venv/bin/python benchmarks/operator_burst.py --operators kvpilot
``--kopf SECTION.NAME=VALUE`` starts kvpilot's operator with that kopf setting (the floor keeps
kopf's defaults); ``KVPILOT_BENCH_PROFILE`` samples the GIL-holding thread with py-spy.
Targets at 1,000: p50 <= 0.2 s, p99 <= 1 s, CPU per server <= 2x the floor's.
"""

from __future__ import annotations

import argparse
import collections
import concurrent.futures
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import kubernetes.client

from kvpilot.api.constants import LABEL_SERVER
from kvpilot.api.crd import crd_manifest
from kvpilot.sandbox import SandboxCluster

ROOT = Path(__file__).resolve().parents[1]
NS = "bench"
GROUP, VERSION, PLURAL = "kvpilot.dev", "v1alpha1", "vllmservers"
SPEC = {
    "model": "Qwen/Qwen2.5-1.5B-Instruct",
    "engine": {"gpuMemoryUtilization": 0.6, "maxModelLen": 8192, "maxNumSeqs": 4},
    "resources": {"gpus": 1, "memory": "6Gi"},
}
CLK_TCK = os.sysconf("SC_CLK_TCK")


class Record:
    """Monotonic times of VLLMServer and Pod ADDED events in namespace ``bench``, by server name."""

    servers: dict[str, float] = {}
    pods: dict[str, float] = {}

    @classmethod
    def observe(cls, kind: str, resource: Any, obj: dict[str, Any]) -> None:
        """The sandbox's observer (:meth:`SandboxCluster.observe`): time each ADDED in the sandbox's loop."""
        meta = obj["metadata"]
        if kind != "ADDED" or meta.get("namespace") != NS:
            return
        if resource.plural == PLURAL:
            cls.servers[meta["name"]] = time.monotonic()
        elif resource.plural == "pods":
            cls.pods.setdefault((meta.get("labels") or {}).get(LABEL_SERVER), time.monotonic())


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a process (``/proc/PID/stat`` fields 14 and 15)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def peak_rss_mib(pid: int) -> float:
    """``VmHWM`` (peak resident set) of a process, MiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def wait(predicate: Any, timeout: float, what: str) -> None:
    """Poll ``predicate`` every 20 ms until true; RuntimeError naming ``what`` after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(0.02)


#: ``--kopf KEY=VALUE``: the kvpilot operator started through :func:`kvpilot.controller.runner.run_operator`
#: with these kopf settings set first (as ``kvpilot operator`` starts it otherwise: quiet, GC tuned, Hub offline).
LAUNCH_WITH_SETTINGS = """
import json, sys
import kopf
from kvpilot.controller.runner import load_configuration, run_operator, tune_gc
kopf.configure(quiet=True)
tune_gc()
settings = kopf.OperatorSettings()
for key, value in json.loads(sys.argv[3]).items():
    section, name = key.split(".")
    setattr(getattr(settings, section), name, value)
run_operator(load_configuration(sys.argv[1]), namespaces=[sys.argv[2]], standalone=True, settings=settings)
"""


def kopf_settings(pairs: list[str]) -> dict[str, Any]:
    """``["queueing.worker_limit=20"]`` -> ``{"queueing.worker_limit": 20}`` (values as JSON, else strings)."""
    out: dict[str, Any] = {}
    for pair in pairs:
        key, _, value = pair.partition("=")
        try:
            out[key] = json.loads(value)
        except ValueError:
            out[key] = value
    return out


def operator_command(kind: str, kubeconfig: Path, settings: dict[str, Any] | None = None) -> list[str]:
    """The operator's command line."""
    if kind == "kvpilot" and settings:
        return [sys.executable, "-c", LAUNCH_WITH_SETTINGS, str(kubeconfig), NS, json.dumps(settings)]
    if kind == "kvpilot":
        return [
            sys.executable,
            "-m",
            "kvpilot.cli",
            "operator",
            "-n",
            NS,
            "--standalone",
            "--metrics-port",
            "0",
            "-q",
            "--kubeconfig",
            str(kubeconfig),
        ]
    return [sys.executable, str(ROOT / "benchmarks" / "bare_kopf_operator.py"), "--kubeconfig", str(kubeconfig)] + [
        "--namespace",
        NS,
    ]


def profile(pid: int) -> subprocess.Popen | None:
    """``KVPILOT_BENCH_PROFILE=FILE``: sample the operator with py-spy (raw stacks to FILE) during the burst."""
    out = os.environ.get("KVPILOT_BENCH_PROFILE")
    if not out:
        return None
    return subprocess.Popen(
        ["py-spy", "record", "--gil", "--nonblocking", "-r", "200", "-f", "raw", "-o", out, "--pid", str(pid)]
    )


def server(name: str) -> dict[str, Any]:
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "VLLMServer", "metadata": {"name": name}, "spec": SPEC}


def run_once(kind: str, n: int, timeout: float, settings: dict[str, Any] | None = None) -> dict[str, Any]:
    """One burst of ``n`` servers against a fresh sandbox; the figures of that run."""
    Record.servers, Record.pods = {}, {}
    with SandboxCluster(strict=False, timeout=60) as cluster, tempfile.TemporaryDirectory() as tmp:
        cluster.observe(Record.observe)
        client = cluster.api_client()
        kubernetes.client.ApiextensionsV1Api(client).create_custom_resource_definition(crd_manifest())
        kubernetes.client.CoreV1Api(client).create_namespace({"metadata": {"name": NS}})
        kubeconfig = cluster.write_kubeconfig(Path(tmp) / "kubeconfig", NS)
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT / "operator")}
        proc = subprocess.Popen(
            operator_command(kind, kubeconfig, settings), env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
        )
        try:
            custom = kubernetes.client.CustomObjectsApi(client)
            custom.create_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, server("warmup"))
            wait(lambda: "warmup" in Record.pods or proc.poll() is not None, 120, "the warm-up Pod")
            if proc.poll() is not None:
                raise RuntimeError(f"{kind} operator exited: {proc.stderr.read().decode()[-2000:]}")
            time.sleep(1.0)  # let the warm-up server's status writes finish before counting CPU
            cpu0, req0 = cpu_seconds(proc.pid), len(cluster.served())
            api0 = cpu_seconds(os.getpid())
            profiler = profile(proc.pid)
            names = [f"s{i:05d}" for i in range(n)]
            t0 = time.monotonic()
            with concurrent.futures.ThreadPoolExecutor(4) as pool:
                clients = [kubernetes.client.CustomObjectsApi(cluster.api_client()) for _ in range(4)]
                list(
                    pool.map(
                        lambda i: clients[i % 4].create_namespaced_custom_object(
                            GROUP, VERSION, NS, PLURAL, server(names[i])
                        ),
                        range(n),
                    )
                )
            created = time.monotonic() - t0
            wait(lambda: all(s in Record.pods for s in names), timeout, f"{n} Pods")
            last_pod = max(Record.pods[s] for s in names)
            cpu, still = cpu_seconds(proc.pid), 0  # quiescence: CPU unchanged over 1 s (bounded)
            deadline = time.monotonic() + timeout
            while still < 5 and time.monotonic() < deadline:
                time.sleep(0.2)
                now = cpu_seconds(proc.pid)
                still = still + 1 if now - cpu < 0.011 else 0
                cpu = now
            rss = peak_rss_mib(proc.pid)
            api_cpu = cpu_seconds(os.getpid()) - api0
            if profiler is not None:
                profiler.send_signal(signal.SIGINT)
                profiler.wait(60)
            requests = cluster.served()[req0:]
        finally:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)
    latencies = sorted(Record.pods[s] - Record.servers[s] for s in names)
    verbs = collections.Counter(verb(r) for r in requests)
    return {
        "all_pods_s": last_pod - min(Record.servers[s] for s in names),
        "create_s": created,
        "p50_s": latencies[len(latencies) // 2],
        "p99_s": latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))],
        "cpu_ms_per_server": (cpu - cpu0) * 1000 / n,
        "rss_mib": rss,
        "api_ms_per_server": api_cpu * 1000 / n,
        "requests": verbs,
    }


def verb(request: Any) -> str:
    """``GET pods``, ``PATCH vllmservers/status``: a served request's method and resource."""
    plural = request.resource.plural if request.resource else "?"
    return f"{request.method} {plural}" + (f"/{request.subresource}" if request.subresource else "")


def median(runs: list[dict[str, Any]], key: str) -> float:
    return statistics.median(r[key] for r in runs)


def main() -> None:
    """Run the bursts and print kvpilot's figures beside the floor's."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--servers", default="100,500,1000", help="comma-separated burst sizes")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--timeout", type=float, default=600.0, help="seconds to wait for the Pods of one burst")
    ap.add_argument("--operators", default="bare,kvpilot")
    ap.add_argument(
        "--kopf",
        action="append",
        default=[],
        metavar="SECTION.NAME=VALUE",
        help="a kopf setting for kvpilot's operator, e.g. queueing.worker_limit=20 (repeatable; floor: kopf's own)",
    )
    args = ap.parse_args()
    settings = kopf_settings(args.kopf)
    kinds = args.operators.split(",")
    for n in (int(x) for x in args.servers.split(",")):
        runs: dict[str, list[dict[str, Any]]] = {k: [] for k in kinds}
        for _ in range(args.repeat):
            for kind in kinds:  # interleaved, so both see the same machine load
                runs[kind].append(run_once(kind, n, args.timeout, settings))
        print(
            f"\n{n} VLLMServers, median of {args.repeat}"
            + (f", kvpilot with kopf settings {settings}" if settings else "")
            + ":"
        )
        print(
            f"  {'operator':<8} {'all Pods s':>10} {'p50 s':>7} {'p99 s':>7} {'CPU ms/srv':>10} {'RSS MiB':>8}"
            f" {'API ms/srv':>10}"
        )
        for kind in kinds:
            r = runs[kind]
            print(
                f"  {kind:<8} {median(r, 'all_pods_s'):>10.2f} {median(r, 'p50_s'):>7.3f} {median(r, 'p99_s'):>7.3f}"
                f" {median(r, 'cpu_ms_per_server'):>10.2f} {median(r, 'rss_mib'):>8.0f}"
                f" {median(r, 'api_ms_per_server'):>10.2f}"
            )
        if "bare" in runs and "kvpilot" in runs:
            ratio = median(runs["kvpilot"], "cpu_ms_per_server") / median(runs["bare"], "cpu_ms_per_server")
            print(f"  CPU per server kvpilot/bare: {ratio:.2f}x (target <= 2x)")
        for kind in kinds:
            total = runs[kind][-1]["requests"]
            per = ", ".join(f"{verb} {count / n:.2f}" for verb, count in sorted(total.items()))
            print(f"  {kind} API requests per server (last run; incl. watches): {per}")


if __name__ == "__main__":
    main()
