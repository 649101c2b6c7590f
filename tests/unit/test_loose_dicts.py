"""A ratchet on loose string-keyed dicts in the product's annotations: they may shrink, never grow.

A ``dict[str, Any]`` in a signature or an attribute hands state across a layer with no shape: every reader
recovers it by string keys and ``isinstance``. Outside the JSON and YAML edges (``to_json``, a parser, a
Kubernetes object as the API returns it) the product passes typed objects. This test counts, in every
signature (parameters and return) and attribute annotation (class body, ``self.x: T``, module level) under
``operator/``, each written ``dict[str, Any]`` / ``Mapping[str, Any]`` (also ``Dict``, ``MutableMapping``),
the same with ``object`` for ``Any``, and each use of a type alias that merely renames one of them. Local
variables are not counted: a function building its JSON answer holds it in a local.

Lower :data:`ALLOWED` as annotations get their types; raising it is a review decision, in plain sight.

Those that remain must be at an edge: inside a function or class whose name is one of :data:`EDGE_NAMES` (a
``to_json``, a ``parse_*`` ...), or one :data:`EDGES` lists with the reason it is one. Any other fails, named by
file, line and qualified name.
"""

from __future__ import annotations

import ast
import fnmatch
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PRODUCT = REPO / "operator" / "kvpilot"

#: loose dict annotations allowed in the product (lower it as they get types; never raise it)
ALLOWED = 36

#: names of functions and classes whose loose dicts are JSON or YAML wherever they are: what a ``to_json``
#: gives, what a ``from_json``, a ``parse_*`` or a ``load_*`` decodes
EDGE_NAMES = ("to_json", "from_json", "parse_*", "load_*")

#: ``module::qualified name`` (``module::*``: the whole module) -> why its loose dicts are at an edge; an
#: attribute's qualified name ends in its own (``EnvVar.value_from``)
EDGES = {
    "api/crd.py::*": "the CRD's OpenAPI schema, built and compared as the JSON the API server stores",
    "api/k8s_validation.py::*": "the Kubernetes OpenAPI fragments, and the affinity and valueFrom JSON a user writes "
    "in a VLLMServer, checked as the API server checks a Pod's",
    "api/models.py::EnvVar.value_from": "a Kubernetes EnvVarSource, copied into the Pod as the user wrote it",
    "api/models.py::VLLMServerSpec.affinity": "a Kubernetes Affinity, copied into the Pod as the user wrote it",
    "api/models.py::KopfStatus.progress": "kopf's own record in status.kopf, kept as kopf writes it",
    "alerts/result.py::Diagnosed.doc": "the diagnosis's -o json document, made once and copied into each answer's "
    "to_json",
    "engine/workloads.py::_typed": "the workload decoder (from_dict): a document's values checked into the "
    "generator's keyword arguments",
}

_MAPPINGS = frozenset({"dict", "Dict", "Mapping", "MutableMapping"})
_LOOSE_VALUES = frozenset({"Any", "object"})


def _name(node: ast.expr) -> str | None:
    """``dict``, ``typing.Dict`` -> ``Dict``, ``collections.abc.Mapping`` -> ``Mapping``: the last name."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return None


def _is_loose(node: ast.AST) -> bool:
    """``dict[str, Any]`` and its spellings (module docstring)."""
    if not (isinstance(node, ast.Subscript) and _name(node.value) in _MAPPINGS):
        return False
    args = node.slice
    if not (isinstance(args, ast.Tuple) and len(args.elts) == 2):
        return False
    key, value = args.elts
    return _name(key) == "str" and _name(value) in _LOOSE_VALUES


def _loose_in(annotation: ast.expr | None, aliases: frozenset[str]) -> int:
    """How many loose dicts an annotation writes (a string annotation parsed first)."""
    if annotation is None:
        return 0
    if isinstance(annotation, ast.Constant) and isinstance(annotation.value, str):
        try:
            annotation = ast.parse(annotation.value, mode="eval").body
        except SyntaxError:
            return 0
    found = 0
    for node in ast.walk(annotation):
        if _is_loose(node) or isinstance(node, ast.Name | ast.Attribute) and _name(node) in aliases:
            found += 1
    return found


def _alias_value(node: ast.stmt) -> tuple[str, ast.expr] | None:
    """``X = dict[str, Any]``, ``X: TypeAlias = ...`` or ``type X = ...`` at a module's top: (name, value)."""
    if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
        return node.targets[0].id, node.value
    annotated = isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)
    if annotated and node.value is not None and _name(node.annotation) == "TypeAlias":
        value = node.value
        if isinstance(value, ast.Constant) and isinstance(value.value, str):  # a forward reference
            value = ast.parse(value.value, mode="eval").body
        return node.target.id, value
    type_alias = getattr(ast, "TypeAlias", None)  # ``type X = ...``: Python 3.12 on
    if type_alias is not None and isinstance(node, type_alias) and isinstance(node.name, ast.Name):
        return node.name.id, node.value
    return None


