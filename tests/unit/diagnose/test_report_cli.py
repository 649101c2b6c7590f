"""Output formats, the JSON Schema contract, exit codes and bad input of `kvpilot diagnose`."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest
from click.testing import CliRunner

from kvpilot.cli import cli
from kvpilot.diagnose.model import Diagnosis, Report

ROOT = Path(__file__).resolve().parents[3]
RECORDINGS = ROOT / "tests" / "fixtures" / "recordings"
SCHEMA = json.loads((ROOT / "docs" / "diagnose-output.schema.json").read_text())


def invoke(*args):
    return CliRunner().invoke(cli, ["diagnose", "--no-what-if", "--no-kube", *args])


@pytest.mark.parametrize("recording", sorted(p.name for p in RECORDINGS.glob("*.om")))
def test_json_output_validates_against_the_schema(recording):
    result = invoke("--recording", str(RECORDINGS / recording), "-o", "json")
    doc = json.loads(result.output)
    jsonschema.validate(doc, SCHEMA)
    assert doc["source"].startswith("recording ")
    assert doc["window_seconds"] == 300


def test_an_inferred_limit_is_not_also_reported_as_the_assumed_default():
    # C14: running sat at 4 with a queue and KV room, no flags: max_num_seqs inferred 4; the note that
    # vLLM's default 256 was assumed for it would contradict that (it still holds for the token budget)
    result = invoke("--recording", str(RECORDINGS / "case_C14.om"), "--window", "120s", "-o", "json")
    (target,) = json.loads(result.output)["targets"]
    assert target["signals"]["inferred_max_num_seqs"] == 4
    text = " ".join(target["evidence"])
    assert "max_num_seqs 4 (inferred; vLLM's default 256 not read)" in text
    assert "max_num_seqs not configured anywhere readable" not in text
    assert "max_num_batched_tokens not configured anywhere readable" in text


def test_schema_rejects_what_the_contract_forbids():
    good = Report(
        "recording x",
        300.0,
        [
            Diagnosis(
                "healthy",
                "ok",
                0.8,
                target={"namespace": "", "pod": "", "server": "", "model_name": "m", "engine": "0"},
                signals={"a": 1.0, "b": None},
            )
        ],
    )
    jsonschema.validate(good.to_json(), SCHEMA)
    for mutate in (
        lambda d: d["targets"][0].update(verdict="slow"),
        lambda d: d["targets"][0].update(severity="bad"),
        lambda d: d["targets"][0].update(confidence=1.5),
        lambda d: d["targets"][0]["signals"].update(c="NaN"),
        lambda d: d["targets"][0]["target"].pop("engine"),
    ):
        doc = good.to_json()
        mutate(doc)
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(doc, SCHEMA)


def test_exit_codes_follow_severity():
    assert invoke("--recording", str(RECORDINGS / "scenario_idle.om")).exit_code == 0
    assert invoke("--recording", str(RECORDINGS / "scenario_prefix-thrash.om")).exit_code == 1  # warning
    assert invoke("--recording", str(RECORDINGS / "scenario_kv-exhaustion.om")).exit_code == 2  # critical


def test_text_and_markdown_show_verdict_evidence_and_bucket_bounds():
    text = invoke("--recording", str(RECORDINGS / "scenario_healthy.om")).output
    assert "healthy" in text
    assert "p99 TTFT in (0.02, 0.04] s" in text
    # ITL observations are gaps between output tokens, not requests
    itl = next(
        e
        for e in json.loads(invoke("--recording", str(RECORDINGS / "scenario_healthy.om"), "-o", "json").output)[
            "targets"
        ][0]["evidence"]
        if e.startswith("p99 ITL")
    )
    assert itl.endswith("inter-token gaps).")
    assert "requests" not in itl
    md = invoke("--recording", str(RECORDINGS / "scenario_kv-exhaustion.om"), "-o", "markdown").output
    assert md.startswith("# kvpilot diagnose")
    assert "### `kv_cache_exhaustion`" in md
    assert "| flag | current | suggested | expected effect |" in md


def test_window_end_and_no_data_exit_3():
    # the recording ends at 1764600000; a window ending an hour later holds nothing
    result = invoke("--recording", str(RECORDINGS / "scenario_healthy.om"), "--end", "1764603600", "-o", "json")
    doc = json.loads(result.output)
    assert result.exit_code == 3
    assert doc["targets"][0]["verdict"] == "no_data"
    jsonschema.validate(doc, SCHEMA)


def test_series_that_stop_give_target_down(tmp_path):
    # the healthy recording cut at 1764599900 but evaluated to 1764600000: 100 s of silence, 10 s interval
    lines = (RECORDINGS / "scenario_healthy.om").read_text().splitlines()
    kept = [ln for ln in lines if ln.startswith("#") or float(ln.rsplit(" ", 1)[1]) <= 1764599900]
    path = tmp_path / "cut.om"
    path.write_text("\n".join(kept) + "\n")
    result = invoke("--recording", str(path), "--end", "1764600000", "-o", "json")
    assert json.loads(result.output)["targets"][0]["verdict"] == "target_down"
    assert result.exit_code == 2


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        ((), "exactly one source"),
        (("--recording", "a", "--prometheus", "http://x"), "exactly one source"),
        (("--recording", "a", "--window", "5 minutes"), "--window"),
        (("--recording", "a", "-o", "yaml"), "yaml"),
        (("--recording", "a", "--max-num-seqs", "0"), "--max-num-seqs"),
        (("--recording", "a", "--quick"), "--quick"),
        (
            ("--prometheus", "prometheus:9090"),
            "--prometheus",
        ),  # a malformed URL is a bad option, not an unreachable source
        (("--metrics-url", "10.0.0.7:8000/metrics", "--quick"), "--metrics-url"),
    ],
)
def test_usage_errors_exit_64(args, needle):
    result = invoke(*args)
    assert result.exit_code == 64
    assert needle in result.output


@pytest.mark.parametrize(
    "content",
    ["not a recording\n", '# TYPE x gauge\nx{a="1" 3 1\n# EOF\n', "vllm:num_requests_running 1\n# EOF\n"],
)
def test_unreadable_input_exits_3_with_one_line(tmp_path, content):
    path = tmp_path / "r.om"
    if content is not None:
        path.write_text(content)
    result = invoke("--recording", str(path))
    assert result.exit_code == 3
    assert "Traceback" not in result.output
    errors = [ln for ln in result.output.splitlines() if ln.startswith("kvpilot: error:")]
    assert len(errors) == 1
    assert "--recording" in errors[0]


def test_missing_recording_is_a_usage_error(tmp_path):
    # like any other bad option: exit 64 (EX_USAGE), one line naming the option
    result = invoke("--recording", str(tmp_path / "absent.om"))
    assert result.exit_code == 64
    assert "--recording" in result.output
    assert "no such file" in result.output
    assert "Traceback" not in result.output
    # a directory exists: saying "no such file" would send the user looking for the wrong mistake
    result = invoke("--recording", str(tmp_path))
    assert result.exit_code == 64
    assert "a directory, not a recording file" in result.output


def test_metrics_url_without_a_path_gets_the_metrics_hint():
    result = invoke("--metrics-url", "http://127.0.0.1:8000")
    assert result.exit_code == 64
    assert "http://127.0.0.1:8000/metrics" in result.output


def test_bare_window_is_seconds_and_the_report_says_so():
    recording = Path(__file__).resolve().parents[2] / "fixtures" / "recordings" / "scenario_idle.om"
    doc = json.loads(invoke("--recording", str(recording), "--window", "5", "-o", "json").output)
    assert doc["window_seconds"] == 5
    assert "--window 5 read as 5 seconds (write 5m for minutes)." in doc["notes"]
    doc = json.loads(invoke("--recording", str(recording), "--window", "5m", "-o", "json").output)
    assert doc["window_seconds"] == 300
    assert not any("--window" in n for n in doc["notes"])


def test_end_accepts_rfc3339():
    # 2025-12-01T14:40:00Z = 1,764,600,000 Unix seconds (the scenario recordings' last sample)
    recording = Path(__file__).resolve().parents[2] / "fixtures" / "recordings" / "scenario_idle.om"
    a = json.loads(invoke("--recording", str(recording), "--end", "2025-12-01T14:40:00Z", "-o", "json").output)
    b = json.loads(invoke("--recording", str(recording), "--end", "1764600000", "-o", "json").output)
    assert a["targets"][0]["signals"] == b["targets"][0]["signals"]
    bad = invoke("--recording", str(recording), "--end", "yesterday")
    assert bad.exit_code == 64
    assert "--end" in bad.output


def test_unreachable_metrics_url_exits_3():
    from tests.support.prom import free_port

    result = invoke("--metrics-url", f"http://127.0.0.1:{free_port()}/metrics", "--quick", "--timeout", "2s")
    assert result.exit_code == 3
    assert "kvpilot: error: --metrics-url" in result.output
    # one short line that names the cause, not requests' exception text cut off mid-word
    line = next(ln for ln in result.output.splitlines() if ln.startswith("kvpilot: error:"))
    assert line.endswith(": connection refused"), line


def test_json_output_on_an_unreachable_source_is_an_error_object():
    from tests.support.prom import free_port

    url = f"http://127.0.0.1:{free_port()}/metrics"
    result = CliRunner().invoke(
        cli, ["diagnose", "--no-kube", "--metrics-url", url, "--quick", "--timeout", "2s", "-o", "json"]
    )
    assert result.exit_code == 3
    doc = json.loads(result.stdout)  # stdout alone: a program piping -o json reads one document
    assert doc["exit_code"] == 3
    assert doc["error"].startswith("--metrics-url")
    assert doc["error"].endswith(": connection refused")
    assert "kvpilot: error:" in result.stderr


def test_watch_reruns(monkeypatch):
    monkeypatch.setattr("time.sleep", lambda _s: None)
    result = invoke("--recording", str(RECORDINGS / "scenario_idle.om"), "--watch", "1", "--watch-count", "3")
    assert result.output.count("kvpilot diagnose  source:") == 3
    assert result.exit_code == 0


def test_ctrl_c_ends_watch_with_the_last_runs_status(monkeypatch):
    # the kv-exhaustion recording is critical (exit 2); Ctrl-C during the second run ends --watch with 2,
    # not click's "Aborted!" exit 1 (which would read as a warning)
    import kvpilot.diagnose.run as run_module

    real_run, calls = run_module.run, []

    def interrupted_second_time(opts):
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real_run(opts)

    monkeypatch.setattr(run_module, "run", interrupted_second_time)
    monkeypatch.setattr("time.sleep", lambda _s: None)
    result = invoke("--recording", str(RECORDINGS / "scenario_kv-exhaustion.om"), "--watch", "1", "--watch-count", "5")
    assert len(calls) == 2
    assert result.exit_code == 2
    assert "Aborted" not in result.output
    # without --watch, Ctrl-C before any result: could not diagnose (3)
    monkeypatch.setattr(run_module, "run", lambda _opts: (_ for _ in ()).throw(KeyboardInterrupt()))
    assert invoke("--recording", str(RECORDINGS / "scenario_kv-exhaustion.om")).exit_code == 3


@pytest.mark.parametrize("output", ["text", "json"])
def test_a_model_name_holding_a_token_behind_an_escape_is_printed_redacted(tmp_path, output):
    """The label's ESC [1m hf_... reaches the report as the label and, repr'd, in the replay's notes."""
    token = "hf_" + "a1B2c3D4e5F6g7H8i9J0kLmN"
    text = (RECORDINGS / "scenario_kv-exhaustion.om").read_text()
    hostile = tmp_path / "hostile.om"
    hostile.write_text(text.replace('model_name="qwen2.5-1.5b"', f'model_name="\x1b[1m{token}"'))
    result = CliRunner().invoke(cli, ["diagnose", "--no-kube", "--recording", str(hostile), "-o", output])
    assert result.exception is None or isinstance(result.exception, SystemExit)
    assert "a1B2c3D4" not in result.output
    assert "[REDACTED]" in result.output
