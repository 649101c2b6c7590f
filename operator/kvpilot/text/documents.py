"""YAML and JSON a user hands kvpilot, read within bounds: one error naming the field and the bound.

Every file or payload a command or the operator decodes (``kvpilot render``'s VLLMServers,
``--scenario-file``, ``kvpilot kv``'s config.json and ``--speculative-config``, a ``--trace`` line,
``diagnose --model-config``, the operator's ``modelConfigRef`` ConfigMap) goes through
:func:`load_yaml_documents`, :func:`load_yaml` or :func:`load_json`; a value that was decoded elsewhere
(kopf's body of a VLLMServer) goes through :func:`check_bounds`. The bounds, each per document:

- **depth**: at most :data:`MAX_DEPTH` (64) nested mappings/sequences. The deepest field a
  VLLMServer has (``spec.affinity.podAntiAffinity.preferredDuringSchedulingIgnoredDuringExecution[0]
  .podAffinityTerm.labelSelector.matchExpressions[0].values[0]``) is 10 levels; PyYAML's composer
  recurses once per level (Python's limit of 1,000 frames ended a 500-deep ``[[[…`` in a
  ``RecursionError``), and so do pydantic, ``json`` and the renderer after it;
- **integers**: at most :data:`MAX_INT_DIGITS` (100) digits. Python refuses to convert a decimal
  string of more than 4,300 digits to an ``int`` or back (``sys.int_info.default_max_str_digits``;
  a 5,000-digit ``ttlSeconds`` ended in that ``ValueError``); every integer field kvpilot reads is
  an int64 (19 digits) or smaller;
- **expansion** (YAML): at most :data:`MAX_NODES` (100,000) nodes once every alias is expanded (an
  alias counts as the nodes of what it repeats). PyYAML shares an aliased node instead of copying
  it, so a "billion laughs" document (857 bytes, nine levels of nine aliases: 9^9 leaves) loads
  at once and then explodes in whatever walks it (validation took 105 s and 1.96 GB before the
  process aborted); an alias inside its own anchor (a cycle) is refused too;
- **numbers** (JSON): a number too large for a float (``1e400``) is refused rather than read as
  infinity, and ``NaN``/``Infinity`` are not JSON (RFC 8259 section 6).

The bounds are checked while the text is read, with the libraries' own hooks: PyYAML's composer
(``compose_node`` sees every node, alias and anchor with its parent, so the path is known before
anything is constructed) and :func:`json.loads`' ``parse_int``/``parse_float``/``parse_constant``
(a digit string is measured before ``int()`` sees it). YAML is read with PyYAML's pure-Python
``SafeLoader`` (YAML 1.1, what ``yaml.safe_load`` does); libyaml's ``CSafeLoader`` composes in C,
out of reach of these hooks.

Pure: text in, Python values out; the callers read the files.
"""

from __future__ import annotations

import functools
import json
import math
import re
from collections.abc import Callable
from typing import Any, NoReturn

from kvpilot.text.errors import InvalidValueError

__all__ = [
    "MAX_DEPTH",
    "MAX_INT_DIGITS",
    "MAX_JSON_BYTES",
    "MAX_NODES",
    "MAX_YAML_BYTES",
    "DocumentError",
    "JsonObject",
    "JsonValue",
    "check_bounds",
    "load_json",
    "load_yaml",
    "load_yaml_documents",
]

#: A JSON value as ``json.loads`` returns it (RFC 8259's types; a document read, before a model or a typed view
#: gives it its shape).
JsonValue = str | int | float | bool | None | list["JsonValue"] | dict[str, "JsonValue"]
#: A JSON object (``{...}``).
JsonObject = dict[str, JsonValue]

