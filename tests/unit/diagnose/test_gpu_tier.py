"""vLLM's batch defaults for a GPU named without its memory: the tier comes from kvpilot's GPU profile.

``EngineArgs.get_batch_defaults`` (vllm/engine/arg_utils.py, vLLM 0.29.0, ``vllm serve``): 1,024 sequences
and 8,192 tokens from 70 GiB unless the device name says A100, 1,024 and 16,384 from 160 GiB, else 256 and
2,048. The H100 SXM and A100 80GB profiles hold 80 GiB (their datasheets), the L4 24 GiB.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from kvpilot.cli import cli
from kvpilot.diagnose.limits import Limit, resolve_limits

GIB = 2**30
CAP = Path(__file__).parents[2] / "fixtures" / "recordings" / "vllm" / "max-num-seqs-cap.om"


@pytest.mark.parametrize("name", ["H100", "h100-sxm", "H100_80GB", "h100 sxm"])
def test_a_named_gpu_without_memory_gets_the_tier_of_its_profile(name: str) -> None:
    lim = resolve_limits(gpu_name=name)
    assert lim.max_num_seqs == Limit(1024, "default")
    assert lim.max_num_batched_tokens == Limit(8192, "default")
    assert lim.gpu_memory_bytes == 80 * GIB
    assert lim.gpu_name == name
    assert lim.notes == (
        "max_num_seqs not configured anywhere readable: assumed vLLM's default 1,024 for a >= 70 GiB non-A100 GPU "
        "(80 GiB: the h100-sxm profile)",
        "max_num_batched_tokens not configured anywhere readable: assumed vLLM's default 8,192 for a >= 70 GiB "
        "non-A100 GPU (80 GiB: the h100-sxm profile)",
    )


@pytest.mark.parametrize("name", [None, "", "RTX 9999", "B200"])
def test_an_unknown_gpu_keeps_the_small_tier_and_its_note(name: str | None) -> None:
    lim = resolve_limits(gpu_name=name)
    assert (lim.max_num_seqs, lim.max_num_batched_tokens) == (Limit(256, "default"), Limit(2048, "default"))
    assert lim.gpu_memory_bytes is None
    note = (
        "max_num_batched_tokens not configured anywhere readable: assumed vLLM's default 2,048 for an unknown "
        "or < 70 GiB GPU"
    )
    # a name kvpilot has no profile for says how to give its tier; no name, nothing to add
    assert lim.notes[1] == (
        note + f" (GPU {name!r} has no kvpilot profile: --gpu-memory gives its tier)" if name else note
    )


@pytest.mark.parametrize("name", ["A100", "a100-80gb", "A100-80G"])
def test_an_a100_keeps_vllm_s_small_tier_at_80_gib(name: str) -> None:
    lim = resolve_limits(gpu_name=name)
    assert (lim.max_num_seqs.value, lim.max_num_batched_tokens.value) == (256, 2048)
    assert lim.gpu_memory_bytes == 80 * GIB
    tier = "for an A100, which keeps the small-GPU defaults under 160 GiB"
    assert lim.notes[1].endswith(f"2,048 {tier} (80 GiB: the a100-80gb profile)")
    # the same tier and note without a profile: an A100 whose memory was given
    given = resolve_limits(gpu_memory_bytes=80 * GIB, gpu_name="NVIDIA A100-SXM4-80GB")
    assert given.max_num_batched_tokens.value == 2048
    assert given.notes[1].endswith(f"2,048 {tier}")


def test_a_given_memory_wins_over_the_profile() -> None:
    small = resolve_limits(gpu_memory_bytes=24 * GIB, gpu_name="H100")
    assert (small.max_num_seqs.value, small.max_num_batched_tokens.value) == (256, 2048)
    assert small.gpu_memory_bytes == 24 * GIB
    assert small.notes[1].endswith("for an unknown or < 70 GiB GPU")  # no profile named: not its memory
    huge = resolve_limits(gpu_memory_bytes=192 * GIB, gpu_name="H100")
    assert (huge.max_num_seqs.value, huge.max_num_batched_tokens.value) == (1024, 16384)
    assert huge.notes[1].endswith("16,384 for a >= 160 GiB GPU")


def test_a_small_profile_names_its_memory() -> None:
    lim = resolve_limits(gpu_name="L4")
    assert (lim.max_num_seqs.value, lim.max_num_batched_tokens.value) == (256, 2048)
    assert lim.gpu_memory_bytes == 24 * GIB
    assert lim.notes[1].endswith("for an unknown or < 70 GiB GPU (24 GiB: the l4 profile)")


def test_configured_limits_need_no_tier() -> None:
    lim = resolve_limits(cli={"max_num_seqs": 4, "max_num_batched_tokens": 512}, gpu_name="H100")
    assert (lim.max_num_seqs, lim.max_num_batched_tokens) == (Limit(4, "cli"), Limit(512, "cli"))
    assert lim.notes == ()


def _limits_line(*args: str) -> str:
    result = CliRunner().invoke(
        cli, ["diagnose", "--no-kube", "--no-what-if", "--recording", str(CAP), "--max-num-seqs", "4", *args]
    )
    assert result.exit_code == 2, result.output  # critical: max_num_seqs_cap
    return " ".join(result.output.split())  # the report wraps at 80 columns


def test_the_user_guide_s_example_reads_the_h100_s_budget() -> None:
    # docs/user-guide.md: kvpilot diagnose --recording cap.om --max-num-seqs 4 --gpu-name H100
    for name in ("H100", "h100-sxm"):
        out = _limits_line("--gpu-name", name)
        assert "max_num_batched_tokens 8,192 (default)" in out
        assert "assumed vLLM's default 8,192 for a >= 70 GiB non-A100 GPU (80 GiB: the h100-sxm profile)" in out
    out = _limits_line("--gpu-name", "H100", "--gpu-memory", "24GiB")
    assert "max_num_batched_tokens 2,048 (default)" in out
    out = _limits_line("--gpu-name", "RTX 9999")
    assert "assumed vLLM's default 2,048 for an unknown or < 70 GiB GPU" in out
