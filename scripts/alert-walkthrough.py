#!/usr/bin/env python3
"""A local alerting walkthrough: a simulated vLLM, real Prometheus and Alertmanager, kvpilot alert-hook.

Starts, all on 127.0.0.1 and each stopped by its PID at the end:

1. ``kvpilot simulate SCENARIO --serve`` in real time (``--speed 1``), its arrivals kept up for an hour;
2. ``kvpilot alert-hook`` (the ``log`` sink) with a bearer token written to a temporary file;
3. Alertmanager (Debian's ``prometheus-alertmanager``) on the shipped
   ``manifests/monitoring/alertmanager.yaml``, with the hook's URL and token file put in;
4. Prometheus scraping the simulator every 15 s (labels ``namespace=llm``, ``pod=qwen-0``) and evaluating
   the shipped ``manifests/monitoring/prometheus-rules.yaml`` unchanged.

It prints each alert's state changes as they happen (pending, firing in Prometheus; delivered to and
diagnosed by the hook, with the hook's answer: verdict, change, predicted effect) with the seconds since the
simulator started, and a summary at the end. There is
no operator, so no ``kvpilot_vllmserver_limit``: the rules use their fallbacks (``limit_source=heuristic``).

``--shortened`` evaluates clearly marked shortened copies of the rules instead (30 s windows, ``for: 5s``,
evaluated every 5 s, scrapes every 5 s): the alerts in about a minute, to see the path work.

Usage: ``make alert-walkthrough`` or ``.venv/bin/python scripts/alert-walkthrough.py [--scenario NAME]
[--shortened] [--timeout 20m]``; it ends when every alert it waits for (``--until``) reached the hook, or at
the timeout. Needs the ``prometheus`` and ``prometheus-alertmanager`` binaries.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[1]
MONITORING = REPO / "manifests" / "monitoring"
NAMESPACE, POD = "llm", "qwen-0"
SCRAPE = "15s"


def free_port() -> int:
    """A free TCP port on 127.0.0.1."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def get_json(url: str) -> Any:
    """GET ``url`` as JSON (5 s, 4 MiB at most); None when it cannot be read yet."""
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:
            return json.loads(resp.read(1 << 22))
    except (OSError, ValueError):
        return None


def duration(text: str) -> float:
    """``90s``, ``20m``, ``1h`` -> seconds."""
    units = {"s": 1, "m": 60, "h": 3600}
    if text[-1:] not in units or not text[:-1].isdigit():
        raise argparse.ArgumentTypeError(f"{text!r}: give a duration such as 90s, 20m or 1h")
    return int(text[:-1]) * units[text[-1]]


def hook_answer(line: dict[str, Any]) -> str:
    """The answer as the hook's log line carries it: ``: verdict (severity): change ...; predicted ...``."""
    answer = f": {line['verdict']} ({line['severity']})"
    answer += f": change {line['change']}" if line.get("change") else ""
    return answer + (f"; {line['predicted_effect']}" if line.get("predicted_effect") else "")


