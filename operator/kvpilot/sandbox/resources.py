"""The sandbox's resource table and the API server's discovery documents built from it (pure).

The built-in resources (kinds, verbs, scope, subresources of Kubernetes' core and built-in groups)
come from the table kmock ships, read through kmock's public API (``kmock.ResourcesArray`` and its
``load_bundled``; kmock 0.8 built it from a k3s cluster's discovery); CRDs add theirs when created.
The discovery documents follow the API server's legacy discovery (``k8s.io/apimachinery``
``metav1.APIVersions``, ``APIGroupList``, ``APIGroup``, ``APIResourceList``): kubectl and kopf read
them (kubectl asks for aggregated discovery first and falls back to these on a plain JSON answer).
"""

from __future__ import annotations

import re
import warnings
from dataclasses import dataclass, field
from typing import Literal, TypedDict

from kvpilot.sandbox.objects import CustomResourceDefinition, JSONSchemaProps

#: ``/version`` of the sandbox (``version.Info``): the API server release whose behaviour it follows.
SERVER_VERSION = {
    "major": "1",
    "minor": "30",
    "gitVersion": "v1.30.0-kvpilot.sandbox",
    "gitTreeState": "clean",
    "compiler": "gc",
    "platform": "linux/amd64",
}


@dataclass(frozen=True)
class Resource:
    """A resource of the API: ``group`` (``""`` for the core group), ``version``, ``plural``."""

    group: str
    version: str
    plural: str

    @classmethod
    def parse(cls, text: str) -> Resource:
        """``"v1/pods"``, ``"apps/v1/deployments"``, ``"kvpilot.dev/v1alpha1/vllmservers"`` → a Resource.

        Raises:
            ValueError: not of the form ``[group/]version/plural``.
        """
        parts = text.strip("/").split("/")
        if len(parts) == 2:
            return cls("", parts[0], parts[1])
        if len(parts) == 3:
            return cls(parts[0], parts[1], parts[2])
        raise ValueError(f"not a resource (want [group/]version/plural): {text!r}")

    @property
    def api_version(self) -> str:
        """The ``apiVersion`` of its objects: ``v1`` or ``group/version``."""
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def qualified(self) -> str:
        """``plural.group`` (``plural`` for the core group), as the API server's messages name it."""
        return f"{self.plural}.{self.group}" if self.group else self.plural


@dataclass
class ResourceInfo:
    """What discovery says about a resource."""

    kind: str
    namespaced: bool
    singular: str = ""
    verbs: set[str] = field(default_factory=set)
    shortnames: set[str] = field(default_factory=set)
    categories: set[str] = field(default_factory=set)
    subresources: set[str] = field(default_factory=set)


#: The verbs of a custom resource (the API server serves all of them for a CRD's resource).
CUSTOM_VERBS = {"create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"}


def builtin_resources() -> dict[Resource, ResourceInfo]:
    """The built-in resources, from kmock's bundled table (its public ``ResourcesArray.load_bundled``)."""
    import kmock

    table = kmock.ResourcesArray()
    with warnings.catch_warnings():  # kmock 0.8 reads its bundle with a deprecated importlib call
        warnings.simplefilter("ignore", DeprecationWarning)
        table.load_bundled()
    out: dict[Resource, ResourceInfo] = {}
    for res in table:
        info = table[res]
        if res.group is None or res.version is None or res.plural is None:  # pragma: no cover - a full table
            continue
        out[Resource(res.group, res.version, res.plural)] = ResourceInfo(
            kind=info.kind or res.plural.capitalize(),
            namespaced=bool(info.namespaced),
            singular=info.singular or "",
            verbs=set(info.verbs),
            shortnames=set(info.shortnames),
            categories=set(info.categories),
            subresources=set(info.subresources),
        )
    return out


def crd_resources(crd: CustomResourceDefinition) -> dict[Resource, tuple[ResourceInfo, JSONSchemaProps | None]]:
    """The resources a CustomResourceDefinition serves, with each version's OpenAPI v3 schema (or None)."""
    spec = crd.get("spec") or {}
    names = spec.get("names") or {}
    out: dict[Resource, tuple[ResourceInfo, JSONSchemaProps | None]] = {}
    for version in spec.get("versions") or []:
        if not version.get("served", True):
            continue
        info = ResourceInfo(
            kind=names.get("kind") or "",
            namespaced=spec.get("scope", "Namespaced") == "Namespaced",
            singular=names.get("singular") or (names.get("kind") or "").lower(),
            verbs=set(CUSTOM_VERBS),
            shortnames=set(names.get("shortNames") or []),
            categories=set(names.get("categories") or []),
            subresources={"status"} if "status" in (version.get("subresources") or {}) else set(),
        )
        schema = (version.get("schema") or {}).get("openAPIV3Schema")
        out[Resource(spec["group"], version["name"], names["plural"])] = (info, schema)
    return out


# ----------------------------------------------------------------------------- discovery documents
class GroupVersion(TypedDict):
    """``metav1.GroupVersionForDiscovery``."""

    groupVersion: str
    version: str


