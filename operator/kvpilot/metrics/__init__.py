"""vLLM metrics: the catalog (names, renames, versions), exposition parsing, and recordings.

- :mod:`kvpilot.metrics.catalog` — canonical names, legacy names, ``match_name()``.
- :mod:`kvpilot.metrics.exposition` — :func:`parse_exposition` for any ``/metrics`` body.
- :mod:`kvpilot.metrics.recording` — :func:`write_recording` / :func:`read_recording`.

Import each from its module: the package imports none of them, because the two parsers load
``prometheus_client``, whose package imports ``http.server`` (its exposition serves ``/metrics``),
and the catalog alone needs none of it (``kvpilot simulate``'s report mode reads the catalog's
versions and never parses or serves metrics; docs/performance.md, "CLI start-up").
"""
