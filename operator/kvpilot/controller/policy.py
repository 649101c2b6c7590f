"""The operator's optional allow-list of images and service accounts. Pure.

Creating a VLLMServer is creating a Pod (docs/security.md): whoever may create one chooses the
image and the service account the pod runs as. A cluster admin can narrow that in the operator's
settings (``kvpilot operator --allowed-image … --allowed-service-account …``, the chart's
``policy.*`` values): a VLLMServer whose pod would run an image or a service account outside the
lists is ``Invalid``, naming the field, and gets no pod. Empty lists (the default) allow anything.

Patterns are shell globs matched against the whole string (:func:`fnmatch.fnmatchcase`: ``*``
matches any run of characters including ``/`` and ``:``), so ``docker.io/vllm/vllm-openai:*``
allows every tag of one repository and ``registry.example.com/*`` a whole registry.

An image is allowed when a pattern matches it as written, or when the pattern, normalised, matches the
image normalised the way the container runtime resolves it (the Docker reference rules of
``github.com/distribution/reference``, ``normalize.go``: a first path component without ``.`` or
``:`` that is not ``localhost`` names no registry, so ``docker.io/`` is meant, and a one-component
name is under ``library/``; an image with neither tag nor digest is ``:latest``). So
``vllm/vllm-openai:v0.33.0`` and ``docker.io/vllm/vllm-openai:v0.33.0`` are the same image to both
``vllm/vllm-openai:*`` and ``docker.io/vllm/vllm-openai:*``. A pattern whose first component holds a
glob character (``*``, ``?``, ``[``) is matched as written only.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from fnmatch import fnmatchcase

from kvpilot.api.objects import Pod


@dataclass(frozen=True)
class SpecPolicy:
    """What the operator lets a VLLMServer's pod run.

    Attributes:
        allowed_images: glob patterns of the container images allowed (empty: any image).
        allowed_service_accounts: glob patterns of the ``spec.serviceAccountName`` values allowed
            (empty: any). A server that names no service account is always allowed: its pod runs
            as the namespace's ``default`` account without a token (``automountServiceAccountToken:
            false``).
    """

    allowed_images: tuple[str, ...] = ()
    allowed_service_accounts: tuple[str, ...] = ()

    @classmethod
    def from_options(cls, images: Iterable[str] = (), service_accounts: Iterable[str] = ()) -> SpecPolicy:
        """A policy from option values; each may hold several patterns separated by commas or spaces."""
        return cls(_patterns(images), _patterns(service_accounts))


def _patterns(values: Iterable[str]) -> tuple[str, ...]:
    return tuple(p for v in values for p in v.replace(",", " ").split() if p)


def _allowed(value: str, patterns: tuple[str, ...]) -> bool:
    return any(fnmatchcase(value, pattern) for pattern in patterns)


def _with_registry(name: str) -> str:
    """``name`` with Docker's default registry and ``library/`` made explicit (distribution/reference's
    ``splitDockerDomain``): ``vllm/x`` -> ``docker.io/vllm/x``, ``ubuntu`` -> ``docker.io/library/ubuntu``;
    a name whose first component is a registry (has ``.`` or ``:``, or is ``localhost``) is unchanged.
    """
    first, sep, rest = name.partition("/")
    if first == "index.docker.io" and sep:  # Docker Hub's legacy name, normalised to docker.io
        return _with_registry(rest)
    if sep and ("." in first or ":" in first or first == "localhost"):
        return name
    return f"docker.io/{name}" if sep else f"docker.io/library/{name}"


def normalized_image(image: str) -> str:
    """The image as the container runtime pulls it: registry explicit (:func:`_with_registry`) and
    ``:latest`` when it has neither tag nor digest (distribution/reference ``TagNameOnly``).
    """
    full = _with_registry(image)
    last = full.rsplit("/", 1)[-1]
    return full if ("@" in last or ":" in last) else f"{full}:latest"


def _image_allowed(image: str, patterns: tuple[str, ...]) -> bool:
    if _allowed(image, patterns):
        return True
    full = normalized_image(image)
    return any(fnmatchcase(full, _with_registry(p)) for p in patterns if not any(c in p.split("/")[0] for c in "*?["))


def violation(policy: SpecPolicy, pod: Pod) -> str | None:
    """The first field of the rendered ``pod`` the policy refuses, as a one-line message naming the
    VLLMServer field (``spec.image: …``), or None when it is allowed.
    """
    spec = pod.get("spec") or {}
    if policy.allowed_images:
        for container in [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]:
            image = str(container.get("image") or "")
            if not _image_allowed(image, policy.allowed_images):
                return (
                    f"spec.image: {image!r} is not among the images this operator allows "
                    f"({', '.join(policy.allowed_images)})"
                )
    account = spec.get("serviceAccountName")
    if policy.allowed_service_accounts and account and not _allowed(str(account), policy.allowed_service_accounts):
        return (
            f"spec.serviceAccountName: {account!r} is not among the service accounts this operator allows "
            f"({', '.join(policy.allowed_service_accounts)})"
        )
    return None
