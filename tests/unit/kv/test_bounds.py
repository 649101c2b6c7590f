"""Every number `kvpilot kv` reads is bounded (kvpilot.kv.bounds, docs/kv.md "Bounds"), and results no GPU
could hold are refused, not printed: each case exits 2 with one line naming the field or option, never an
internal error, an OverflowError or a MemoryError.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from kvpilot.cli import cli
from kvpilot.kv import KVConfigError, capacity, kv_spec_from_config
from kvpilot.kv.bounds import MAX_LAYERS

from .conftest import GIB, hf_config

QWEN = hf_config("Qwen__Qwen2.5-1.5B-Instruct")
JAMBA = hf_config("ai21labs__Jamba-v0.1")
DIGITS_400 = int("9" * 400)


def _kv(tmp_path: Path, config: dict, *args: str):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    return CliRunner().invoke(cli, ["kv", str(path), *args])


def _one_line_naming(result, field: str, file: Path | None = None) -> None:
    """One line naming ``field``; a field of the config.json after the file (an option alone)."""
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    # a number beyond the bounds of every file kvpilot reads (kvpilot.text.documents: 100 digits) is refused
    # while the file is read, and a value beyond kvpilot.kv's bounds once it is read: the file named before the field
    where = "" if file is None else re.escape(str(file)) + ": "
    assert lines == [lines[0]], result.output
    assert re.match(rf"kvpilot: error: {where}{re.escape(field)}: ", lines[0]), result.output
    assert "internal error" not in result.output
    assert "Error:" not in result.output.split(": error: ")[0]


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"num_key_value_heads": 1e308}, "num_key_value_heads"),  # was: internal error: OverflowError (text output)
        ({"num_key_value_heads": DIGITS_400}, "num_key_value_heads"),  # was: OverflowError
        ({"num_hidden_layers": 1e30}, "num_hidden_layers"),  # was: cannot fit 'int' into an index-sized integer
        ({"num_hidden_layers": 2**53}, "num_hidden_layers"),  # was: MemoryError
        ({"num_hidden_layers": 10**8}, "num_hidden_layers"),  # was: 796 MB and 14 s
        ({"num_hidden_layers": -DIGITS_400}, "num_hidden_layers"),
        ({"num_attention_heads": 4097, "num_key_value_heads": 1}, "num_attention_heads"),
        ({"head_dim": 16_385}, "head_dim"),
        ({"hidden_size": 2**20 + 1}, "hidden_size"),
        ({"max_position_embeddings": 1e308}, "max_position_embeddings"),
        ({"sliding_window": DIGITS_400, "use_sliding_window": True}, "sliding_window"),
        ({"rope_scaling": {"type": "linear", "factor": 1e300}}, "rope_scaling.factor"),
        # 32,768 x 2^15 = 2^30 + ... tokens: a context above the 2^30 bound
        ({"rope_scaling": {"type": "linear", "factor": 32_769}}, "rope_scaling"),
    ],
)
def test_config_fields_above_their_bound_exit_2_naming_the_field(tmp_path, change, field):
    _one_line_naming(_kv(tmp_path, {**QWEN, **change}, "--kv-memory", "1GiB"), field, tmp_path / "config.json")


def test_a_hybrid_model_with_10_12_layers_is_refused_before_any_per_layer_work(tmp_path):
    # was: 44 s and 2.25 GB, then MemoryError
    result = _kv(tmp_path, {**JAMBA, "num_hidden_layers": 10**12}, "--kv-memory", "1GiB")
    _one_line_naming(result, "num_hidden_layers", tmp_path / "config.json")
    with pytest.raises(KVConfigError, match="^mamba_d_state: .* above 1,048,576"):
        kv_spec_from_config({**JAMBA, "mamba_d_state": DIGITS_400})


def test_layer_patterns_are_counted_not_listed():
    # Jamba at the bound: attention where layer % 8 == 4 -> layers 4, 12, ..., 4092: (4096 - 1 - 4) // 8 + 1 = 512
    spec = kv_spec_from_config({**JAMBA, "num_hidden_layers": MAX_LAYERS})
    assert spec.layer_counts == (("full_attention", 512), ("mamba", MAX_LAYERS - 512))
    # Gemma-2 (even layers slide) with 4,095 layers: 2,048 sliding, 2,047 full
    gemma2 = kv_spec_from_config({**hf_config("google__gemma-2-9b-it"), "num_hidden_layers": 4095})
    assert (gemma2.count("sliding_attention"), gemma2.count("full_attention")) == (2048, 2047)
    # Gemma-3: every 6th layer full: 62 layers -> 10 full, 52 sliding (the fixture's own count)
    gemma3 = kv_spec_from_config(hf_config("google__gemma-3-27b-it"))
    assert (gemma3.count("full_attention"), gemma3.count("sliding_attention")) == (10, 52)
    # Qwen3-Next: every 4th layer full: 48 -> 12 full, 36 linear
    nxt = kv_spec_from_config(hf_config("Qwen__Qwen3-Next-80B-A3B-Instruct"))
    assert (nxt.count("full_attention"), nxt.count("linear_attention")) == (12, 36)
    # an offset outside the period gives no attention layer (i % 8 is never 9)
    with pytest.raises(KVConfigError, match="no attention layer"):
        kv_spec_from_config({**JAMBA, "attn_layer_offset": 9})


def test_bytes_per_token_no_gpu_could_hold_is_refused_not_printed(tmp_path):
    # was: 1.6e22 bytes per token, exit 0. Here every field is within its bound, but 2 x 4,096 layers x 4,096 KV
    # heads x 16,384 x 2 bytes = 2^40 B per token: above the 1 GiB bound
    huge = {**QWEN, "num_hidden_layers": 4096, "num_attention_heads": 4096, "num_key_value_heads": 4096}
    result = _kv(tmp_path, {**huge, "head_dim": 16_384}, "--kv-memory", "1GiB")
    _one_line_naming(result, "config.json")
    assert "1,099,511,627,776 B of KV per token" in result.output


def test_kv_memory_above_the_gpu_s_memory_is_refused(tmp_path):
    # was: "fits yes" with a smallest utilization of -0.3081
    result = _kv(tmp_path, QWEN, "--kv-memory", "100GiB", "--gpu-memory", "80GiB")
    _one_line_naming(result, "--kv-memory")
    assert "more than the GPU's memory" in result.output


def test_kv_memory_above_utilization_x_total_gives_no_negative_utilization(tmp_path):
    # 79 GiB fits in 80 GiB but not in 0.92 x 80 = 73.6 GiB: the smallest utilization is not an answer then
    result = _kv(tmp_path, QWEN, "--kv-memory", "79GiB", "--gpu-memory", "80GiB", "-o", "json")
    assert result.exit_code == 0, result.output
    doc = json.loads(result.output)
    assert doc["min_gpu_memory_utilization_to_fit"] is None
    assert any("is more than --gpu-memory x --gpu-memory-utilization" in note for note in doc["notes"])
    # within the budget it is computed, and positive: (0.92 x 80 GiB - 60 GiB + 2,049 blocks x 458,752 B) / 80 GiB
    ok = json.loads(_kv(tmp_path, QWEN, "--kv-memory", "60GiB", "--gpu-memory", "80GiB", "-o", "json").output)
    expected = (0.92 * 80 * GIB - 60 * GIB + (32_768 // 16 + 1) * 16 * 28_672) / (80 * GIB)
    assert abs(ok["min_gpu_memory_utilization_to_fit"] - expected) < 1e-9


def test_free_memory_above_the_gpu_s_memory_is_refused(tmp_path):
    _one_line_naming(_kv(tmp_path, QWEN, "--gpu-memory", "80GiB", "--free-gpu-memory", "90GiB"), "--free-gpu-memory")


@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("--max-model-len", str(DIGITS_400)),
        ("--max-num-seqs", str(DIGITS_400)),  # was: internal error: OverflowError
        ("--max-num-batched-tokens", str(DIGITS_400)),
        ("--data-parallel-size", str(DIGITS_400)),
        ("--tensor-parallel-size", str(DIGITS_400)),
        ("--pipeline-parallel-size", str(DIGITS_400)),
    ],
)
def test_options_above_their_bound_exit_2_naming_the_option(tmp_path, option, value):
    _one_line_naming(_kv(tmp_path, QWEN, "--kv-memory", "1GiB", option, value), option)


@pytest.mark.parametrize("option", ["--kv-memory", "--gpu-memory", "--free-gpu-memory"])
def test_a_400_digit_size_is_a_usage_error_not_an_overflow(tmp_path, option):
    # was: internal error: OverflowError (float("9" * 400) is inf)
    args = (
        ["--gpu-memory", "80GiB", option, f"{DIGITS_400}GiB"]
        if option != "--gpu-memory"
        else [option, "9" * 400 + "GiB"]
    )
    result = _kv(tmp_path, QWEN, *args)
    assert result.exit_code == 2
    assert "too large to be a size" in result.output
    assert "internal error" not in result.output
    # a large finite size is refused by the memory bound (64 TiB), naming the option
    _one_line_naming(_kv(tmp_path, QWEN, "--kv-memory", "65537GiB"), "--kv-memory")


def test_the_api_refuses_what_the_cli_refuses():
    with pytest.raises(KVConfigError, match="^--max-model-len: .* above 1,073,741,824"):
        capacity(QWEN, max_model_len=DIGITS_400)
    with pytest.raises(KVConfigError, match="^--kv-memory: "):
        capacity(QWEN, kv_memory_bytes=2 * 80 * GIB, gpu_memory_bytes=80 * GIB)


@pytest.mark.parametrize("window", ["", "128", -1, 1e308, DIGITS_400 // 10**305])
def test_a_sliding_window_beside_layer_types_is_checked_too(tmp_path, window):
    """Found by tests/unit/kv/test_kv_fuzz.py: with ``layer_types`` the window was taken as given, so
    ``sliding_window: ""`` reached the text output (internal error: TypeError).
    """
    result = _kv(tmp_path, {**hf_config("openai__gpt-oss-20b"), "sliding_window": window})
    _one_line_naming(result, "sliding_window", tmp_path / "config.json")
    spec = kv_spec_from_config(hf_config("openai__gpt-oss-20b"))  # its own window, 128 tokens, is read
    assert spec.sliding_window == 128
