"""``kvpilot simulate SCENARIO`` text report at 80 and 200 columns: fits, wraps on spaces, prints figures
as text.numbers does (no Python reprs), and keeps the founding measurement's figures readable.
"""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from kvpilot.cli import cli
from kvpilot.commands.simulate.report_text import value_text


@pytest.mark.parametrize("width", [80, 200])
def test_seed_lru_report_fits_and_reads(width):
    result = CliRunner().invoke(cli, ["simulate", "seed-lru"], env={"COLUMNS": str(width)})
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert max(len(line) for line in lines) <= width
    words = result.output.split()
    assert "None" not in words
    assert "True" not in words
    assert "False" not in words
    rows = {line.split()[0]: line.split()[1:] for line in lines if line.strip() and not line.startswith(" ")}
    # docs/engine.md, "The founding measurement": 21,520 KV tokens = 1,345 blocks, 1,344 usable
    assert rows["kv_cache_tokens"] == ["21,520"]
    assert rows["usable_blocks"] == ["1,344"]
    # the reversed pass hits 1,343 blocks x 16 = 21,488 tokens, whole on one line at any width
    assert any("prefix_cache_hit_tokens=21,488" in line for line in lines)


def test_value_text():
    assert value_text(None) == "none"
    assert value_text(None, "not set") == "not set"
    assert value_text(True) == "yes"
    assert value_text(False) == "no"
    assert value_text(16_000_000_000.0) == "16,000,000,000"
    assert value_text(1_449_551_462) == "1,449,551,462"
    # 4 / 21 = 0.190476...: four significant figures
    assert value_text(4 / 21) == "0.1905"
    assert value_text(0.0015) == "0.0015"


def test_config_figures_carry_their_units():
    # EngineConfig's defaults: 16e9 B/s load bandwidth, 1.5 ms step overhead, block size 16 tokens
    from kvpilot.commands.simulate.report_text import render_text

    config = {"block_size": 16, "offload_load_bandwidth": 16e9, "step_overhead": 1.5e-3, "weight_bytes": None}
    config |= {"gpu": "h100-sxm", "enable_prefix_caching": True}
    text = render_text({"config": config}, 80)
    assert "16 tokens" in text, text
    assert "16,000,000,000 B/s" in text, text
    assert "0.0015 s" in text, text
    assert "not set" in text, text
    assert "yes" in text, text
    assert "not set B" not in text, text
