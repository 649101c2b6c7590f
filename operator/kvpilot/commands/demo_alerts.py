"""The demo's alert section: one kvpilot alert from rule to firing to diagnosis, on loopback.

The ``max-num-seqs-cap`` engine scenario is recorded with the demo pod's labels (and the operator's
``kvpilot_vllmserver_limit`` for it), backfilled into a real Prometheus (promtool) that evaluates
kvpilot's rules; the firing ``VLLMMaxNumSeqsCap`` is posted as Alertmanager would post it to
``kvpilot alert-hook`` (in process, on 127.0.0.1), which answers with the diagnosis. Needs the
``prometheus`` and ``promtool`` binaries; without them the section says so and is skipped. Every wait
is bounded; the Prometheus process is stopped by its PID.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypedDict

from kvpilot.commands._child import start_tied
from kvpilot.text.numbers import fig

#: simulated seconds recorded, and between snapshots (the rules' 5 m window fits with room)
RECORD_SECONDS, RECORD_INTERVAL = 330, 10
ALERT = "VLLMMaxNumSeqsCap"
WAIT_SECONDS = 20.0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]  # (host, port) of an AF_INET socket
        return port


class RuleAlert(TypedDict, total=False):
    """An alert of a rule in Prometheus' ``/api/v1/rules`` answer."""

    state: str
    labels: dict[str, str]


class Rule(TypedDict, total=False):
    """A rule in Prometheus' ``/api/v1/rules`` answer (the fields the demo reads)."""

    name: str
    lastEvaluation: str
    alerts: list[RuleAlert]


class RuleGroup(TypedDict, total=False):
    """A rule group in Prometheus' ``/api/v1/rules`` answer."""

    rules: list[Rule]


class RulesData(TypedDict, total=False):
    """The ``data`` of Prometheus' ``/api/v1/rules`` answer."""

    groups: list[RuleGroup]


class HookTarget(TypedDict, total=False):
    """One diagnosed target in the alert hook's answer (:meth:`kvpilot.alerts.result.AlertResult.to_json`)."""

    verdict: str
    severity: str
    confidence: float
    evidence: list[str]


class HookDiagnosis(TypedDict, total=False):
    """A result's diagnosis in the alert hook's answer."""

    targets: list[HookTarget]


class HookResult(TypedDict, total=False):
    """One alert's result in the alert hook's answer (the fields the demo prints)."""

    diagnosis: HookDiagnosis | None
    error: str | None
    change: str | None
    predicted_effect: str | None


class HookAnswer(TypedDict, total=False):
    """The alert hook's answer to an Alertmanager webhook (the fields the demo reads)."""

    results: list[HookResult]


def _get_json(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=5) as resp:
        return json.loads(resp.read(1 << 22))


def _wait(probe: Callable[[], Any], what: str) -> Any:
    deadline = time.monotonic() + WAIT_SECONDS
    while time.monotonic() < deadline:
        try:
            result = probe()
        except OSError:
            result = None
        if result:
            return result
        time.sleep(0.2)
    raise RuntimeError(f"alert demo: {what} within {fig(WAIT_SECONDS, 3)} s")


def _recording(tmp: Path, namespace: str, pod: str, end: float) -> list[Path]:
    """The scenario's recording with the pod's labels, and the operator's limit series, as files."""
    from kvpilot.commands.simulate.session import Simulation, record

    sim = Simulation("max-num-seqs-cap", {}, "0.33.0", None, horizon=RECORD_SECONDS)
    raw = tmp / "raw.om"
    _, start, last = record(sim, raw, RECORD_SECONDS, RECORD_INTERVAL, end)
    extra = f'namespace="{namespace}",pod="{pod}",job="vllm",'
    labelled = tmp / "vllm.om"
    labelled.write_text(
        "\n".join(
            line if line.startswith("#") or "{" not in line else line.replace("{", "{" + extra, 1)
            for line in raw.read_text().splitlines()
        )
        + "\n"
    )
    seqs = int(sim.engine.config.max_num_seqs)
    limits = tmp / "limits.om"
    series = f'kvpilot_vllmserver_limit{{namespace="{namespace}",pod="{pod}",server="demo",limit="max_num_seqs"}}'
    steps = int((last - start) // RECORD_INTERVAL)
    limits.write_text(
        "# TYPE kvpilot_vllmserver_limit gauge\n"
        + "".join(f"{series} {seqs} {start + k * RECORD_INTERVAL:.0f}\n" for k in range(steps + 1))
        + "# EOF\n"
    )
    return [labelled, limits]


def _post_alert(prometheus_url: str, alert: dict[str, str]) -> tuple[HookAnswer, float, str]:
    """POST ``alert`` in an Alertmanager v4 body to an alert hook on loopback; (answer, seconds, url)."""
    import aiohttp

    from kvpilot.alerts.hook import AlertHook, HookConfig, serve

    token = "demo-" + str(time.time_ns())
    body = {
        "version": "4",
        "status": "firing",
        "receiver": "kvpilot",
        "groupKey": f'{{}}:{{alertname="{ALERT}"}}',
        "alerts": [{"status": "firing", "labels": alert, "annotations": {}, "fingerprint": "demo"}],
    }

    async def main() -> tuple[HookAnswer, float, str]:
        runner = await serve(AlertHook(HookConfig(prometheus=prometheus_url, bearer_token=token)), "127.0.0.1", 0)
        host, port = runner.addresses[0][:2]
        url = f"http://{host}:{port}/alerts"
        try:
            async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=WAIT_SECONDS)) as session:
                started = time.perf_counter()
                async with session.post(url, json=body, headers={"Authorization": f"Bearer {token}"}) as resp:
                    answer: HookAnswer = await resp.json()
                return answer, time.perf_counter() - started, url
        finally:
            await runner.cleanup()

    return asyncio.run(main())


