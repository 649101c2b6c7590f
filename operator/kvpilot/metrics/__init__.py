"""vLLM metrics: the catalog (names, renames, versions), exposition parsing, and recordings.

- :mod:`kvpilot.metrics.catalog` — canonical names, legacy names, ``match_name()``, ``name_regex()``.
- :mod:`kvpilot.metrics.exposition` — :func:`parse_exposition` for any ``/metrics`` body.
- :mod:`kvpilot.metrics.recording` — :func:`write_recording` / :func:`read_recording`.
"""

from kvpilot.metrics.exposition import ExpositionError, Sample, parse_exposition
from kvpilot.metrics.recording import read_recording, write_recording

__all__ = ["ExpositionError", "Sample", "parse_exposition", "read_recording", "write_recording"]
