"""What a diagnosis tells its reader to do about a limit inferred from the gauges (limits.confirm_inferred).

A person running ``kvpilot diagnose`` can add flags; the reader of an alert-hook answer cannot, and a
``--pod`` already looked up cannot be passed again.
"""

from __future__ import annotations

from pathlib import Path

from kvpilot.diagnose.limits import confirm_inferred
from kvpilot.diagnose.run import Options, run

RECORDING = Path(__file__).resolve().parents[2] / "fixtures" / "recordings" / "vllm" / "max-num-seqs-cap.om"


def test_nothing_inferred_nothing_said():
    assert confirm_inferred([], "cli", pod_read=False) is None


def test_the_command_line_reader_is_told_which_flags_to_pass():
    text = confirm_inferred(["max_num_seqs"], "cli", pod_read=False)
    assert text is not None
    assert "pass --max-num-seqs N, or --pod" in text


def test_a_pod_already_read_is_not_suggested_again():
    text = confirm_inferred(["max_num_batched_tokens"], "cli", pod_read=True)
    assert text is not None
    assert "pass --max-num-batched-tokens N to confirm" in text
    assert "--pod" not in text


def test_a_service_reader_is_told_what_to_deploy_not_which_flags_to_pass():
    text = confirm_inferred(["max_num_seqs"], "service", pod_read=False)
    assert text is not None
    assert "--" not in text.replace("/metrics", "")
    assert "kvpilot operator" in text
    assert "kvpilot_vllmserver_limit" in text


def _evidence(reader: str) -> list[str]:
    # vLLM 0.29.0's own scheduler at max_num_seqs 4 (tests/fixtures/recordings/vllm/PROVENANCE.md), no limit given:
    # the rules infer the cap from the flat running gauge
    report = run(Options(recording=str(RECORDING), window_seconds=300, use_kube=False, reader=reader))  # type: ignore[arg-type]
    [target] = report.targets
    assert target.verdict == "max_num_seqs_cap"
    assert target.signals["inferred_max_num_seqs"] == 4
    return target.evidence


def test_the_alert_hook_answer_carries_the_service_advice():
    evidence = _evidence("service")  # the default: kvpilot alert-hook builds Options without a reader
    assert any("deploy the server through the kvpilot operator" in e for e in evidence)
    assert not any("pass --max-num-seqs" in e for e in evidence)


def test_the_cli_diagnosis_carries_the_flags():
    evidence = _evidence("cli")
    assert any("pass --max-num-seqs N, or --pod" in e for e in evidence)
    assert not any("kvpilot operator" in e for e in evidence)


def test_a_pod_that_could_not_be_read_is_not_said_to_omit_the_limit():
    why = "no Kubernetes configuration (ConfigException: Invalid kube-config file. No configuration found.)"
    text = confirm_inferred(["max_num_seqs"], "cli", pod_read=False, pod_unread=why)
    assert text == (
        "Lower confidence: max_num_seqs inferred from the gauges, not read (the pod could not be read: "
        f"{why}): pass --max-num-seqs N, or run with access to the cluster (--kubeconfig, --context), to confirm."
    )
    assert "do not state it" not in text


def test_a_pod_the_cluster_refused_names_the_refusal():
    text = confirm_inferred(["max_num_batched_tokens"], "cli", pod_read=False, pod_unread="HTTP 404 Not Found")
    assert text == (
        "Lower confidence: max_num_batched_tokens inferred from the gauges, not read (the pod could not be read: "
        "HTTP 404 Not Found): pass --max-num-batched-tokens N, or check --pod, -n and the access to the cluster, "
        "to confirm."
    )


def test_a_pod_read_that_did_not_state_the_limit_keeps_its_sentence():
    text = confirm_inferred(["max_num_seqs"], "cli", pod_read=True)
    assert text == (
        "Lower confidence: max_num_seqs inferred from the gauges, not read (the pod's command line and startup "
        "log do not state it): pass --max-num-seqs N to confirm."
    )


def test_a_named_pod_without_a_kubeconfig_gets_the_could_not_be_read_advice(tmp_path, monkeypatch):
    # --pod named, no Kubernetes configuration anywhere: the pod was never read, so the advice must not say
    # its command line omits the limit
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "missing-kubeconfig"))
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    report = run(Options(recording=str(RECORDING), window_seconds=300, namespace="llm", pod="qwen-0", reader="cli"))
    [target] = report.targets
    assert target.signals["inferred_max_num_seqs"] == 4
    assert any(n.startswith("pod llm/qwen-0 not read: no Kubernetes configuration") for n in report.notes)
    [advice] = [e for e in target.evidence if e.startswith("Lower confidence")]
    assert "(the pod could not be read: no Kubernetes configuration" in advice
    assert "do not state it" not in advice
    assert "pass --max-num-seqs N, or run with access to the cluster" in advice
