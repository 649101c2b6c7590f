"""Fuzz: ``kvpilot kv CONFIG [options]`` on generated config.json files and option values.

A config starts as one of the real configs of ``tests/fixtures/hf-configs`` (dense, GQA, MLA, sliding window,
hybrid Mamba and linear attention, multimodal ``text_config``); then fields ``kvpilot.kv`` reads are set to
hostile values (zero, negative, huge, 120-digit integers, floats, strings, lists, mappings, null, booleans),
deleted, nested inside ``text_config`` or replaced by hostile JSON text (nesting up to 3,000 deep, numbers
of up to 6,000 digits, ``1e400``, ``NaN``), or the text is cut short. Options are drawn from valid and
hostile values: parallel sizes, ``--max-model-len``, ``--block-size``, sizes, ``--kv-cache-dtype``,
``--speculative-config`` JSON. Property (``tests/support/fuzz.py``): exit 0 or 1 with numbers (``-o json``:
a JSON object whose ``bytes_per_token`` is a whole number and whose ``fits`` agrees with the exit code),
or exit 2 with exactly one line (2 is also click's usage error, naming the option); never an exception,
never more than 5 s of CPU. The Hub is never asked: CONFIG is a file and ``HF_HUB_OFFLINE=1``.
"""

from __future__ import annotations

import json
import os
import tempfile

import pytest
from hypothesis import HealthCheck, event, example, given, settings
from hypothesis import strategies as st

from tests.conftest import FIXTURES
from tests.support.fuzz import EXAMPLES, invoke

CONFIGS = {p.stem: json.loads(p.read_text()) for p in sorted((FIXTURES / "hf-configs").glob("*.json"))}

#: fields kvpilot.kv reads (kv/spec.py, kv/speculative.py)
_FIELDS = [
    "num_hidden_layers",
    "num_attention_heads",
    "num_key_value_heads",
    "hidden_size",
    "head_dim",
    "torch_dtype",
    "dtype",
    "max_position_embeddings",
    "sliding_window",
    "use_sliding_window",
    "max_window_layers",
    "sliding_window_pattern",
    "layer_types",
    "kv_lora_rank",
    "qk_rope_head_dim",
    "text_config",
    "model_type",
    "full_attention_interval",
    "attn_layer_period",
    "attn_layer_offset",
    "hybrid_override_pattern",
    "num_nextn_predict_layers",
    "quantization_config",
    "mamba_d_state",
    "linear_num_key_heads",
]
_VALUES = st.one_of(
    st.integers(-3, 5),
    st.integers(-(2**70), 2**70),
    st.integers(1, 9).map(lambda d: int(str(d) * 120)),  # 120 digits: beyond the loader's bound
    st.floats(allow_nan=False, allow_infinity=False),
    st.sampled_from(["", "bfloat16", "float16", "fp8", "auto", "x", "32", "M*-E", "full_attention"]),
    st.lists(st.sampled_from(["full_attention", "sliding_attention", "linear_attention", 1, None]), max_size=6),
    st.dictionaries(st.sampled_from(_FIELDS), st.integers(-1, 64), max_size=3),
    st.none(),
    st.booleans(),
)
_TEXT = st.one_of(
    st.integers(1, 3000).map(lambda n: "[" * n + "]" * n),
    st.integers(1, 6000).map(lambda n: "9" * n),
    st.sampled_from(["1e400", "-1e400", "NaN", "Infinity", "1e308", "-0", "0.5", '"\\ud800"', "[]", "{}"]),
)


@st.composite
def config_text(draw: st.DrawFn) -> str:
    config = dict(CONFIGS[draw(st.sampled_from(sorted(CONFIGS)))])
    target = config
    if isinstance(config.get("text_config"), dict) and draw(st.booleans()):
        target = config["text_config"] = dict(config["text_config"])
    marks = {}
    for _ in range(draw(st.sampled_from([0, 1, 1, 2, 3]))):
        name = draw(st.sampled_from(_FIELDS))
        choice = draw(st.sampled_from(["value", "value", "delete", "text"]))
        if choice == "delete":
            target.pop(name, None)
        elif choice == "value":
            target[name] = draw(_VALUES)
        else:
            mark = f"@@{len(marks)}@@"
            marks[mark] = draw(_TEXT)
            target[name] = mark
    text = json.dumps(config)
    for mark, fragment in marks.items():
        text = text.replace(json.dumps(mark), fragment)
    if draw(st.sampled_from(range(12))) == 0:
        text = text[: draw(st.integers(0, len(text)))]  # cut short
    return text


