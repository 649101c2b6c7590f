"""Fetching a model's files from the Hugging Face Hub, bounded in time (the one I/O module of kvpilot.kv).

Used by ``kvpilot kv <hub id>`` and the operator's KV pre-flight: :func:`fetch_file` (one file),
:func:`hub_weights_bytes` (a model's weight bytes, one way for both), :func:`hub_model` (config.json
and weights) and :class:`HubModelCache` (the operator's per-process cache of those lookups).

``huggingface_hub.hf_hub_download`` alone, with the Hub unreachable and nothing cached, retries its
metadata request with backoff (``huggingface_hub/file_download.py``, "No local file found.
Retrying..": ``retry_on_errors=True``, 5 retries waiting 1, 2, 4, 8, 8 s; huggingface_hub 2.4),
about 23 s and ten warnings before it fails. Here one metadata request (``get_hf_file_metadata``,
which does not retry) with a short timeout decides first: unreachable → the local cache, else
:class:`HubUnavailableError` at once.
``HF_HUB_OFFLINE=1`` skips the network entirely (the cache only), as huggingface_hub documents.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from kvpilot.text.documents import MAX_JSON_BYTES, JsonObject, load_json
from kvpilot.text.numbers import fig

#: Seconds one Hub request may take before the Hub counts as unreachable; ``HF_HUB_ETAG_TIMEOUT``
#: (huggingface_hub's own variable for its metadata request, default 10 s there) overrides it.
DEFAULT_HUB_TIMEOUT_SECONDS = 5.0


class HubUnavailableError(Exception):
    """A file could not be had from the Hub nor the local cache; ``str()`` is one short line (why)."""


def hub_timeout() -> float:
    """Seconds per Hub request: ``HF_HUB_ETAG_TIMEOUT`` when set to a positive number, else
    :data:`DEFAULT_HUB_TIMEOUT_SECONDS`.
    """
    try:
        value = float(os.environ.get("HF_HUB_ETAG_TIMEOUT", ""))
    except ValueError:
        return DEFAULT_HUB_TIMEOUT_SECONDS
    return value if value > 0 else DEFAULT_HUB_TIMEOUT_SECONDS


@contextlib.contextmanager
def quiet_hub() -> Iterator[None]:
    """Silence huggingface_hub's warnings (retry notices) while inside; the caller reports one line."""
    hub_logger = logging.getLogger("huggingface_hub")
    level = hub_logger.level
    hub_logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        hub_logger.setLevel(level)


def _why(exc: BaseException, timeout: float) -> str:
    """One short line for a failed Hub request."""
    from huggingface_hub.errors import (
        GatedRepoError,
        HfHubHTTPError,
        OfflineModeIsEnabled,
        RemoteEntryNotFoundError,
        RepositoryNotFoundError,
    )

    if isinstance(exc, OfflineModeIsEnabled):
        return "HF_HUB_OFFLINE is set"
    if isinstance(exc, GatedRepoError):
        return "the repository is gated (set HF_TOKEN)"
    if isinstance(exc, RepositoryNotFoundError):
        return "no such repository (or it is private: set HF_TOKEN)"
    if isinstance(exc, RemoteEntryNotFoundError):
        return "the repository has no such file"
    if isinstance(exc, HfHubHTTPError):
        status = getattr(getattr(exc, "response", None), "status_code", None)
        return f"HTTP {status}" if status else type(exc).__name__
    if isinstance(exc, TimeoutError) or "timeout" in type(exc).__name__.lower():
        return f"no answer within {fig(timeout, 3)} s"
    text = str(exc).splitlines()[0][:120] if str(exc) else ""
    return f"unreachable ({text})" if text else f"unreachable ({type(exc).__name__})"


def fetch_file(repo_id: str, filename: str, *, timeout: float | None = None) -> Path:
    """The local path of ``filename`` of Hub model ``repo_id``, downloaded (or cached).

    Args:
        repo_id: a Hub model id, e.g. ``Qwen/Qwen2.5-1.5B-Instruct``.
        filename: a file of the repository, e.g. ``config.json``.
        timeout: seconds per request (default :func:`hub_timeout`).

    Returns:
        the file's path in the Hugging Face cache (``HF_HOME``).

    Raises:
        HubUnavailableError: the Hub did not answer within ``timeout`` (or refused, or is disabled with
            ``HF_HUB_OFFLINE``) and the file is not cached, or the Hub said no (missing, gated);
            the message is one line. Never retries: it returns within about two ``timeout``s
            (one metadata request, then the download).
    """
    from huggingface_hub import constants, get_hf_file_metadata, hf_hub_download, hf_hub_url

    timeout = hub_timeout() if timeout is None else timeout
    with quiet_hub():
        if constants.is_offline_mode():
            failure: BaseException = _offline()
        else:
            try:
                get_hf_file_metadata(hf_hub_url(repo_id, filename), timeout=timeout)
            except Exception as exc:  # noqa: BLE001 - any failure: try the cache, then one line
                failure = exc
            else:
                try:
                    return Path(hf_hub_download(repo_id=repo_id, filename=filename, etag_timeout=timeout))
                except Exception as exc:  # noqa: BLE001
                    raise HubUnavailableError(_why(exc, timeout)) from None
        try:
            return Path(hf_hub_download(repo_id=repo_id, filename=filename, local_files_only=True))
        except Exception:  # noqa: BLE001 - not cached: report why the Hub failed
            raise HubUnavailableError(_why(failure, timeout)) from None


