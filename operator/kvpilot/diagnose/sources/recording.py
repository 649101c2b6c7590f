"""``--recording FILE``: replay a recording (docs/metrics.md, "Recordings") through the signal computation."""

from __future__ import annotations

from pathlib import Path

from kvpilot.diagnose.sources import SourceError
from kvpilot.metrics.exposition import ExpositionError, Sample
from kvpilot.metrics.recording import read_recording

#: Largest recording read: 32 MiB. A 5-minute ``kvpilot simulate --record`` timeline is under
#: 1 MiB; reading keeps every sample in memory (about 15 bytes of memory per byte of file), so the
#: cap bounds a run to about 500 MiB. Larger files are refused before any byte is read.
MAX_RECORDING_BYTES = 32 * 2**20


def load_recording(path: str | Path) -> list[Sample]:
    """Read the samples of a recording file (at most :data:`MAX_RECORDING_BYTES`).

    Raises:
        SourceError: the file is missing, unreadable, too large or not a recording (one line,
            naming the file and, for a bad line, its number).
    """
    try:
        size = Path(path).stat().st_size
        if size > MAX_RECORDING_BYTES:
            raise SourceError(
                f"--recording {path}: {size / 2**20:.1f} MiB, more than the limit of "
                f"{MAX_RECORDING_BYTES // 2**20} MiB (cut it to the window you want diagnosed)"
            )
        return read_recording(Path(path))
    except ExpositionError as exc:
        raise SourceError(f"--recording {path}: not a readable recording: {exc}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise SourceError(
            f"--recording {path}: {exc.strerror if isinstance(exc, OSError) and exc.strerror else exc}"
        ) from None
