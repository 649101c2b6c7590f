"""A ratchet on loose string-keyed dicts in the product's annotations: they may shrink, never grow.

A ``dict[str, Any]`` in a signature or an attribute hands state across a layer with no shape: every reader
recovers it by string keys and ``isinstance``. Outside the JSON and YAML edges (``to_json``, a parser, a
Kubernetes object as the API returns it) the product passes typed objects. This test counts, in every
signature (parameters and return) and attribute annotation (class body, ``self.x: T``, module level) under
``operator/``, each written ``dict[str, Any]`` / ``Mapping[str, Any]`` (also ``Dict``, ``MutableMapping``),
the same with ``object`` for ``Any``, and each use of a type alias that merely renames one of them. Local
variables are not counted: a function building its JSON answer holds it in a local.

Lower :data:`ALLOWED` as annotations get their types; raising it is a review decision, in plain sight.
"""

from __future__ import annotations

import ast
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PRODUCT = REPO / "operator" / "kvpilot"

#: loose dict annotations allowed in the product (lower it as they get types; never raise it)
ALLOWED = 73

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


def _annotations(tree: ast.Module) -> list[ast.expr | None]:
    """Every signature and attribute annotation of a module (not local variables')."""
    out: list[ast.expr | None] = []

    def visit(node: ast.AST, scope: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                a = child.args
                params = [*a.posonlyargs, *a.args, *a.kwonlyargs, a.vararg, a.kwarg]
                out.extend(p.annotation for p in params if p is not None)
                out.append(child.returns)
                visit(child, "function")
            elif isinstance(child, ast.ClassDef):
                visit(child, "class")
            elif isinstance(child, ast.AnnAssign):
                target = child.target
                on_self = isinstance(target, ast.Attribute) and _name(target.value) == "self"
                if scope != "function" or on_self:
                    out.append(child.annotation)
            else:
                visit(child, scope)

    visit(tree, "module")
    return out


def _area(path: Path) -> str:
    """``diagnose``, ``cli.py``: the folder under kvpilot/, or the module at its top."""
    return path.relative_to(PRODUCT).parts[0]


def loose_dict_counts() -> Counter[str]:
    """Loose dict annotations per area of the product (module docstring)."""
    trees = {p: ast.parse(p.read_text(encoding="utf-8")) for p in sorted(PRODUCT.rglob("*.py"))}
    aliases = _aliases(trees)
    counts: Counter[str] = Counter()
    for path, tree in trees.items():
        found = sum(_loose_in(a, aliases) for a in _annotations(tree))
        if found:
            counts[_area(path)] += found
    return counts


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
