"""Bounded HTTP GETs for diagnose's sources: one deadline for the whole request, one size cap.

``requests`` bounds each socket read (``timeout=``), not a request: a server trickling one byte
every 2 s keeps a ``requests.get`` alive forever, and ``response.text`` reads any body whole. Here
every GET has

- a **whole-request deadline** (connect + headers + body): aiohttp's ``ClientTimeout(total=...)``
  (https://docs.aiohttp.org/en/stable/client_quickstart.html#timeouts), so a trickle, a hang or an
  endless body ends at the deadline;
- a **size cap** on the *decompressed* body, counted while it streams in 64 KiB chunks (aiohttp
  inflates ``Content-Encoding: gzip`` as it reads, so a gzip bomb stops at the cap, not in memory).

With a ``sink`` the body is handed on chunk by chunk as it arrives instead of being kept (the
Prometheus source decodes its answers that way, :mod:`kvpilot.diagnose.sources.vector`).

Credentials never travel in a URL kvpilot prints: :func:`split_credentials` takes the userinfo out
of ``http://user:password@host`` and turns it into the ``Authorization: Basic`` header it stands
for (RFC 3986 section 3.2.1 deprecates ``user:password`` in a URI; RFC 7617 basic auth), so the
URL in reports, errors, answers and logs is the bare one; :func:`basic_authorization` and
:func:`bearer_authorization` build the headers ``--prometheus-basic-auth-file`` and
``--prometheus-bearer-token-file`` send, as Prometheus' own ``basic_auth``/``authorization``
client settings do.
"""

from __future__ import annotations

import asyncio
import base64
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from urllib.parse import unquote, urlsplit, urlunsplit

import aiohttp
import requests

from kvpilot.text.numbers import fig

#: Largest Prometheus answer read (decompressed): 64 MiB is about 250,000 instant-vector rows
#: of vLLM's label sets (~250 bytes a row), far beyond a cluster's vLLM servers.
MAX_PROMETHEUS_BYTES = 64 * 2**20
#: Largest ``/metrics`` body read (decompressed): vLLM's own body is tens of KiB (a server with
#: many LoRA adapters or long histograms a few MiB).
MAX_SCRAPE_BYTES = 16 * 2**20
#: Most rows (series) one Prometheus signal answer may hold (one row per target): 50,000 targets.
#: A larger answer is refused with a message to narrow the selection (every target's signals and
#: report are kept: about 25 KiB each, docs/performance.md).
MAX_PROMETHEUS_ROWS = 50_000
#: Rows per target a histogram-bucket answer may hold (one per target and ``le``): its row and byte
#: bounds are this many times the signal answer's, for the same 50,000 targets. vLLM 0.29's
#: histograms that diagnose reads have 14-23 buckets (``vllm/v1/metrics/loggers.py``).
MAX_HISTOGRAM_BUCKETS = 40
_CHUNK = 64 * 2**10


_USERINFO_RE = re.compile(r"^([A-Za-z][A-Za-z0-9+.\-]*://)[^/?#]*@")


def split_credentials(url: str) -> tuple[str, str | None]:
    """``url`` without its userinfo, and the ``Authorization`` value that userinfo stood for.

    ``http://alice:p%40ss@prometheus:9090/x`` -> ``("http://prometheus:9090/x", "Basic YWxpY2U6cEBzcw==")``
    (user and password percent-decoded, RFC 3986); a URL without userinfo comes back as it is, with None.
    A text that is not a URL is returned unchanged.
    """
    try:
        parts = urlsplit(url)
    except ValueError:  # e.g. an unclosed "[": cut whatever precedes an "@" in the authority all the same
        return _USERINFO_RE.sub(r"\1", url), None
    userinfo, at, host = parts.netloc.rpartition("@")
    if not at:
        return url, None
    user, _, password = userinfo.partition(":")
    bare = urlunsplit((parts.scheme, host, parts.path, parts.query, parts.fragment))
    return bare, basic_authorization(unquote(user), unquote(password))


def display_url(url: str) -> str:
    """``url`` as kvpilot prints it: without userinfo (:func:`split_credentials`)."""
    return split_credentials(url)[0]


def basic_authorization(user: str, password: str) -> str:
    """The ``Authorization`` value of HTTP basic auth (RFC 7617): ``Basic base64(user:password)``, UTF-8."""
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode("ascii")


def bearer_authorization(token: str) -> str:
    """The ``Authorization`` value of a bearer token (RFC 6750): ``Bearer <token>``."""
    return f"Bearer {token}"


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


class _SinkError(Exception):
    """An exception raised by a body sink, carried through the HTTP client's own handling."""

    def __init__(self, original: BaseException) -> None:
        super().__init__(str(original))
        self.original = original


async def _fetch(
    url: str,
    params: Mapping[str, str] | None,
    headers: dict[str, str] | None,
    deadline: float,
    max_bytes: int,
    sink: Callable[[bytes], None] | None = None,
) -> Fetched:
    timeout = aiohttp.ClientTimeout(total=deadline)
    async with (
        aiohttp.ClientSession(timeout=timeout, auto_decompress=True, trust_env=True) as session,
        session.get(url, params=params, headers=headers, allow_redirects=True, max_redirects=5) as response,
    ):
        body = bytearray()
        streamed = 0
        streaming = sink is not None and response.status == 200
        async for chunk in response.content.iter_chunked(_CHUNK):
            if streaming:
                streamed += len(chunk)
                if streamed > max_bytes:
                    raise ResponseTooLargeError(f"answer larger than {max_bytes / 2**20:g} MiB (the limit)")
                try:
                    sink(chunk)  # type: ignore[misc]
                except Exception as exc:  # noqa: BLE001 - the sink's own error, re-raised by fetch()
                    raise _SinkError(exc) from None
                continue
            body += chunk
            if len(body) > max_bytes:
                body.clear()  # the exception's traceback keeps this frame: release the bytes now
                raise ResponseTooLargeError(f"answer larger than {fig(max_bytes / 2**20, 3)} MiB (the limit)")
        return Fetched(response.status, dict(response.headers), bytes(body))


def fetch(
    url: str,
    *,
    params: Mapping[str, str] | None = None,
    headers: dict[str, str] | None = None,
    deadline: float = 10.0,
    max_bytes: int = MAX_SCRAPE_BYTES,
    sink: Callable[[bytes], None] | None = None,
) -> Fetched:
    """GET ``url``: the whole request within ``deadline`` seconds, at most ``max_bytes`` of body.

    With ``sink``, a 200 answer's body goes to ``sink(chunk)`` as it arrives and is not kept
    (``Fetched.body`` is empty); an exception ``sink`` raises ends the request and is raised as it is.
    Other statuses keep their body (an error message) as without ``sink``.

    Raises:
        DeadlineExceededError: not finished within ``deadline`` (connect, headers and body together).
        ResponseTooLargeError: the decompressed body exceeds ``max_bytes``.
        requests.ConnectionError: connection refused, unknown host, a broken or invalid answer.
    """
    if deadline <= 0:
        raise DeadlineExceededError("no time left in the run's deadline")
    try:
        return asyncio.run(_fetch(url, params, headers, deadline, max_bytes, sink))
    except _SinkError as exc:
        raise exc.original from None
    except TimeoutError:
        raise DeadlineExceededError(f"timed out: no complete answer within {fig(deadline, 3)} s") from None
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
