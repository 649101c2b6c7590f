"""Two operator processes against one sandbox with kopf peering: one acts, the other waits, and
takes over when the first is killed (by PID).

Each operator has its own kubeconfig token, so the sandbox's request log tells who sent what.
Priorities are not given: ``kvpilot operator --peering`` orders replicas by start time (the
chart's and the manifests' setting), so operator ``a``, started first, acts.

What kopf does (kopf/_core/engines/peering.py in kopf 1.45): with ``--peering`` an operator starts
paused and resumes only when the peering object's ``status`` shows no live peer of higher or equal
priority; every replica merge-patches its record ``{identity: {priority, lifetime, lastseen}}``
every ``max(1, lifetime - 5..10)`` s; a record older than its ``lifetime`` is dead. A replica
stopped with SIGTERM deletes its record on exit (the other resumes at once); one killed with
SIGKILL blocks the others until its record expires (``--peering-lifetime``).
"""

from __future__ import annotations

import collections
import copy
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import kubernetes.client
import pytest
import yaml

from tests.conftest import REPO
from tests.integration.operator.conftest import SERVERS, wait_for
from tests.integration.operator.test_operator import EXPERIMENT
from tests.support.waiting import stop_process

KVPILOT = str(Path(sys.executable).with_name("kvpilot"))
PEERINGS = ("kopf.dev", "v1")
#: Seconds a killed operator's record blocks the other (``--peering-lifetime``): short for the test.
LIFETIME = 4
SERVER_COUNT = 4
#: Bounds of the polls (generous: 2 cores shared by many jobs); the measured times are printed.
START_TIMEOUT = 60.0
TAKEOVER_TIMEOUT = LIFETIME + 30.0


@pytest.fixture(scope="module", autouse=True)
def peering_crds(cluster):
    """Kopf's peering CRDs, as the manifests ship them."""
    ext = kubernetes.client.ApiextensionsV1Api(cluster.api_client())
    for crd in yaml.safe_load_all((REPO / "manifests" / "crd" / "kopfpeerings.yaml").read_text()):
        ext.create_custom_resource_definition(crd)


class Operator:
    """``kvpilot operator`` in a child process with its own token (``operator-<name>``)."""

    def __init__(self, cluster, tmp_path: Path, name: str, scope: list[str], peering: str) -> None:
        self.name = f"operator-{name}"
        kubeconfig = cluster.write_kubeconfig(tmp_path / f"{self.name}.kubeconfig", token=self.name)
        env = {**os.environ, "KUBECONFIG": str(kubeconfig), "HF_HUB_OFFLINE": "1", "POD_NAME": self.name}
        env.pop("KUBERNETES_SERVICE_HOST", None)
        self.log = tmp_path / f"{self.name}.log"
        with self.log.open("w") as out:
            self.proc = subprocess.Popen(
                [KVPILOT, "operator", *scope, "--peering", peering, "--peering-lifetime", str(LIFETIME)]
                + ["--metrics-port", "0"],  # two operators on one host: no /metrics port to share
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
            )

    def output(self) -> str:
        return self.log.read_text()


def _peering(api, namespace: str | None, name: str) -> dict:
    custom = kubernetes.client.CustomObjectsApi(api)
    if namespace is None:
        return custom.get_cluster_custom_object(*PEERINGS, "clusterkopfpeerings", name)
    return custom.get_namespaced_custom_object(*PEERINGS, namespace, "kopfpeerings", name)


def _create_peering(api, namespace: str | None, name: str) -> None:
    custom = kubernetes.client.CustomObjectsApi(api)
    if namespace is None:
        body = {"apiVersion": "kopf.dev/v1", "kind": "ClusterKopfPeering", "metadata": {"name": name}}
        custom.create_cluster_custom_object(*PEERINGS, "clusterkopfpeerings", body)
    else:
        body = {"apiVersion": "kopf.dev/v1", "kind": "KopfPeering", "metadata": {"name": name}}
        custom.create_namespaced_custom_object(*PEERINGS, namespace, "kopfpeerings", body)


