"""End to end, live: `kvpilot simulate --serve` scraped by a real Prometheus, then `kvpilot diagnose`.

The simulated server runs the max-num-seqs-cap scenario at 10x speed. Prometheus 2.42 asks for
OpenMetrics, which prometheus_client >= 0.22 answers with `vllm_`-escaped names
(docs/metrics.md, "Escaping"), so this also checks that diagnose reads what such a Prometheus stores.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import urllib.request

import pytest
from click.testing import CliRunner

from kvpilot.cli import cli
from tests.integration.diagnose.scenario_flags import scenario_cli_args
from tests.support.prom import PrometheusServer, free_port
from tests.support.waiting import wait_for

pytestmark = pytest.mark.prometheus


def _poll(predicate, timeout: float, what: str):
    return wait_for(predicate, timeout=timeout, interval=0.2, what=what)


@pytest.fixture
def simulated_server(tmp_path):
    port = free_port()
    with open(tmp_path / "simulate.log", "w") as log:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "kvpilot.cli",
                "simulate",
                "max-num-seqs-cap",
                "--serve",
                f"127.0.0.1:{port}",
                "--speed",
                "10",
                "--duration",
                "3000s",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        url = f"http://127.0.0.1:{port}/metrics"

        def up() -> bool:
            try:
                with urllib.request.urlopen(url, timeout=2) as r:
                    return r.status == 200
            except OSError:
                assert proc.poll() is None, (tmp_path / "simulate.log").read_text()
                return False

        try:
            _poll(up, 60, "simulated server did not answer /metrics")
            yield port
        finally:
            os.kill(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.kill(proc.pid, signal.SIGKILL)
                proc.wait(timeout=5)


def test_live_prometheus_scraping_the_simulator(tmp_path, simulated_server):
    port = simulated_server
    with PrometheusServer(tmp_path / "prom", scrape_targets=[f"127.0.0.1:{port}"]) as prom:
        # wait for 12 scraped samples of the running gauge (either spelling): data, not sleeps. Under load a
        # query can time out (prom.query raises): that is one more poll, not a failed test.
        def enough():
            try:
                rows = prom.query('count_over_time({__name__=~"vllm[:_]num_requests_running"}[30s])')
            except RuntimeError:
                return False
            return rows and max(float(r["value"][1]) for r in rows) >= 12

        _poll(enough, 90, "Prometheus did not collect 12 samples")

        # the window ends at the newest stored sample, not at the wall clock: a scrape delayed by a loaded
        # machine would otherwise leave the last sample more than 3 intervals old and read as target_down
        def newest():
            try:
                rows = prom.query('max(timestamp({__name__=~"vllm[:_]num_requests_running"}))')
            except RuntimeError:
                return None
            return float(rows[0]["value"][1]) if rows else None

        end = _poll(newest, 30, "no running sample to end the window at")
        result = CliRunner().invoke(
            cli,
            [
                "diagnose",
                "--no-what-if",
                "--prometheus",
                prom.url,
                "--no-kube",
                "--window",
                "12s",
                "--end",
                f"{end:.3f}",
                "-o",
                "json",
                *scenario_cli_args("max-num-seqs-cap"),
            ],
        )
        stored = prom.query('count({__name__=~"vllm_num_requests_running"})')
    doc = json.loads(result.output)
    assert len(doc["targets"]) == 1, doc
    target = doc["targets"][0]
    assert target["verdict"] == "max_num_seqs_cap", target["evidence"]
    assert target["target"]["instance"] == f"127.0.0.1:{port}"
    assert target["target"]["job"] == "vllm"
    assert target["signals"]["running_max"] == 4
    # Prometheus 2.x stores the escaped names: said once in the notes, not as a warning finding on the target
    assert all(f["verdict"] != "metrics_schema_mismatch" for f in target["findings"])
    noted = any("stores vLLM's metrics with '_' for ':'" in n for n in doc["notes"])
    assert noted == bool(stored)  # the note appears exactly when Prometheus holds the escaped names


def test_live_metrics_url_scraped_over_a_window(simulated_server):
    url = f"http://127.0.0.1:{simulated_server}/metrics"
    result = CliRunner().invoke(
        cli,
        [
            "diagnose",
            "--no-what-if",
            "--metrics-url",
            url,
            "--no-kube",
            "--window",
            "4s",
            "--scrape-interval",
            "1s",
            "-o",
            "json",
            *scenario_cli_args("max-num-seqs-cap"),
        ],
    )
    doc = json.loads(result.output)
    assert doc["targets"][0]["verdict"] == "max_num_seqs_cap"
    assert any(n.startswith("5 scrapes every 1 s") for n in doc["notes"])  # floor(4 / 1) + 1
    # scraped as Prometheus 3.x asks (escaping=allow-utf-8): the simulator's own colon names, nothing renamed
    assert all(f["verdict"] != "metrics_schema_mismatch" for f in doc["targets"][0]["findings"])
    assert not any("'_' for ':'" in n for n in doc["notes"])
    quick = CliRunner().invoke(
        cli,
        [
            "diagnose",
            "--no-what-if",
            "--metrics-url",
            url,
            "--no-kube",
            "--quick",
            "-o",
            "json",
            *scenario_cli_args("max-num-seqs-cap"),
        ],
    )
    qdoc = json.loads(quick.output)
    assert qdoc["targets"][0]["verdict"] == "max_num_seqs_cap"
    assert any("--quick: two scrapes" in n for n in qdoc["notes"])
    assert qdoc["window_seconds"] < 10


def test_live_window_saved_and_diagnosed_again(tmp_path, simulated_server):
    """--save-recording keeps the scrapes of a live window: --recording reads them back to the same answer."""
    url = f"http://127.0.0.1:{simulated_server}/metrics"
    saved = tmp_path / "window.om"
    live = CliRunner().invoke(
        cli,
        ["diagnose", "--no-what-if", "--metrics-url", url, "--no-kube", "--window", "4s", "--scrape-interval", "1s",
         "--save-recording", str(saved), "-o", "json", *scenario_cli_args("max-num-seqs-cap")],
    )  # fmt: skip
    doc = json.loads(live.output)
    assert any(n.startswith(f"The 5 scrapes saved to {saved}") for n in doc["notes"]), doc["notes"]
    again = CliRunner().invoke(
        cli,
        ["diagnose", "--no-what-if", "--recording", str(saved), "--no-kube", "--window", "4s", "-o", "json",
         *scenario_cli_args("max-num-seqs-cap")],
    )  # fmt: skip
    redoc = json.loads(again.output)
    (a,), (b,) = doc["targets"], redoc["targets"]
    assert (b["verdict"], b["severity"]) == (a["verdict"], a["severity"]) == ("max_num_seqs_cap", a["severity"])
    for name in ("running_avg", "running_max", "waiting_avg", "kv_usage_max"):
        assert b["signals"][name] == pytest.approx(a["signals"][name], rel=1e-6, abs=1e-9), name


def test_save_recording_needs_metrics_url(tmp_path):
    result = CliRunner().invoke(
        cli, ["diagnose", "--recording", str(tmp_path / "x.om"), "--save-recording", str(tmp_path / "y.om")]
    )
    assert result.exit_code == 64, result.output
    assert "--save-recording works with --metrics-url only" in result.output


def test_save_recording_to_an_unwritable_place_is_one_line(simulated_server, tmp_path):
    url = f"http://127.0.0.1:{simulated_server}/metrics"
    target = tmp_path / "no-such-dir" / "w.om"
    result = CliRunner().invoke(
        cli,
        ["diagnose", "--no-what-if", "--metrics-url", url, "--no-kube", "--quick", "--save-recording", str(target)],
    )
    assert result.exit_code == 3, result.output
    assert f"--save-recording {target}:" in result.output
    assert "Traceback" not in result.output