def _aliases(trees: dict[Path, ast.Module]) -> frozenset[str]:
    """Module-level names bound to nothing but a loose dict (or a union of one with None)."""
    names = set()
    for tree in trees.values():
        for node in tree.body:
            alias = _alias_value(node)
            if alias is None:
                continue
            name, value = alias
            parts = [value]
            while parts and isinstance(parts[-1], ast.BinOp) and isinstance(parts[-1].op, ast.BitOr):
                union = parts.pop()
                parts += [union.left, union.right]
            if any(_is_loose(p) for p in parts) and all(
                _is_loose(p) or (isinstance(p, ast.Constant) and p.value is None) for p in parts
            ):
                names.add(name)
    return frozenset(names)


@dataclass(frozen=True)
class _Annotation:
    """One signature or attribute annotation: where it is, and the functions and classes around it."""

    node: ast.expr | None
    line: int
    scopes: tuple[str, ...]  # enclosing function and class names, outermost first
    attribute: str = ""  # an attribute's own name ("value_from", "self.c"); "" for a signature

    @property
    def qualname(self) -> str:
        return ".".join([*self.scopes, self.attribute] if self.attribute else self.scopes) or "<module>"


def _located(tree: ast.Module) -> list[_Annotation]:
    """Every signature and attribute annotation of a module (not local variables'), with where it is."""
    out: list[_Annotation] = []

    def visit(node: ast.AST, kind: str, scopes: tuple[str, ...]) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                inner = (*scopes, child.name)
                a = child.args
                params = [*a.posonlyargs, *a.args, *a.kwonlyargs, a.vararg, a.kwarg]
                out.extend(_Annotation(p.annotation, p.lineno, inner) for p in params if p is not None)
                out.append(_Annotation(child.returns, child.lineno, inner))
                visit(child, "function", inner)
            elif isinstance(child, ast.ClassDef):
                visit(child, "class", (*scopes, child.name))
            elif isinstance(child, ast.AnnAssign):
                target = child.target
                on_self = isinstance(target, ast.Attribute) and _name(target.value) == "self"
                if kind != "function" or on_self:
                    out.append(_Annotation(child.annotation, child.lineno, scopes, ast.unparse(target)))
            else:
                visit(child, kind, scopes)

    visit(tree, "module", ())
    return out


def _annotations(tree: ast.Module) -> list[ast.expr | None]:
    """Every signature and attribute annotation of a module (not local variables')."""
    return [a.node for a in _located(tree)]


def _edge(module: str, found: _Annotation) -> str | None:
    """The :data:`EDGE_NAMES` pattern or :data:`EDGES` entry that puts ``found`` at an edge, or None."""
    for scope in found.scopes:
        for pattern in EDGE_NAMES:
            if fnmatch.fnmatchcase(scope, pattern):
                return pattern
    for entry in EDGES:
        where, _, qualname = entry.partition("::")
        if where == module and (qualname == "*" or f"{found.qualname}.".startswith(f"{qualname}.")):
            return entry
    return None


def _loose(module: str, tree: ast.Module, aliases: frozenset[str]) -> list[tuple[_Annotation, int, str | None]]:
    """``(annotation, loose dicts it writes, the edge it is at or None)`` for each loose annotation of a module."""
    out = []
    for found in _located(tree):
        n = _loose_in(found.node, aliases)
        if n:
            out.append((found, n, _edge(module, found)))
    return out


def _area(path: Path) -> str:
    """``diagnose``, ``cli.py``: the folder under kvpilot/, or the module at its top."""
    return path.relative_to(PRODUCT).parts[0]


def _product() -> tuple[dict[Path, ast.Module], frozenset[str]]:
    trees = {p: ast.parse(p.read_text(encoding="utf-8")) for p in sorted(PRODUCT.rglob("*.py"))}
    return trees, _aliases(trees)


