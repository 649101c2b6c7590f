"""Fuzz: ``kvpilot render -`` on generated VLLMServer YAML text, hostile in structure as well as in values.

The text starts as a spec from ``test_spec_properties``' strategies (hostile strings, absurd quantities,
affinities) with env ``valueFrom`` sources added, dumped by PyYAML; then a field may be replaced by a
fragment of hostile YAML (nesting up to 700 deep, integers up to 6,000 digits, alias bombs of up to 12
levels of 12, a cycle, tags YAML's types refuse, dates that do not exist, undefined aliases), the bytes
may be mutated (control characters, brackets, anchors, cut short), and documents may be joined; the
shipped examples' specs are a second starting point, so that mutated specs are often still valid.
Property (``tests/support/fuzz.py``): exit 0 with a v1 List whose Pod and Service
kubernetes-validate 1.37 accepts strictly, or exit 2 with exactly one line naming the field or the
place; never an exception, never more than 5 s of CPU for one input.
"""

from __future__ import annotations

import re

import kubernetes_validate
import yaml
from hypothesis import HealthCheck, event, example, given, settings
from hypothesis import strategies as st

from tests.conftest import REPO
from tests.support.fuzz import EXAMPLES, invoke
from tests.unit.api import test_value_from as value_from_cases
from tests.unit.render import test_spec_properties as spec_cases

_SOURCES = st.one_of(
    st.sampled_from(value_from_cases.ACCEPTED),
    st.sampled_from([case[0] for case in value_from_cases.REFUSED]),
    st.dictionaries(
        st.sampled_from(["fieldRef", "resourceFieldRef", "configMapKeyRef", "secretKeyRef", "fileKeyRef", "x"]),
        st.one_of(
            st.fixed_dictionaries(
                {},
                optional={
                    "fieldPath": st.sampled_from(["metadata.name", "status.podIP", "bogus", "metadata.labels['a']"]),
                    "resource": st.sampled_from(["limits.cpu", "limits.memory", "limits.gpu", ""]),
                    "divisor": st.sampled_from(["1", "1m", "1Mi", "1024", "abc", 1, 0.001]),
                    "name": spec_cases._KEY,
                    "key": spec_cases._KEY,
                },
            ),
            spec_cases._TEXT,
            st.none(),
        ),
        max_size=2,
    ),
)
_ENV = st.lists(
    st.fixed_dictionaries({"name": st.sampled_from(["A", "B_1", "POD_IP"]), "valueFrom": _SOURCES}), max_size=2
)
_GOOD_ENV = st.lists(
    st.fixed_dictionaries(
        {"name": st.sampled_from(["A", "B_1"]), "valueFrom": st.sampled_from(value_from_cases.ACCEPTED)}
    ),
    max_size=2,
    unique_by=lambda v: v["name"],
)
#: the shipped examples' specs: valid, so a mutation of one is often still valid (the accepting path)
_EXAMPLES = [
    doc["spec"]
    for path in sorted((REPO / "manifests" / "examples").glob("*.yaml"))
    for doc in yaml.safe_load_all(path.read_text())
    if isinstance(doc, dict) and doc.get("kind") == "VLLMServer"
]
_SPECS = st.one_of(
    st.tuples(spec_cases.SPECS, _ENV).map(lambda t: {**t[0], "env": t[1]} if t[1] else t[0]),
    st.tuples(st.sampled_from(_EXAMPLES), _GOOD_ENV).map(lambda t: {**t[0], "env": [*t[0].get("env", []), *t[1]]}),
)
_NAMES = st.sampled_from(["qwen"] * 12 + ["Qwen", "a" * 64, ""])
_LEAF = re.compile(r"^\s+(?:- )?[\w.\-/]+: (\S.*)$", re.MULTILINE)  # a scalar field of the dumped YAML


def _bomb(levels: int, width: int) -> str:
    """A flow sequence holding an anchored list of ``width`` scalars and ``levels`` lists of ``width`` aliases."""
    parts = ["&a0 [" + ", ".join(["x"] * width) + "]"]
    parts += [f"&a{i} [" + ", ".join([f"*a{i - 1}"] * width) + "]" for i in range(1, levels + 1)]
    return "[" + ", ".join(parts) + "]"


