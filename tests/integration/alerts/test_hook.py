"""``kvpilot alert-hook`` on loopback: every webhook fixture, auth, bad bodies, injection, a burst.

A real Prometheus holds engine recordings (``kvpilot simulate --record``) under the labels the
fixtures name: pod ``qwen-7b-0`` is the ``kv-exhaustion`` scenario, ``qwen-7b-1`` ``max-num-seqs-cap``,
``qwen-7b-2`` ``healthy`` (namespace ``llm-serving``, model ``Qwen/Qwen2.5-7B-Instruct``). Their
timestamps end two minutes after the test starts, so a diagnosis "now" finds live-looking series.
"""

from __future__ import annotations

import asyncio
import base64
import io
import json
import subprocess
import sys
import time
from pathlib import Path

import aiohttp
import pytest

from kvpilot.alerts.hook import AlertHook, HookConfig, serve
from kvpilot.alerts.sinks import ForwardSink, LogSink
from kvpilot.diagnose.run import run as diagnose_run
from tests.integration.alerts import timelines
from tests.support.prom import PrometheusServer, backfill

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "webhooks"
NAMESPACE, MODEL = "llm-serving", "Qwen/Qwen2.5-7B-Instruct"
PODS = {"qwen-7b-0": "kv-exhaustion", "qwen-7b-1": "max-num-seqs-cap", "qwen-7b-2": "healthy"}
TOKEN = "s3cret-token"

pytestmark = pytest.mark.prometheus


def _fixture(name: str) -> dict:
    return json.loads((FIXTURES / name).read_text())


def _labelled(text: str, pod: str) -> str:
    """The recording with the target labels a Kubernetes scrape would add."""
    labels = {"namespace": NAMESPACE, "pod": pod, "job": "vllm", "instance": f"10.0.0.{pod[-1]}:8000"}
    return timelines.with_target_labels(text, labels)


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory):
    work = tmp_path_factory.mktemp("hook-prom")
    end = int(time.time()) + 120
    for pod, scenario in PODS.items():
        raw = work / f"{pod}.raw.om"
        subprocess.run(
            [
                sys.executable,
                "-m",
                "kvpilot.cli",
                "simulate",
                scenario,
                "--record",
                str(raw),
                "--duration",
                "600s",
                "--interval",
                "10s",
                "--end",
                str(end),
                "--model-name",
                MODEL,
            ],
            check=True,
            capture_output=True,
            timeout=300,
        )
        labelled = work / f"{pod}.om"
        labelled.write_text(_labelled(raw.read_text(), pod))
        backfill(labelled, work / "data")
    with PrometheusServer(work, data_dir=work / "data") as prom:
        prom.wait_for_series('vllm:num_requests_running{pod="qwen-7b-2"}')
        yield prom


class Hook:
    """The receiver on 127.0.0.1 with a client."""

    def __init__(self, hook: AlertHook):
        self.hook = hook
        self.runner = None
        self.url = ""

    async def __aenter__(self):
        self.runner = await serve(self.hook, "127.0.0.1", 0)
        host, port = self.runner.addresses[0][:2]
        self.url = f"http://{host}:{port}"
        self.session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60))
        return self

    async def __aexit__(self, *exc):
        await self.session.close()
        await self.runner.cleanup()

    async def post(self, body, headers=None, raw: bytes | None = None):
        headers = {"Authorization": f"Bearer {TOKEN}"} if headers is None else headers
        data = raw if raw is not None else json.dumps(body).encode()
        async with self.session.post(self.url + "/alerts", data=data, headers=headers) as resp:
            text = await resp.text()
            return resp.status, (json.loads(text) if resp.content_type == "application/json" else text)


def _config(prom, **kw) -> HookConfig:
    return HookConfig(prometheus=prom.url, bearer_token=TOKEN, **kw)


def _verdicts(answer: dict) -> dict[str, str | None]:
    return {
        r["target"]["pod"]: (r["diagnosis"]["targets"][0]["verdict"] if r["diagnosis"] else None)
        for r in answer["results"]
    }


