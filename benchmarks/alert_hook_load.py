"""Alert-hook load: Alertmanager bodies at a fixed rate on loopback, against ``kvpilot alert-hook`` and a floor.

Setup: a real Prometheus on 127.0.0.1 holding 8 vLLM pods (``namespace="bench"``, pods
``vllm-0000`` .. ``vllm-0007``, the eight engine-scenario recordings of
``tests/fixtures/recordings`` moved to end 150 s from now, backfilled with promtool), and
``kvpilot alert-hook --insecure-no-auth`` on a free port (its diagnoses-per-minute and connection bounds
lifted past the load), once with the cache of each target's diagnosis on
(``--cache 5m``) and once off (``--cache 0.001s``, the smallest it takes: every alert is
diagnosed; only alerts about the same target in flight at the same moment share one diagnosis).

Load: ``--rate`` requests/s (default 200) for ``--duration`` s (default 30), open loop (request i
leaves at t0 + i/rate whatever the answers do), at most ``--max-in-flight`` (default 512) at once,
each with a 30 s deadline; the body is ``tests/fixtures/webhooks/alertmanager_firing.json`` with its
one alert pointed at pod ``vllm-<i mod 8>`` (fingerprint per pod). The run stops by itself.

Printed per receiver: answered, errors (not 200, or no answer in time), latency p50/p99 (ms),
achieved rate, the receiver's peak RSS (``VmHWM``). Floor: the same load against a bare aiohttp
server on loopback answering each POST with a fixed JSON document, in the same run.

Run from the repository root:  .venv/bin/python benchmarks/alert_hook_load.py
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import copy
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import aiohttp

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from diagnose_scale import END, recording_chunks  # noqa: E402

from tests.support.prom import PrometheusServer, backfill, free_port  # noqa: E402

BODY = json.loads((ROOT / "tests" / "fixtures" / "webhooks" / "alertmanager_firing.json").read_text())
PODS = 8
FLOOR_SERVER = """
import sys
from aiohttp import web
async def alerts(request):
    await request.read()
    return web.json_response({"results": []})
