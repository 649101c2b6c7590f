"""``kvpilot diagnose --prometheus`` reads the operator's ``kvpilot_vllmserver_limit`` from a real Prometheus.

The ``max-num-seqs-cap`` scenario recording (tests/fixtures/recordings, made by ``kvpilot simulate``: running
pinned at 4 with a queue) gets a pod's labels and, as the operator exports it, a ``kvpilot_vllmserver_limit``
series for that pod; promtool backfills both and Prometheus 2.42 answers kvpilot's queries.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from kvpilot.cli import cli
from tests.support.prom import PrometheusServer, backfill

pytestmark = pytest.mark.prometheus

RECORDING = Path(__file__).resolve().parents[2] / "fixtures" / "recordings" / "scenario_max-num-seqs-cap.om"
START, END = 1_764_599_700, 1_764_600_000  # the recording's first and last snapshot (every 10 s)
LABELS = 'namespace="llm",pod="qwen-0",'


def _data(tmp_path: Path, limits: dict[str, int]) -> Path:
    """Backfilled TSDB blocks: the recording with the pod's labels, and the operator's limit series."""
    lines = RECORDING.read_text().splitlines()
    labelled = [ln if ln.startswith("#") or "{" not in ln else ln.replace("{", "{" + LABELS, 1) for ln in lines]
    (tmp_path / "vllm.om").write_text("\n".join(labelled) + "\n")
    series = "".join(
        f'kvpilot_vllmserver_limit{{{LABELS}server="qwen",limit="{name}"}} {value} {t}\n'
        for name, value in limits.items()
        for t in range(START, END + 1, 15)
    )
    (tmp_path / "limits.om").write_text("# TYPE kvpilot_vllmserver_limit gauge\n" + series + "# EOF\n")
    data = tmp_path / "data"
    backfill(tmp_path / "vllm.om", data)
    if limits:
        backfill(tmp_path / "limits.om", data)
    return data


def _diagnose(url: str, *extra: str) -> dict:
    args = ["diagnose", "--no-kube", "--prometheus", url, "--end", str(END), "--window", "300s", "-o", "json"]
    result = CliRunner().invoke(cli, [*args, *extra])
    assert result.exit_code == 2, result.output  # a finding
    [target] = json.loads(result.output)["targets"]
    return target


def test_the_operator_s_limit_replaces_the_inference(tmp_path: Path):
    data = _data(tmp_path, {"max_num_seqs": 4, "max_num_batched_tokens": 2048})
    with PrometheusServer(tmp_path, data_dir=data) as prom:
        target = _diagnose(prom.url)
        overridden = _diagnose(prom.url, "--max-num-seqs", "8")
    assert target["verdict"] == "max_num_seqs_cap" and target["target"]["pod"] == "qwen-0"
    limits_line = next(e for e in target["evidence"] if e.startswith("Limits: "))
    assert "max_num_seqs 4 (kvpilot_vllmserver_limit)" in limits_line
    assert "max_num_batched_tokens 2,048 (kvpilot_vllmserver_limit)" in limits_line
    assert not any("inferred" in e for e in target["evidence"])  # read, not inferred from the gauges
    assert not any("not configured anywhere readable" in e for e in target["evidence"])
    assert any("kvpilot_vllmserver_limit" in q and "max by (namespace, pod, limit)" in q for q in target["queries"])
    # the command line overrides the metric (and then the gauges' 4 is not the configured cap)
    assert "max_num_seqs 8 (cli)" in next(e for e in overridden["evidence"] if e.startswith("Limits: "))


def test_without_the_metric_the_cap_is_inferred_as_before(tmp_path: Path):
    with PrometheusServer(tmp_path, data_dir=_data(tmp_path, {})) as prom:
        target = _diagnose(prom.url)
    assert target["verdict"] == "max_num_seqs_cap"
    assert "max_num_seqs 4 (inferred; vLLM's default 256 not read)" in next(
        e for e in target["evidence"] if e.startswith("Limits: ")
    )