def loose_dict_counts() -> Counter[str]:
    """Loose dict annotations per area of the product (module docstring)."""
    trees, aliases = _product()
    counts: Counter[str] = Counter()
    for path, tree in trees.items():
        found = sum(_loose_in(a, aliases) for a in _annotations(tree))
        if found:
            counts[_area(path)] += found
    return counts


def loose_dicts() -> list[tuple[str, _Annotation, int, str | None]]:
    """``(module, annotation, loose dicts, edge or None)`` for every loose annotation of the product."""
    trees, aliases = _product()
    out = []
    for path, tree in trees.items():
        module = path.relative_to(PRODUCT).as_posix()
        out += [(module, *loose) for loose in _loose(module, tree, aliases)]
    return out


def _spelled(counts: Counter[str]) -> str:
    return ", ".join(f"{area} {n}" for area, n in counts.most_common())


def test_the_count_finds_each_spelling():
    source = """
from typing import Any, Mapping, TypeAlias
import typing
Doc = dict[str, Any]
Maybe: TypeAlias = "Mapping[str, object] | None"
Real = dict[str, int]
top: dict[str, Any] = {}
class C:
    a: typing.Dict[str, Any]
    b: Real
    def __init__(self, x: Doc, y: list[Mapping[str, Any]]) -> Maybe:
        self.c: dict[str, object] = {}
        local: dict[str, Any] = {}
        inner: Doc = {}
def f(*args: dict[str, object], **kw: "dict[str, Any]") -> Doc: ...
"""
    tree = ast.parse(source)
    aliases = _aliases({Path("m.py"): tree})
    assert aliases == frozenset({"Doc", "Maybe"})
    # top, a, x, y, -> Maybe, self.c, *args, **kw, -> Doc; not Real, not the locals
    assert sum(_loose_in(a, aliases) for a in _annotations(tree)) == 9


def test_loose_dicts_only_shrink():
    counts = loose_dict_counts()
    total = sum(counts.values())
    assert total <= ALLOWED, f"{total} loose dict annotations, {ALLOWED} allowed: type them ({_spelled(counts)})"
    assert total == ALLOWED, f"down to {total} loose dict annotations: lower ALLOWED to match ({_spelled(counts)})"


def test_edges_are_told_from_the_rest():
    source = """
from typing import Any
class Report:
    doc: dict[str, Any]
    other: dict[str, Any]
    def to_json(self) -> dict[str, Any]:
        def inner(x: dict[str, Any]) -> None: ...
    def helper(self, x: dict[str, Any]) -> None:
        self.kept: dict[str, Any] = {}
def parse_thing(text: str) -> dict[str, object]: ...
def load_file(path: str) -> None:
    local: dict[str, Any] = {}  # a local: not counted
def reparse(x: dict[str, Any]) -> None: ...
"""
    tree = ast.parse(source)
    module = "alerts/result.py"
    found = {(a.line, a.qualname): edge for a, _, edge in _loose(module, tree, frozenset())}
    assert found == {
        (4, "Report.doc"): None,  # EDGES lists this module's Diagnosed.doc, not Report.doc
        (5, "Report.other"): None,
        (6, "Report.to_json"): "to_json",
        (7, "Report.to_json.inner"): "to_json",  # inside a to_json
        (8, "Report.helper"): None,
        (9, "Report.helper.self.kept"): None,
        (10, "parse_thing"): "parse_*",
        (13, "reparse"): None,  # a name must match the pattern, not contain it
    }
    listed = {
        (a.qualname, edge)
        for a, _, edge in _loose(
            "api/models.py",
            ast.parse("class EnvVar:\n    value_from: dict[str, Any] | None\n    other: dict[str, Any]\n"),
            frozenset(),
        )
    }
    assert listed == {("EnvVar.value_from", "api/models.py::EnvVar.value_from"), ("EnvVar.other", None)}


def test_loose_dicts_are_only_at_edges():
    where = PRODUCT.relative_to(REPO).as_posix()
    off_edge = list(dict.fromkeys(f"{where}/{m}:{a.line}:{a.qualname}" for m, a, _, edge in loose_dicts() if not edge))
    assert not off_edge, (
        "loose dicts outside the JSON/YAML edges (give them a type, or list a true edge in EDGES with why):\n"
        + "\n".join(off_edge)
    )


def test_each_listed_edge_still_has_a_loose_dict():
    used = {edge for *_, edge in loose_dicts()}
    stale = sorted(set(EDGES) - used)
    assert not stale, f"EDGES lists what holds no loose dict any more: drop {', '.join(stale)}"
