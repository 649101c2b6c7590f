"""Errors that name what the user got wrong: the cluster configuration the operator and the alert hook were
pointed at (the option only when it was given, the missing file as missing), and the URL shape diagnose
expects for each source.
"""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from kvpilot.cli import cli
from kvpilot.controller.runner import ClusterConfigError, load_configuration


def _run(args: list[str], env: dict[str, str | None]) -> tuple[int, str]:
    result = CliRunner().invoke(cli, args, env=env)
    return result.exit_code, result.output


def _error_line(output: str) -> str:
    lines = [line for line in output.splitlines() if line.strip()]
    assert len(lines) == 1, output  # one line, no traceback
    return lines[0]


OPERATOR = ["operator", "-n", "llm", "--metrics-port", "0"]


def test_kubeconfig_from_the_environment_is_named_as_such_and_missing_as_missing(tmp_path):
    missing = tmp_path / "nonexistent"
    code, output = _run(OPERATOR, {"KUBECONFIG": str(missing), "KUBERNETES_SERVICE_HOST": None})
    line = _error_line(output)
    assert code == 2
    assert line == f"kvpilot: error: $KUBECONFIG names {missing}: no such file"
    assert "--kubeconfig" not in line  # not passed: the option is not to blame


def test_the_option_is_named_when_it_was_given(tmp_path):
    missing = tmp_path / "nonexistent"
    code, output = _run([*OPERATOR, "--kubeconfig", str(missing)], {"KUBECONFIG": None})
    assert code == 2
    assert _error_line(output) == f"kvpilot: error: --kubeconfig {missing}: no such file"


def test_no_configuration_at_all_says_where_it_looked(tmp_path):
    code, output = _run(OPERATOR, {"KUBECONFIG": None, "KUBERNETES_SERVICE_HOST": None, "HOME": str(tmp_path)})
    line = _error_line(output)
    assert code == 2
    assert "~/.kube/config: no such file" in line
    assert "not in a cluster" in line


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        (b"clusters: [\n", "not valid YAML at line 2, column 1"),  # PyYAML's error, once a traceback
        (b"\xff\xfe", "'utf-8' codec can't decode"),
        (b"{}", "no usable cluster configuration"),
    ],
)
def test_an_unusable_file_is_one_line_naming_it(tmp_path, content, reason):
    path = tmp_path / "config"
    path.write_bytes(content)
    with pytest.raises(ClusterConfigError) as caught:
        load_configuration(str(path))
    assert str(caught.value).startswith(f"{path}: no usable cluster configuration: ")
    assert reason in str(caught.value)
    code, output = _run(OPERATOR, {"KUBECONFIG": str(path)})
    assert code == 2
    assert _error_line(output).startswith(f"kvpilot: error: $KUBECONFIG names {path}: ")


def test_a_directory_is_not_a_kubeconfig(tmp_path):
    with pytest.raises(ClusterConfigError, match=f"^{tmp_path}: is a directory, not a file$"):
        load_configuration(str(tmp_path))


def test_alert_hook_s_kube_event_sink_names_the_environment_too(tmp_path):
    missing = tmp_path / "nonexistent"
    args = ["alert-hook", "--prometheus", "http://127.0.0.1:9", "--insecure-no-auth", "--sink", "kube-event"]
    code, output = _run(args, {"KUBECONFIG": str(missing)})
    assert code == 2
    assert _error_line(output) == f"kvpilot: error: --sink kube-event: $KUBECONFIG names {missing}: no such file"


@pytest.mark.parametrize(
    ("flag", "typed", "meant"),
    [
        ("--metrics-url", "localhost:18124/metrics", "http://localhost:18124/metrics"),
        ("--metrics-url", "10.0.0.7:8000/metrics", "http://10.0.0.7:8000/metrics"),
        ("--prometheus", "prometheus:9090", "http://prometheus:9090"),
    ],
)
def test_a_url_without_its_scheme_gets_the_url_it_meant(flag, typed, meant):
    code, output = _run(["diagnose", flag, typed], {})
    assert code == 64
    assert f"{flag} {typed!r}: not an http(s) URL; did you mean {meant}?" in output
    assert "9090" not in output or flag == "--prometheus"  # never a Prometheus example for a /metrics URL


def test_other_bad_urls_get_an_example_of_their_own_source():
    _, metrics = _run(["diagnose", "--metrics-url", "ftp://host/metrics"], {})
    assert "(example: http://127.0.0.1:8000/metrics)" in metrics
    _, prometheus = _run(["diagnose", "--prometheus", "ftp://host"], {})
    assert "(example: http://127.0.0.1:9090)" in prometheus


def test_credentials_typed_without_a_scheme_are_not_echoed():
    _, output = _run(["diagnose", "--metrics-url", "user:s3cret@host:8000/metrics"], {})
    assert "s3cret" not in output
    assert "did you mean http://host:8000/metrics?" in output


@pytest.mark.parametrize("url", ["http://127.0.0.1:8000/metrics", "http://10.0.0.7:8000/metrics/"])
def test_a_metrics_page_given_as_prometheus_is_pointed_to_metrics_url(url):
    # checked before any network read: port 8000 on 127.0.0.1 need not listen
    code, output = _run(["diagnose", "--prometheus", url], {})
    assert code == 64
    assert f"--prometheus {url!r} ends in /metrics, a metrics page, not a Prometheus server" in output
    assert f"use --metrics-url {url};" in output
    assert "HTTP 404" not in output


def test_a_prometheus_base_url_with_a_path_prefix_is_not_taken_for_a_metrics_page():
    # a Prometheus behind a proxy prefix (/prometheus) is a Prometheus; port 9 (discard) on loopback refuses
    code, output = _run(["diagnose", "--prometheus", "http://127.0.0.1:9/prometheus", "--timeout", "1"], {})
    assert "ends in /metrics" not in output
    assert code != 64


def test_simulate_serve_given_a_url_names_the_host_port_it_takes():
    code, output = _run(["simulate", "--serve", "http://127.0.0.1:8000"], {})
    assert code == 2
    assert _error_line(output) == (
        "kvpilot: error: --serve: 'http://127.0.0.1:8000' is a URL; --serve takes HOST:PORT or PORT "
        "(did you mean 127.0.0.1:8000?)"
    )


@pytest.mark.parametrize(
    ("flag", "value", "meant"),
    [
        ("--listen", "http://0.0.0.0:8080", "0.0.0.0:8080"),
        ("--metrics-listen", "https://127.0.0.1:9100/", "127.0.0.1:9100"),
    ],
)
def test_alert_hook_listen_given_a_url_names_the_option_the_value_and_the_form(flag, value, meant):
    args = ["alert-hook", "--prometheus", "http://127.0.0.1:9", "--insecure-no-auth", flag, value]
    code, output = _run(args, {})
    assert code == 2
    assert _error_line(output) == (
        f"kvpilot: error: {flag}: {value!r} is a URL; {flag} takes HOST:PORT or PORT (did you mean {meant}?)"
    )


def test_alert_hook_that_cannot_bind_names_the_address_it_was_given():
    # a host no resolver knows (.invalid is reserved, RFC 2606): the bind fails after parsing
    code, output = _run(
        [
            "alert-hook",
            "--prometheus",
            "http://127.0.0.1:9",
            "--insecure-no-auth",
            "--listen",
            "no-such-host.invalid:0",
        ],
        {},
    )
    assert code == 2
    line = _error_line(output)
    assert line.startswith("kvpilot: error: --listen 'no-such-host.invalid:0': cannot listen (")
    assert line.endswith("); give HOST:PORT of a local address, or PORT")
