"""Bounded HTTP GETs for diagnose's sources: one deadline for the whole request, one size cap.

``requests`` bounds each socket read (``timeout=``), not a request: a server trickling one byte
every 2 s keeps a ``requests.get`` alive forever, and ``response.text`` reads any body whole. Here
every GET has

- a **whole-request deadline** (connect + headers + body): aiohttp's ``ClientTimeout(total=...)``
  (https://docs.aiohttp.org/en/stable/client_quickstart.html#timeouts), so a trickle, a hang or an
  endless body ends at the deadline;
- a **size cap** on the *decompressed* body, counted while it streams in 64 KiB chunks (aiohttp
  inflates ``Content-Encoding: gzip`` as it reads, so a gzip bomb stops at the cap, not in memory).

:class:`BoundedSession` makes these GETs look like ``requests.Session.request`` so that
``prometheus-api-client`` keeps doing the Prometheus HTTP API (parameters, status handling, JSON).
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any

import aiohttp
import requests
import requests.structures

#: Largest Prometheus answer read (decompressed): 64 MiB is about 250,000 instant-vector rows
#: of vLLM's label sets (~250 bytes a row), far beyond a cluster's vLLM servers.
MAX_PROMETHEUS_BYTES = 64 * 2**20
#: Largest ``/metrics`` body read (decompressed): vLLM's own body is tens of KiB (a server with
#: many LoRA adapters or long histograms a few MiB).
MAX_SCRAPE_BYTES = 16 * 2**20
#: Most rows (series) one Prometheus answer may hold, counted in the raw JSON before it is parsed:
#: 50,000 is 50,000 targets for a gauge query or about 2,500 targets for a histogram-bucket query
#: (20 buckets each). A larger answer is refused with a message to narrow the selection (each row
#: costs about 1 KiB parsed, and every target's signals and report are kept).
MAX_PROMETHEUS_ROWS = 50_000
_CHUNK = 64 * 2**10


class ResponseTooLargeError(requests.RequestException):
    """A body over its cap (a ``requests.RequestException``, so callers' handlers see it)."""


class DeadlineExceededError(requests.Timeout):
    """The whole request did not finish within its deadline (a ``requests.Timeout``)."""


@dataclass
class Fetched:
    """One answer: HTTP status, headers, the (decompressed) body."""

    status: int
    headers: dict[str, str]
    body: bytes


async def _fetch(
    url: str, params: dict[str, Any] | None, headers: dict[str, str] | None, deadline: float, max_bytes: int
) -> Fetched:
    timeout = aiohttp.ClientTimeout(total=deadline)
    async with (
        aiohttp.ClientSession(timeout=timeout, auto_decompress=True, trust_env=True) as session,
        session.get(url, params=params, headers=headers, allow_redirects=True, max_redirects=5) as response,
    ):
        body = bytearray()
        async for chunk in response.content.iter_chunked(_CHUNK):
            body += chunk
            if len(body) > max_bytes:
                body.clear()  # the exception's traceback keeps this frame: release the bytes now
                raise ResponseTooLargeError(f"answer larger than {max_bytes / 2**20:g} MiB (the limit)")
        return Fetched(response.status, dict(response.headers), bytes(body))


def fetch(
    url: str,
    *,
    params: dict[str, Any] | None = None,
    headers: dict[str, str] | None = None,
    deadline: float = 10.0,
    max_bytes: int = MAX_SCRAPE_BYTES,
) -> Fetched:
    """GET ``url``: the whole request within ``deadline`` seconds, at most ``max_bytes`` of body.

    Raises:
        DeadlineExceededError: not finished within ``deadline`` (connect, headers and body together).
        ResponseTooLargeError: the decompressed body exceeds ``max_bytes``.
        requests.ConnectionError: connection refused, unknown host, a broken or invalid answer.
    """
    if deadline <= 0:
        raise DeadlineExceededError("no time left in the run's deadline")
    try:
        return asyncio.run(_fetch(url, params, headers, deadline, max_bytes))
    except TimeoutError:
        raise DeadlineExceededError(f"timed out: no complete answer within {deadline:g} s") from None
    except aiohttp.ClientConnectorError as exc:
        raise requests.ConnectionError(_connector_reason(exc)) from None
    except (aiohttp.ClientError, ValueError) as exc:  # a malformed answer, a broken connection, a bad URL
        raise requests.ConnectionError(f"{type(exc).__name__}: {exc}") from None


def _connector_reason(exc: aiohttp.ClientConnectorError) -> str:
    os_error = getattr(exc, "os_error", None)
    text = str(os_error or exc)
    if isinstance(os_error, ConnectionRefusedError) or "refused" in text.lower():
        return "Connection refused"
    return text


class BoundedSession(requests.Session):
    """A ``requests.Session`` whose GETs go through :func:`fetch` (deadline and size cap).

    Args:
        max_bytes: the body cap of every request.
        max_rows: the most ``"metric"`` keys (instant-vector rows) an answer may hold; None for no cap.
        run_deadline: a ``time.monotonic()`` instant no request may outlive (the run's overall
            deadline); None for none.

    Only what ``prometheus-api-client``'s ``custom_query`` uses is supported: GET with ``params``,
    ``headers`` and ``timeout`` (seconds, the whole-request deadline); TLS options are ignored
    beyond aiohttp's defaults (system CA bundle, verification on).
    """

    def __init__(self, max_bytes: int, run_deadline: float | None = None, max_rows: int | None = None) -> None:
        super().__init__()
        self.max_bytes = max_bytes
        self.run_deadline = run_deadline
        self.max_rows = max_rows

    def request(self, method: str | bytes, url: str | bytes, *args: Any, **kwargs: Any) -> requests.Response:
        """GET ``url`` bounded (see the class); other methods are refused (diagnose is read-only)."""
        method = method.decode() if isinstance(method, bytes) else method
        url = url.decode() if isinstance(url, bytes) else url
        if method.upper() != "GET":
            raise requests.RequestException(f"{method} refused: diagnose only reads")
        timeout = kwargs.get("timeout") or 10.0
        if isinstance(timeout, tuple):
            timeout = sum(t for t in timeout if t)
        deadline = float(timeout)
        if self.run_deadline is not None:
            deadline = min(deadline, self.run_deadline - time.monotonic())
        fetched = fetch(
            url, params=kwargs.get("params"), headers=kwargs.get("headers"), deadline=deadline, max_bytes=self.max_bytes
        )
        if self.max_rows is not None and fetched.status == 200:
            rows = fetched.body.count(b'"metric"')
            if rows > self.max_rows:
                raise ResponseTooLargeError(
                    f"answer with {rows:,} series, more than the limit of {self.max_rows:,}: "
                    "narrow the selection (--namespace, --server, --pod, --model-name)"
                )
        response = requests.Response()
        response.status_code = fetched.status
        response.headers = requests.structures.CaseInsensitiveDict(fetched.headers)
        response._content = fetched.body
        response.url = url
        response.encoding = "utf-8"
        return response
