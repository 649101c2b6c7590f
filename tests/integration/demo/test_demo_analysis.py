"""`kvpilot demo`'s analysis sections: KV math, the founding measurement, a diagnosis per scenario.

Expected numbers are worked out by hand from docs/background.md (§2, §4, §9) and the scenarios'
definitions, never read back from the code under test.
"""

from __future__ import annotations

import contextlib
import io
import re

from rich.console import Console

from kvpilot.commands import demo, demo_analysis
from tests.integration.diagnose.scenario_flags import EXPECTED


def _run_sections(*sections):
    out = io.StringIO()
    with contextlib.ExitStack() as stack:
        ctx = demo.DemoContext(console=Console(file=out, width=400), stack=stack)
        ctx.server = demo.experiment_example()
        for section in sections:
            section(ctx)
    return ctx, out.getvalue()


def _table(text: str) -> dict[str, list[str]]:
    """Rows of the tables in ``text`` (cells are separated by two or more spaces), by first cell."""
    rows = [re.split(r"\s{2,}", line.strip()) for line in text.splitlines()]
    return {row[0]: row[1:] for row in rows if len(row) >= 4}


def test_kv_section_quantifies_each_flag_change():
    _, text = _run_sections(demo_analysis.section_kv)
    # 2 x 28 layers x 2 KV heads x 128 x 2 bytes (docs/background.md §2)
    assert "28,672 bytes per token" in text
    # 21,520 tokens / 16 = 1,345 blocks, 1,344 usable (§4); 1,345 blocks / (8,192 / 16) = 2.63 requests
    assert "1,345 blocks of 16 (1,344 usable" in text
    rows = _table(text)  # change -> KV tokens, max-model-len, concurrency
    assert rows["as deployed"] == ["21,520", "8,192", "2.63"]
    # 0.60 -> 0.80 on 8 GiB: 21,520 x 28,672 + 0.2 x 8 x 2^30 = 2,335,008,358 bytes
    #   / (16 x 28,672 = 458,752 bytes per block) = 5,089 blocks = 81,424 tokens; 5,089 / 512 = 9.94
    assert rows["--gpu-memory-utilization 0.6 -> 0.8"] == ["81,424", "8,192", "9.94"]
    # fp8: 617,021,440 bytes / (16 x 14,336) = 2,690 blocks = 43,040 tokens; 2,690 / 512 = 5.25
    assert rows["--kv-cache-dtype fp8"] == ["43,040", "8,192", "5.25"]
    # the shorter-requests row counts requests of ITS length: 1,345 blocks / (4,096 / 16) = 5.25
    assert rows["--max-model-len 4096"] == ["21,520", "4,096", "5.25"]


def test_engine_section_reproduces_the_founding_measurement():
    _, text = _run_sections(demo_analysis.section_engine)
    # docs/background.md §9: 0, 0, 21,488 GPU hits; with 1.5 GiB CPU tier pass 2 = 10 x 19 x 256 = 48,640
    rows = _table(text)  # pass -> hits, TTFT model/vLLM, CPU tier hits GPU+CPU, TTFT model/vLLM
    assert rows["first"][0] == "0"
    assert rows["second"][0] == "0"
    assert rows["reversed"][0] == "21,488"
    assert rows["second"][2] == "0 + 48,640"
    # the claim under the table, from the table's own figures (model / measured TTFT p50, ms):
    # (569.8 - 575.5) / 575.5 = -1.0 %, (569.8 - 576.2) / 576.2 = -1.1 %, (497.8 - 505.4) / 505.4 = -1.5 %,
    # CPU tier pass 1 (592.1 - 597.8) / 597.8 = -1.0 %: within 1.5 %; pass 2 (31.5 - 48.6) / 48.6 = -35 %
    assert [rows[p][1] for p in ("first", "second", "reversed")] == ["569.8 / 575.5", "569.8 / 576.2", "497.8 / 505.4"]
    assert rows["first"][3] == "592.1 / 597.8"
    assert rows["second"][3] == "31.5 / 48.6"
    flat = " ".join(text.split())
    assert "hit counts exactly" in flat
    assert "within 1.5 %" in flat
    assert "pass 2 is 35 % low" in flat
    assert 'docs/engine.md, "The founding measurement"' in flat


