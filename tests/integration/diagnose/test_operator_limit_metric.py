"""``kvpilot diagnose --prometheus`` reads the operator's ``kvpilot_vllmserver_limit`` from a real Prometheus.

The ``max-num-seqs-cap`` scenario recording (tests/fixtures/recordings, made by ``kvpilot simulate``: running
pinned at 4 with a queue) gets a pod's labels and, as the operator exports it, a ``kvpilot_vllmserver_limit``
series for that pod; promtool backfills both and Prometheus 2.42 answers kvpilot's queries. Then every engine
scenario, its limits only in that metric: each verdict must be the scenario's, with the limit read, not inferred.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from kvpilot.cli import cli
from tests.integration.diagnose.scenario_flags import EXPECTED, scenario_cli_args
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
    args = [
        "diagnose",
        "--no-what-if",
        "--no-kube",
        "--prometheus",
        url,
        "--end",
        str(END),
        "--window",
        "300s",
        "-o",
        "json",
    ]
    result = CliRunner().invoke(cli, [*args, *extra])
    assert result.exit_code == 2, result.output  # a finding
    [target] = json.loads(result.output)["targets"]
    return target


def test_the_operator_s_limit_replaces_the_inference(tmp_path: Path):
    data = _data(tmp_path, {"max_num_seqs": 4, "max_num_batched_tokens": 2048})
    with PrometheusServer(tmp_path, data_dir=data) as prom:
        target = _diagnose(prom.url)
        # 8 passed for a server that runs 4: running 3.9 of 8 binds nothing, so no limit explains the queue
        # (unexplained_queue, critical as the queue grows), where the nearest limit was named before
        overridden = _diagnose(prom.url, "--max-num-seqs", "8")
    assert target["verdict"] == "max_num_seqs_cap"
    assert target["target"]["pod"] == "qwen-0"
    limits_line = next(e for e in target["evidence"] if e.startswith("Limits: "))
    assert "max_num_seqs 4 (kvpilot_vllmserver_limit)" in limits_line
    assert "max_num_batched_tokens 2,048 (kvpilot_vllmserver_limit)" in limits_line
    assert not any("inferred" in e for e in target["evidence"])  # read, not inferred from the gauges
    assert not any("not configured anywhere readable" in e for e in target["evidence"])
    assert any("kvpilot_vllmserver_limit" in q and "max by (namespace, pod, limit)" in q for q in target["queries"])
    # the command line overrides the metric (and then the gauges' 4 is not the configured cap)
    assert "max_num_seqs 8 (cli)" in next(e for e in overridden["evidence"] if e.startswith("Limits: "))
    assert overridden["verdict"] == "unexplained_queue"


def test_without_the_metric_the_cap_is_inferred_as_before(tmp_path: Path):
    with PrometheusServer(tmp_path, data_dir=_data(tmp_path, {})) as prom:
        target = _diagnose(prom.url)
    assert target["verdict"] == "max_num_seqs_cap"
    assert "max_num_seqs 4 (inferred; vLLM's default 256 not read)" in next(
        e for e in target["evidence"] if e.startswith("Limits: ")
    )


@pytest.fixture(scope="module")
def every_scenario(tmp_path_factory):
    """One Prometheus holding every engine scenario's recording (pod ``p-SCENARIO``) and, for each, the
    operator's kvpilot_vllmserver_limit with the flags the server runs with (scenario_flags).
    """
    tmp = tmp_path_factory.mktemp("scenarios")
    data, ends = tmp / "data", {}
    for scenario in sorted(EXPECTED):
        pod = f"p-{scenario}"
        lines = (RECORDING.parent / f"scenario_{scenario}.om").read_text().splitlines()
        stamps = [float(ln.rsplit(" ", 1)[1]) for ln in lines if ln and not ln.startswith("#")]
        start, ends[scenario] = int(min(stamps)), int(max(stamps))
        (tmp / f"{scenario}.om").write_text(
            "\n".join(
                ln if ln.startswith("#") else ln.replace("{", f'{{namespace="llm",pod="{pod}",', 1) for ln in lines
            )
            + "\n"
        )
        flags = scenario_cli_args(scenario)[:6]  # --max-num-seqs N --max-num-batched-tokens B --max-model-len L
        limits = {flag[2:].replace("-", "_"): value for flag, value in zip(flags[::2], flags[1::2], strict=True)}
        series = "".join(
            f'kvpilot_vllmserver_limit{{namespace="llm",pod="{pod}",server="{scenario}",limit="{name}"}} {value} {t}\n'
            for name, value in limits.items()
            for t in range(start, ends[scenario] + 1, 15)
        )
        (tmp / f"{scenario}-limits.om").write_text("# TYPE kvpilot_vllmserver_limit gauge\n" + series + "# EOF\n")
        backfill(tmp / f"{scenario}.om", data)
        backfill(tmp / f"{scenario}-limits.om", data)
    with PrometheusServer(tmp, data_dir=data) as prom:
        yield prom.url, ends


@pytest.mark.parametrize("scenario", sorted(EXPECTED))
def test_every_scenario_is_right_with_the_limits_only_in_the_operator_metric(every_scenario, scenario):
    url, ends = every_scenario
    args = [
        "diagnose",
        "--no-what-if",
        "--no-kube",
        "--prometheus",
        url,
        "--pod",
        f"p-{scenario}",
        "--end",
        str(ends[scenario]),
    ]
    result = CliRunner().invoke(cli, [*args, "--window", "300s", "-o", "json"])
    [target] = json.loads(result.output)["targets"]
    assert target["verdict"] == EXPECTED[scenario], target["evidence"]
    n_seqs = int(scenario_cli_args(scenario)[1])
    assert f"max_num_seqs {n_seqs:,} (kvpilot_vllmserver_limit)" in " ".join(target["evidence"])
    assert "inferred" not in " ".join(target["evidence"])
