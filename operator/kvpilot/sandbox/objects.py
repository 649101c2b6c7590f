"""The objects the sandbox stores and serves, as ``TypedDict`` views (pure).

The sandbox keeps every kind alike: an object is its ``apiVersion``, ``kind`` and ``metadata`` (the
fields the API server itself manages), its ``spec`` and ``status`` as the client sent them (``object``:
read through a kind's own view where the sandbox reads them: a Pod's, a CRD's), and whatever other
fields its kind has (a ConfigMap's ``data``), carried unchanged. A CRD's schema is an OpenAPI v3
``JSONSchemaProps`` (``k8s.io/apiextensions-apiserver``), of which the sandbox reads the structural part.
"""

from __future__ import annotations

from typing import TypedDict

from kvpilot.api.objects import ObjectMeta


class StoredObject(TypedDict, total=False):
    """An object of any kind, as stored (the module's docstring)."""

    apiVersion: str
    kind: str
    metadata: ObjectMeta
    spec: object
    status: object


class WatchEvent(TypedDict):
    """A watch event: ``ADDED``, ``MODIFIED``, ``DELETED`` with the object, ``BOOKMARK`` with a bookmark
    (an object of the kind with only ``metadata``), ``ERROR`` with a ``Status`` (an object of kind Status).
    """

    type: str
    object: StoredObject


#: An OpenAPI v3 schema (``JSONSchemaProps``): the structural keywords the sandbox prunes by; validation
#: reads the whole schema (jsonschema). ``x-kubernetes-preserve-unknown-fields`` keeps everything below it.
JSONSchemaProps = TypedDict(
    "JSONSchemaProps",
    {
        "type": str,
        "properties": "dict[str, JSONSchemaProps]",
        "items": "JSONSchemaProps",
        "additionalProperties": "bool | JSONSchemaProps",
        "x-kubernetes-preserve-unknown-fields": bool,
    },
    total=False,
)


class CRDNames(TypedDict, total=False):
    """``CustomResourceDefinitionNames``."""

    plural: str
    singular: str
    kind: str
    shortNames: list[str]
    categories: list[str]


class CRDValidation(TypedDict, total=False):
    """``CustomResourceValidation``."""

    openAPIV3Schema: JSONSchemaProps


class CRDVersion(TypedDict, total=False):
    """``CustomResourceDefinitionVersion``."""

    name: str
    served: bool
    storage: bool
    schema: CRDValidation
    subresources: dict[str, dict[str, str]]


class CRDSpec(TypedDict, total=False):
    """``CustomResourceDefinitionSpec``."""

    group: str
    names: CRDNames
    scope: str
    versions: list[CRDVersion]


class Condition(TypedDict, total=False):
    """A condition (``CustomResourceDefinitionCondition``)."""

    type: str
    status: str
    reason: str
    message: str
    lastTransitionTime: str


class CRDStatus(TypedDict, total=False):
    """``CustomResourceDefinitionStatus``."""

    acceptedNames: CRDNames
    storedVersions: list[str]
    conditions: list[Condition]


class CustomResourceDefinition(TypedDict, total=False):
    """A ``CustomResourceDefinition`` (``apiextensions.k8s.io/v1``)."""

    apiVersion: str
    kind: str
    metadata: ObjectMeta
    spec: CRDSpec
    status: object
