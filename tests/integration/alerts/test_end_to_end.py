"""End to end on loopback: the operator's /metrics and a simulated vLLM scraped by a real Prometheus
evaluating kvpilot's rules, a real Alertmanager routing the firing alert to ``kvpilot alert-hook``,
whose answer (forwarded) and Kubernetes Event (on the VLLMServer in the sandbox API) carry the verdict.

Kept short: 1 s scrape and evaluation intervals, the rules rendered with a 30 s window and ``for: 5s``
(the committed ones use 5 m), the simulator at 10 simulated seconds per second. Alertmanager runs the
shipped ``manifests/monitoring/alertmanager.yaml`` (its group_wait of 10 s included), with only the hook's
address and token file filled in. Every process is
started on 127.0.0.1 and stopped by its PID; every wait is bounded.
"""

from __future__ import annotations

import contextlib
import copy
import json
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import kubernetes.client
import pytest
import yaml
from kopf.testing import KopfRunner

from kvpilot.alerts import render
from kvpilot.alerts.rules import alert_rules
from kvpilot.controller.handlers import build_registry
from kvpilot.controller.metrics import OperatorMetrics
from kvpilot.controller.settings import make_settings
from tests.conftest import require_tool
from tests.integration.operator.conftest import SERVERS, wait_for
from tests.integration.operator.test_operator import EXPERIMENT, VLLM_LOG
from tests.support.prom import PrometheusServer, free_port
from tests.support.waiting import stop_process

pytestmark = pytest.mark.prometheus
TOKEN = "e2e-token"
MONITORING = Path(__file__).resolve().parents[3] / "manifests" / "monitoring"


class Collector:
    """An HTTP server on loopback keeping every JSON body POSTed to it (the hook's forward sink)."""

    def __init__(self) -> None:
        self.bodies: list[dict] = []
        bodies = self.bodies

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # http.server's name
                length = int(self.headers.get("Content-Length") or 0)
                bodies.append(json.loads(self.rfile.read(min(length, 1 << 22))))
                self.send_response(200)
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}/"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()


def _start(cmd: list[str], log) -> subprocess.Popen:
    return subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)