def main(argv: list[str] | None = None) -> int:
    """Run the walkthrough; 0 when every awaited alert reached the hook, 1 at the timeout."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--scenario", default="max-num-seqs-cap", help="kvpilot simulate scenario")
    parser.add_argument("--shortened", action="store_true", help="shortened copies of the rules (30 s, for: 5s)")
    parser.add_argument("--timeout", type=duration, default="20m", help="give up after this long (default 20m)")
    parser.add_argument(
        "--until",
        default="VLLMMaxNumSeqsCap,VLLMTTFTHigh",
        help="comma-separated alerts to wait for at the hook (default VLLMMaxNumSeqsCap,VLLMTTFTHigh)",
    )
    args = parser.parse_args(argv)
    prometheus, alertmanager = shutil.which("prometheus"), shutil.which("prometheus-alertmanager")
    if not (prometheus and alertmanager):
        print(
            "needs the prometheus and prometheus-alertmanager binaries (Debian: apt-get install prometheus "
            "prometheus-alertmanager)",
            file=sys.stderr,
        )
        return 2
    # SIGTERM (timeout, kill) ends the walkthrough like Ctrl-C: the finally below stops every process started
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    kvpilot = [sys.executable, "-m", "kvpilot.cli"]
    wanted = {a for a in args.until.split(",") if a}
    tmp = Path(tempfile.mkdtemp(prefix="kvpilot-walkthrough-"))
    sim_port, hook_port, am_port, prom_port = (free_port() for _ in range(4))
    token = tmp / "token"
    token.write_text(os.urandom(16).hex())
    procs: list[subprocess.Popen[bytes]] = []
    logs = {n: open(tmp / f"{n}.log", "w") for n in ("simulate", "hook", "alertmanager", "prometheus")}  # noqa: SIM115

    def start(name: str, cmd: list[str]) -> None:
        procs.append(subprocess.Popen(cmd, stdout=logs[name], stderr=subprocess.STDOUT, start_new_session=True))

    # 1. the rules: the shipped file, or shortened copies (clearly marked in their group name)
    if args.shortened:
        from kvpilot.alerts import render
        from kvpilot.alerts.rules import alert_rules

        rules = render.prometheus_rules(alert_rules(window="30s", for_override="5s"), interval="5s")
        rules["groups"][0]["name"] += "-SHORTENED-COPY"
        rules_file = tmp / "rules-shortened.yaml"
        rules_file.write_text(render.dump(rules))
    else:
        rules_file = MONITORING / "prometheus-rules.yaml"
    # 2. Alertmanager: the shipped configuration with the hook's URL and token file
    am = yaml.safe_load((MONITORING / "alertmanager.yaml").read_text())
    for receiver in am["receivers"]:
        for hook in receiver.get("webhook_configs", []):
            hook["url"] = f"http://127.0.0.1:{hook_port}/alerts"
            hook["http_config"]["authorization"]["credentials_file"] = str(token)
    (tmp / "alertmanager.yml").write_text(yaml.safe_dump(am))
    scrape = "5s" if args.shortened else SCRAPE  # a 30 s window holds the fallback's 3 samples only at 5 s
    prom_config = {
        "global": {"scrape_interval": scrape, "evaluation_interval": scrape},
        "rule_files": [str(rules_file)],
        "alerting": {"alertmanagers": [{"static_configs": [{"targets": [f"127.0.0.1:{am_port}"]}]}]},
        "scrape_configs": [
            {
                "job_name": "vllm",
                "static_configs": [
                    {"targets": [f"127.0.0.1:{sim_port}"], "labels": {"namespace": NAMESPACE, "pod": POD}}
                ],
            }
        ],
    }
    (tmp / "prometheus.yml").write_text(yaml.safe_dump(prom_config))
    (tmp / "scenario.yaml").write_text("workload: {duration: 3600}\n")  # arrivals for an hour, not 5 minutes
    t0 = time.monotonic()
    seen: dict[tuple[str, str, str], tuple[float, str]] = {}

    def note(alert: str, sev: str, what: str, extra: str = "") -> None:
        if (alert, sev, what) in seen:
            return
        seen[(alert, sev, what)] = (time.monotonic() - t0, extra)
        m, s = divmod(int(seen[(alert, sev, what)][0]), 60)
        print(f"+{m:02d}:{s:02d}  {alert:<28} {sev:<8} {what}{extra}", flush=True)

    try:
        start(
            "simulate",
            [
                *kvpilot,
                "simulate",
                args.scenario,
                "--serve",
                f"127.0.0.1:{sim_port}",
                "--scenario-file",
                str(tmp / "scenario.yaml"),
            ],
        )
        start(
            "hook",
            [
                *kvpilot,
                "alert-hook",
                "--prometheus",
                f"http://127.0.0.1:{prom_port}",
                "--listen",
                f"127.0.0.1:{hook_port}",
                "--bearer-token-file",
                str(token),
                "--sink",
                "log",
            ],
        )
        start(
            "alertmanager",
            [
                alertmanager,
                f"--config.file={tmp / 'alertmanager.yml'}",
                f"--storage.path={tmp / 'am-data'}",
                f"--web.listen-address=127.0.0.1:{am_port}",
                "--cluster.listen-address=",
            ],
        )
        start(
            "prometheus",
            [
                prometheus,
                f"--config.file={tmp / 'prometheus.yml'}",
                f"--storage.tsdb.path={tmp / 'tsdb'}",
                f"--web.listen-address=127.0.0.1:{prom_port}",
            ],
        )
        print(
            f"{'rules: SHORTENED COPIES (30 s windows, for: 5s)' if args.shortened else 'rules: ' + str(rules_file)}"
            f"\nsimulate {args.scenario} http://127.0.0.1:{sim_port}/metrics, Prometheus http://127.0.0.1:{prom_port}, "
            f"Alertmanager http://127.0.0.1:{am_port}, hook http://127.0.0.1:{hook_port}; logs in {tmp}",
            flush=True,
        )
        while time.monotonic() - t0 < args.timeout:
            for proc, name in zip(procs, logs, strict=True):
                if proc.poll() is not None:
                    print(f"{name} exited ({proc.returncode}): see {tmp / (name + '.log')}", file=sys.stderr)
                    return 1
            answer = get_json(f"http://127.0.0.1:{prom_port}/api/v1/alerts") or {}
            for a in answer.get("data", {}).get("alerts", []):
                lab = a["labels"]
                src = f" (limit_source={lab['limit_source']})" if "limit_source" in lab else ""
                note(lab["alertname"], lab.get("severity", ""), f"{a['state']} in Prometheus", src)
            for line in (tmp / "hook.log").read_text().splitlines():
                if line.startswith("{"):
                    d = json.loads(line)
                    if d.get("event") == "diagnosis":
                        note(d["alertname"], "", "at the hook", hook_answer(d))
            if all(any(k[0] == w and k[2] == "at the hook" for k in seen) for w in wanted):
                break
            time.sleep(2)
        else:
            print(f"timeout: not every one of {sorted(wanted)} reached the hook", file=sys.stderr)
            return 1
    finally:
        for proc in reversed(procs):
            if proc.poll() is None:
                os.killpg(proc.pid, 15)
                try:
                    proc.wait(10)
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, 9)
                    proc.wait(10)
        for log in logs.values():
            log.close()
        print(f"\nseconds since the simulator started (1-minute load average now: {os.getloadavg()[0]:.2f}):")
        for (alert, sev, what), (at, extra) in sorted(seen.items(), key=lambda kv: kv[1][0]):
            print(f"  {at:7.0f} s  {alert} {sev} {what}{extra}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