def test_diagnose_section_names_each_scenario_s_bottleneck():
    ctx, text = _run_sections(demo_analysis.section_diagnose)
    # the verdict each scenario is built to produce (shared with the diagnose tests)
    assert ctx.diagnoses == {name: EXPECTED[name] for name in demo_analysis.DIAGNOSED}
    assert set(ctx.diagnoses.values()) == {
        "kv_cache_exhaustion",
        "max_num_seqs_cap",
        "token_budget_cap",
        "compute_bound",
        "prefix_cache_ineffective",
        "healthy",
        "idle",
    }
    assert "--max-num-seqs 4 ->" in text  # the cap scenario runs with max_num_seqs 4


def test_packaged_model_config_is_the_real_one(fixtures_dir):
    import importlib.resources
    import json

    packaged = importlib.resources.files("kvpilot").joinpath("data/Qwen2.5-1.5B-Instruct.config.json").read_text()
    real = (fixtures_dir / "hf-configs" / "Qwen__Qwen2.5-1.5B-Instruct.json").read_text()
    assert json.loads(packaged) == json.loads(real)


def test_the_kv_command_the_demo_prints_reproduces_its_numbers_offline():
    import json
    import shlex

    from click.testing import CliRunner

    from kvpilot.cli import cli

    ctx, text = _run_sections(demo_analysis.section_kv)
    (command,) = [cmd for what, cmd in ctx.more if what == "KV math"]
    argv = shlex.split(command)
    assert argv[:2] == ["kvpilot", "kv"]
    assert argv[2].endswith("Qwen2.5-1.5B-Instruct.config.json")
    # 21,520 x 28,672 = 617,021,440 B = 0.574707... GiB: rounded down (0.5746GiB) it is 1,344 blocks, so the
    # demo rounds up: 0.5747GiB = 617,064,432 B, still 1,345 blocks of 458,752 B
    assert argv[argv.index("--kv-memory") + 1] == "0.5747GiB"
    result = CliRunner().invoke(cli, [*argv[1:], "-o", "json"], env={"HF_HUB_OFFLINE": "1"})
    assert result.exit_code == 0, result.output
    kv = json.loads(result.output)
    shown = _table(text)["as deployed"]  # the demo's KV tokens, max-model-len, concurrency
    assert [f"{kv['kv_tokens']:,}", f"{kv['inputs']['max_model_len']:,}", f"{kv['max_concurrency']:.2f}"] == shown
    assert (kv["kv_tokens"], kv["kv_blocks"]) == (21_520, 1_345)


def test_the_kv_command_names_the_config_from_where_the_demo_runs(tmp_path):
    # in the clone (the tests run from its root, as make demo does): relative, short enough for 80 columns
    from pathlib import Path

    root = Path(__file__).resolve().parents[3]
    inside = demo_analysis.kv_command(617_064_432, 458_752, 8192, cwd=root)
    assert inside.split()[2] == "operator/kvpilot/data/Qwen2.5-1.5B-Instruct.config.json"
    # anywhere else: the absolute path, which pastes from any directory
    outside = demo_analysis.kv_command(617_064_432, 458_752, 8192, cwd=tmp_path)
    assert outside.split()[2] == str(root / "operator/kvpilot/data/Qwen2.5-1.5B-Instruct.config.json")


def test_the_kv_memory_option_keeps_the_blocks_it_rounds():
    from kvpilot.commands._common import parse_size

    # any pool of whole blocks reads back as the same blocks, for block sizes of 16 x 6,144 B to 16 x 401,408 B
    for block_bytes in (16 * 6144, 16 * 28_672, 16 * 401_408):
        for blocks in (1, 7, 1345, 123_457):
            option = demo_analysis.kv_memory_option(blocks * block_bytes, block_bytes)
            assert parse_size(option) // block_bytes == blocks, (block_bytes, blocks, option)
