"""The alert hook answering an alert about a pod whose queue gauge reads millions: its peak memory and its slot.

A real Prometheus (Debian's ``prometheus``/``promtool``) holds the ``kv-exhaustion`` engine scenario (330 simulated
s every 10 s, ending now) as pod ``llm/qwen-7f3a2`` with every ``vllm:num_requests_waiting`` sample set to
``--waiting`` (2,000,000 by default: what Prometheus stores from a pod whose /metrics exports it). ``kvpilot
alert-hook --max-concurrency 1`` runs as a child process on 127.0.0.1; it gets one firing alert about that pod, then
one about another pod (a slot still taken would leave it "not started"). Prints the hook process's peak RSS
(``VmHWM``), both answers' gist, and ``kvpilot_alert_hook_diagnoses_in_flight`` after them.

Run: python benchmarks/alert_hook_backlog.py [--waiting 2000000]
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

from kvpilot.commands.simulate.session import Simulation, record


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _wait_ready(url: str, seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=2) as resp:
                if resp.status == 200:
                    return
        except OSError:
            time.sleep(0.2)
    raise SystemExit(f"{url} not ready within {seconds} s")


def _recording(tmp: Path, waiting: int) -> Path:
    record(Simulation("kv-exhaustion", {}, "0.33.0", None, horizon=330), tmp / "raw.om", 330, 10, time.time())
    extra = 'namespace="llm",pod="qwen-7f3a2",job="vllm",'
    lines = []
    for line in (tmp / "raw.om").read_text().splitlines():
        if not line.startswith("#") and "{" in line:
            line = line.replace("{", "{" + extra, 1)
        if line.startswith("vllm:num_requests_waiting{"):
            line = re.sub(r"\} \S+ ", f"}} {float(waiting)!r} ", line, count=1)
        lines.append(line)
    out = tmp / "rec.om"
    out.write_text("\n".join(lines) + "\n")
    return out


def _alert(port: int, pod: str, fingerprint: str) -> dict[str, Any]:
    body = {
        "version": "4",
        "status": "firing",
        "alerts": [
            {
                "status": "firing",
                "labels": {"alertname": "VLLMKVCacheExhaustion", "namespace": "llm", "pod": pod},
                "fingerprint": fingerprint,
            }
        ],
    }
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/alerts",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    started = time.monotonic()
    with urllib.request.urlopen(request, timeout=120) as resp:
        answer = json.loads(resp.read())
    (result,) = answer["results"]
    targets = (result.get("diagnosis") or {}).get("targets") or [{}]
    replay = targets[0].get("replay") or {}
    return {
        "seconds": round(time.monotonic() - started, 1),
        "status": result.get("status"),
        "error": result.get("error"),
        "verdict": targets[0].get("verdict"),
        "replayed": replay.get("predicted") is not None,
        "mean_waiting": (replay.get("predicted") or {}).get("mean_waiting"),
        "misses": replay.get("misses"),
    }


def _in_flight(port: int) -> float | None:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as resp:
        for line in resp.read().decode().splitlines():
            if line.startswith("kvpilot_alert_hook_diagnoses_in_flight "):
                return float(line.split()[1])
    return None


def _peak_rss_mib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) // 1024
    return -1


def main() -> None:
    """Record, backfill, start Prometheus and the hook, send two alerts, print."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--waiting", type=int, default=2_000_000)
    args = ap.parse_args()
    prometheus, promtool = shutil.which("prometheus"), shutil.which("promtool")
    if not (prometheus and promtool):
        raise SystemExit("needs prometheus and promtool on PATH")
    with tempfile.TemporaryDirectory() as name:
        tmp = Path(name)
        rec = _recording(tmp, args.waiting)
        subprocess.run(
            [promtool, "tsdb", "create-blocks-from", "openmetrics", str(rec), str(tmp / "data")],
            check=True,
            capture_output=True,
            timeout=120,
        )
        (tmp / "prometheus.yml").write_text("{}\n")
        prom_port, hook_port = _free_port(), _free_port()
        prom = subprocess.Popen(
            [
                prometheus,
                f"--config.file={tmp / 'prometheus.yml'}",
                f"--storage.tsdb.path={tmp / 'data'}",
                f"--web.listen-address=127.0.0.1:{prom_port}",
                "--storage.tsdb.retention.time=3650d",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        hook = None
        try:
            _wait_ready(f"http://127.0.0.1:{prom_port}/-/ready")
            hook = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "kvpilot.cli",
                    "alert-hook",
                    "--prometheus",
                    f"http://127.0.0.1:{prom_port}",
                    "--insecure-no-auth",
                    "--listen",
                    f"127.0.0.1:{hook_port}",
                    "--max-concurrency",
                    "1",
                ],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            _wait_ready(f"http://127.0.0.1:{hook_port}/metrics")
            first = _alert(hook_port, "qwen-7f3a2", "backlog00000001")
            second = _alert(hook_port, "other-00000", "backlog00000002")
            print(
                json.dumps(
                    {
                        "waiting": args.waiting,
                        "hook_peak_rss_mib": _peak_rss_mib(hook.pid),
                        "alert": first,
                        "next_alert_other_pod": second,
                        "in_flight_after": _in_flight(hook_port),
                    },
                    indent=1,
                )
            )
        finally:
            for proc in (hook, prom):
                if proc is not None:
                    proc.terminate()
                    proc.wait(10)


if __name__ == "__main__":
    main()