def firing_alerts(rules: RulesData) -> list[dict[str, str]] | None:
    """The labels of the firing :data:`ALERT` alerts in Prometheus' ``/api/v1/rules`` data, once every rule of
    that alertname (its warning and critical variants) has been evaluated; None before, or while none fires.

    Prometheus evaluates a group's rules one after the other and stores each one's ``ALERTS`` series as it
    goes: a query of ``ALERTS`` can see the warning variant before the critical one of the same round.
    """
    variants = [r for g in rules.get("groups", []) for r in g.get("rules", []) if r.get("name") == ALERT]
    if not variants or any(str(r.get("lastEvaluation", "0001-")).startswith("0001-") for r in variants):
        return None
    firing = [dict(a["labels"]) for r in variants for a in r.get("alerts", []) if a.get("state") == "firing"]
    return firing or None


def fired_labels(firing: list[dict[str, str]]) -> dict[str, str]:
    """The labels of the alert to post among the firing ones of :data:`ALERT`.

    A rule with ``critical_when`` has a warning and a critical variant and both may fire for the pod;
    Alertmanager's shipped inhibit rule then mutes the warning, so the critical one is the one posted.
    """
    critical = [labels for labels in firing if labels.get("severity") == "critical"]
    return (critical or firing)[0]


def fired_line(labels: dict[str, str], fired_after: float, namespace: str, pod: str) -> str:
    """The demo's line for the alert that fired, with that alert's own severity (its ``severity`` label)."""
    return (
        f"{ALERT} ({labels.get('severity', '?')}: running at the pod's own max_num_seqs, a queue, KV room) fired "
        f"in a real Prometheus after {fired_after:.1f} s, fed the max-num-seqs-cap engine scenario as "
        f"{namespace}/{pod} (limit_source={labels.get('limit_source', '?')})."
    )


def section_alerts(ctx: Any) -> None:
    """Rule -> firing in a real Prometheus -> webhook -> ``kvpilot alert-hook`` -> diagnosis."""
    from kvpilot.alerts import render
    from kvpilot.alerts.rules import alert_rules

    ctx.heading("An alert, from rule to diagnosis (kvpilot alert-hook)")
    prometheus, promtool = shutil.which("prometheus"), shutil.which("promtool")
    if not (prometheus and promtool):
        ctx.say("Skipped: needs the prometheus and promtool binaries (Debian: apt-get install prometheus).")
        return
    namespace, pod = "kvpilot-demo", getattr(ctx, "pod_name", "") or "qwen-demo0"
    [rule] = [r for r in alert_rules(for_override="0s") if r.name == ALERT]
    with tempfile.TemporaryDirectory(prefix="kvpilot-demo-alerts-") as name:
        tmp = Path(name)
        # ends now: Prometheus refuses to append (ALERTS) before the newest backfilled sample
        for path in _recording(tmp, namespace, pod, end=time.time()):
            subprocess.run(
                [promtool, "tsdb", "create-blocks-from", "openmetrics", str(path), str(tmp / "data")],
                check=True,
                capture_output=True,
                timeout=60,
            )
        (tmp / "rules.yaml").write_text(render.dump(render.prometheus_rules([rule], interval="1s")))
        (tmp / "prometheus.yml").write_text(json.dumps({"rule_files": [str(tmp / "rules.yaml")]}))
        port = _free_port()
        url = f"http://127.0.0.1:{port}"
        log = open(tmp / "prometheus.log", "w")  # noqa: SIM115 - closed below, after the process
        proc = start_tied(  # ends with the demo, even a demo killed by SIGKILL
            [
                prometheus,
                f"--config.file={tmp / 'prometheus.yml'}",
                f"--storage.tsdb.path={tmp / 'data'}",
                f"--web.listen-address=127.0.0.1:{port}",
                "--storage.tsdb.retention.time=3650d",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        try:
            started = time.monotonic()
            firing = _wait(lambda: firing_alerts(_get_json(f"{url}/api/v1/rules")["data"]), f"{ALERT} firing")
            fired_after = time.monotonic() - started
            labels = fired_labels(firing)
            answer, seconds, hook_url = _post_alert(url, labels)
        finally:
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)
            log.close()
    result = answer["results"][0]
    diagnosis = (result.get("diagnosis") or {}).get("targets") or [{}]
    d = diagnosis[0]
    ctx.say(fired_line(labels, fired_after, namespace, pod))
    ctx.say(f"kvpilot alert-hook answered its Alertmanager webhook in {seconds:.2f} s ({hook_url}):")
    evidence = (d.get("evidence") or [result.get("error") or "no diagnosis"])[0]
    ctx.say(
        f"{d.get('verdict', 'not diagnosed')} ({d.get('severity', '?')}, confidence {d.get('confidence', '?')}): "
        f"{evidence}",
        indent=2,
    )
    change, effect = result.get("change"), result.get("predicted_effect")
    if change:  # the hook's answer leads with them, as its log line and every sink do
        ctx.say(f"change {change}" + (f": {effect}" if effect else ""), indent=2)
    ctx.more.append(("the alert rules and receiver", "kvpilot alert-hook --help"))
