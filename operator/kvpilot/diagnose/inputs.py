"""What ``kvpilot diagnose`` is asked to read, checked before anything is read (pure: no I/O).

:func:`source_from_flags` turns the three source options (``--prometheus URL``, ``--metrics-url URL``,
``--recording FILE``) and the options that only work with one of them into one :class:`Source`, or a
:class:`FlagError` whose message is the one line the command prints as a usage error.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal
from urllib.parse import urlsplit

from kvpilot.diagnose.sources.http import display_url

SourceKind = Literal["prometheus", "metrics_url", "recording"]

#: each source's option and an example of its value
_URL_OPTIONS: tuple[tuple[SourceKind, str, str], ...] = (
    ("prometheus", "--prometheus", "http://127.0.0.1:9090"),
    ("metrics_url", "--metrics-url", "http://127.0.0.1:8000/metrics"),
)


class FlagError(ValueError):
    """Options that do not make a run (or a value one cannot use); the message is one line naming the option."""


@dataclass(frozen=True)
class Source:
    """The one source of a run: a Prometheus base URL, a vLLM /metrics URL or a recording file."""

    kind: SourceKind
    location: str

    @property
    def prometheus(self) -> str:
        """The Prometheus base URL, or ``""``."""
        return self.location if self.kind == "prometheus" else ""

    @property
    def metrics_url(self) -> str:
        """The /metrics URL, or ``""``."""
        return self.location if self.kind == "metrics_url" else ""

    @property
    def recording(self) -> str:
        """The recording's path, or ``""``."""
        return self.location if self.kind == "recording" else ""


def source_from_flags(
    prometheus: str | None,
    metrics_url: str | None,
    recording: str | None,
    *,
    quick: bool = False,
    save_recording: str | None = None,
) -> Source:
    """The run's :class:`Source` from its options.

    Raises:
        FlagError: not exactly one source; ``--quick`` or ``--save-recording`` without ``--metrics-url``; a URL
            that is not http(s) (a missing scheme names the URL meant); a ``--metrics-url`` without a path; a
            ``--prometheus`` that is a /metrics page.
    """
    options: tuple[tuple[SourceKind, str | None], ...] = (
        ("prometheus", prometheus),
        ("metrics_url", metrics_url),
        ("recording", recording),
    )
    given = [Source(kind, value) for kind, value in options if value]
    if len(given) != 1:
        raise FlagError("give exactly one source: --prometheus URL, --metrics-url URL or --recording FILE")
    source = given[0]
    if quick and not source.metrics_url:
        raise FlagError("--quick works with --metrics-url only")
    if save_recording and not source.metrics_url:
        raise FlagError("--save-recording works with --metrics-url only (it saves the scrapes)")
    for kind, option, example in _URL_OPTIONS:
        if source.kind == kind:
            check_url(option, source.location, example)
    if source.metrics_url:
        check_metrics_path(source.metrics_url)
    if source.prometheus:
        check_prometheus_path(source.prometheus)
    return source


def check_url(option: str, url: str, example: str) -> None:
    """Refuse ``url`` unless it is ``http(s)://host...``; a ``host[:port][/path]`` without its scheme is told the
    URL it likely meant (credentials never shown).

    Raises:
        FlagError: ``--prometheus 'prom:9090': not an http(s) URL; did you mean http://prom:9090?``.
    """
    if re.match(r"^https?://[^/\s]+", url):
        return
    if "://" not in url and re.match(r"^[\w.-]+(:\d+)?(/\S*)?$", url.split("@")[-1]):
        meant = display_url("http://" + url)  # host[:port][/path] without its scheme (credentials dropped)
        raise FlagError(f"{option} {meant[7:]!r}: not an http(s) URL; did you mean {meant}?")
    raise FlagError(f"{option} {display_url(url)!r}: not an http(s) URL (example: {example})")


def check_metrics_path(url: str) -> None:
    """Refuse a ``--metrics-url`` without a path: vLLM serves its metrics at /metrics."""
    if urlsplit(url).path in ("", "/"):
        shown = display_url(url)
        raise FlagError(
            f"--metrics-url {shown!r} has no path: vLLM serves its metrics at /metrics "
            f"(try {shown.rstrip('/')}/metrics)"
        )


def check_prometheus_path(url: str) -> None:
    """Refuse a ``--prometheus`` URL ending in /metrics: a server's own exposition page, not a Prometheus API base
    (whose queries live under /api/v1).
    """
    if urlsplit(url).path.rstrip("/").endswith("/metrics"):
        shown = display_url(url)
        raise FlagError(
            f"--prometheus {shown!r} ends in /metrics, a metrics page, not a Prometheus server: to read it, "
            f"use --metrics-url {shown}; for Prometheus, give its base URL (example: http://127.0.0.1:9090)"
        )


def window_note(window_text: object) -> str | None:
    """The report's note when ``--window`` was typed as a bare number (read as seconds), else None."""
    if isinstance(window_text, str) and re.fullmatch(r"\s*\d+(\.\d+)?\s*", window_text):
        return f"--window {window_text.strip()} read as {window_text.strip()} seconds (write 5m for minutes)."
    return None