#: Nested mappings and sequences one document may hold (the root counts as level 1).
MAX_DEPTH = 64
#: Digits (sign and ``_`` separators not counted) of one integer.
MAX_INT_DIGITS = 100
#: Nodes of one YAML document with every alias expanded; also the nodes :func:`check_bounds` walks.
MAX_NODES = 100_000
#: Bytes of a YAML file a command reads (``kvpilot render``, ``--scenario-file``): 3 MiB, the API server's
#: default limit on a request body (k8s.io/apiserver ``Config.MaxRequestBodyBytes``), so a VLLMServer
#: larger than this could never be created anyway.
MAX_YAML_BYTES = 3 * 1024 * 1024
#: Bytes of a JSON file a command reads (a model's config.json, ``model.safetensors.index.json``; the
#: index of the largest checkpoints is about 10 MB), 64 MiB.
MAX_JSON_BYTES = 64 * 1024 * 1024

_INT_LIMIT = 10**MAX_INT_DIGITS  # an int of more than MAX_INT_DIGITS digits is >= this in magnitude
_PLAIN_KEY_RE = re.compile(r"^[A-Za-z0-9_.\-/]+$")
_PATH_CHARS = 200  # a path in an error message is cut here (a path of 64 long keys stays readable)
_KEY_CHARS = 40


class DocumentError(InvalidValueError):
    """A document kvpilot will not read: unparsable, or beyond one of the bounds above.

    Attributes:
        path: where, as a field path from the document's root (``spec.env[0].valueFrom.a3[2]``),
            ``(document)`` when no field can be named, or ``""`` for a syntax error (its message
            carries the line and column).
        message: one line: what is wrong and the bound, e.g. ``an integer of 5000 digits (the bound
            is 100 digits)``.

    ``str(error)`` is ``"<path>: <message>"`` (just the message without a path). An
    :class:`~kvpilot.text.errors.InputError` whose ``field`` is the path, and a ``ValueError``, so callers
    that already turn a ``ValueError`` of ``json.loads`` into a message keep working.
    """

    @property
    def path(self) -> str:
        """The field path (``field``), by the name a document's position goes by."""
        return self.field


def _child(path: str, key: object) -> str:
    """``path.key`` or ``path[i]``; a key that is not plain ASCII is JSON-quoted and cut to 40 characters."""
    if isinstance(key, int) and not isinstance(key, bool):
        part = f"[{key}]"
    else:
        text = key if isinstance(key, str) else str(key)
        cut = text if len(text) <= _KEY_CHARS else text[:_KEY_CHARS] + "…"
        part = (f".{cut}" if path else cut) if _PLAIN_KEY_RE.match(text) else f"[{json.dumps(cut)}]"
    return path + part


def _shown(path: str) -> str:
    if not path:
        return "(document)"
    return path if len(path) <= _PATH_CHARS else path[:_PATH_CHARS] + "…"


def _too_deep(path: str) -> NoReturn:
    raise DocumentError(_shown(path), f"nested too deeply (more than {MAX_DEPTH} levels; the bound is {MAX_DEPTH})")


def _too_long(path: str, digits: int) -> NoReturn:
    raise DocumentError(_shown(path), f"an integer of {digits} digits (the bound is {MAX_INT_DIGITS} digits)")


def _too_many(path: str) -> NoReturn:
    raise DocumentError(
        _shown(path),
        f"the document expands to more than {MAX_NODES:,} nodes here (an alias counts as the nodes it "
        f"repeats; the bound is {MAX_NODES:,})",
    )


def check_bounds(value: object, root: str = "", *, count_nodes: bool = True) -> None:
    """Hold an already-decoded value to the bounds: depth, integer size, node count.

    For values decoded by someone else (kopf's VLLMServer body, a caller's dict), and for what
    :func:`load_json` decoded. The walk is iterative and stops at the first problem, so it is bounded
    by :data:`MAX_NODES` whatever the value (a structure sharing sub-structures is walked as expanded,
    as the bound counts it).

    Args:
        value: decoded JSON/YAML: dicts, lists, scalars.
        root: the path of ``value`` itself in messages (``spec``).
        count_nodes: hold the value to :data:`MAX_NODES` (a JSON text is bounded by its size instead).

    Raises:
        DocumentError: naming the path of the first node beyond a bound.
    """
    stack: list[tuple[object, str, int]] = [(value, root, 1)]
    nodes = 0
    while stack:
        item, path, depth = stack.pop()
        nodes += 1
        if count_nodes and nodes > MAX_NODES:
            _too_many(path)
        if isinstance(item, dict):
            if depth > MAX_DEPTH:
                _too_deep(path)
            stack.extend((v, _child(path, k), depth + 1) for k, v in reversed(list(item.items())))
        elif isinstance(item, list):
            if depth > MAX_DEPTH:
                _too_deep(path)
            stack.extend((v, _child(path, i), depth + 1) for i, v in reversed(list(enumerate(item))))
        elif isinstance(item, int) and not isinstance(item, bool) and not -_INT_LIMIT < item < _INT_LIMIT:
            _too_long(path, _digits(item))
        elif isinstance(item, _Oversized):  # what load_json's hooks left for a number beyond the bounds
            digits = item.text.lstrip("-")
            if digits.isdigit():
                _too_long(path, len(digits))
            raise DocumentError(_shown(path), f"{item.text[:40]} is beyond the range of a number")


