"""docs/architecture.md's data-flow picture against the real import graph (grimp, import-linter's own)."""

from __future__ import annotations

import re
from pathlib import Path

import grimp
import pytest

DOC = Path(__file__).resolve().parents[2] / "docs" / "architecture.md"
CALL, DATA = "─►", "═►"


def _section(text: str, title: str) -> str:
    start = text.index(f"## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end != -1 else None]


def _picture_and_boxes() -> tuple[list[tuple[str, str, str]], dict[str, list[str]]]:
    flow = _section(DOC.read_text(encoding="utf-8"), "Data flow")
    picture = re.search(r"```text\n(.*?)```", flow, re.S).group(1)
    arrows = []
    for line in picture.strip().splitlines():
        parts = re.split(f"({CALL}|{DATA})", line)
        names = [p.strip() for p in parts[::2]]
        kinds = parts[1::2]
        arrows += [(a, kind, b) for a, kind, b in zip(names, kinds, names[1:], strict=False)]
    boxes = {}
    for row in re.findall(r"^\| ([^|]+?) \| ([^|]+?) \|", flow, re.M):
        if row[0] not in ("box", "---"):
            boxes[row[0]] = re.findall(r"`(kvpilot[\w.]*)`", row[1])
    return arrows, boxes


ARROWS, BOXES = _picture_and_boxes()
GRAPH = grimp.build_graph("kvpilot")


def _modules(name: str) -> set[str]:
    """``name`` and its submodules, plus the package ``__init__`` that re-exports it (``from kvpilot.api
    import parse_spec`` imports kvpilot.api, which imports kvpilot.api.validation).
    """
    found = {m for m in GRAPH.modules if m == name or m.startswith(name + ".")}
    parent = name.rsplit(".", 1)[0]
    if parent != name and GRAPH.direct_import_exists(importer=parent, imported=name):
        found.add(parent)
    return found


def _connected(a: str, b: str) -> bool:
    ma = set().union(*(_modules(m) for m in BOXES[a]))
    mb = set().union(*(_modules(m) for m in BOXES[b]))
    return any(
        GRAPH.direct_import_exists(importer=x, imported=y) or GRAPH.direct_import_exists(importer=y, imported=x)
        for x in ma
        for y in mb
        if x != y
    )


def test_the_picture_has_the_flow_the_issue_names():
    # VLLMServer -> validate -> render -> Pod -> log and metrics -> signals -> rules -> verdict -> report / alert
    assert ("VLLMServer", CALL, "validate") in ARROWS
    assert ("render", CALL, "Pod") in ARROWS
    assert ("Pod", DATA, "startup log") in ARROWS
    assert ("Pod", DATA, "/metrics") in ARROWS
    assert ("signals", CALL, "rules") in ARROWS
    assert ("rules", CALL, "verdict") in ARROWS
    assert ("verdict", CALL, "report") in ARROWS
    assert ("diagnose run", CALL, "alert") in ARROWS


def test_every_box_names_modules_that_exist():
    names = {a for a, _, _ in ARROWS} | {b for _, _, b in ARROWS}
    assert names == set(BOXES), names ^ set(BOXES)
    for box, modules in BOXES.items():
        assert modules, box
        for module in modules:
            assert module in GRAPH.modules, (box, module)


@pytest.mark.parametrize(("a", "b"), [(a, b) for a, kind, b in ARROWS if kind == CALL])
def test_every_call_arrow_is_an_import_between_its_boxes(a, b):
    assert _connected(a, b), f"{a} ({BOXES[a]}) and {b} ({BOXES[b]}) do not import each other"


def test_the_check_can_fail():
    # two boxes the picture does not connect: the startup-log parser and the rules never import each other
    assert not _connected("startup log", "rules")


def test_the_layers_picture_lists_every_top_level_package():
    layers = _section(DOC.read_text(encoding="utf-8"), "Layers")
    drawn = set(re.findall(r"kvpilot\.(\w+)", layers)) | set(re.findall(r"\| (\w+)", layers))
    packages = {m.split(".")[1] for m in GRAPH.modules if m.count(".") == 1}
    assert packages <= drawn, packages - drawn