@pytest.mark.parametrize("name", ["alertmanager_firing.json", "grafana_firing.json"])
async def test_a_firing_alert_is_answered_with_the_diagnosis_of_its_target(prometheus, name):
    async with Hook(AlertHook(_config(prometheus))) as hook:
        status, answer = await hook.post(_fixture(name))
    assert status == 200
    assert answer["sender"] == ("grafana" if name.startswith("grafana") else "alertmanager")
    [result] = answer["results"]
    assert result["status"] == "firing"
    assert result["error"] is None
    assert result["cached"] is False
    assert result["target"] == {"namespace": NAMESPACE, "pod": "qwen-7b-0", "server": "", "model_name": MODEL}
    [target] = result["diagnosis"]["targets"]
    # qwen-7b-0 is the kv-exhaustion scenario: preemptions and a queue at the KV ceiling
    assert target["verdict"] == "kv_cache_exhaustion"
    assert target["severity"] == "critical"
    assert target["target"]["pod"] == "qwen-7b-0"
    assert result["diagnosis"]["source"] == f"prometheus {prometheus.url}"
    # the answer carries the predictions (kvpilot.advice.run.predict_for_alert): the replay of the window, checked,
    # or why there is none (the hook's 10 s budget on a busy machine)
    assert set(target["replay"]) >= {"predicted", "observed", "matches", "misses"}
    assert target["replay"]["matches"] or target["replay"]["misses"]


async def test_the_answers_figures_are_what_prometheus_computes_for_the_window(prometheus):
    """The answer's signals against Prometheus' own evaluation of the same series, not against kvpilot's code.

    The default window is 5 minutes ending when the hook asks; the test asks Prometheus for the same functions
    just before and just after the post, so the hook's figures must lie between the two (the series run 2 minutes
    past the fixture's start, so the window moves with the clock while the hook works; 5 % slack on each side).
    """
    sel = f'namespace="{NAMESPACE}",pod="qwen-7b-0"'
    queries = {
        "preemptions_increase": f"sum(increase(vllm:num_preemptions_total{{{sel}}}[5m]))",
        "running_avg": f"avg(avg_over_time(vllm:num_requests_running{{{sel}}}[5m]))",
        "running_max": f"max(max_over_time(vllm:num_requests_running{{{sel}}}[5m]))",
        "waiting_avg": f"avg(avg_over_time(vllm:num_requests_waiting{{{sel}}}[5m]))",
    }

    def evaluate() -> dict[str, float]:
        return {name: float(prometheus.query(q)[0]["value"][1]) for name, q in queries.items()}

    before = evaluate()
    async with Hook(AlertHook(_config(prometheus))) as hook:
        _, answer = await hook.post(_fixture("alertmanager_firing.json"))
    after = evaluate()
    signals = answer["results"][0]["diagnosis"]["targets"][0]["signals"]
    for name in queries:
        low, high = sorted((before[name], after[name]))
        assert low * 0.95 - 1e-9 <= signals[name] <= high * 1.05 + 1e-9, (name, signals[name], before, after)
    # the kv-exhaustion scenario preempts and queues: the figures are not zeros that would match anything
    assert before["preemptions_increase"] > 0
    assert before["waiting_avg"] > 0


@pytest.mark.parametrize("name", ["alertmanager_group_3_alerts.json", "grafana_multiple_alerts.json"])
async def test_a_group_diagnoses_each_firing_alert_and_only_acknowledges_the_resolved_one(prometheus, name):
    calls = []

    def counting(opts):
        calls.append(opts.pod)
        return diagnose_run(opts)

    async with Hook(AlertHook(_config(prometheus), diagnose=counting)) as hook:
        status, answer = await hook.post(_fixture(name))
    assert status == 200
    # the alerts claim max_num_seqs for pod 0 and token_budget for pod 1; the diagnosis says what binds:
    # pod 0 runs kv-exhaustion, pod 1 max-num-seqs-cap (cap inferred: running flat at 4 with a queue)
    assert _verdicts(answer) == {"qwen-7b-0": "kv_cache_exhaustion", "qwen-7b-1": "max_num_seqs_cap", "qwen-7b-2": None}
    assert sorted(calls) == ["qwen-7b-0", "qwen-7b-1"]  # the resolved alert cost no diagnosis