def _digits(n: int) -> int:
    """Decimal digits of ``|n|`` without converting it to a string (which Python refuses past 4,300 digits)."""
    n = abs(n)
    estimate = max(1, int(n.bit_length() * math.log10(2)))
    return estimate + (1 if n >= int(10**estimate) else 0)


# ===================================================================================== JSON


class _Oversized:
    """What ``parse_int``/``parse_float`` return for a number beyond the bounds: found by the walk, with its path."""

    __slots__ = ("text",)

    def __init__(self, text: str) -> None:
        self.text = text


def _refuse_constant(name: str) -> NoReturn:
    raise DocumentError("", f"not valid JSON: {name} is not a JSON number (RFC 8259 section 6)")


def load_json(text: str) -> object:
    """Decode one JSON document (RFC 8259) within the bounds.

    Raises:
        DocumentError: not JSON (``not valid JSON (line 3 column 7: Expecting value)``), ``NaN`` or
            ``Infinity``, nested more than :data:`MAX_DEPTH` deep (naming the path; ``(document)``
            when Python's own parser gave up first, at about 1,000 levels), an integer of more than
            :data:`MAX_INT_DIGITS` digits or a number beyond a float's range (naming its path).
    """
    marked: list[_Oversized] = []

    def parse_int(digits: str) -> int | _Oversized:
        if len(digits.lstrip("-")) <= MAX_INT_DIGITS:
            return int(digits)
        marked.append(_Oversized(digits))
        return marked[-1]

    def parse_float(number: str) -> float | _Oversized:
        value = float(number)
        if math.isfinite(value):
            return value
        marked.append(_Oversized(number))
        return marked[-1]

    try:
        doc = json.loads(text, parse_int=parse_int, parse_float=parse_float, parse_constant=_refuse_constant)
    except json.JSONDecodeError as exc:
        raise DocumentError("", f"not valid JSON (line {exc.lineno} column {exc.colno}: {exc.msg})") from None
    except RecursionError:
        _too_deep("")
    # the nesting is at most the number of brackets: most documents need no walk
    if marked or text.count("[") + text.count("{") > MAX_DEPTH:
        check_bounds(doc, count_nodes=False)
    return doc


# ===================================================================================== YAML


def load_yaml_documents(text: str) -> list[object]:
    """Every document of a YAML stream (``---``-separated), within the bounds; empty documents dropped.

    Raises:
        DocumentError: not YAML (``not valid YAML at line 2, column 9: <problem>``) or a value YAML's
            types refuse (``!!int abc``, the date ``2024-13-01``), or beyond a bound, naming the path.
    """
    try:
        loader = _loader_class()(text)  # the reader refuses control characters here
    except _yaml_error() as exc:
        raise _syntax_error(exc) from None
    try:
        docs = []
        while loader.check_data():
            doc = loader.get_data()
            if doc is not None:
                docs.append(doc)
        return docs
    except _yaml_error() as exc:
        raise _syntax_error(exc) from None
    finally:
        loader.dispose()


