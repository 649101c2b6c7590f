"""External strings made safe to print: terminal control characters removed, secrets redacted.

Every string kvpilot did not write itself (a label value from a ``/metrics`` body or a recording, a
Prometheus error, a VLLMServer field, a vLLM log line) passes through here before it reaches a
terminal, a Markdown report, a ``status`` field, a Kubernetes Event or a log line.

Control characters: Unicode general category ``Cc`` (C0 ``U+0000``-``U+001F``, ``DEL`` ``U+007F``
and C1 ``U+0080``-``U+009F``, which include ``ESC`` and the 8-bit ``CSI``), the line and paragraph
separators ``U+2028``/``U+2029`` and the bidirectional embedding/override/isolate controls
``U+202A``-``U+202E``, ``U+2066``-``U+2069`` (the "Trojan Source" characters, CVE-2021-42574), and the
invisible format characters (soft hyphen ``U+00AD``, zero-width space/joiners and direction marks
``U+200B``-``U+200F``, word joiner and invisible operators ``U+2060``-``U+2064``, ``U+FEFF``).
ECMA-48 escape sequences are removed whole (``ESC [ 31 m`` leaves nothing behind, not ``[31m``). A lone
surrogate (category ``Cs``, ``U+D800``-``U+DFFF``: what JSON's ``"\ud800"`` or bytes decoded with
``surrogateescape`` leave in a string) becomes ``U+FFFD``, as UTF-8 decoding with ``errors="replace"`` gives:
no UTF-8 stream can carry it, so a log line holding one would be lost to an encoding error.

Redaction sees what a terminal shows: a text holding a control character or an invisible one is
stripped first (:func:`strip_controls`, newlines kept) and the stripped text redacted, so
``ESC [ 1 m hf_…`` (a coloured log line), ``HF_TO<BEL>KEN=…`` or a zero-width space inside a token is
recognised as the token it displays. An escape written out as text (``repr()`` of a label, a log that
quotes one: ``\\x1b[1m``, ``\\033[1m``, ``\\u001b[1m``) is removed as well before redacting,
so ``'\\x1b[1mhf_…'`` is no longer a word that merely ends in ``hf_…``.

Secrets (:func:`redact`): a value is replaced by ``[REDACTED]`` when it matches a published token
format (Hugging Face ``hf_``, OpenAI ``sk-``, GitHub ``ghp_``/``github_pat_``, Slack ``xox?-``,
AWS access key ids ``AKIA``, JSON Web Tokens, ``Bearer`` credentials), follows ``--api-key`` (vLLM's
``--api-key``, ``vllm/entrypoints/openai/cli_args.py``) or is the literal value of a variable whose
name ends in ``_TOKEN``, ``_KEY``, ``_SECRET`` or ``_PASSWORD`` (``HF_TOKEN=hf_…``), or is the userinfo
of a URL (``http://user:password@host`` -> ``http://[REDACTED]@host``; RFC 3986 section 3.2.1).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable

REDACTED = "[REDACTED]"

#: ECMA-48 sequences: CSI (``ESC [`` or 8-bit ``U+009B``) parameters/intermediates/final byte, OSC
#: (``ESC ]`` … BEL or ST) and two-character ``ESC x`` sequences.
_ESCAPE_RE = re.compile(
    r"(?:\x1b\[|\x9b)[\x30-\x3f]*[\x20-\x2f]*[\x40-\x7e]?"
    r"|(?:\x1b\]|\x9d)[^\x07\x1b\x9c]*(?:\x07|\x1b\\|\x9c)?"
    r"|\x1b[\x20-\x7e]?"
)

#: Published token formats (each a prefix plus enough random characters not to match prose).
_TOKEN_PATTERNS = (
    r"hf_[A-Za-z0-9]{20,}",  # Hugging Face user access tokens
    r"sk-(?:proj-|ant-)?[A-Za-z0-9_\-]{16,}",  # OpenAI / Anthropic API keys
    r"gh[pousr]_[A-Za-z0-9]{30,}",  # GitHub tokens
    r"github_pat_[A-Za-z0-9_]{30,}",
    r"xox[abposr]-[A-Za-z0-9\-]{10,}",  # Slack tokens
    r"(?:AKIA|ASIA)[0-9A-Z]{16}",  # AWS access key ids
    r"eyJ[A-Za-z0-9_\-]{8,}\.eyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}",  # JSON Web Tokens
    r"glpat-[A-Za-z0-9_\-]{20,}",  # GitLab personal access tokens
)
_TOKEN_RE = re.compile(r"(?<![A-Za-z0-9_])(?:" + "|".join(_TOKEN_PATTERNS) + r")")
#: ``Bearer <credential>`` (RFC 6750) and ``--api-key <value>`` / ``--api-key=<value>``.
_BEARER_RE = re.compile(r"(?i)(\bbearer\s+)(?!\[REDACTED\])[A-Za-z0-9._~+/\-]+=*")
_API_KEY_RE = re.compile(r"(--api-key(?:=|\s+))(?!\[REDACTED\])(\"[^\"]*\"|'[^']*'|\S+)")
#: ``NAME_TOKEN=value`` / ``NAME_KEY: value`` / JSON ``"NAME_TOKEN": "value"``.
_SECRET_NAME = r"(?:[A-Z0-9_]*_)?(?:TOKEN|KEY|SECRET|PASSWORD|APIKEY)"
_ASSIGN_RE = re.compile(
    r"(\b" + _SECRET_NAME + r"[\"']?\s*[=:]\s*)(?!\[REDACTED\])(\"[^\"]*\"|'[^']*'|[^\s,;}\]]+)",
)
_SECRET_NAME_RE = re.compile(r"^" + _SECRET_NAME + r"$")
#: ``scheme://userinfo@``: a password (or a token as user name) in a URL.
_USERINFO_RE = re.compile(r"(\b[A-Za-z][A-Za-z0-9+.\-]*://)(?!\[REDACTED\]@)[^\s/?#@\[\]]+@")
#: A literal every pattern above needs (``--api-key``, the names' TOKEN/KEY/SECRET/PASSWORD,
#: ``bearer`` in any case, each token format's prefix): a text without one is returned unchanged
#: after one search instead of four substitutions.
_MAYBE_SECRET_RE = re.compile(
    r"--api-key|TOKEN|KEY|SECRET|PASSWORD|(?i:bearer)|hf_|sk-|gh[pousr]_|github_pat_|xox[abposr]-|AKIA|ASIA|eyJ|glpat-|://"
)


#: An ECMA-48 escape written out as text: a backslash escape of ESC (``\\x1b``, ``\\033``, ``\\u001b``)
#: and, when present, the CSI parameters and final byte that follow it, or an OSC string up to its written-out
#: BEL or ST (``\\x1b]8;;url\\x07``, as ``repr`` writes a hyperlink); or any other C0 control or DEL written out
#: as a hex escape (``\\x07``, ``\\x00``, ``\\u0007``: ``repr`` of a string holding one).
_WRITTEN_ESC = r"\\(?:x1[bB]|0?33|u001[bB])"
_TEXT_ESCAPE_RE = re.compile(
    _WRITTEN_ESC + r"\][^\\]*(?:\\(?:x07|u0007|0?07)|" + _WRITTEN_ESC + r"\\\\)?"
    r"|" + _WRITTEN_ESC + r"(?:\[[0-9;?]*[ -/]*[@-~])?"
    r"|\\(?:x[01][0-9a-fA-F]|x7[fF]|u00[01][0-9a-fA-F]|u007[fF])"
)


def is_secret_name(name: str) -> bool:
    """True for an environment variable name that holds a secret by convention (case-insensitive).

    ``HF_TOKEN``, ``HUGGING_FACE_HUB_TOKEN``, ``OPENAI_API_KEY``, ``AWS_SECRET_ACCESS_KEY``,
    ``DB_PASSWORD`` -> True; ``LMCACHE_CHUNK_SIZE``, ``KEYS`` -> False.
    """
    return bool(_SECRET_NAME_RE.match(name.upper()))


def contains_secret(text: str) -> bool:
    """True when ``text`` contains something :func:`redact` would replace (controls aside)."""
    shown = text if text.isprintable() else strip_controls(text, keep_newlines=True)
    return redact(shown) != shown


def redact(text: str) -> str:
    """``text`` with every secret-looking value replaced by ``[REDACTED]`` (see the module docstring).

    Example: ``"--api-key sk-abc… HF_TOKEN=hf_x…"`` -> ``"--api-key [REDACTED] HF_TOKEN=[REDACTED]"``.
    """
    # a control or invisible character, or one written out as an escape, may hide a secret: see what is shown
    shown = text if text.isprintable() else strip_controls(text, keep_newlines=True)
    while "\\" in shown and (unescaped := _TEXT_ESCAPE_RE.sub("", shown)) != shown:  # until none is left
        shown = unescaped
    if not _MAYBE_SECRET_RE.search(shown):
        return text
    text = shown
    text = _USERINFO_RE.sub(lambda m: m.group(1) + REDACTED + "@", text)
    text = _API_KEY_RE.sub(lambda m: m.group(1) + REDACTED, text)
    text = _ASSIGN_RE.sub(lambda m: m.group(1) + REDACTED, text)
    text = _BEARER_RE.sub(lambda m: m.group(1) + REDACTED, text)
    return _TOKEN_RE.sub(REDACTED, text)


def redact_argv(argv: Iterable[str]) -> list[str]:
    """An argument vector with secrets redacted: the element after ``--api-key``, the value of
    ``--api-key=…`` and any element :func:`redact` changes (``["--api-key", "x"]`` ->
    ``["--api-key", "[REDACTED]"]``).
    """
    out: list[str] = []
    after_key = False
    for arg in argv:
        arg = str(arg)
        if after_key:
            out.append(REDACTED)
        elif arg.startswith("--api-key="):
            out.append("--api-key=" + REDACTED)
        else:
            out.append(redact(arg))
        after_key = arg == "--api-key"
    return out


#: Line breaks and tabs become a space (a newline is kept with ``keep_newlines``).
_SPACE_CHARS = "\t\n\r\x0b\x0c\x85\u2028\u2029"
_TO_SPACE = str.maketrans(dict.fromkeys(_SPACE_CHARS, " "))
_TO_SPACE_KEEP_NL = str.maketrans(dict.fromkeys(_SPACE_CHARS.replace("\n", ""), " "))
#: What is removed once line breaks are spaces: the rest of category ``Cc`` (``U+0000``-``U+001F``
#: but the newline, ``U+007F``-``U+009F``), the bidirectional controls and the invisible format characters.
_CONTROL_RE = re.compile(
    "[\x00-\x09\x0b-\x1f\x7f-\x9f\u00ad\u200b-\u200f\u202a-\u202e\u2060-\u2064\u2066-\u2069\ufeff]"
)
#: Lone surrogates (category ``Cs``): replaced by ``U+FFFD``, never written (see the module docstring).
_SURROGATE_RE = re.compile("[\ud800-\udfff]")


def strip_controls(text: str, *, keep_newlines: bool = False) -> str:
    r"""``text`` without escape sequences and control characters (see the module docstring).

    A tab becomes a space; a newline (``\n``) is kept only with ``keep_newlines``, otherwise it
    becomes a space, like every other line break (``\r``, ``U+0085``, ``U+2028``).

    ``str.isprintable()`` is False for every character this changes (categories ``Cc``, ``Cf``,
    ``Cs``, ``Zl``, ``Zp``), so a printable string is returned as it is without a per-character pass. A lone
    surrogate becomes ``U+FFFD``.
    """
    text = str(text)
    if text.isprintable():
        return text
    text = _SURROGATE_RE.sub("\ufffd", text)
    text = _ESCAPE_RE.sub("", text)
    text = text.translate(_TO_SPACE_KEEP_NL if keep_newlines else _TO_SPACE)
    return _CONTROL_RE.sub("", text)


def safe(text: object, *, keep_newlines: bool = False) -> str:
    """An external string ready to print: secrets redacted, then control characters removed."""
    return strip_controls(redact(str(text)), keep_newlines=keep_newlines)


def one_line(text: object, limit: int | None = None) -> str:
    """:func:`safe` on one line, runs of whitespace collapsed, cut to ``limit`` characters (``…``).

    Results are cached (the last 1,024 texts): a report repeats the same query and label strings
    for every target.
    """
    return _one_line(text if isinstance(text, str) else str(text), limit)


@functools.lru_cache(maxsize=1024)
def _one_line(text: str, limit: int | None) -> str:
    line = " ".join(safe(text).split(" "))
    line = re.sub(r" {2,}", " ", line).strip()
    if limit is not None and len(line) > limit:
        line = line[: max(limit - 1, 0)] + "…"
    return line


#: The CommonMark ASCII punctuation that can open or close inline markup, a heading or a table
#: cell (backslash-escapable, CommonMark spec section 2.4).
_MARKDOWN_SPECIAL = re.compile(r"([\\`*_\[\]<>#|~])")


def markdown_text(text: object) -> str:
    r""":func:`one_line` with Markdown markup characters backslash-escaped (CommonMark §2.4), so a
    label cannot split a heading, open a link or a table cell: ``a|b`` -> ``a\|b``.
    """
    return _MARKDOWN_SPECIAL.sub(r"\\\1", one_line(text))