@pytest.mark.parametrize("name", ["alertmanager_resolved.json", "grafana_resolved.json"])
async def test_resolved_alerts_are_acknowledged_without_work(prometheus, name):
    def never(_opts):
        raise AssertionError("a resolved alert must not be diagnosed")

    async with Hook(AlertHook(_config(prometheus), diagnose=never)) as hook:
        status, answer = await hook.post(_fixture(name))
    assert status == 200
    [result] = answer["results"]
    assert result["status"] == "resolved"
    assert result["diagnosis"] is None
    assert result["error"] is None


async def test_unknown_keys_are_ignored(prometheus):
    body = _fixture("alertmanager_firing.json")
    body["notification_reason"] = "new"  # Alertmanager v0.32+
    body["routeLabels"] = {"x": "y"}  # v0.34+
    body["alerts"][0]["enrichments"] = [{"a": 1}]
    async with Hook(AlertHook(_config(prometheus))) as hook:
        status, answer = await hook.post(body)
    assert status == 200
    assert _verdicts(answer) == {"qwen-7b-0": "kv_cache_exhaustion"}


@pytest.mark.parametrize(
    "headers",
    [
        {},
        {"Authorization": "Bearer wrong"},
        {"Authorization": f"Bearer {TOKEN}x"},
        {"Authorization": f"Basic {base64.b64encode(b'u:' + TOKEN.encode()).decode()}"},  # basic not configured
        {"Authorization": TOKEN},
    ],
)
async def test_requests_without_the_right_credentials_are_refused(prometheus, headers):
    async with Hook(AlertHook(_config(prometheus), diagnose=lambda _o: pytest.fail("no work unauthenticated"))) as hook:
        status, answer = await hook.post(_fixture("alertmanager_firing.json"), headers=headers)
    assert status == 401
    assert answer == {"error": "unauthorized"}


async def test_basic_auth(prometheus):
    config = HookConfig(prometheus=prometheus.url, basic_auth=("alertmanager", "pa:ss"))
    good = {"Authorization": "Basic " + base64.b64encode(b"alertmanager:pa:ss").decode()}
    bad = {"Authorization": "Basic " + base64.b64encode(b"alertmanager:pass").decode()}
    garbage = {"Authorization": "Basic !!!"}
    async with Hook(AlertHook(config)) as hook:
        assert (await hook.post(_fixture("alertmanager_resolved.json"), headers=good))[0] == 200
        assert (await hook.post(_fixture("alertmanager_resolved.json"), headers=bad))[0] == 401
        assert (await hook.post(_fixture("alertmanager_resolved.json"), headers=garbage))[0] == 401


def test_auth_is_required_unless_explicitly_disabled(prometheus):
    with pytest.raises(ValueError, match="auth"):
        HookConfig(prometheus=prometheus.url)
    assert HookConfig(prometheus=prometheus.url, insecure_no_auth=True).insecure_no_auth


async def test_bad_bodies_get_4xx(prometheus):
    async with Hook(AlertHook(_config(prometheus, max_body_bytes=4096))) as hook:
        assert (await hook.post(None, raw=b"{not json"))[0] == 400
        assert (await hook.post(None, raw=b"\xff\xfe"))[0] == 400
        status, answer = await hook.post({"version": "2", "alerts": []})
        assert status == 422
        assert answer["error"].startswith("version:")
        status, answer = await hook.post({"version": "4", "alerts": {"a": 1}})
        assert status == 422
        assert answer["error"] == "alerts: expected a list"
        body = _fixture("alertmanager_firing.json")
        body["alerts"][0]["labels"]["pod"] = 7
        status, answer = await hook.post(body)
        assert status == 422
        assert answer["error"] == "alerts[0].labels.pod: expected a string"
        big = _fixture("alertmanager_firing.json")
        big["padding"] = "x" * 5000  # above the 4096-byte limit
        assert (await hook.post(big))[0] == 413


