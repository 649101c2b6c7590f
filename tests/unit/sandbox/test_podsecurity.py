"""The sandbox's Pod Security admission against the Pod Security Standards and the plugin's wording.

Expected messages are written by hand from k8s.io/pod-security-admission (``policy/check_*.go``:
each check's ForbiddenReason and ForbiddenDetail format; ``admission/admission.go``: ``violates
PodSecurity "<level>:<version>": reason (detail), ...``), the shape kubectl prints for a refused pod.
"""

from __future__ import annotations

import copy

import pytest

from kvpilot.api import parse_spec
from kvpilot.render import render_objects
from kvpilot.sandbox import podsecurity


def _nginx() -> dict:
    """A pod with no securityContext at all (what `kubectl run nginx --image=nginx` creates)."""
    return {"containers": [{"name": "nginx", "image": "nginx"}]}


def test_a_bare_pod_gets_the_api_servers_restricted_message():
    found = podsecurity.violations(_nginx(), "restricted")
    # What the API server answers for this pod (reasons in check-ID order):
    assert podsecurity.admission_message("web", "restricted", "latest", found) == (
        'pods "web" is forbidden: violates PodSecurity "restricted:latest": allowPrivilegeEscalation != false '
        '(container "nginx" must set securityContext.allowPrivilegeEscalation=false), unrestricted capabilities '
        '(container "nginx" must set securityContext.capabilities.drop=["ALL"]), runAsNonRoot != true '
        '(pod or container "nginx" must set securityContext.runAsNonRoot=true), seccompProfile '
        '(pod or container "nginx" must set securityContext.seccompProfile.type to "RuntimeDefault" or "Localhost")'
    )
    assert podsecurity.violations(_nginx(), "baseline") == []  # nothing baseline forbids
    assert podsecurity.violations(_nginx(), "privileged") == []


@pytest.mark.parametrize(
    ("change", "level", "expected"),
    [
        ({"hostNetwork": True, "hostPID": True}, "baseline", ("host namespaces", "hostNetwork, hostPID")),
        (
            {"containers": [{"name": "a", "securityContext": {"privileged": True}}]},
            "baseline",
            ("privileged", 'container "a" must not set securityContext.privileged=true'),
        ),
        (
            {"containers": [{"name": "a", "securityContext": {"capabilities": {"add": ["SYS_ADMIN", "CHOWN"]}}}]},
            "baseline",
            (
                "non-default capabilities",
                'container "a" must not include "SYS_ADMIN" in securityContext.capabilities.add',
            ),
        ),
        (
            {"volumes": [{"name": "h", "hostPath": {"path": "/"}}, {"name": "g", "hostPath": {"path": "/x"}}]},
            "baseline",
            ("hostPath volumes", 'volumes "h", "g"'),
        ),
        (
            {"containers": [{"name": "a", "ports": [{"containerPort": 80, "hostPort": 8080}]}]},
            "baseline",
            ("hostPort", 'container "a" uses hostPort 8080'),
        ),
        (
            {"securityContext": {"seccompProfile": {"type": "Unconfined"}}},
            "baseline",
            ("seccompProfile", 'pod must not set securityContext.seccompProfile.type to "Unconfined"'),
        ),
        (
            {"securityContext": {"sysctls": [{"name": "kernel.msgmax", "value": "1"}]}},
            "baseline",
            ("forbidden sysctls", "kernel.msgmax"),
        ),
    ],
)
def test_each_baseline_check(change, level, expected):
    spec = {**_nginx(), **change}
    assert podsecurity.violations(spec, level) == [expected]


def _restricted_ok(**container_sc) -> dict:
    sc = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}, **container_sc}
    return {
        "securityContext": {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}},
        "containers": [{"name": "c", "image": "x", "securityContext": sc}],
    }


def test_restricted_allows_net_bind_service_and_localhost_seccomp_but_not_other_capabilities():
    assert (
        podsecurity.violations(
            _restricted_ok(capabilities={"drop": ["ALL"], "add": ["NET_BIND_SERVICE"]}), "restricted"
        )
        == []
    )
    assert podsecurity.violations(_restricted_ok(seccompProfile={"type": "Localhost"}), "restricted") == []
    assert podsecurity.violations(_restricted_ok(capabilities={"drop": ["ALL"], "add": ["CHOWN"]}), "restricted") == [
        ("unrestricted capabilities", 'container "c" must not include "CHOWN" in securityContext.capabilities.add')
    ]


def test_restricted_run_as_root_and_volume_types():
    spec = _restricted_ok(runAsNonRoot=False, runAsUser=0)
    spec["volumes"] = [{"name": "nfs", "nfs": {"server": "x", "path": "/"}}, {"name": "tmp", "emptyDir": {}}]
    assert podsecurity.violations(spec, "restricted") == [
        ("restricted volume types", 'volumes ["nfs"] have restricted types'),
        ("runAsNonRoot != true", 'container "c" must not set securityContext.runAsNonRoot=false'),
        ("runAsUser=0", 'container "c" must not set runAsUser=0'),
    ]
    # restricted replaces baseline's hostPath check with its volume-type check (one reason, not two)
    hostpath = _restricted_ok()
    hostpath["volumes"] = [{"name": "h", "hostPath": {"path": "/"}}]
    assert podsecurity.violations(hostpath, "restricted") == [
        ("restricted volume types", 'volumes ["h"] have restricted types')
    ]


def test_kvpilots_pods_default_and_run_as_root():
    pod, _ = render_objects("qwen", "llm", parse_spec({"model": "Qwen/Qwen2.5-1.5B-Instruct"}))
    assert podsecurity.violations(pod["spec"], "restricted") == []
    as_root, _ = render_objects("qwen", "llm", parse_spec({"model": "Qwen/Qwen2.5-1.5B-Instruct", "runAsRoot": True}))
    # docs/security.md: runAsRoot passes baseline, not restricted (runAsNonRoot is dropped)
    assert podsecurity.violations(as_root["spec"], "baseline") == []
    assert podsecurity.violations(as_root["spec"], "restricted") == [
        ("runAsNonRoot != true", 'pod or container "vllm" must set securityContext.runAsNonRoot=true')
    ]
    lmcache, _ = render_objects(
        "qwen",
        "llm",
        parse_spec(
            {"model": "m", "kvOffload": {"backend": "lmcache", "cpuMemory": "8Gi"}, "modelCache": {"claimName": "c"}}
        ),
    )
    assert podsecurity.violations(copy.deepcopy(lmcache["spec"]), "restricted") == []


def test_enforced_level_from_the_namespace_labels():
    labels = {"pod-security.kubernetes.io/enforce": "restricted"}
    assert podsecurity.enforced_level({"metadata": {"labels": labels}}) == ("restricted", "latest")
    pinned = {**labels, "pod-security.kubernetes.io/enforce-version": "v1.30"}
    assert podsecurity.enforced_level({"metadata": {"labels": pinned}}) == ("restricted", "v1.30")
    assert (
        podsecurity.enforced_level({"metadata": {"labels": {"pod-security.kubernetes.io/enforce": "privileged"}}})
        is None
    )
    assert podsecurity.enforced_level({"metadata": {}}) is None
