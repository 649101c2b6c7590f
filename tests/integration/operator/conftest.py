"""Fixtures for the operator on the sandbox API: one sandbox API per module, a namespace per test,
the real kopf operator in a thread (kopf's ``KopfRunner``), and bounded polling instead of sleeps.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import kubernetes.client
import kubernetes.config.kube_config
import pytest
from kopf.testing import KopfRunner

from kvpilot.api.crd import crd_manifest
from kvpilot.controller.handlers import build_registry
from kvpilot.controller.settings import make_settings
from kvpilot.sandbox import Kubelet, SandboxCluster
from tests.support.waiting import wait_for  # noqa: F401  (re-exported for the operator tests)

T = TypeVar("T")
SERVERS = ("kvpilot.dev", "v1alpha1")


@pytest.fixture(scope="module")
def cluster() -> Iterator[SandboxCluster]:
    """The sandbox API on loopback with the VLLMServer CRD installed (strict: a surprise fails the module)."""
    with SandboxCluster(strict=True) as sandbox:
        kubernetes.client.ApiextensionsV1Api(sandbox.api_client()).create_custom_resource_definition(crd_manifest())
        yield sandbox


@pytest.fixture(autouse=True)
def _no_real_cluster(cluster: SandboxCluster, tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The kubernetes client read KUBECONFIG at import: point its default at the sandbox so
    nothing in these tests can reach a real cluster by accident.
    """
    path = cluster.write_kubeconfig(tmp_path / "kubeconfig")
    monkeypatch.setenv("KUBECONFIG", str(path))
    monkeypatch.setattr(kubernetes.config.kube_config, "KUBE_CONFIG_DEFAULT_LOCATION", str(path))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)


@pytest.fixture
def namespace(cluster: SandboxCluster) -> str:
    """A fresh namespace for one test."""
    name = f"t-{uuid.uuid4().hex[:8]}"
    kubernetes.client.CoreV1Api(cluster.api_client()).create_namespace({"metadata": {"name": name}})
    return name


@pytest.fixture
def api(cluster: SandboxCluster) -> kubernetes.client.ApiClient:
    """A kubernetes client bound to the sandbox."""
    return cluster.api_client()


@pytest.fixture
def kubelet(cluster: SandboxCluster) -> Kubelet:
    """The test plays the scheduler and kubelet."""
    return Kubelet(cluster)


@pytest.fixture
def operator(cluster: SandboxCluster, namespace: str) -> Callable[[], KopfRunner]:
    """A factory of kopf runners of the real operator, watching the test's namespace."""

    def start(**registry: Any) -> KopfRunner:
        """A runner; ``registry`` goes to :func:`build_registry` (e.g. ``retry_policy``)."""
        return KopfRunner(
            ["run", "--standalone", "--namespace", namespace],
            registry=build_registry(cluster.configuration(), hub=False, **registry),
            settings=make_settings(),
            timeout=10,
        )

    return start