INJECTIONS = [
    'qwen-7b-0"} or {__name__=~".+',
    'qwen-7b-0",pod=~".*',
    "qwen-7b-0\\",
    "qwen-7b-0\n",
    ".*",
]


@pytest.mark.parametrize("label", ["namespace", "pod", "model_name", "server"])
@pytest.mark.parametrize("value", INJECTIONS)
async def test_label_values_never_reach_promql_unescaped(prometheus, label, value):
    """An injection in any label either is refused (not a Kubernetes name) or is matched literally:
    it must never select the recorded series (which would answer with a real verdict).
    """
    body = _fixture("alertmanager_firing.json")
    body["alerts"][0]["labels"][label] = value
    seen = []

    def spy(opts):
        seen.append(opts)
        return diagnose_run(opts)

    async with Hook(AlertHook(_config(prometheus), diagnose=spy)) as hook:
        status, answer = await hook.post(body)
    assert status == 200
    [result] = answer["results"]
    if result["error"] is not None:  # refused before any query
        assert result["error"].startswith(f"label {label}:")
        assert not seen
    else:  # model_name: any string, matched literally -> nothing matches
        assert label == "model_name"
        assert [t["verdict"] for t in result["diagnosis"]["targets"]] == ["no_data"]


async def test_a_repeating_alert_is_diagnosed_once_per_interval(prometheus):
    calls = []

    def counting(opts):
        calls.append(opts.pod)
        return diagnose_run(opts)

    async with Hook(AlertHook(_config(prometheus, cache_seconds=300), diagnose=counting)) as hook:
        first = (await hook.post(_fixture("alertmanager_firing.json")))[1]["results"][0]
        second = (await hook.post(_fixture("alertmanager_firing.json")))[1]["results"][0]
    assert calls == ["qwen-7b-0"]
    assert first["cached"] is False
    assert second["cached"] is True
    assert second["diagnosis"] == first["diagnosis"]


async def test_a_concurrent_burst_is_bounded_and_shares_diagnoses(prometheus):
    running, peak, calls = 0, 0, []
    import threading

    lock = threading.Lock()

    def tracked(opts):
        nonlocal running, peak
        with lock:
            running += 1
            peak = max(peak, running)
            calls.append(opts.pod)
        try:
            return diagnose_run(opts)
        finally:
            with lock:
                running -= 1

    bodies = []
    for i in range(12):  # 12 requests: 6 about one target, 6 about 6 other targets (pods without series)
        body = _fixture("alertmanager_firing.json")
        if i % 2:
            body["alerts"][0]["labels"]["pod"] = f"absent-{i}"
        bodies.append(body)
    async with Hook(AlertHook(_config(prometheus, max_concurrency=2), diagnose=tracked)) as hook:
        answers = await asyncio.gather(*(hook.post(b) for b in bodies))
    assert all(status == 200 for status, _ in answers)
    assert [_verdicts(a) for _, a in answers] == [
        {"qwen-7b-0": "kv_cache_exhaustion"} if i % 2 == 0 else {f"absent-{i}": "no_data"} for i in range(12)
    ]
    assert peak <= 2  # max_concurrency
    assert len(calls) == 7  # one shared diagnosis for the 6 alerts about one target + one per other target


async def test_a_slow_diagnosis_times_out_with_an_error_not_a_hang(prometheus):
    import threading

    release = threading.Event()

    def slow(opts):
        release.wait(10)
        return diagnose_run(opts)

    async with Hook(AlertHook(_config(prometheus, timeout_seconds=0.5), diagnose=slow)) as hook:
        status, answer = await hook.post(_fixture("alertmanager_firing.json"))
    release.set()
    assert status == 200
    assert answer["results"][0]["error"] == "diagnosis: no answer within 0.5 s"


