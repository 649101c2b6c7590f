"""The bounded YAML/JSON loader: each bound on both sides, the path it names, and hostile inputs.

The node counts are worked out by hand in each test: every composed node counts one (a mapping, a
sequence, a scalar, a mapping's key), an alias the nodes of what it repeats.
"""

from __future__ import annotations

import time
import tracemalloc

import pytest

from kvpilot.text.documents import (
    MAX_DEPTH,
    MAX_INT_DIGITS,
    MAX_NODES,
    DocumentError,
    check_bounds,
    load_json,
    load_yaml,
    load_yaml_documents,
)


def _nested_list(levels: int) -> list:
    value: list = []
    for _ in range(levels - 1):
        value = [value]
    return value


def test_the_bounds_are_the_documented_numbers():
    assert (MAX_DEPTH, MAX_INT_DIGITS, MAX_NODES) == (64, 100, 100_000)


# ------------------------------------------------------------------ depth


@pytest.mark.parametrize("load", [load_yaml, load_json])
def test_64_levels_are_read_and_65_are_refused_naming_the_path(load):
    assert load("[" * 64 + "]" * 64) == _nested_list(64)
    with pytest.raises(DocumentError) as info:
        load("[" * 65 + "]" * 65)
    assert info.value.path == "[0]" * 64  # the 65th level is the only element of the 64th
    assert "nested too deeply" in info.value.message
    assert "the bound is 64" in info.value.message


def test_depth_counts_mappings_and_not_the_scalar_at_the_bottom():
    inside = "{a: " * 63 + "{b: 1}" + "}" * 63  # 64 mappings, a scalar in the last
    assert load_yaml(inside) is not None
    with pytest.raises(DocumentError) as info:
        load_yaml("{a: " * 64 + "{b: 1}" + "}" * 64)
    assert info.value.path == ".".join(["a"] * 64)


def test_the_500_deep_affinity_of_issue_24_is_refused_in_the_composer():
    # was: RecursionError in PyYAML's composer (exit 70)
    text = "spec:\n  affinity: {nodeAffinity: " + "[" * 500 + "]" * 500 + "}\n"
    with pytest.raises(DocumentError) as info:
        load_yaml(text)
    assert info.value.path.startswith("spec.affinity.nodeAffinity[0][0]")
    assert info.value.path.endswith("…")  # cut at 200 characters: one readable line
    assert "the bound is 64" in info.value.message


def test_json_deeper_than_pythons_own_parser_names_the_document():
    with pytest.raises(DocumentError) as info:
        load_json("[" * 100_000)  # RecursionError inside json.loads, about 1,000 levels down
    assert info.value.path == "(document)"
    assert "nested too deeply" in info.value.message


def test_check_bounds_walks_decoded_values_the_same_way():
    check_bounds({"a": _nested_list(63)}, "spec")  # the mapping is level 1, the lists 2..64
    with pytest.raises(DocumentError) as info:
        check_bounds({"a": _nested_list(64)}, "spec")
    assert info.value.path == "spec.a" + "[0]" * 63


# ------------------------------------------------------------------ integers


@pytest.mark.parametrize("sign", ["", "-"])
def test_100_digits_are_read_and_101_are_refused(sign):
    ok, big = sign + "9" * 100, sign + "1" + "0" * 100
    assert load_yaml(f"ttlSeconds: {ok}") == {"ttlSeconds": int(ok)}
    assert load_json(f'{{"ttlSeconds": {ok}}}') == {"ttlSeconds": int(ok)}
    for load, text in ((load_yaml, f"ttlSeconds: {big}"), (load_json, f'{{"ttlSeconds": {big}}}')):
        with pytest.raises(DocumentError) as info:
            load(text)
        assert info.value.path == "ttlSeconds"
        assert info.value.message == "an integer of 101 digits (the bound is 100 digits)"


def test_yaml_integer_digits_leave_out_separators_and_count_other_bases():
    assert load_yaml("n: " + "_".join(["1" * 10] * 10)) == {"n": int("1" * 100)}  # 100 digits, 9 underscores
    with pytest.raises(DocumentError) as info:
        load_yaml("n: 0x" + "f" * 99)  # 0x + 99 hex digits: 101 characters
    assert info.value.message.startswith("an integer of 101 digits")


def test_the_5000_digit_ttl_seconds_of_issue_24_names_the_field():
    # was: ValueError "Exceeds the limit (4300 digits) for integer string conversion" (exit 70)
    with pytest.raises(DocumentError) as info:
        load_yaml_documents("spec:\n  ttlSeconds: " + "9" * 5000 + "\n")
    assert str(info.value) == "spec.ttlSeconds: an integer of 5000 digits (the bound is 100 digits)"
    with pytest.raises(DocumentError) as info:
        check_bounds({"ttlSeconds": 10**5000}, "spec")  # 1 and 5000 zeros
    assert str(info.value) == "spec.ttlSeconds: an integer of 5001 digits (the bound is 100 digits)"


def test_check_bounds_measures_integers_on_both_sides():
    check_bounds({"n": 10**100 - 1, "m": -(10**100 - 1), "flag": True})  # 100 nines
    with pytest.raises(DocumentError, match="an integer of 101 digits"):
        check_bounds({"n": 10**100})