def _offline() -> BaseException:
    from huggingface_hub.errors import OfflineModeIsEnabled

    return OfflineModeIsEnabled("HF_HUB_OFFLINE")


def hub_weights_bytes(repo_id: str, *, timeout: float | None = None) -> int | None:
    """Weight bytes of Hub model ``repo_id``, the same way for every caller (:mod:`kvpilot.kv.weights`):
    the safetensors index's ``metadata.total_size``, else the Hub's safetensors parameter counts
    times their dtype sizes; None when neither is available (offline and not cached, a ``.bin``
    checkpoint, an unknown dtype). Each request is bounded by ``timeout`` (default :func:`hub_timeout`).
    """
    from kvpilot.kv.weights import weights_from_index, weights_from_parameters

    timeout = hub_timeout() if timeout is None else timeout
    try:
        path = fetch_file(repo_id, "model.safetensors.index.json", timeout=timeout)
        total = weights_from_index(load_json(path.read_text(encoding="utf-8")))  # bounded (kvpilot.text.documents)
    except (HubUnavailableError, OSError, ValueError):  # no index (a single-file checkpoint), offline
        total = None
    if total is not None:
        return total
    from huggingface_hub import HfApi, constants

    if constants.is_offline_mode():
        return None
    try:
        with quiet_hub():
            info = HfApi().model_info(repo_id, timeout=timeout)
    except Exception:  # noqa: BLE001 - any Hub failure: the weights are unknown, the caller says so
        return None
    safetensors = getattr(info, "safetensors", None)
    return weights_from_parameters(getattr(safetensors, "parameters", None))


@dataclass(frozen=True)
class HubModel:
    """What the Hub gave for one model: its ``config.json`` (None when unavailable), its weight bytes
    (None when unknown) and where they came from (or why not), one line.
    """

    config: JsonObject | None
    weights_bytes: int | None
    source: str


def hub_model(repo_id: str) -> HubModel:
    """``config.json`` and :func:`hub_weights_bytes` of Hub model ``repo_id``, each request bounded by
    :func:`hub_timeout` with no retry (``HF_HUB_OFFLINE`` honoured: the local cache only).
    """
    try:
        with open(fetch_file(repo_id, "config.json"), encoding="utf-8") as fh:
            config = load_json(fh.read(MAX_JSON_BYTES + 1))  # bounded: a DocumentError is a ValueError
    except HubUnavailableError as exc:  # offline, gated, unknown model: the caller's condition says so
        return HubModel(None, None, f"the Hub: {exc}")
    except (OSError, ValueError) as exc:
        return HubModel(None, None, f"the Hub: config.json unreadable ({type(exc).__name__})")
    if not isinstance(config, dict):
        return HubModel(None, None, "the Hub: config.json is not a JSON object")
    return HubModel(config, hub_weights_bytes(repo_id), f"the Hub ({repo_id})")


class HubModelCache:
    """:func:`hub_model` per model id, for a long-running process (the operator).

    A model whose ``config.json`` was had is kept for the life of the process (a Hub revision's
    files do not change under a running server); a failure is kept :data:`RETRY_SECONDS` so a
    reconcile loop does not ask an unreachable Hub every time, then asked again.

    Args:
        fetch: how to look a model up (default :func:`hub_model`).
        clock: monotonic seconds (default :func:`time.monotonic`), injectable for tests.
    """

    #: Seconds a failed lookup is kept before the Hub is asked again.
    RETRY_SECONDS = 600.0

    def __init__(
        self, fetch: Callable[[str], HubModel] = hub_model, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._fetch = fetch
        self._clock = clock
        self._entries: dict[str, tuple[float, HubModel]] = {}
        self._lock = threading.Lock()

    def get(self, repo_id: str) -> HubModel:
        """The cached lookup of ``repo_id``, or a fresh one (see the class docstring)."""
        with self._lock:
            entry = self._entries.get(repo_id)
        if entry is not None:
            at, found = entry
            if found.config is not None or self._clock() - at < self.RETRY_SECONDS:
                return found
        found = self._fetch(repo_id)
        with self._lock:
            self._entries[repo_id] = (self._clock(), found)
        return found