#: option -> (values a user means, values that are wrong); most examples use the first, one in four gets one wrong
_OPTION_VALUES = {
    "--tensor-parallel-size": (["1", "2", "4", "8"], ["3", "0", "-1", "64"]),
    "--pipeline-parallel-size": (["1", "2"], ["3", "0"]),
    "--data-parallel-size": (["1", "2"], ["0"]),
    "--max-model-len": (["1", "4096", "32768", "131072"], ["0", "-5", str(10**30), "x"]),
    "--block-size": (["16", "32", "64"], ["1", "0", "7"]),
    "--gpu-memory-utilization": (["0.9", "0.5", "1"], ["0", "1.5", "-0.1", "nan", "inf"]),
    "--max-num-batched-tokens": (["2048", "8192"], ["1", "0", "-1", str(10**20)]),
    "--max-num-seqs": (["1", "256"], ["0"]),
    "--kv-memory": (["2GiB", "0.5GiB", "16GB", "80GiB"], ["0GiB", "1e9GiB", "10", "-1GiB", "abc"]),
    "--gpu-memory": (["24GiB", "80GiB"], ["0GiB", "10", "abc"]),
    "--weights-memory": (["14GiB", "1GiB"], ["-1GiB", "10"]),
    "--overhead-memory": (["1GiB"], ["abc"]),
    "--free-gpu-memory": (["20GiB", "70GiB"], ["10"]),
    "--kv-cache-dtype": (["auto", "fp8", "bfloat16"], ["fp8_ds_mla", "int4"]),
    "--speculative-config": (
        [
            '{"method": "mtp"}',
            '{"method": "mtp", "num_speculative_tokens": 2}',
            '{"method": "ngram", "num_speculative_tokens": 3}',
        ],
        [
            '{"method": "eagle"}',
            '{"num_speculative_tokens": ' + "9" * 200 + "}",
            "[" * 2000,
            "{",
            "null",
            '{"method": "mtp", "num_speculative_tokens": -1}',
        ],
    ),
    "-o": (["json", "json", "text"], []),
}


@st.composite
def options(draw: st.DrawFn) -> dict[str, str]:
    chosen = draw(st.lists(st.sampled_from(sorted(_OPTION_VALUES)), max_size=6, unique=True))
    out = {name: draw(st.sampled_from(_OPTION_VALUES[name][0])) for name in chosen}
    wrong = [name for name in chosen if _OPTION_VALUES[name][1]]
    if wrong and draw(st.sampled_from([True, False, False, False])):
        name = draw(st.sampled_from(wrong))
        out[name] = draw(st.sampled_from(_OPTION_VALUES[name][1]))
    return out


@pytest.fixture(autouse=True)
def _offline(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # a draft model named by --speculative-config is never fetched


@settings(
    max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)
@given(config_text(), options())
@example('{"num_hidden_layers": ' + "9" * 5000 + "}", {"--kv-memory": "2GiB"})
@example('{"text_config": ' + "[" * 3000 + "]" * 3000 + "}", {})
@example(json.dumps({**CONFIGS["meta-llama__Llama-3.1-8B-Instruct"], "num_hidden_layers": 10**9}), {})  # 8 GB of layers
@example(json.dumps({**CONFIGS["Qwen__Qwen2.5-1.5B-Instruct"], "num_key_value_heads": 1e308}), {})  # OverflowError
@example(json.dumps({**CONFIGS["openai__gpt-oss-20b"], "sliding_window": ""}), {})  # TypeError in the text output
@example(json.dumps(CONFIGS["meta-llama__Llama-3.1-8B-Instruct"]), {"--kv-memory": "2.89GiB", "-o": "json"})
def test_kv_answers_any_config_with_numbers_or_one_line(text, options):
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "config.json")
        with open(path, "w", encoding="utf-8") as fh:
            fh.write(text)
        args = ["kv", path, *[part for option, value in options.items() for part in (option, value)]]
        out = invoke(args, results=(0, 1), refusals=(2,))
    if out.code == 2:
        line = out.errors[0]
        event("refused: " + ("an option" if line.startswith("Error: ") else line.split(": ")[2].split(" ")[0][:40]))
        return
    event(f"computed, exit {out.code}")
    if options.get("-o") == "json":
        doc = json.loads(out.stdout)
        # 0 when no layer grows with the whole request (every layer sliding): kv says so in its text output
        assert isinstance(doc["bytes_per_token"], int)
        assert doc["bytes_per_token"] >= 0
        check = doc["startup_memory_check"]
        assert (out.code == 1) == (doc["fits"] is False or (check is not None and not check["feasible"]))
