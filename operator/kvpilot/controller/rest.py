"""JSON requests the operator makes on every new server, without the ``kubernetes`` client's model layer.

The generated API methods (``CoreV1Api.create_namespaced_pod`` …) validate their arguments with
pydantic's ``validate_call`` and build or walk model objects; for the three writes every new
VLLMServer costs (its Service, its Pod, its status) that is about half of the client-side CPU
of each request (0.7 -> 0.37 ms per create on the benchmark machine, ``docs/performance.md``).
:class:`JsonApi` sends the same requests through the same :class:`kubernetes.client.ApiClient`
(its public ``param_serialize`` and ``call_api``: the same connection pool, authentication,
headers and TLS settings) and returns the JSON the API served, as a dict.

Errors are the client's own: a non-2xx answer raises :class:`kubernetes.client.ApiException`
(``ApiException.from_response``: ``NotFoundException`` for 404, ``ConflictException`` for 409 …,
with ``status``, ``reason``, ``body`` and ``headers``), exactly as the generated methods raise it.

Paths: Kubernetes API conventions, "API resource paths"
(https://kubernetes.io/docs/reference/using-api/api-concepts/#resource-uris).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any
from urllib.parse import quote

import kubernetes.client
from kubernetes.client.exceptions import ApiException

#: ``Content-Type`` of a JSON merge patch (RFC 7386), what ``patch_namespaced_custom_object_status`` sends.
MERGE_PATCH = "application/merge-patch+json"


class JsonApi:
    """POST and merge-PATCH of JSON objects through ``api_client`` (see the module's docstring)."""

    def __init__(self, api_client: kubernetes.client.ApiClient) -> None:
        self.api_client = api_client

    def request(
        self, method: str, path: str, body: dict[str, Any] | None = None, content_type: str = "application/json"
    ) -> dict[str, Any]:
        """``method`` on ``path`` (below the configuration's host) with ``body`` as JSON; the JSON served.

        Raises:
            ApiException: the API's non-2xx answer (the client's subclass for its status).
        """
        headers = {"Accept": "application/json", "Content-Type": content_type}
        serialized = self.api_client.param_serialize(
            method=method, resource_path=path, header_params=headers, body=body, auth_settings=["BearerToken"]
        )
        response = self.api_client.call_api(*serialized)
        read: Callable[[], bytes] = response.read  # the client's RESTResponse.read (unannotated): the body
        data = read()
        if not 200 <= response.status <= 299:
            raise ApiException.from_response(http_resp=response, body=None, data=None)
        served: dict[str, Any] = json.loads(data)
        return served

    def create(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        """POST ``body`` to the collection at ``path`` (e.g. ``/api/v1/namespaces/NS/pods``); the object created."""
        return self.request("POST", path, body)

    def merge_patch(self, path: str, patch: dict[str, Any]) -> dict[str, Any]:
        """JSON-merge-patch the object at ``path`` with ``patch``; the object as patched."""
        return self.request("PATCH", path, patch, MERGE_PATCH)


def core_path(namespace: str, plural: str) -> str:
    """The path of a core (``v1``) namespaced collection: ``/api/v1/namespaces/NS/PLURAL``."""
    return f"/api/v1/namespaces/{_segment(namespace)}/{plural}"


def custom_status_path(group: str, version: str, namespace: str, plural: str, name: str) -> str:
    """The ``status`` subresource of a namespaced custom object: ``/apis/G/V/namespaces/NS/PLURAL/NAME/status``."""
    return f"/apis/{group}/{version}/namespaces/{_segment(namespace)}/{plural}/{_segment(name)}/status"


def _segment(value: str) -> str:
    """``value`` as one path segment (percent-encoded like the generated client encodes path parameters)."""
    return quote(str(value), safe="")
