"""``--recording FILE``: replay a recording (design.md "Recordings") through the signal computation."""

from __future__ import annotations

from pathlib import Path

from kvpilot.diagnose.sources import SourceError
from kvpilot.metrics.exposition import ExpositionError, Sample
from kvpilot.metrics.recording import read_recording


def load_recording(path: str | Path) -> list[Sample]:
    """Read the samples of a recording file.

    Raises:
        SourceError: the file is missing, unreadable or not a recording (one line, naming the file
            and, for a bad line, its number).
    """
    try:
        return read_recording(Path(path))
    except ExpositionError as exc:
        raise SourceError(f"--recording {path}: not a readable recording: {exc}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise SourceError(
            f"--recording {path}: {exc.strerror if isinstance(exc, OSError) and exc.strerror else exc}"
        ) from None