def load_yaml(text: str) -> object:
    """The one document of a YAML text (None when empty), within the bounds.

    Raises:
        DocumentError: as :func:`load_yaml_documents`, and for a stream of several documents.
    """
    docs = load_yaml_documents(text)
    if len(docs) > 1:
        raise DocumentError("", f"holds {len(docs)} YAML documents; one is expected")
    return docs[0] if docs else None


def _yaml_error() -> type[Exception]:
    import yaml

    return yaml.YAMLError


def _syntax_error(exc: Exception) -> DocumentError:
    mark = getattr(exc, "problem_mark", None)
    where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
    problem = getattr(exc, "problem", None) or (str(exc).splitlines() or ["unreadable"])[0]
    return DocumentError("", f"not valid YAML{where}: {problem}")


@functools.cache
def _loader_class() -> Callable[[str], Any]:  # noqa: C901
    """PyYAML's ``SafeLoader`` with a composer that measures every node (built on first use: PyYAML is
    imported only by the commands that read YAML).
    """
    import yaml
    from yaml.constructor import ConstructorError
    from yaml.events import AliasEvent, ScalarEvent
    from yaml.nodes import ScalarNode

    int_tag = "tag:yaml.org,2002:int"

    class BoundedLoader(yaml.SafeLoader):
        """Composes with a path stack, an expanded-node count and each anchor's expanded size."""

        def __init__(self, stream: str) -> None:
            super().__init__(stream)
            self._paths: list[str] = []
            self._nodes = 0
            self._sizes: dict[str, int] = {}

        def compose_document(self) -> Any:
            self._paths, self._nodes, self._sizes = [], 0, {}
            return super().compose_document()

        def _path_of(self, parent: Any, index: Any) -> str:
            if parent is None:
                return ""
            base = self._paths[-1]
            if index is None:  # a mapping's key
                return base
            if isinstance(index, int):
                return _child(base, index)
            return _child(base, index.value if isinstance(index, ScalarNode) else "?")

        def _count(self, nodes: int, path: str) -> None:
            self._nodes += nodes
            if self._nodes > MAX_NODES:
                _too_many(path)

        def compose_node(self, parent: Any, index: Any) -> Any:
            path = self._path_of(parent, index)
            if self.check_event(AliasEvent):
                anchor = self.peek_event().anchor  # type: ignore[no-untyped-call]  # types-PyYAML leaves it untyped
                if anchor in self.anchors and anchor not in self._sizes:
                    raise DocumentError(_shown(path), f"the alias *{anchor} is inside its own anchor (a cycle)")
                self._count(self._sizes.get(anchor, 0), path)
                return super().compose_node(parent, index)
            anchor = self.peek_event().anchor  # type: ignore[no-untyped-call]  # as above
            if len(self._paths) >= MAX_DEPTH and not self.check_event(ScalarEvent):  # a mapping or sequence
                _too_deep(path)
            start = self._nodes
            self._count(1, path)
            self._paths.append(path)
            node = super().compose_node(parent, index)
            self._paths.pop()
            if anchor is not None:
                self._sizes[anchor] = self._nodes - start
            if isinstance(node, ScalarNode) and node.tag == int_tag:
                digits = len(node.value.lstrip("+-").replace("_", ""))
                if digits > MAX_INT_DIGITS:
                    _too_long(path, digits)
            return node

        def construct_object(self, node: Any, deep: bool = False) -> Any:
            # a scalar YAML's types refuse (``!!int abc``, ``2024-13-01``) raises ValueError in PyYAML: a YAML error;
            # so does ``!!timestamp`` on text that is no date at all, where PyYAML's own constructor fails on its
            # regular expression's missing match (AttributeError)
            try:
                return super().construct_object(node, deep)
            except (ValueError, OverflowError, TypeError) as exc:
                tag = str(node.tag).rsplit(":", 1)[-1]
                raise ConstructorError(None, None, f"not a valid {tag}: {exc}", node.start_mark) from None
            except AttributeError:
                if not isinstance(node, ScalarNode):
                    raise
                tag = str(node.tag).rsplit(":", 1)[-1]
                raise ConstructorError(None, None, f"not a valid {tag}", node.start_mark) from None

    return BoundedLoader
