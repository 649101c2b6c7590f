"""`kvpilot demo`'s analysis sections: KV math, the founding measurement, a diagnosis per scenario.

Expected numbers are worked out by hand from background.md (§2, §4, §9) and the scenarios'
definitions, never read back from the code under test.
"""

from __future__ import annotations

import contextlib
import io

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


def test_kv_section_quantifies_each_flag_change():
    _, text = _run_sections(demo_analysis.section_kv)
    # 2 x 28 layers x 2 KV heads x 128 x 2 bytes (background.md §2)
    assert "28,672 bytes per token" in text
    # 21,520 tokens / 16 = 1,345 blocks, 1,344 usable (§4); 1,345 blocks / (8,192 / 16) = 2.63 requests
    assert "1,345 blocks of 16 (1,344 usable" in text and "2.63 requests of 8,192" in text
    # 0.60 -> 0.80 on 8 GiB: 21,520 x 28,672 + 0.2 x 8 x 2^30 = 2,335,008,358 bytes
    #   / (16 x 28,672 = 458,752 bytes per block) = 5,089 blocks = 81,424 tokens
    assert "81,424" in text
    # fp8: 617,021,440 bytes / (16 x 14,336) = 2,690 blocks = 43,040 tokens
    assert "43,040" in text


def test_engine_section_reproduces_the_founding_measurement():
    _, text = _run_sections(demo_analysis.section_engine)
    # background.md §9: 0, 0, 21,488 GPU hits; with 1.5 GiB CPU tier pass 2 = 10 x 19 x 256 = 48,640
    rows = {line.split("│")[1].strip(): line for line in text.splitlines() if line.count("│") >= 5}
    assert "│ 0 " in rows["first"] and "│ 0 " in rows["second"] and "21,488" in rows["reversed"]
    assert "0 / 48,640" in rows["second"]


def test_diagnose_section_names_each_scenario_s_bottleneck():
    ctx, text = _run_sections(demo_analysis.section_diagnose)
    # the verdict each scenario is built to produce (shared with the diagnose tests)
    assert ctx.extra["diagnoses"] == {name: EXPECTED[name] for name in demo_analysis.DIAGNOSED}
    assert set(ctx.extra["diagnoses"].values()) == {
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
