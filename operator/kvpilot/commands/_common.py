"""Helpers shared by the CLI command modules: one-line errors, size parsing, listen addresses."""

from __future__ import annotations

import io
import math
import re
import sys
from typing import Any, NoReturn, TextIO, cast

import click

from kvpilot.text.errors import InputError, InvalidValueError

EXIT_BAD_INPUT = 2

_SIZE_RE = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*([KMGT]i?B?|[KMGT]|B)?\s*$", re.IGNORECASE)
_UNITS = {
    "": 1,
    "b": 1,
    "k": 1000,
    "kb": 1000,
    "m": 1000**2,
    "mb": 1000**2,
    "g": 1000**3,
    "gb": 1000**3,
    "t": 1000**4,
    "tb": 1000**4,
    "ki": 2**10,
    "kib": 2**10,
    "mi": 2**20,
    "mib": 2**20,
    "gi": 2**30,
    "gib": 2**30,
    "ti": 2**40,
    "tib": 2**40,
}


def listen_address(text: str, option: str, port_only_host: str, empty_host: str) -> tuple[str, int]:
    """``HOST:PORT`` or ``PORT`` (a socket address to listen on) -> ``(host, port)``; port 0 lets the OS choose.

    ``PORT`` alone listens on ``port_only_host``, ``:PORT`` on ``empty_host``. A URL
    (``http://0.0.0.0:8080``) is refused naming the ``HOST:PORT`` it holds: its scheme would otherwise be
    taken for part of the host name, which no resolver knows.

    Raises:
        InvalidValueError: naming ``option`` and the value.
    """
    from urllib.parse import urlsplit

    text = str(text)
    if "://" in text:
        try:
            meant = urlsplit(text).netloc.rpartition("@")[2]
        except ValueError:
            meant = ""
        hint = f"did you mean {meant}?" if meant else "example: 127.0.0.1:8123"
        raise InvalidValueError(option, f"{text!r} is a URL; {option} takes HOST:PORT or PORT ({hint})")
    host, sep, port = text.rpartition(":")
    if not sep:
        host = port_only_host
    host = host.strip("[]") or empty_host
    if not port.isdigit() or not 0 <= int(port) <= 65535:
        raise InvalidValueError(option, f"{text!r} is not HOST:PORT or PORT (example: 127.0.0.1:8123)")
    return host, int(port)


def fail(message: str, code: int = EXIT_BAD_INPUT) -> NoReturn:
    """Print ``kvpilot: error: <message>`` on one line to stderr and exit with ``code``.

    The message is made safe first (:func:`kvpilot.text.safe.one_line`): it often quotes input
    (a file's text, a server's answer), so terminal control characters are removed and secrets redacted.
    """
    from kvpilot.text.safe import one_line  # here: a command that succeeds never compiles its patterns

    click.echo(f"kvpilot: error: {one_line(message)}", err=True)
    sys.exit(code)


def fail_input(error: InputError, file: str | None = None) -> NoReturn:
    """Refuse bad input, the one way every command does: ``kvpilot: error: [FILE: ]<field>: <message>`` on one
    line to stderr, exit 2.

    ``error`` is any :class:`~kvpilot.text.errors.InputError` (``SpecError``, ``KVConfigError``,
    ``DocumentError``, ``InvalidValueError``); ``file`` names the input it came from when there is one (the file as
    the user typed it, ``server.yaml (document 2)``, ``--scenario-file x.yaml``), so the line says which file
    and which field. Click's own usage errors (a bad option value, exit 2 with the usage) are left to click.
    """
    fail(f"{file}: {error}" if file else str(error))


def read_input(path: str, limit: int, what: str | None = None) -> str:
    """The UTF-8 text of file ``path`` (``-``: stdin), at most ``limit`` bytes; exits 2 otherwise, the
    message starting with ``what`` (an option's name, ``CONFIG``) when given.

    Reads ``limit + 1`` bytes at most, so a file that is too large (or endless, ``/dev/zero``) costs no
    more memory than the bound. Bounds: :mod:`kvpilot.text.documents` (``MAX_YAML_BYTES``, ``MAX_JSON_BYTES``).
    """
    prefix = f"{what}: " if what else ""
    try:
        if path == "-":
            data = sys.stdin.buffer.read(limit + 1)
        else:
            with open(path, "rb") as fh:
                data = fh.read(limit + 1)
    except OSError as exc:
        fail(f"{prefix}cannot read {path}: {exc.strerror or exc}")
    if len(data) > limit:
        fail(f"{prefix}cannot read {path}: larger than {limit:,} bytes (the bound for this file)")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        fail(f"{prefix}cannot read {path}: not UTF-8 text (byte {exc.start}: {exc.reason})")


def parse_size(text: str, field: str = "size", require_unit: bool = False) -> int:
    """Parse a size such as ``1.5GiB``, ``512MiB``, ``16GB`` or ``1073741824`` into bytes.

    ``GiB``/``MiB``/``KiB``/``Gi`` are powers of 2 (GiB = 2**30 bytes); ``GB``/``MB``/``G`` are
    powers of 10, as Kubernetes quantities and vLLM's docs use them.

    Raises:
        InvalidValueError: naming ``field`` when the text is not a non-negative size.
    """
    m = _SIZE_RE.match(str(text))
    if not m:
        raise InvalidValueError(field, f"{text!r} is not a size (examples: 1.5GiB, 512MiB, 16GB)")
    number, unit = m.groups()
    if require_unit and not unit:
        raise InvalidValueError(
            field,
            f"{text!r} has no unit; a memory size in bytes is never meant here (write e.g. {text}GiB or {text}GB)",
        )
    value = float(number) * _UNITS[(unit or "").lower()]
    if not math.isfinite(value):  # e.g. 400 digits: float("9" * 400) is inf
        raise InvalidValueError(field, f"{text[:40]!r}{'...' if len(text) > 40 else ''} is too large to be a size")
    return int(round(value))


