"""An operator upgraded from the release that kept kopf's record in annotations.

The previous release (kvpilot before ``status.kopf``) ran kopf with its annotation storages under
the ``kvpilot.dev`` prefix: ``kvpilot.dev/last-handled-configuration`` (the handled essence as
JSON) and per-handler progress annotations. Here that release's settings run the same handlers
first, so the VLLMServers carry exactly what kopf wrote then; today's operator (``status.kopf``)
takes over each of them in every phase: it must adopt them as they are (no new Pod, no Event, no
status change beyond its own record) and still act on a later spec change.
"""

from __future__ import annotations

import copy
import json

import kopf
import kubernetes.client
from kopf.testing import KopfRunner

from kvpilot.controller.handlers import build_registry
from kvpilot.controller.settings import make_settings
from tests.integration.operator.conftest import SERVERS, wait_for
from tests.integration.operator.test_operator import EXPERIMENT

PHASES = ("Pending", "Ready", "Expired", "Failed", "Invalid")


def _previous_release_settings() -> kopf.OperatorSettings:
    """The previous release's ``make_settings``: kopf's annotation storages under ``kvpilot.dev``."""
    settings = make_settings()
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix="kvpilot.dev")
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix="kvpilot.dev", key="last-handled-configuration"
    )
    return settings


def _runner(cluster, namespace: str, settings: kopf.OperatorSettings) -> KopfRunner:
    return KopfRunner(
        ["run", "--standalone", "--namespace", namespace],
        registry=build_registry(cluster.configuration(), hub=False),
        settings=settings,
        timeout=10,
    )


def _server(cluster, namespace: str, name: str) -> dict:
    return cluster.get("kvpilot.dev/v1alpha1/vllmservers", namespace, name) or {}


def _pod_of(cluster, namespace: str, name: str) -> dict | None:
    pods = [p for p in cluster.list("v1/pods", namespace) if p["metadata"]["labels"]["kvpilot.dev/server"] == name]
    return pods[0] if pods else None


def test_servers_of_the_annotation_release_are_adopted_and_still_follow_their_spec(cluster, api, namespace, kubelet):
    custom = kubernetes.client.CustomObjectsApi(api)
    names = {phase: phase.lower() for phase in PHASES}
    with _runner(cluster, namespace, _previous_release_settings()):
        for phase, name in names.items():
            body = copy.deepcopy(EXPERIMENT)
            body["metadata"]["name"] = name
            if phase == "Invalid":
                body["spec"]["engine"]["extraArgs"] = ["--max-num-seqs=8"]  # a managed flag: refused
            custom.create_namespaced_custom_object(*SERVERS, namespace, "vllmservers", body)
        pods = {
            phase: wait_for(lambda name=name: _pod_of(cluster, namespace, name), what=f"the pod of {name}")
            for phase, name in names.items()
            if phase != "Invalid"
        }
        for phase in ("Ready", "Expired", "Failed"):
            kubelet.schedule(namespace, pods[phase]["metadata"]["name"])
            kubelet.start(namespace, pods[phase]["metadata"]["name"])
        kubelet.ready(namespace, pods["Ready"]["metadata"]["name"])
        kubelet.deadline_exceeded(namespace, pods["Expired"]["metadata"]["name"])
        kubelet.fail(namespace, pods["Failed"]["metadata"]["name"], exit_code=1, reason="Error", message="boom")
        for phase, name in names.items():
            wait_for(
                lambda name=name, phase=phase: (
                    (_server(cluster, namespace, name).get("status") or {}).get("phase") == phase
                ),
                what=f"{name} {phase}",
            )
        wait_for(
            lambda: all(
                "kvpilot.dev/last-handled-configuration" in (_server(cluster, namespace, n)["metadata"]["annotations"])
                for n in names.values()
            ),
            what="the previous release's record in annotations",
        )
    before = {name: _server(cluster, namespace, name) for name in names.values()}
    assert not any("kopf" in server["status"] for server in before.values())  # the old release's shape
    pod_uids = sorted(p["metadata"]["uid"] for p in cluster.list("v1/pods", namespace))
    event_uids = {e["metadata"]["uid"] for e in cluster.list("v1/events", namespace)}

    with _runner(cluster, namespace, make_settings()):
        # today's operator handled each one: its record is in status.kopf
        wait_for(
            lambda: all(
                ((_server(cluster, namespace, n).get("status") or {}).get("kopf") or {}).get("last-handled-digest")
                for n in names.values()
            ),
            what="today's record of every server",
        )
        after = {name: _server(cluster, namespace, name) for name in names.values()}
        # a spec change after the upgrade is seen and acted on: a new pod from the new spec
        old_uid = pods["Ready"]["metadata"]["uid"]
        custom.patch_namespaced_custom_object(
            *SERVERS, namespace, "vllmservers", "ready", {"spec": {"engine": {"maxNumSeqs": 8}}}
        )
        new_pod = wait_for(
            lambda: (p := _pod_of(cluster, namespace, "ready")) and p["metadata"]["uid"] != old_uid and p,
            what="the replacement pod",
        )
        wait_for(
            lambda: not cluster.get("v1/pods", namespace, pods["Ready"]["metadata"]["name"]), what="the old pod gone"
        )
        # kopf posts Events in order from one queue: once the replacement's is there, any the
        # takeover posted before it is there too
        wait_for(
            lambda: any(e["reason"] == "PodReplaced" for e in cluster.list("v1/events", namespace)),
            what="the PodReplaced event",
        )
        events = [e for e in cluster.list("v1/events", namespace) if e["metadata"]["uid"] not in event_uids]

    for name, server in after.items():
        status = dict(server["status"])
        status.pop("kopf")
        assert status == before[name]["status"], name  # phase, conditions, timestamps: all kept
    # Ready's old pod was replaced by the spec change; every other pod is the one of before
    assert sorted(
        p["metadata"]["uid"]
        for p in cluster.list("v1/pods", namespace)
        if p["metadata"]["uid"] != new_pod["metadata"]["uid"]
    ) == sorted(u for u in pod_uids if u != old_uid)
    command = new_pod["spec"]["containers"][0]["command"]
    assert command[command.index("--max-num-seqs") + 1] == "8"
    # the takeover itself posted nothing: the only Events are the spec change's, all of server "ready"
    assert {e["involvedObject"]["name"] for e in events} == {"ready"}, [(e["reason"], e["message"]) for e in events]
    assert {e["reason"] for e in events} <= {"PodReplaced", "PodCreated", "Pending"}
    # the record is a digest, not a copy of the spec
    assert json.loads(after["ready"]["status"]["kopf"]["last-handled-digest"]).keys() == {"sha256"}