def _create_server(api, namespace: str, name: str) -> None:
    body = copy.deepcopy(EXPERIMENT)
    body["metadata"]["name"] = name
    kubernetes.client.CustomObjectsApi(api).create_namespaced_custom_object(*SERVERS, namespace, "vllmservers", body)


def _requests_by(cluster, token: str, namespace: str) -> list[tuple[str, str]]:
    """``(method, path)`` of the requests ``token`` sent about objects in ``namespace``."""
    marker = f"/namespaces/{namespace}/"
    return [(m, p) for m, p, t in cluster.requests() if t == token and marker in p and "kopfpeerings" not in p]


def _settled(cluster, namespace: str, names: list[str], instance: str) -> bool:
    """Every server has its pod, its Service, phase Pending and its Pending Event by ``instance``."""
    pods = collections.Counter(
        p["metadata"]["labels"]["kvpilot.dev/server"] for p in cluster.list("v1/pods", namespace)
    )
    services = {s["metadata"]["name"] for s in cluster.list("v1/services", namespace)}
    events = {
        (e["involvedObject"]["name"], e["reason"])
        for e in cluster.list("v1/events", namespace)
        if e.get("reportingInstance") == instance
    }
    return all(
        pods[n] == 1
        and n in services
        and ((cluster.get("kvpilot.dev/v1alpha1/vllmservers", namespace, n) or {}).get("status") or {}).get("phase")
        == "Pending"
        and (n, "Pending") in events
        for n in names
    )


def test_peering_object_status_merges_expires_and_is_watched_as_the_api_server_does(api, namespace):
    """What kopf relies on: its CRD has no status subresource, so a merge patch of the object
    changes ``status`` (kept: ``x-kubernetes-preserve-unknown-fields``); ``null`` deletes a record
    (RFC 7386); every change is a new resourceVersion and a MODIFIED event to a watch from it.
    """
    from kubernetes import watch

    custom = kubernetes.client.CustomObjectsApi(api)
    _create_peering(api, namespace, "p")
    _create_peering(api, None, f"p-{namespace}")
    record = {"priority": 1, "lifetime": 60, "lastseen": "2026-12-01T13:00:00+00:00"}
    first = custom.patch_namespaced_custom_object(*PEERINGS, namespace, "kopfpeerings", "p", {"status": {"a": record}})
    second = custom.patch_namespaced_custom_object(
        *PEERINGS, namespace, "kopfpeerings", "p", {"status": {"b": {**record, "priority": 2}}}
    )
    assert second["status"] == {"a": record, "b": {**record, "priority": 2}}
    third = custom.patch_namespaced_custom_object(*PEERINGS, namespace, "kopfpeerings", "p", {"status": {"a": None}})
    assert third["status"] == {"b": {**record, "priority": 2}}
    versions = [int(o["metadata"]["resourceVersion"]) for o in (first, second, third)]
    assert versions == sorted(set(versions))
    cluster_wide = custom.patch_cluster_custom_object(
        *PEERINGS, "clusterkopfpeerings", f"p-{namespace}", {"status": {"a": record}}
    )
    assert cluster_wide["status"] == {"a": record}
    assert "namespace" not in cluster_wide["metadata"]
    stream = watch.Watch()
    seen = []
    for event in stream.stream(
        custom.list_namespaced_custom_object,
        *PEERINGS,
        namespace,
        "kopfpeerings",
        resource_version=first["metadata"]["resourceVersion"],
        _request_timeout=10,
    ):
        seen.append((event["type"], event["object"]["metadata"]["resourceVersion"], event["object"]["status"]))
        if len(seen) == 2:
            stream.stop()
    assert seen == [
        ("MODIFIED", second["metadata"]["resourceVersion"], second["status"]),
        ("MODIFIED", third["metadata"]["resourceVersion"], third["status"]),
    ]