def _message_once(exc: InputError, param: click.Parameter | None) -> str:
    """The message of a parser's error, for ``ParamType.fail``: click already names the option
    ("Invalid value for '--window': ..."), so the error's own field is dropped there.
    """
    return exc.message if param is not None else str(exc)


def _option_name(param: click.Parameter | None, default: str) -> str:
    """The option as the user typed it (``--kv-offload-cpu``), not its Python name (``kv_offload_cpu_bytes``);
    ``default`` when there is no option (a direct ``convert`` call).
    """
    return max(param.opts, key=len) if param is not None and param.opts else default


#: Prometheus' duration units up to days (``ms``, ``s``, ``m``, ``h``, ``d``; Prometheus docs, "Time durations"),
#: one number each; a bare number is seconds.
_DURATION_RE = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*(ms|s|m|h|d)?\s*$")
_DURATION_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, None: 1.0}


def parse_duration(text: str, field: str) -> float:
    """``"90"``, ``"90s"``, ``"10m"``, ``"1.5h"``, ``"1d"``, ``"500ms"`` -> seconds (> 0); one syntax for every command.

    Raises:
        InvalidValueError: naming ``field`` when the text is not a positive, finite duration.
    """
    m = _DURATION_RE.match(str(text))
    if not m or float(m.group(1)) <= 0:
        raise InvalidValueError(field, f"{text!r} is not a positive duration (examples: 600, 90s, 10m, 1h, 1d)")
    seconds = float(m.group(1)) * _DURATION_UNITS[m.group(2)]
    if not math.isfinite(seconds):  # 400 digits overflow a float to inf
        shown = str(text) if len(str(text)) <= 40 else str(text)[:37] + "..."
        raise InvalidValueError(field, f"{shown!r} is not a finite duration")
    return seconds


class DurationParam(click.ParamType):  # type: ignore[type-arg]  # generic in new click, not in 8.1 (allowed)
    """click parameter type for durations (seconds), see :func:`parse_duration`."""

    name = "duration"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> float:
        """Click's hook (overrides ``ParamType.convert``): seconds, or a usage error naming the option."""
        if isinstance(value, (int, float)):
            return float(value)
        field = _option_name(param, "duration")
        try:
            return parse_duration(value, field)
        except InvalidValueError as exc:
            self.fail(_message_once(exc, param), param, ctx)


DURATION = DurationParam()


class SizeParam(click.ParamType):  # type: ignore[type-arg]  # generic in new click, not in 8.1 (allowed)
    """click parameter type for sizes (bytes), see :func:`parse_size`; ``require_unit`` refuses bare numbers."""

    name = "size"

    def __init__(self, require_unit: bool = False) -> None:
        self.require_unit = require_unit

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> int:
        """Click's hook (overrides ``ParamType.convert``): bytes, or a usage error naming the option."""
        if isinstance(value, int):
            return value
        field = _option_name(param, "size")
        try:
            return parse_size(value, field=field, require_unit=self.require_unit)
        except InvalidValueError as exc:
            self.fail(_message_once(exc, param), param, ctx)


SIZE = SizeParam()
#: a memory size that must carry its unit (``10`` is refused: 10 bytes is never a GPU's or a KV pool's size)
MEMORY_SIZE = SizeParam(require_unit=True)


def read_secret_file(path: str, field: str = "") -> str:
    """The secret a file holds (a token, ``USER:PASSWORD``): its UTF-8 text, surrounding whitespace removed.

    Raises:
        InvalidValueError: naming ``field`` (the option that named the file; none when ``""``) when the file cannot
            be read, is not UTF-8 or holds only whitespace (the message names the file, never its content).
    """
    try:
        with open(path, encoding="utf-8") as fp:  # not pathlib: kept out of every command's start-up
            value = fp.read().strip()
    except UnicodeDecodeError:
        raise InvalidValueError(field, f"{path} is not UTF-8 text") from None
    except OSError as exc:
        raise InvalidValueError(field, f"cannot read {path}: {exc.strerror or type(exc).__name__}") from None
    if not value:
        raise InvalidValueError(field, f"{path} is empty")
    return value


class TrimmedLines(io.TextIOBase):
    """A text stream that writes each line to ``stream`` without its trailing spaces: rich pads a table's cells to
    the console's width, which a pipe or a file would keep (``grep 'x$'`` misses, diffs show noise).

    Its methods override ``io.TextIOBase``'s (not marked ``@typing_extensions.override``: every command imports this
    module, and typing_extensions would cost every start its import; docs/performance.md, "CLI start-up").
    """

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self.pending = ""

    def write(self, text: str) -> int:
        """Write every whole line of ``self.pending + text`` trimmed; keep the rest for the next write."""
        *lines, self.pending = (self.pending + text).split("\n")
        if lines:
            self.stream.write("".join(line.rstrip(" ") + "\n" for line in lines))
        return len(text)

    def flush(self) -> None:
        """Write the unfinished line (as it stands) and flush ``stream``."""
        if self.pending:
            self.stream.write(self.pending)
            self.pending = ""
        self.stream.flush()

    def isatty(self) -> bool:
        return self.stream.isatty()


def trimmed_stdout() -> TextIO:
    """Standard output through :class:`TrimmedLines`, typed as the text stream rich's ``Console(file=)`` takes."""
    return cast(TextIO, TrimmedLines(sys.stdout))