async def test_healthz_and_metrics(prometheus):
    async with Hook(AlertHook(_config(prometheus))) as hook:
        await hook.post(_fixture("alertmanager_firing.json"))
        await hook.post(None, headers={})
        async with hook.session.get(hook.url + "/healthz") as resp:
            assert resp.status == 200
            assert (await resp.text()) == "ok\n"
        async with hook.session.get(hook.url + "/metrics") as resp:
            text = await resp.text()
    assert 'kvpilot_alert_hook_requests_total{code="200"} 1.0' in text
    assert 'kvpilot_alert_hook_requests_total{code="401"} 1.0' in text
    assert 'kvpilot_alert_hook_diagnoses_total{verdict="kv_cache_exhaustion"} 1.0' in text
    assert "kvpilot_alert_hook_diagnosis_duration_seconds_count 1.0" in text


async def test_log_and_forward_sinks(prometheus):
    """The log sink writes one JSON line per alert; the forward sink POSTs to the configured URL."""
    from aiohttp import web

    received = []

    async def receive(request):
        received.append(await request.json())
        return web.Response(text="ok")

    app = web.Application()
    app.router.add_post("/forward", receive)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    host, port = runner.addresses[0][:2]
    stream = io.StringIO()
    sinks = [LogSink(stream), ForwardSink(f"http://{host}:{port}/forward")]
    body = _fixture("alertmanager_group_3_alerts.json")
    body["alerts"][0]["labels"]["forward_url"] = "http://127.0.0.1:1/evil"  # never used: not configured
    try:
        async with Hook(AlertHook(_config(prometheus, sinks=sinks))) as hook:
            status, _ = await hook.post(body)
    finally:
        await runner.cleanup()
    assert status == 200
    lines = [json.loads(line) for line in stream.getvalue().splitlines()]
    assert sorted((x["event"], x["target"]["pod"], x["verdict"]) for x in lines) == [
        ("diagnosis", "qwen-7b-0", "kv_cache_exhaustion"),
        ("diagnosis", "qwen-7b-1", "max_num_seqs_cap"),
        ("resolved", "qwen-7b-2", None),
    ]
    assert sorted(r["result"]["target"]["pod"] for r in received) == ["qwen-7b-0", "qwen-7b-1", "qwen-7b-2"]


def test_the_command_serves_and_refuses_to_start_without_auth(prometheus, tmp_path):
    """``kvpilot alert-hook`` as a user starts it: a process on loopback, stopped by its PID."""
    import urllib.request

    from tests.support.prom import free_port
    from tests.support.waiting import stop_process, wait_for

    no_auth = subprocess.run(
        [sys.executable, "-m", "kvpilot.cli", "alert-hook", "--prometheus", prometheus.url],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert no_auth.returncode == 2
    assert "--bearer-token-file" in no_auth.stderr
    assert "Traceback" not in no_auth.stderr
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    port = free_port()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "kvpilot.cli",
            "alert-hook",
            "--prometheus",
            prometheus.url,
            "--listen",
            f"127.0.0.1:{port}",
            "--bearer-token-file",
            str(token_file),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:

        def healthy():
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2) as resp:
                    return resp.status == 200
            except OSError:
                return False

        wait_for(healthy, timeout=30, what="the hook's /healthz")
        request = urllib.request.Request(
            f"http://127.0.0.1:{port}/alerts",
            data=json.dumps(_fixture("grafana_firing.json")).encode(),
            headers={"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=60) as resp:
            answer = json.loads(resp.read())
    finally:
        stop_process(proc)
    assert _verdicts(answer) == {"qwen-7b-0": "kv_cache_exhaustion"}
    log_line = json.loads(proc.stdout.read().decode().splitlines()[0])  # the default log sink
    assert log_line["event"] == "diagnosis"
    assert log_line["verdict"] == "kv_cache_exhaustion"
