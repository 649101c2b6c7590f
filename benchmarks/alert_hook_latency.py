"""Latency of ``kvpilot alert-hook`` for one diagnosis: webhook in, diagnosis JSON out.

A real Prometheus (Debian's ``prometheus``/``promtool``) holds the ``kv-exhaustion`` engine scenario
(330 simulated s every 10 s, ending now) as pod ``llm/qwen-7f3a2``; the receiver runs on 127.0.0.1 and
gets the same Alertmanager v4 body ``--requests`` times, each with a new fingerprint (no cache hit),
one at a time. Prints the round trip (POST to answer) and the diagnosis alone (the hook's histogram).

Run: python benchmarks/alert_hook_latency.py [--requests 20]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import socket
import statistics
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path

import aiohttp

from kvpilot.alerts.hook import AlertHook, HookConfig, serve
from kvpilot.commands.simulate.session import Simulation, record


def _labelled(raw: Path, out: Path) -> None:
    extra = 'namespace="llm",pod="qwen-7f3a2",job="vllm",'
    lines = (
        line if line.startswith("#") or "{" not in line else line.replace("{", "{" + extra, 1)
        for line in raw.read_text().splitlines()
    )
    out.write_text("\n".join(lines) + "\n")


async def _measure(prometheus: str, requests: int) -> tuple[list[float], AlertHook]:
    hook = AlertHook(HookConfig(prometheus=prometheus, bearer_token="bench", cache_seconds=0))
    runner = await serve(hook, "127.0.0.1", 0)
    host, port = runner.addresses[0][:2]
    times = []
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as session:
            for i in range(requests):
                body = {
                    "version": "4",
                    "status": "firing",
                    "alerts": [
                        {
                            "status": "firing",
                            "labels": {"alertname": "VLLMKVCacheExhaustion", "namespace": "llm", "pod": "qwen-7f3a2"},
                            "fingerprint": f"bench{i:011d}",
                        }
                    ],
                }
                started = time.perf_counter()
                async with session.post(
                    f"http://{host}:{port}/alerts", json=body, headers={"Authorization": "Bearer bench"}
                ) as resp:
                    answer = await resp.json()
                times.append(time.perf_counter() - started)
                assert answer["results"][0]["diagnosis"]["targets"][0]["verdict"] == "kv_cache_exhaustion", answer
    finally:
        await runner.cleanup()
    return times, hook


def main() -> None:
    """Record, backfill, start Prometheus, measure, print."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=20)
    args = ap.parse_args()
    prometheus, promtool = shutil.which("prometheus"), shutil.which("promtool")
    if not (prometheus and promtool):
        raise SystemExit("needs prometheus and promtool on PATH")
    with tempfile.TemporaryDirectory() as name:
        tmp = Path(name)
        record(Simulation("kv-exhaustion", {}, "0.33.0", None, horizon=330), tmp / "raw.om", 330, 10, time.time())
        _labelled(tmp / "raw.om", tmp / "rec.om")
        subprocess.run(
            [promtool, "tsdb", "create-blocks-from", "openmetrics", str(tmp / "rec.om"), str(tmp / "data")],
            check=True,
            capture_output=True,
            timeout=120,
        )
        (tmp / "prometheus.yml").write_text("{}\n")
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        proc = subprocess.Popen(
            [
                prometheus,
                f"--config.file={tmp / 'prometheus.yml'}",
                f"--storage.tsdb.path={tmp / 'data'}",
                f"--web.listen-address=127.0.0.1:{port}",
                "--storage.tsdb.retention.time=3650d",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            url = f"http://127.0.0.1:{port}"
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                try:
                    with urllib.request.urlopen(url + "/-/ready", timeout=2) as resp:
                        if resp.status == 200:
                            break
                except OSError:
                    time.sleep(0.2)
            times, hook = asyncio.run(_measure(url, args.requests))
        finally:
            proc.terminate()
            proc.wait(10)
    hist = {s.name: s.value for m in hook.metrics.registry.collect() for s in m.samples}
    diag_mean = (
        hist["kvpilot_alert_hook_diagnosis_duration_seconds_sum"]
        / hist["kvpilot_alert_hook_diagnosis_duration_seconds_count"]
    )
    print(
        json.dumps(
            {
                "requests": len(times),
                "round_trip_ms": {
                    "min": round(min(times) * 1e3, 1),
                    "median": round(statistics.median(times) * 1e3, 1),
                    "max": round(max(times) * 1e3, 1),
                },
                "diagnosis_mean_ms": round(diag_mean * 1e3, 1),
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
