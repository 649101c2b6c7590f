"""``kvpilot kv`` text output read at 80 and 200 columns: the layer line adds up, an all-sliding-window
model shows what a request holds, nothing is split mid-word, and the exit status says whether it fits.
"""

from __future__ import annotations

import re

import pytest
from click.testing import CliRunner

from kvpilot.cli import cli

from .conftest import HF_CONFIGS

NEMOTRON = str(HF_CONFIGS / "nvidia__NVIDIA-Nemotron-3-Nano-30B-A3B-BF16.json")
PHI3 = str(HF_CONFIGS / "microsoft__Phi-3-mini-4k-instruct.json")
QWEN_72B = str(HF_CONFIGS / "Qwen__Qwen2.5-72B-Instruct.json")


def kv_text(*args: str, width: int = 80):
    result = CliRunner().invoke(cli, ["kv", *args], env={"COLUMNS": str(width)})
    return result, result.output


def _flat(text: str) -> str:
    """The table's cells read as prose: borders removed, wrapped lines rejoined."""
    return " ".join(re.sub(r"[│┌┐└┘├┤┬┴┼─]", " ", text).split())


@pytest.mark.parametrize("width", [80, 200])
def test_every_layer_is_accounted_for_in_the_attention_line(width):
    result, text = kv_text(NEMOTRON, "--kv-memory", "2GiB", "--max-model-len", "8192", width=width)
    assert result.exit_code == 0, text
    assert max(len(line) for line in text.splitlines()) <= width
    # hybrid_override_pattern of the config: 6 '*' (attention) + 23 'M' (Mamba2) + 23 '-'/'E' (MLP/MoE) = 52
    assert "52 layers: 6 full attention, 23 Mamba, 23 without KV cache (MLP/MoE)" in _flat(text)


def test_all_sliding_window_model_shows_the_per_request_window_term():
    result, text = kv_text(PHI3, "--kv-memory", "2GiB", "--max-model-len", "4096")
    assert result.exit_code == 0, text
    flat = _flat(text)
    # Phi-3-mini: every layer slides (window 2,047), so no byte grows with the whole request ...
    assert "bytes per token (per GPU) 0 B (0 KiB): no layer grows with the whole request" in flat
    # ... each request holds its window: 32 layers x 2 (K,V) x 32 heads x 96 x 2 bytes = 393,216 B per token,
    # for min(2,047 - 1 + 2,048, 4,096) = 4,094 tokens -> ceil(4,094 / 16) + 1 = 257 blocks x 16 x 393,216 B
    # = 1,616,904,192 B = 1.5059 GiB, printed in the bytes-per-token line and the window term's own line
    assert "each request holds 1.5059 GiB for its window" in flat
    assert "393,216 B per token x at most 4,094 tokens" in flat
    assert "= 1.5059 GiB" in flat


@pytest.mark.parametrize("width", [80, 200])
def test_no_flag_or_field_name_is_split(width):
    _, text = kv_text(QWEN_72B, "--kv-memory", "1GiB", "--max-model-len", "32768", width=width)
    lines = text.splitlines()
    assert max(len(line) for line in lines) <= width
    for word in ("max_model_len", "gpu_memory_utilization", "use_sliding_window", "max_position_embeddings"):
        whole = sum(line.count(word) for line in lines)
        rejoined = _flat(text).replace(" ", "").count(word.replace(" ", ""))
        assert whole == rejoined, word  # rejoining the lines finds no occurrence the lines do not show


def test_exit_status_1_when_one_request_does_not_fit():
    # Qwen2.5-72B: 2 x 80 layers x 8 KV heads x 128 x 2 bytes = 327,680 B per token; 32,768 tokens need
    # 10 GiB of KV, more than the 1 GiB given: computed (no error), does not fit -> exit 1, fits false
    result, text = kv_text(QWEN_72B, "--kv-memory", "1GiB", "--max-model-len", "32768")
    assert result.exit_code == 1
    assert "NO: vLLM refuses to start (exit status 1)" in _flat(text)
    result = CliRunner().invoke(cli, ["kv", QWEN_72B, "--kv-memory", "1GiB", "--max-model-len", "32768", "-o", "json"])
    assert result.exit_code == 1
    assert '"fits": false' in result.output
    # 1 GiB / (16 x 327,680 B) = 204 blocks, 203 usable (vLLM 0.29.0 keeps the null block out of the fit):
    # a 3,248-token request (203 blocks) fits -> exit 0; 3,264 tokens (204 blocks) do not -> exit 1
    result, _ = kv_text(QWEN_72B, "--kv-memory", "1GiB", "--max-model-len", "3248")
    assert result.exit_code == 0
    result, _ = kv_text(QWEN_72B, "--kv-memory", "1GiB", "--max-model-len", "3264")
    assert result.exit_code == 1


def test_help_documents_the_exit_status():
    result = CliRunner().invoke(cli, ["kv", "--help"], env={"COLUMNS": "200"})
    assert "Exit status: 0 computed and one --max-model-len request fits" in " ".join(result.output.split())
    assert "1 computed, but it does not fit" in " ".join(result.output.split())