@pytest.mark.parametrize(
    ("scope", "kill"),
    [("namespaced", signal.SIGKILL), ("clusterwide", signal.SIGTERM)],
    ids=["KopfPeering-SIGKILL", "ClusterKopfPeering-SIGTERM"],
)
def test_one_of_two_operators_acts_and_the_other_takes_over(cluster, api, namespace, tmp_path, scope, kill):
    peering = f"kvpilot-{namespace}"  # one peering neighbourhood per test
    peering_ns = namespace if scope == "namespaced" else None
    args = ["--namespace", namespace] if scope == "namespaced" else ["--all-namespaces"]
    _create_peering(api, peering_ns, peering)
    a = b = None
    try:
        t0 = time.monotonic()
        a = Operator(cluster, tmp_path, "a", args, peering)
        wait_for(
            lambda: a.name in (_peering(api, peering_ns, peering).get("status") or {}),
            timeout=START_TIMEOUT,
            what="operator a's record",
        )
        b = Operator(cluster, tmp_path, "b", args, peering)  # started later: a lower priority
        records = wait_for(
            lambda: (lambda s: s if b.name in s else None)(_peering(api, peering_ns, peering).get("status") or {}),
            timeout=START_TIMEOUT,
            what="operator b's record",
        )
        assert records[a.name]["priority"] > records[b.name]["priority"]
        assert records[a.name]["lifetime"] == records[b.name]["lifetime"] == LIFETIME

        names = [f"s{i}" for i in range(SERVER_COUNT)]
        for name in names:
            _create_server(api, namespace, name)
        wait_for(lambda: _settled(cluster, namespace, names, a.name), timeout=START_TIMEOUT, what="a's servers")
        print(f"{scope}: {SERVER_COUNT} servers settled {time.monotonic() - t0:.1f} s after the first start")

        # b never acted (nor read a VLLMServer, a Pod or a Service: its watches stayed paused).
        assert _requests_by(cluster, b.name, namespace) == []
        assert "Resuming operations" not in b.output()
        events = cluster.list("v1/events", namespace)
        assert collections.Counter((e["involvedObject"]["name"], e["reason"]) for e in events) == {
            (n, "Pending"): 1 for n in names
        }
        assert {e["reportingInstance"] for e in events} == {a.name}

        os.kill(a.proc.pid, kill)  # SIGKILL: no goodbye, the record expires; SIGTERM: a deletes it
        a.proc.wait(timeout=30)
        killed = time.monotonic()
        # b takes over: it reads every VLLMServer (kopf resumes them) ...
        wait_for(
            lambda: all(
                ("GET", f"/apis/{'/'.join(SERVERS)}/namespaces/{namespace}/vllmservers/{n}")
                in _requests_by(cluster, b.name, namespace)
                for n in names
            ),
            timeout=TAKEOVER_TIMEOUT,
            what="b resuming the servers",
        )
        took = time.monotonic() - killed
        print(f"{scope}: b took over {took:.1f} s after {signal.Signals(kill).name} (lifetime {LIFETIME} s)")
        # ... and handles a new one; its Events come after any b posted for the old servers.
        _create_server(api, namespace, "late")
        wait_for(lambda: _settled(cluster, namespace, ["late"], b.name), timeout=TAKEOVER_TIMEOUT, what="b's server")
        assert b.proc.poll() is None
    finally:
        stop_process(a.proc if a else None)
        stop_process(b.proc if b else None)
    pods = collections.Counter(
        p["metadata"]["labels"]["kvpilot.dev/server"] for p in cluster.list("v1/pods", namespace)
    )
    assert pods == {n: 1 for n in [*names, "late"]}
    assert sorted(s["metadata"]["name"] for s in cluster.list("v1/services", namespace)) == sorted([*names, "late"])
    events = cluster.list("v1/events", namespace)
    assert collections.Counter((e["involvedObject"]["name"], e["reason"]) for e in events) == {
        (n, "Pending"): 1 for n in [*names, "late"]
    }
    # b adopted a's pods and Services: no write of its own for the old servers.
    writes = [(m, p) for m, p in _requests_by(cluster, b.name, namespace) if m != "GET"]
    assert [w for w in writes if any(f"/{n}" in w[1] for n in names) and "/late" not in w[1]] == []
    assert "Traceback" not in b.output()