class Group(TypedDict):
    """The fields of ``metav1.APIGroup`` an ``APIGroupList`` item has."""

    name: str
    versions: list[GroupVersion]
    preferredVersion: GroupVersion


class APIGroup(Group):
    """``/apis/GROUP``: ``metav1.APIGroup``."""

    apiVersion: Literal["v1"]
    kind: Literal["APIGroup"]


class APIVersions(TypedDict):
    """``/api``: ``metav1.APIVersions``."""

    kind: Literal["APIVersions"]
    versions: list[str]


class APIGroupList(TypedDict):
    """``/apis``: ``metav1.APIGroupList``."""

    apiVersion: Literal["v1"]
    kind: Literal["APIGroupList"]
    groups: list[Group]


class APIResource(TypedDict):
    """``metav1.APIResource``."""

    name: str
    singularName: str
    namespaced: bool
    kind: str
    verbs: list[str]
    shortNames: list[str]
    categories: list[str]


class APIResourceList(TypedDict):
    """``/api/v1``, ``/apis/GROUP/VERSION``: ``metav1.APIResourceList``."""

    apiVersion: Literal["v1"]
    kind: Literal["APIResourceList"]
    groupVersion: str
    resources: list[APIResource]


class RootPaths(TypedDict):
    """``/``: ``metav1.RootPaths``."""

    paths: list[str]


#: A discovery document the sandbox serves.
DiscoveryDocument = APIVersions | APIGroupList | APIGroup | APIResourceList | RootPaths


_VERSION_RE = re.compile(r"^v(\d+)(?:(alpha|beta)(\d*))?$")


def version_priority(version: str) -> tuple[int, int, int]:
    """Sort key of a version by the API server's priority (``k8s.io/apimachinery`` ``CompareKubeAwareVersionStrings``):
    GA before beta before alpha, a higher major first, then a higher minor (``v2`` > ``v1`` > ``v1beta2`` >
    ``v1beta1`` > ``v1alpha1``); larger is preferred. Other strings sort last.
    """
    match = _VERSION_RE.match(version)
    if not match:
        return (-1, 0, 0)
    stage = {"alpha": 0, "beta": 1, None: 2}[match.group(2)]
    return (stage, int(match.group(1)), int(match.group(3) or 0))


def _versions(resources: dict[Resource, ResourceInfo], group: str) -> list[str]:
    """The group's versions, preferred first."""
    return sorted({r.version for r in resources if r.group == group}, key=version_priority, reverse=True)


def _group(resources: dict[Resource, ResourceInfo], group: str) -> Group:
    versions = _versions(resources, group)
    listed: list[GroupVersion] = [{"groupVersion": f"{group}/{v}", "version": v} for v in versions]
    return {"name": group, "versions": listed, "preferredVersion": listed[0]}


def api_versions() -> APIVersions:
    """``/api``: the core group's versions."""
    return {"kind": "APIVersions", "versions": ["v1"]}


def api_group_list(resources: dict[Resource, ResourceInfo]) -> APIGroupList:
    """``/apis``: every named group with its versions."""
    groups = sorted({r.group for r in resources if r.group})
    return {"apiVersion": "v1", "kind": "APIGroupList", "groups": [_group(resources, g) for g in groups]}


def api_group(resources: dict[Resource, ResourceInfo], group: str) -> APIGroup | None:
    """``/apis/GROUP``, or None when no resource is in that group."""
    if not _versions(resources, group):
        return None
    found = _group(resources, group)
    return {
        "apiVersion": "v1",
        "kind": "APIGroup",
        "name": found["name"],
        "versions": found["versions"],
        "preferredVersion": found["preferredVersion"],
    }


def api_resource_list(resources: dict[Resource, ResourceInfo], group: str, version: str) -> APIResourceList | None:
    """``/api/v1`` or ``/apis/GROUP/VERSION``: its resources and their subresources, or None when it has none."""
    found = sorted(
        ((r, i) for r, i in resources.items() if (r.group, r.version) == (group, version)), key=lambda ri: ri[0].plural
    )
    if not found:
        return None
    listed: list[APIResource] = []
    for res, info in found:
        for sub in ["", *sorted(info.subresources)]:
            listed.append(
                {
                    "name": f"{res.plural}/{sub}" if sub else res.plural,
                    "singularName": info.singular if not sub else "",
                    "namespaced": info.namespaced,
                    "kind": info.kind,
                    "verbs": sorted(info.verbs),
                    "shortNames": sorted(info.shortnames) if not sub else [],
                    "categories": sorted(info.categories) if not sub else [],
                }
            )
    return {
        "apiVersion": "v1",
        "kind": "APIResourceList",
        "groupVersion": f"{group}/{version}" if group else version,
        "resources": listed,
    }


def root_paths(resources: dict[Resource, ResourceInfo]) -> RootPaths:
    """``/``: the API's paths."""
    paths = {"/api", "/api/v1", "/apis", "/version"}
    for res in resources:
        if res.group:
            paths |= {f"/apis/{res.group}", f"/apis/{res.group}/{res.version}"}
    return {"paths": sorted(paths)}