def test_rule_to_alertmanager_to_hook_to_event(cluster, api, namespace, kubelet, tmp_path):
    alertmanager = require_tool("prometheus-alertmanager")
    procs: list[subprocess.Popen] = []
    metrics = OperatorMetrics()
    operator_metrics = metrics.serve("127.0.0.1", 0, "/metrics")
    token = tmp_path / "token"
    token.write_text(TOKEN)
    kubeconfig = cluster.write_kubeconfig(tmp_path / "kubeconfig", namespace=namespace)
    sim_port, hook_port, am_port = free_port(), free_port(), free_port()
    runner = KopfRunner(
        ["run", "--standalone", "--namespace", namespace],
        registry=build_registry(cluster.configuration(), hub=False, metrics=metrics),
        settings=make_settings(),
        timeout=10,
    )
    try:
        with runner, Collector() as collector, contextlib.ExitStack() as files:
            logs = {n: files.enter_context(open(tmp_path / f"{n}.log", "w")) for n in ("sim", "hook", "alertmanager")}
            # 1. a VLLMServer with maxNumSeqs 4, its pod Ready: the operator exports the limit for that pod
            body = copy.deepcopy(EXPERIMENT)
            kubernetes.client.CustomObjectsApi(api).create_namespaced_custom_object(
                *SERVERS, namespace, "vllmservers", body
            )
            pod = wait_for(lambda: (cluster.list("v1/pods", namespace) or [None])[0], what="the pod")["metadata"][
                "name"
            ]
            kubelet.schedule(namespace, pod)
            kubelet.start(namespace, pod, log=VLLM_LOG)
            kubelet.ready(namespace, pod)
            wait_for(lambda: any(s.pod == pod for s in metrics.servers()), what="the pod in the operator's metrics")

            # 2. the pod's engine: the max-num-seqs-cap scenario (max_num_seqs 4, as the spec says)
            procs.append(
                _start(
                    [
                        sys.executable,
                        "-m",
                        "kvpilot.cli",
                        "simulate",
                        "max-num-seqs-cap",
                        "--serve",
                        f"127.0.0.1:{sim_port}",
                        "--speed",
                        "10",
                    ],
                    logs["sim"],
                )
            )
            # 3. the hook: limits from the VLLMServer spec, Events in the sandbox, results forwarded
            prom_port = free_port()
            procs.append(
                _start(
                    [
                        sys.executable,
                        "-m",
                        "kvpilot.cli",
                        "alert-hook",
                        "--prometheus",
                        f"http://127.0.0.1:{prom_port}",
                        "--listen",
                        f"127.0.0.1:{hook_port}",
                        "--bearer-token-file",
                        str(token),
                        "--window",
                        "30s",
                        "--limits-from-cluster",
                        "--kubeconfig",
                        str(kubeconfig),
                        "--sink",
                        "log",
                        "--sink",
                        "kube-event",
                        "--sink",
                        "forward",
                        "--forward-url",
                        collector.url,
                    ],
                    logs["hook"],
                )
            )
            # 4. Alertmanager on the shipped configuration (manifests/monitoring/alertmanager.yaml, unchanged but
            #    for the hook's address and token file): its grouping, its route, its inhibition
            am_config = yaml.safe_load((MONITORING / "alertmanager.yaml").read_text())
            [hook_receiver] = [r for r in am_config["receivers"] if r.get("webhook_configs")]
            hook_receiver["webhook_configs"][0]["url"] = f"http://127.0.0.1:{hook_port}/alerts"
            hook_receiver["webhook_configs"][0]["http_config"]["authorization"]["credentials_file"] = str(token)
            (tmp_path / "alertmanager.yml").write_text(yaml.safe_dump(am_config))
            procs.append(
                _start(
                    [
                        alertmanager,
                        f"--config.file={tmp_path / 'alertmanager.yml'}",
                        f"--storage.path={tmp_path / 'am-data'}",
                        f"--web.listen-address=127.0.0.1:{am_port}",
                        "--cluster.listen-address=",
                    ],
                    logs["alertmanager"],
                )
            )
            # 5. Prometheus: both scrapes, kvpilot's rules (30 s window, for: 5s, evaluated every second)
            rules = render.prometheus_rules(alert_rules(window="30s", for_override="5s"), interval="1s")
            (tmp_path / "rules.yaml").write_text(render.dump(rules))
            host, port = operator_metrics.host, operator_metrics.port
            prom = PrometheusServer(
                tmp_path / "prom",
                extra_config={
                    "rule_files": [str(tmp_path / "rules.yaml")],
                    "alerting": {"alertmanagers": [{"static_configs": [{"targets": [f"127.0.0.1:{am_port}"]}]}]},
                    "scrape_configs": [
                        {
                            "job_name": "vllm",
                            "static_configs": [
                                {"targets": [f"127.0.0.1:{sim_port}"], "labels": {"namespace": namespace, "pod": pod}}
                            ],
                        },
                        {
                            "job_name": "kvpilot-operator",
                            "honor_labels": True,
                            "static_configs": [{"targets": [f"{host}:{port}"]}],
                        },
                    ],
                },
            )
            prom.port, prom.url = prom_port, f"http://127.0.0.1:{prom_port}"
            with prom:
                firing = prom.wait_for_series('ALERTS{alertname="VLLMMaxNumSeqsCap", alertstate="firing"}', timeout=120)
                assert firing[0]["metric"]["limit_source"] == "kvpilot_vllmserver_limit"
                assert firing[0]["metric"]["pod"] == pod
                assert firing[0]["metric"]["namespace"] == namespace

                def forwarded():
                    return next(
                        (b for b in collector.bodies if b["alert"]["labels"].get("alertname") == "VLLMMaxNumSeqsCap"),
                        None,
                    )

                body = wait_for(forwarded, timeout=60, what="the hook's result for VLLMMaxNumSeqsCap")
                result, alert_labels = body["result"], body["alert"]["labels"]
                event = wait_for(
                    lambda: next(
                        (
                            e
                            for e in cluster.list("v1/events", namespace)
                            if e.get("reason") == "AlertDiagnosed" and "VLLMMaxNumSeqsCap" in e["message"]
                        ),
                        None,
                    ),
                    timeout=30,
                    what="the AlertDiagnosed Event",
                )
    finally:
        for proc in reversed(procs):
            stop_process(proc)
        operator_metrics.close()
    [diagnosis] = result["diagnosis"]["targets"]
    assert diagnosis["verdict"] == "max_num_seqs_cap", diagnosis["evidence"]
    # one severity policy (kvpilot.diagnose.severity): the queue grows, so the alert that reached the hook is
    # the critical variant (the shipped inhibit rule muted the warning one) and the diagnosis says critical too
    assert alert_labels["severity"] == diagnosis["severity"] == "critical"
    assert not any(
        b["alert"]["labels"].get("alertname") == "VLLMMaxNumSeqsCap"
        and b["alert"]["labels"].get("severity") == "warning"
        for b in collector.bodies
    )
    assert "of 4 (spec)" in diagnosis["evidence"][0]  # the limit came from the VLLMServer spec
    assert diagnosis["target"]["namespace"] == namespace
    assert diagnosis["target"]["pod"] == pod
    assert result["target"]["server"] == "qwen"
    assert event["involvedObject"]["kind"] == "VLLMServer"
    assert event["involvedObject"]["name"] == "qwen"
    assert "max_num_seqs_cap" in event["message"]
    assert event["type"] == "Warning"
    hook_lines = [json.loads(x) for x in (tmp_path / "hook.log").read_text().splitlines() if x.startswith("{")]
    assert any(x["alertname"] == "VLLMMaxNumSeqsCap" and x["verdict"] == "max_num_seqs_cap" for x in hook_lines)
