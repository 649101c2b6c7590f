"""``--metrics-url URL``: scrape a vLLM ``/metrics`` endpoint repeatedly over the window (read-only GETs).

Each scrape's samples get the scrape time as timestamp, so the samples of all scrapes form a
timeline the same :func:`kvpilot.diagnose.signals.compute_signals` reads as a recording.
``--quick`` takes two scrapes a few seconds apart instead (rates over seconds, gauges as two
points; the report says so).
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from urllib.parse import urlsplit, urlunsplit

import requests

from kvpilot.diagnose.sources import SourceError, request_failure_reason
from kvpilot.diagnose.sources.http import MAX_SCRAPE_BYTES, display_url, fetch, split_credentials
from kvpilot.metrics.exposition import ExpositionError, Sample, parse_exposition

#: Most lines one scrape may have (checked before parsing): vLLM's /metrics holds about a
#: thousand lines per served model (its histograms' buckets included), so 50,000 leaves room for
#: many engines and LoRA adapters while a 100,000-series body is refused in milliseconds.
MAX_SCRAPE_LINES = 50_000
#: Accept header: what Prometheus 3.x asks for (OpenMetrics 1.0.0 with ``escaping=allow-utf-8``, then
#: OpenMetrics 0.0.1, the text format 1.0.0 and 0.0.4), so names arrive as a current Prometheus stores
#: them: the server's own, colons kept. prometheus_client (vLLM's exporter) honours the first media type
#: it knows, whatever its q, and from 0.22 escapes ``:`` to ``_`` when OpenMetrics comes without
#: ``escaping=`` (``prometheus_client.exposition.choose_encoder``): the header Prometheus 2.x sends, and
#: the one this module sent before, which made every target look renamed (docs/metrics.md, "Escaping").
ACCEPT = (
    "application/openmetrics-text;version=1.0.0;escaping=allow-utf-8;q=0.6,"
    "application/openmetrics-text;version=0.0.1;q=0.5,"
    "text/plain;version=1.0.0;escaping=allow-utf-8;q=0.4,"
    "text/plain;version=0.0.4;q=0.3,*/*;q=0.1"
)


def scrape_once(url: str, timeout: float = 10.0, run_deadline: float | None = None) -> str:
    """GET ``url`` once and return the body (decoded as UTF-8, undecodable bytes replaced).

    Userinfo in ``url`` (``http://user:password@host``) is sent as basic auth and left out of every
    message. The whole request (connect, headers, body) must finish within ``timeout`` seconds and before
    ``run_deadline`` (a ``time.monotonic()`` instant); the decompressed body may be at most
    :data:`~kvpilot.diagnose.sources.http.MAX_SCRAPE_BYTES` (:mod:`kvpilot.diagnose.sources.http`).

    Raises:
        SourceError: connection refused, deadline passed, body too large, or a non-200 answer (one line).
    """
    deadline = timeout if run_deadline is None else min(timeout, run_deadline - time.monotonic())
    bare, authorization = split_credentials(url)  # userinfo is sent as basic auth, never printed
    headers = {"Accept": ACCEPT} | ({"Authorization": authorization} if authorization else {})
    try:
        fetched = fetch(bare, headers=headers, deadline=deadline, max_bytes=MAX_SCRAPE_BYTES)
    except requests.RequestException as exc:
        raise SourceError(f"--metrics-url {bare}: {request_failure_reason(exc, deadline)}") from None
    if fetched.status != 200:
        raise SourceError(f"--metrics-url {bare}: HTTP {fetched.status}")
    return fetched.body.decode("utf-8", errors="replace")


def scrape_series(
    url: str,
    window_seconds: float,
    interval_seconds: float = 5.0,
    quick: bool = False,
    quick_gap_seconds: float = 3.0,
    timeout: float = 10.0,
    clock: Callable[[], float] = time.time,
    sleep: Callable[[float], None] = time.sleep,
    run_deadline: float | None = None,
    bodies: list[tuple[float, str]] | None = None,
    progress: Callable[[int, int, float], None] | None = None,
) -> tuple[list[Sample], int]:
    """Scrape ``url`` every ``interval_seconds`` for ``window_seconds`` (or twice when ``quick``).

    Args:
        url: the ``/metrics`` URL.
        window_seconds: how long to scrape (seconds); the number of scrapes is
            ``floor(window / interval) + 1``, at least 2.
        interval_seconds: seconds between scrapes.
        quick: two scrapes ``quick_gap_seconds`` apart.
        quick_gap_seconds: seconds between the two quick scrapes.
        timeout: seconds for each whole scrape (connect + headers + body).
        clock: the wall clock (seconds), injectable for tests.
        sleep: how to wait (seconds), injectable for tests.
        run_deadline: ``time.monotonic()`` instant after which no scrape starts or continues
            (the run's overall deadline); None for none.
        bodies: when given, each scrape's ``(time, body)`` is appended to it (``--save-recording``).
        progress: called after each scrape with (scrapes done, scrapes in all, seconds until the last).

    Returns:
        ``(samples, scrapes)``: all samples, each stamped with its scrape's time (Unix seconds).

    Raises:
        SourceError: the first scrape fails (later failures end the series early), or a body is
            not Prometheus text/OpenMetrics.
    """
    count = 2 if quick else max(2, int(window_seconds // interval_seconds) + 1)
    gap = quick_gap_seconds if quick else interval_seconds
    samples: list[Sample] = []
    done = 0
    first = clock()
    for i in range(count):
        # stamped at Prometheus's resolution, a millisecond, as a saved recording stores it: the live window
        # and the recording read again select the same scrapes
        started = round(clock(), 3)
        if run_deadline is not None and time.monotonic() >= run_deadline:
            break
        try:
            body = scrape_once(url, timeout, run_deadline)
        except SourceError:
            if i == 0:
                raise
            break
        lines = body.count("\n")
        if lines > MAX_SCRAPE_LINES:
            raise SourceError(
                f"--metrics-url {display_url(url)}: {lines:,} lines in one scrape, more than the limit of "
                f"{MAX_SCRAPE_LINES:,} (a vLLM server exposes about a thousand per model)"
            )
        try:
            samples.extend(parse_exposition(body, default_timestamp=started))
        except ExpositionError as exc:
            raise SourceError(f"--metrics-url {display_url(url)}: not Prometheus text or OpenMetrics: {exc}") from None
        if bodies is not None:
            bodies.append((started, body))
        done += 1
        if progress is not None:
            progress(done, count, (count - done) * gap)
        if i < count - 1:  # on a fixed schedule from the first scrape: no drift, so the window holds every scrape
            sleep(max(0.0, first + (i + 1) * gap - clock()))
    return samples, done


#: Largest ``/version`` answer read: vLLM's is ``{"version": "0.32.0"}``, a few dozen bytes.
MAX_VERSION_BYTES = 4096
_VERSION = re.compile(r"\d+\.\d+(\.\d+)?([.+-][0-9A-Za-z.+-]{1,40})?")


def server_version(metrics_url: str, timeout: float = 5.0) -> str | None:
    """The vLLM version the server at ``metrics_url`` reports (``GET /version`` on the same origin), or None.

    vLLM's OpenAI server answers ``{"version": "0.32.0"}`` there (``vllm/entrypoints/serve/instrumentator/
    basic.py``, v0.32.0). Best effort and bounded: any failure, a non-200 answer, more than
    :data:`MAX_VERSION_BYTES`, or text that is not a version is None, never an error.
    """
    bare, authorization = split_credentials(metrics_url)
    parts = urlsplit(bare)
    url = urlunsplit((parts.scheme, parts.netloc, "/version", "", ""))
    headers = {"Accept": "application/json"} | ({"Authorization": authorization} if authorization else {})
    try:
        fetched = fetch(url, headers=headers, deadline=timeout, max_bytes=MAX_VERSION_BYTES)
        doc = json.loads(fetched.body) if fetched.status == 200 else None
    except (requests.RequestException, ValueError):
        return None
    version = doc.get("version") if isinstance(doc, dict) else None
    if isinstance(version, str) and _VERSION.fullmatch(version):
        return version
    return None
