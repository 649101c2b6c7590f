"""Where the operator connects: kubeconfig read when called, and kopf's connection from it."""

from __future__ import annotations

import pytest
import yaml

from kvpilot.controller.runner import ClusterConfigError, load_configuration
from kvpilot.controller.settings import connection_info


def _kubeconfig(path, server="https://10.0.0.1:6443", token="s3cret"):
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "current-context": "c",
                "clusters": [{"name": "k", "cluster": {"server": server, "insecure-skip-tls-verify": True}}],
                "users": [{"name": "u", "user": {"token": token}}],
                "contexts": [{"name": "c", "context": {"cluster": "k", "user": "u"}}],
            }
        )
    )
    return path


def test_kubeconfig_from_the_environment_at_call_time(tmp_path, monkeypatch):
    monkeypatch.setenv("KUBECONFIG", str(_kubeconfig(tmp_path / "config")))
    configuration = load_configuration()
    info = connection_info(configuration)
    assert info.server == "https://10.0.0.1:6443"
    assert (info.scheme, info.token) == ("Bearer", "s3cret")
    assert info.insecure is True


def test_explicit_kubeconfig_wins_over_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("KUBECONFIG", str(_kubeconfig(tmp_path / "env", server="https://env:6443")))
    explicit = _kubeconfig(tmp_path / "explicit", server="https://explicit:6443")
    assert load_configuration(str(explicit)).host == "https://explicit:6443"


def test_unusable_kubeconfig_names_the_file(tmp_path, monkeypatch):
    missing = tmp_path / "nope"
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    with pytest.raises(ClusterConfigError, match=str(missing)):
        load_configuration(str(missing))
