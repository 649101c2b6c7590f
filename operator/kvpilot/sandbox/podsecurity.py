"""Pod Security admission for the sandbox: the ``baseline`` and ``restricted`` checks a namespace
labelled ``pod-security.kubernetes.io/enforce=<level>`` applies to a pod create. Pure.

The levels and controls are the Kubernetes "Pod Security Standards"
(https://kubernetes.io/docs/concepts/security/pod-security-standards/); the check IDs, their order,
the reasons and the wording of the details are those of the admission plugin itself,
k8s.io/pod-security-admission (``policy/check_*.go``, ``admission/admission.go``), so a refused pod
gets the message a real API server sends::

    pods "x" is forbidden: violates PodSecurity "restricted:latest": allowPrivilegeEscalation != false
    (container "vllm" must set securityContext.allowPrivilegeEscalation=false), runAsNonRoot != true
    (pod or container "vllm" must set securityContext.runAsNonRoot=true)

Emulated (every control a pod kvpilot renders can touch): baseline ``hostNamespaces``,
``privileged``, ``capabilities_baseline``, ``hostPathVolumes``, ``hostPorts``, ``procMount``,
``seccompProfile_baseline``, ``sysctls``; restricted ``allowPrivilegeEscalation``,
``capabilities_restricted``, ``restrictedVolumes``, ``runAsNonRoot``, ``runAsUser``,
``seccompProfile_restricted``. Not emulated: AppArmor, SELinux options, Windows host process,
probes' and lifecycle hooks' ``host`` field, user-namespace relaxations, ``enforce-version`` pinning
(every version is judged as ``latest``), exemptions, ``warn``/``audit`` modes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, TypedDict

from kvpilot.api.objects import KubeObject
from kvpilot.text.numbers import noun

ENFORCE_LABEL = "pod-security.kubernetes.io/enforce"
ENFORCE_VERSION_LABEL = "pod-security.kubernetes.io/enforce-version"

#: Capabilities the baseline level lets a container add (``capabilities_allowed_1_0``).
BASELINE_CAPABILITIES = frozenset(
    {
        "AUDIT_WRITE",
        "CHOWN",
        "DAC_OVERRIDE",
        "FOWNER",
        "FSETID",
        "KILL",
        "MKNOD",
        "NET_BIND_SERVICE",
        "SETFCAP",
        "SETGID",
        "SETPCAP",
        "SETUID",
        "SYS_CHROOT",
    }
)
#: Volume sources the restricted level allows (``check_restrictedVolumes.go``).
RESTRICTED_VOLUME_SOURCES = frozenset(
    {"configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim", "projected", "secret"}
)
#: Sysctls the baseline level allows (``check_sysctls.go``, the 1.32 safe set).
SAFE_SYSCTLS = frozenset(
    {
        "kernel.shm_rmid_forced",
        "net.ipv4.ip_local_port_range",
        "net.ipv4.ip_unprivileged_port_start",
        "net.ipv4.tcp_syncookies",
        "net.ipv4.ping_group_range",
        "net.ipv4.ip_local_reserved_ports",
        "net.ipv4.tcp_keepalive_time",
        "net.ipv4.tcp_fin_timeout",
        "net.ipv4.tcp_keepalive_intvl",
        "net.ipv4.tcp_keepalive_probes",
        "net.ipv4.tcp_rmem",
        "net.ipv4.tcp_wmem",
    }
)

Violation = tuple[str, str]  # (ForbiddenReason, ForbiddenDetail)


# The fields of a Pod's spec the checks read (k8s.io/api/core/v1 names): the request's JSON, before any
# validation, so a check still reads each value defensively (``is True``, ``str(...)``).
class SeccompProfile(TypedDict, total=False):
    """``SeccompProfile``."""

    type: str
    localhostProfile: str


class Capabilities(TypedDict, total=False):
    """``Capabilities``."""

    add: list[str]
    drop: list[str]


class Sysctl(TypedDict, total=False):
    """``Sysctl``."""

    name: str
    value: str


class SecurityContext(TypedDict, total=False):
    """A pod's ``securityContext`` or a container's: the fields of either that the checks read."""

    privileged: bool
    capabilities: Capabilities
    procMount: str
    seccompProfile: SeccompProfile
    allowPrivilegeEscalation: bool
    runAsNonRoot: bool
    runAsUser: int
    sysctls: list[Sysctl]


class ContainerPort(TypedDict, total=False):
    """``ContainerPort``."""

    containerPort: int
    hostPort: int


class Container(TypedDict, total=False):
    """A container (also an init or ephemeral one)."""

    name: str
    ports: list[ContainerPort]
    securityContext: SecurityContext


class Volume(TypedDict, total=False):
    """A volume: its name and one source (each source's key names its type)."""

    name: str
    hostPath: dict[str, str]


class PodSpec(TypedDict, total=False):
    """A Pod's ``spec``."""

    hostNetwork: bool
    hostPID: bool
    hostIPC: bool
    volumes: list[Volume]
    securityContext: SecurityContext
    containers: list[Container]
    initContainers: list[Container]
    ephemeralContainers: list[Container]


def _join_quote(items: list[str]) -> str:
    """Go's ``joinQuote``: each item double-quoted, joined by ``", "``."""
    return ", ".join(_quote(i) for i in items)


def _quote(item: str) -> str:
    return '"' + item.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _containers(spec: PodSpec) -> Iterator[Container]:
    """``visitContainers``: containers, initContainers, ephemeralContainers."""
    yield from spec.get("initContainers") or []
    yield from spec.get("containers") or []
    yield from spec.get("ephemeralContainers") or []


def _sc(obj: PodSpec | Container) -> SecurityContext:
    return obj.get("securityContext") or {}


def _containers_named(names: list[str]) -> str:
    return f"{noun(len(names), 'container')} {_join_quote(names)}"


# ----------------------------------------------------------------------------- baseline
def _host_namespaces(spec: PodSpec) -> Violation | None:
    used = sorted(f for f in ("hostNetwork", "hostPID", "hostIPC") if spec.get(f))
    return ("host namespaces", ", ".join(used)) if used else None


def _privileged(spec: PodSpec) -> Violation | None:
    bad = [c["name"] for c in _containers(spec) if _sc(c).get("privileged") is True]
    return ("privileged", f"{_containers_named(bad)} must not set securityContext.privileged=true") if bad else None


def _capabilities_baseline(spec: PodSpec) -> Violation | None:
    bad, caps = [], set()
    for c in _containers(spec):
        extra = {str(x) for x in (_sc(c).get("capabilities") or {}).get("add") or []} - BASELINE_CAPABILITIES
        if extra:
            bad.append(c["name"])
            caps |= extra
    if not bad:
        return None
    return (
        "non-default capabilities",
        f"{_containers_named(bad)} must not include {_join_quote(sorted(caps))} in securityContext.capabilities.add",
    )


def _host_path_volumes(spec: PodSpec) -> Violation | None:
    bad = [v["name"] for v in spec.get("volumes") or [] if "hostPath" in v]
    return ("hostPath volumes", f"{noun(len(bad), 'volume')} {_join_quote(bad)}") if bad else None


def _host_ports(spec: PodSpec) -> Violation | None:
    bad, ports = [], set()
    for c in _containers(spec):
        used = {str(p["hostPort"]) for p in c.get("ports") or [] if p.get("hostPort")}
        if used:
            bad.append(c["name"])
            ports |= used
    if not bad:
        return None
    return (
        "hostPort",
        f"{_containers_named(bad)} {noun(len(bad), 'uses', 'use')} "
        f"{noun(len(ports), 'hostPort')} {', '.join(sorted(ports))}",
    )


def _proc_mount(spec: PodSpec) -> Violation | None:
    bad, kinds = [], set()
    for c in _containers(spec):
        mount = _sc(c).get("procMount")
        if mount not in (None, "Default"):
            bad.append(c["name"])
            kinds.add(str(mount))
    if not bad:
        return None
    return (
        "procMount",
        f"{_containers_named(bad)} must not set securityContext.procMount to {_join_quote(sorted(kinds))}",
    )


def _seccomp_baseline(spec: PodSpec) -> Violation | None:
    setters = []
    if (_sc(spec).get("seccompProfile") or {}).get("type") == "Unconfined":
        setters.append("pod")
    bad = [c["name"] for c in _containers(spec) if (_sc(c).get("seccompProfile") or {}).get("type") == "Unconfined"]
    if bad:
        setters.append(_containers_named(bad))
    if not setters:
        return None
    return "seccompProfile", f'{" and ".join(setters)} must not set securityContext.seccompProfile.type to "Unconfined"'


def _sysctls(spec: PodSpec) -> Violation | None:
    bad = [str(s.get("name")) for s in _sc(spec).get("sysctls") or [] if s.get("name") not in SAFE_SYSCTLS]
    return ("forbidden sysctls", ", ".join(bad)) if bad else None


# ----------------------------------------------------------------------------- restricted
def _allow_privilege_escalation(spec: PodSpec) -> Violation | None:
    bad = [c["name"] for c in _containers(spec) if _sc(c).get("allowPrivilegeEscalation") is not False]
    if not bad:
        return None
    return (
        "allowPrivilegeEscalation != false",
        f"{_containers_named(bad)} must set securityContext.allowPrivilegeEscalation=false",
    )


def _capabilities_restricted(spec: PodSpec) -> Violation | None:
    missing_drop, adding, caps = [], [], set()
    for c in _containers(spec):
        capabilities = _sc(c).get("capabilities")
        if capabilities is None:
            missing_drop.append(c["name"])
            continue
        if "ALL" not in (capabilities.get("drop") or []):
            missing_drop.append(c["name"])
        extra = {str(x) for x in capabilities.get("add") or [] if x != "NET_BIND_SERVICE"}
        if extra:
            adding.append(c["name"])
            caps |= extra
    details = []
    if missing_drop:
        details.append(f'{_containers_named(missing_drop)} must set securityContext.capabilities.drop=["ALL"]')
    if adding:
        named = _containers_named(adding)
        details.append(f"{named} must not include {_join_quote(sorted(caps))} in securityContext.capabilities.add")
    return ("unrestricted capabilities", "; ".join(details)) if details else None


def _restricted_volumes(spec: PodSpec) -> Violation | None:
    bad = sorted({v["name"] for v in spec.get("volumes") or [] if not (set(v) - {"name"}) <= RESTRICTED_VOLUME_SOURCES})
    if not bad:
        return None
    return "restricted volume types", f"volumes [{' '.join(_quote(n) for n in bad)}] have restricted types"  # Go %q


def _pod_or_containers(
    spec: PodSpec, value: Callable[[SecurityContext], Any], good: Callable[[Any], bool]
) -> tuple[list[str], list[str], set[str], bool]:
    """The shape of ``runAsNonRoot``/``seccompProfile``: ``(explicit bad setters, containers unset
    without a good pod-level value, bad values, pod value good)``.
    """
    setters, implicit, values = [], [], set()
    pod_value = value(_sc(spec))
    pod_good = pod_value is not None and good(pod_value)
    if pod_value is not None and not pod_good:
        setters.append("pod")
        values.add(str(pod_value))
    explicit = []
    for c in _containers(spec):
        v = value(_sc(c))
        if v is None:
            if not pod_good:
                implicit.append(c["name"])
        elif not good(v):
            explicit.append(c["name"])
            values.add(str(v))
    if explicit:
        setters.append(_containers_named(explicit))
    return setters, implicit, values, pod_good


def _run_as_non_root(spec: PodSpec) -> Violation | None:
    setters, implicit, _, _ = _pod_or_containers(spec, lambda sc: sc.get("runAsNonRoot"), lambda v: v is True)
    if setters:
        return "runAsNonRoot != true", f"{' and '.join(setters)} must not set securityContext.runAsNonRoot=false"
    if implicit:
        return (
            "runAsNonRoot != true",
            f"pod or {_containers_named(implicit)} must set securityContext.runAsNonRoot=true",
        )
    return None


def _run_as_user(spec: PodSpec) -> Violation | None:
    setters = ["pod"] if _sc(spec).get("runAsUser") == 0 else []
    bad = [c["name"] for c in _containers(spec) if _sc(c).get("runAsUser") == 0]
    if bad:
        setters.append(_containers_named(bad))
    return ("runAsUser=0", f"{' and '.join(setters)} must not set runAsUser=0") if setters else None


def _seccomp_restricted(spec: PodSpec) -> Violation | None:
    setters, implicit, values, _ = _pod_or_containers(
        spec, lambda sc: (sc.get("seccompProfile") or {}).get("type"), lambda v: v in ("RuntimeDefault", "Localhost")
    )
    if setters:
        bad = _join_quote(sorted(values))
        return "seccompProfile", f"{' and '.join(setters)} must not set securityContext.seccompProfile.type to {bad}"
    if implicit:
        return (
            "seccompProfile",
            f'pod or {_containers_named(implicit)} must set securityContext.seccompProfile.type to "RuntimeDefault" '
            'or "Localhost"',
        )
    return None


#: ``(check ID, level, check, overridden at restricted by)`` in the plugin's order: baseline checks by
#: ID, then restricted checks by ID (a baseline check with ``Overlap`` is replaced at restricted).
CHECKS: tuple[tuple[str, str, Callable[[PodSpec], Violation | None], str | None], ...] = (
    ("capabilities_baseline", "baseline", _capabilities_baseline, "capabilities_restricted"),
    ("hostNamespaces", "baseline", _host_namespaces, None),
    ("hostPathVolumes", "baseline", _host_path_volumes, "restrictedVolumes"),
    ("hostPorts", "baseline", _host_ports, None),
    ("privileged", "baseline", _privileged, None),
    ("procMount", "baseline", _proc_mount, None),
    ("seccompProfile_baseline", "baseline", _seccomp_baseline, "seccompProfile_restricted"),
    ("sysctls", "baseline", _sysctls, None),
    ("allowPrivilegeEscalation", "restricted", _allow_privilege_escalation, None),
    ("capabilities_restricted", "restricted", _capabilities_restricted, None),
    ("restrictedVolumes", "restricted", _restricted_volumes, None),
    ("runAsNonRoot", "restricted", _run_as_non_root, None),
    ("runAsUser", "restricted", _run_as_user, None),
    ("seccompProfile_restricted", "restricted", _seccomp_restricted, None),
)


def violations(pod_spec: PodSpec, level: str) -> list[Violation]:
    """``(reason, detail)`` of every check ``pod_spec`` fails at ``level`` (``privileged``: none)."""
    if level not in ("baseline", "restricted"):
        return []
    out = []
    for _id, check_level, check, overridden_by in CHECKS:
        if check_level == "restricted" and level != "restricted":
            continue
        if overridden_by is not None and level == "restricted":
            continue
        found = check(pod_spec)
        if found is not None:
            out.append(found)
    return out


def enforced_level(namespace: KubeObject | None) -> tuple[str, str] | None:
    """``(level, version)`` a namespace enforces (its ``pod-security.kubernetes.io/enforce`` label and
    ``enforce-version``, default ``latest``), or None for ``privileged``/unlabelled/unknown levels.
    """
    labels = ((namespace or {}).get("metadata") or {}).get("labels") or {}
    level = labels.get(ENFORCE_LABEL)
    if level not in ("baseline", "restricted"):
        return None
    return level, labels.get(ENFORCE_VERSION_LABEL) or "latest"


def admission_message(pod_name: str, level: str, version: str, found: list[Violation]) -> str:
    """The API server's 403 message: ``pods "<name>" is forbidden: violates PodSecurity
    "<level>:<version>": <reason> (<detail>), ...``.
    """
    reasons = ", ".join(f"{reason} ({detail})" if detail else reason for reason, detail in found)
    return f'pods "{pod_name}" is forbidden: violates PodSecurity "{level}:{version}": {reasons}'