app = web.Application()
app.router.add_post("/alerts", alerts)
web.run_app(app, host="127.0.0.1", port=int(sys.argv[1]), print=None)
"""


def shifted_recording(path: Path) -> None:
    """The 8-pod recording with every sample timestamp moved to end 150 s from now (so that the
    diagnoses of the next two minutes see fresh samples, not a target gone quiet).
    """
    raw = path.with_suffix(".raw")
    with raw.open("w") as fp:
        fp.writelines(recording_chunks(PODS))
    offset = time.time() + 150 - END
    with raw.open() as src, path.open("w") as out:
        for line in src:
            if line.startswith("#") or not line.strip():
                out.write(line)
                continue
            head, _, stamp = line.rstrip("\n").rpartition(" ")
            out.write(f"{head} {float(stamp) + offset:.3f}\n")


def body(i: int) -> bytes:
    doc = copy.deepcopy(BODY)
    alert = doc["alerts"][0]
    pod = f"vllm-{i % PODS:05d}"  # diagnose_scale.recording_chunks' pod names
    alert["labels"].update(namespace="bench", pod=pod)
    alert["labels"].pop("model_name", None)  # the recordings' pods serve other model names
    alert["fingerprint"] = f"{i % PODS:016x}"
    doc["commonLabels"] = dict(alert["labels"])
    return json.dumps(doc).encode()


def peak_rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


async def _ready(url: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    async with aiohttp.ClientSession() as session:
        while time.monotonic() < deadline:
            try:
                async with session.get(url, timeout=aiohttp.ClientTimeout(total=1)) as r:
                    if r.status < 500:
                        return
            except (aiohttp.ClientError, TimeoutError):
                pass
            await asyncio.sleep(0.05)
    raise RuntimeError(f"{url} did not answer within {timeout:.0f} s")


async def load(url: str, rate: float, duration: float, max_in_flight: int) -> dict:
    """Open-loop load; returns latencies (s) of the 200 answers and the error count."""
    bodies = [body(i) for i in range(PODS)]
    latencies: list[float] = []
    errors = 0
    verdicts: collections.Counter[str] = collections.Counter()  # what the answers said, by verdict
    gate = asyncio.Semaphore(max_in_flight)
    connector = aiohttp.TCPConnector(limit=max_in_flight)
    async with aiohttp.ClientSession(connector=connector) as session:

        async def one(i: int) -> None:
            nonlocal errors
            async with gate:
                t = time.perf_counter()
                try:
                    async with session.post(
                        url,
                        data=bodies[i % PODS],
                        headers={"Content-Type": "application/json"},
                        timeout=aiohttp.ClientTimeout(total=30),
                    ) as r:
                        raw = await r.read()
                        if r.status == 200:
                            latencies.append(time.perf_counter() - t)
                            verdicts.update(_verdicts(raw))
                        else:
                            errors += 1
                except (aiohttp.ClientError, TimeoutError):
                    errors += 1

        n = int(rate * duration)
        t0 = time.perf_counter()
        tasks = []
        for i in range(n):
            delay = t0 + i / rate - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.create_task(one(i)))
        await asyncio.gather(*tasks)
        elapsed = time.perf_counter() - t0
    return {"sent": n, "latencies": sorted(latencies), "errors": errors, "elapsed": elapsed, "verdicts": verdicts}


def _verdicts(raw: bytes) -> list[str]:
    """The verdicts of an alert hook's answer (``results[].diagnosis.targets[].verdict``); the floor's fixed
    document has none.
    """
    doc = json.loads(raw)
    return [
        t["verdict"] for res in doc.get("results") or [] for t in ((res.get("diagnosis") or {}).get("targets") or [])
    ]


def run(argv: list[str], port: int, args: argparse.Namespace) -> dict:
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        asyncio.run(_ready(f"http://127.0.0.1:{port}/healthz", 60))
        result = asyncio.run(load(f"http://127.0.0.1:{port}/alerts", args.rate, args.duration, args.max_in_flight))
        result["rss"] = peak_rss_mib(proc.pid)
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)
    return result


def report(label: str, r: dict) -> None:
    lat = r["latencies"]
    p50 = statistics.median(lat) * 1000 if lat else float("nan")
    p99 = lat[min(len(lat) - 1, int(len(lat) * 0.99))] * 1000 if lat else float("nan")
    print(
        f"  {label:<22} answered {len(lat):>5}/{r['sent']}  errors {r['errors']:>4}  p50 {p50:>8.1f} ms"
        f"  p99 {p99:>8.1f} ms  {len(lat) / r['elapsed']:>6.0f} req/s  peak RSS {r['rss']:>5.0f} MiB"
    )
    if r["verdicts"]:
        print("    verdicts: " + ", ".join(f"{v} {n}" for v, n in sorted(r["verdicts"].items())))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rate", type=float, default=200.0)
    ap.add_argument("--duration", type=float, default=30.0)
    ap.add_argument("--max-in-flight", type=int, default=512)
    args = ap.parse_args()
    kvpilot = str(ROOT / ".venv" / "bin" / "kvpilot")
    with tempfile.TemporaryDirectory(prefix="kvpilot-hook-") as tmp:
        rec = Path(tmp) / "pods.om"
        shifted_recording(rec)
        backfill(rec, Path(tmp) / "data")
        with PrometheusServer(Path(tmp) / "prom", data_dir=Path(tmp) / "data") as prom:
            print(f"{args.rate:g} req/s for {args.duration:g} s, {PODS} targets, open loop:")
            port = free_port()
            report("floor (bare aiohttp)", run([sys.executable, "-c", FLOOR_SERVER, str(port)], port, args))
            for label, cache in (("alert-hook cache on", "5m"), ("alert-hook cache off", "0.001s")):
                port = free_port()
                argv = [kvpilot, "alert-hook", "--prometheus", prom.url, "--listen", f"127.0.0.1:{port}"]
                argv += ["--insecure-no-auth", "--cache", cache]
                # the load is the point: lift the per-minute and connection bounds past it (docs/security.md)
                argv += ["--max-diagnoses-per-minute", "100000", "--max-connections", str(2 * args.max_in_flight)]
                report(label, run(argv, port, args))


if __name__ == "__main__":
    main()