def test_json_numbers_beyond_a_float_and_non_numbers_are_refused():
    assert load_json('{"x": 1e308}') == {"x": 1e308}
    with pytest.raises(DocumentError) as info:
        load_json('{"x": [1, 1e400]}')
    assert str(info.value) == "x[1]: 1e400 is beyond the range of a number"
    for constant in ("NaN", "Infinity", "-Infinity"):
        with pytest.raises(DocumentError, match=f"{constant.lstrip('-')} is not a JSON number"):
            load_json(f'{{"x": {constant}}}')


# ------------------------------------------------------------------ alias expansion


def _aliases(repeats: int, extra: str = "") -> str:
    """A root sequence: an anchored list of 368 scalars, then ``repeats`` aliases of it.

    Nodes: the root 1, the anchored list 1 + 368, each alias 369: 1 + 369 * (repeats + 1).
    """
    return "[&x [" + ", ".join(["1"] * 368) + "]" + ", *x" * repeats + extra + "]"


def test_aliases_count_what_they_repeat_up_to_the_bound():
    assert len(load_yaml(_aliases(270))) == 271  # 1 + 369 * 271 = 100,000 nodes: read
    with pytest.raises(DocumentError) as info:
        load_yaml(_aliases(270, ", 1"))  # one scalar more: 100,001
    assert info.value.path == "[271]"
    assert "more than 100,000 nodes" in info.value.message
    with pytest.raises(DocumentError) as info:
        load_yaml(_aliases(271))  # an alias more: 100,369, refused at that alias
    assert info.value.path == "[271]"


def test_the_857_byte_alias_bomb_of_issue_24_is_refused_at_once():
    # was: 105 s and 1.96 GB in validation, then SIGABRT (nine levels of nine aliases: 9^9 leaves)
    levels = ["a0: &a0 [" + ", ".join(['"x"'] * 9) + "]"]
    levels += [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]" for i in range(1, 9)]
    text = "spec:\n  env:\n  - name: X\n    valueFrom:\n" + "".join(f"      {line}\n" for line in levels)
    tracemalloc.start()
    started = time.process_time()
    with pytest.raises(DocumentError) as info:
        load_yaml_documents(text)
    cpu = time.process_time() - started
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    # 10 nodes down to valueFrom's mapping; anchors of 10, 91, 820, 7,381, 66,430 nodes (1 + 9 x the one
    # before), each with its key: 74,747; a5's key and list 74,749; its first alias adds 66,430 > 100,000
    assert info.value.path == "spec.env[0].valueFrom.a5[0]"
    assert cpu < 5
    assert peak < 50 * 2**20


def test_an_alias_inside_its_own_anchor_is_a_cycle():
    with pytest.raises(DocumentError) as info:
        load_yaml("a: &x [1, *x]")
    assert str(info.value) == "a[1]: the alias *x is inside its own anchor (a cycle)"


def test_merge_keys_and_aliases_still_read_as_pyyaml_reads_them():
    doc = load_yaml("base: &b {x: 1, y: 2}\nfirst: {<<: *b, z: 3}\n")
    assert doc == {"base": {"x": 1, "y": 2}, "first": {"x": 1, "y": 2, "z": 3}}


def test_every_document_of_a_stream_gets_its_own_count():
    one = _aliases(270)  # 100,000 nodes
    assert len(load_yaml_documents(f"{one}\n---\n{one}\n---\n")) == 2


# ------------------------------------------------------------------ errors that are YAML's or JSON's own


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("a: [", "not valid YAML at line 1, column 5: expected the node content"),
        ("a: !!int abc", "not valid YAML at line 1, column 4: not a valid int"),  # was a ValueError
        ("a: 2024-13-01", "not valid YAML at line 1, column 4: not a valid timestamp"),  # ditto
        ("a: !!timestamp \ufeff2024-13-01", "not valid YAML at line 1, column 4: not a valid timestamp"),  # no date
        ("a: !!timestamp soon", "not valid YAML at line 1, column 4: not a valid timestamp"),  # PyYAML: AttributeError
        ("a: *nowhere", "found undefined alias"),
        ("a: 1\n\x00", "not valid YAML: unacceptable character #x0000"),
        ("? [a]\n: 1", "found unhashable key"),
        ("a: !!python/object:os.system x", "could not determine a constructor"),
    ],
)
def test_yaml_errors_are_one_document_error(text, words):
    with pytest.raises(DocumentError) as info:
        load_yaml(text)
    assert words in str(info.value)
    assert "\n" not in str(info.value)


def test_load_yaml_wants_one_document():
    assert load_yaml("") is None
    with pytest.raises(DocumentError, match="holds 2 YAML documents"):
        load_yaml("a: 1\n---\nb: 2\n")


def test_json_syntax_errors_say_where():
    with pytest.raises(DocumentError) as info:
        load_json('{"a": }')
    assert str(info.value) == "not valid JSON (line 1 column 7: Expecting value)"


def test_a_path_quotes_keys_that_are_not_plain_and_cuts_long_ones():
    with pytest.raises(DocumentError) as info:
        load_json('{"a b\\n": {"' + "k" * 50 + '": ' + "1" * 101 + "}}")
    assert info.value.path == '["a b\\n"].' + "k" * 40 + "…"
    assert info.value.path.isprintable()