_FRAGMENTS = st.one_of(
    st.integers(1, 700).map(lambda n: "[" * n + "]" * n),
    st.integers(1, 300).map(lambda n: "{a: " * n + "1" + "}" * n),
    st.tuples(st.sampled_from(["", "-", "+", "0x", "0o"]), st.integers(1, 6000)).map(lambda t: t[0] + "7" * t[1]),
    st.tuples(st.integers(1, 12), st.integers(2, 12)).map(lambda t: _bomb(*t)),
    st.sampled_from(
        [
            "&c [1, *c]",
            "&m {a: *m}",
            "*undefined",
            "!!int abc",
            "!!float x",
            "!!binary '@@'",
            "!!timestamp 2024-13-01",
            "2024-02-30",
            "!!python/object:os.system x",
            "!!set {a}",
            "!!str 1",
            "1e400",
            ".nan",
            "-.inf",
            "1_000",
            "0o17",
            "190:20:30",
            "{<<: [*undefined]}",
            "~",
            "? [a]\n: 1",
        ]
    ),
)
_NOISE = st.sampled_from(
    [
        "\x00",
        "\t",
        "\x7f",
        "\x85",
        "\u2028",
        "\ufeff",
        ":",
        "[",
        "]",
        "{",
        "}",
        "&a",
        "*a",
        "!",
        "'",
        '"',
        "#",
        "\n",
        " ",
        "- ",
        "---\n",
        "%YAML 1.1\n",
    ]
)


@st.composite
def documents(draw: st.DrawFn) -> bytes:
    """The YAML text of one or two VLLMServers, maybe with a hostile fragment and mutated bytes."""
    texts = []
    for _ in range(draw(st.sampled_from([1, 1, 1, 2]))):
        doc = {"apiVersion": "kvpilot.dev/v1alpha1", "kind": "VLLMServer", "metadata": {"name": draw(_NAMES)}}
        doc["spec"] = draw(_SPECS)
        text = yaml.safe_dump(doc, sort_keys=False, allow_unicode=draw(st.booleans()))
        if draw(st.sampled_from([True, False, False])):  # a hostile fragment in place of one scalar field
            spec_at = text.index("\nspec:")
            leaves = [m.start(1) for m in _LEAF.finditer(text) if m.start(1) > spec_at]
            if leaves:
                at = draw(st.sampled_from(leaves))
                end = text.index("\n", at)
                text = text[:at] + draw(_FRAGMENTS).replace("\n", " ") + text[end:]
        texts.append(text)
    text = "---\n".join(texts)
    for _ in range(draw(st.sampled_from([0, 0, 0, 0, 1, 2, 3]))):  # byte-level noise: inserted, deleted, cut
        at = draw(st.integers(0, len(text)))
        kind = draw(st.sampled_from(["insert", "delete", "cut"]))
        if kind == "insert":
            text = text[:at] + draw(_NOISE) + text[at:]
        elif kind == "delete":
            text = text[:at] + text[at + draw(st.integers(1, 8)) :]
        else:
            text = text[:at]
    return text.encode()


_HEAD = b"apiVersion: kvpilot.dev/v1alpha1\nkind: VLLMServer\nmetadata: {name: q}\n"
_LINE = re.compile(r"^kvpilot: error: (?:-(?: \(document \d+\))?: |cannot read -: )(.+)$")


@settings(
    max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)
@given(documents())
@example(_HEAD + b"spec:\n  model: m\n  affinity: {nodeAffinity: " + b"[" * 500 + b"]" * 500 + b"}\n")
@example(_HEAD + b"spec: {model: m, ttlSeconds: " + b"9" * 5000 + b"}\n")
@example(_HEAD + b"spec:\n  model: m\n  env:\n  - name: X\n    valueFrom: " + _bomb(9, 9).encode() + b"\n")
@example(_HEAD + b"spec: {model: m, env: [{name: X, valueFrom: &x {a: *x}}]}\n")
@example(_HEAD + b"spec: {model: !!int abc}\n")
@example(_HEAD + b"spec: {model: m\xff\xfe}\n")  # not UTF-8
@example(_HEAD + b"spec:\n  model: m\n  podAnnotations: {\"\\_\": ''}\n")  # U+00A0 (no-break space) in the error line
def test_render_answers_any_text_with_objects_or_one_line(data):
    out = invoke(["render", "-"], results=(0,), refusals=(2,), stdin=data)
    if out.code == 0:
        event("rendered")
        doc = yaml.safe_load(out.stdout)
        assert (doc["apiVersion"], doc["kind"]) == ("v1", "List")
        assert [i["kind"] for i in doc["items"]] == ["Pod", "Service"] * (len(doc["items"]) // 2)
        assert doc["items"]
        for obj in doc["items"]:
            kubernetes_validate.validate(obj, "1.37", strict=True)
        return
    match = _LINE.match(out.errors[0])
    assert match, out.errors[0]
    reason = match.group(1)
    assert reason.strip(), out.errors[0]  # a reason after the place
    event(f"refused: {_kind(reason)}")


def _kind(reason: str) -> str:
    if "the bound is" in reason or "inside its own anchor" in reason:
        return "a bound"
    if reason.startswith("not valid YAML"):
        return "not YAML"
    if reason.startswith("not UTF-8"):
        return "not UTF-8"
    if reason.startswith("spec.env") and ".valueFrom" in reason.split(":")[0]:
        return "env valueFrom"
    if reason.startswith("spec"):
        return "another spec field"
    return reason.split(":")[0].split(" ")[0]  # kind, apiVersion, metadata.name, (document), no
