"""``kvpilot kv``: outputs, local folders with safetensors, and bad input (exit 2, field named, no traceback)."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys

import pytest
from click.testing import CliRunner

from kvpilot.cli import cli

from .conftest import GIB, HF_CONFIGS

LLAMA = str(HF_CONFIGS / "meta-llama__Llama-3.1-8B-Instruct.json")


def run(*args: str):
    return CliRunner().invoke(cli, ["kv", *args])


def test_json_keys_and_numbers():
    result = run(
        LLAMA,
        "--kv-memory",
        "2.89GiB",
        "--max-model-len",
        "29000",
        "--gpu-memory",
        "23.58GiB",
        "--gpu-memory-utilization",
        "0.9",
        "-o",
        "json",
    )
    assert result.exit_code == 1, result.output  # computed; does not fit: exit 1 (kv --help)
    doc = json.loads(result.output)
    assert {
        "bytes_per_token",
        "kv_tokens",
        "kv_blocks",
        "max_concurrency",
        "fits",
        "max_model_len_that_fits",
        "min_gpu_memory_utilization_to_fit",
        "estimate",
        "inputs",
    } <= set(doc)
    assert doc["bytes_per_token"] == 2 * 32 * 8 * 128 * 2
    # floor(2.89 GiB / (16 x 131,072 B)) = floor(1479.68) = 1,479 blocks
    assert doc["kv_blocks"] == 1479
    assert doc["kv_tokens"] == 1479 * 16
    # vLLM 0.29.0 plans the fit against the usable blocks (one is the null block): 1,478 x 16 = 23,648, the
    # "maximum number of tokens that can be stored in KV cache (23648)" case C01's log gives
    assert doc["fits"] is False
    assert doc["max_model_len_that_fits"] == 1478 * 16 == 23_648
    assert doc["inputs"]["max_model_len"] == 29000
    assert doc["inputs"]["kv_memory_bytes"] == round(2.89 * GIB)
    assert doc["estimate"] is False


def test_text_output_has_units():
    result = run(LLAMA, "--kv-memory", "2.89GiB", "--max-model-len", "29000")
    assert result.exit_code == 1, result.output  # computed; does not fit: exit 1 (kv --help)
    assert "131,072 B" in result.output
    assert "GiB" in result.output
    assert "23,664" in result.output
    assert "0.82x" in result.output
    assert "NO" in result.output


def test_help_has_examples_and_vllm_spellings():
    result = run("--help")
    assert result.exit_code == 0
    for flag in (
        "--kv-cache-dtype",
        "--tensor-parallel-size",
        "--data-parallel-size",
        "--max-model-len",
        "--block-size",
        "--gpu-memory-utilization",
        "--kv-memory",
        "--gpu-memory",
        "--weights-memory",
        "Examples:",
    ):
        assert flag in result.output


def test_folder_with_safetensors_gives_weights(tmp_path):
    (tmp_path / "config.json").write_text((HF_CONFIGS / "Qwen__Qwen2.5-1.5B-Instruct.json").read_text())
    with open(tmp_path / "model.safetensors", "wb") as f:
        f.truncate(3 * GIB)  # sparse file: 3 GiB of "weights"
    result = run(
        str(tmp_path),
        "--gpu-memory",
        "8GiB",
        "--gpu-memory-utilization",
        "0.6",
        "--overhead-memory",
        "1GiB",
        "--max-model-len",
        "8192",
        "-o",
        "json",
    )
    assert result.exit_code == 0, result.output
    doc = json.loads(result.output)
    # ceil(0.6 x 8 GiB) - 3 GiB - 1 GiB = 0.8 GiB (vLLM's request_memory rounds up); / (16 x 28,672 B) blocks
    assert doc["kv_memory_bytes"] == math.ceil(0.6 * 8 * GIB) - 3 * GIB - 1 * GIB
    assert doc["kv_blocks"] == (math.ceil(0.6 * 8 * GIB) - 4 * GIB) // (16 * 28_672)
    assert doc["estimate"] is True
    assert doc["inputs"]["weights_bytes"] == 3 * GIB


def test_safetensors_index_total_size_divided_by_tp(tmp_path):
    (tmp_path / "config.json").write_text((HF_CONFIGS / "Qwen__Qwen2.5-7B-Instruct.json").read_text())
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps({"metadata": {"total_size": 15_231_233_024}}))
    result = run(str(tmp_path), "--gpu-memory", "24GiB", "--tensor-parallel-size", "2", "-o", "json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["inputs"]["weights_bytes"] == 15_231_233_024 // 2


@pytest.mark.parametrize(
    ("config", "args", "field"),
    [
        ({"num_attention_heads": 32, "hidden_size": 4096}, [], "num_hidden_layers"),
        ({"num_hidden_layers": 32, "num_attention_heads": 0, "hidden_size": 4096}, [], "num_attention_heads"),
        (
            {"num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 0, "hidden_size": 4096},
            [],
            "num_key_value_heads",
        ),
        ({"num_hidden_layers": "many", "num_attention_heads": 32, "hidden_size": 4096}, [], "num_hidden_layers"),
        (
            {"num_hidden_layers": 2, "num_attention_heads": 2, "hidden_size": 8, "torch_dtype": "bfloat17"},
            [],
            "torch_dtype",
        ),
        (
            {"num_hidden_layers": 2, "num_attention_heads": 2, "hidden_size": 8, "max_position_embeddings": 64},
            ["--kv-cache-dtype", "int3"],
            "--kv-cache-dtype",
        ),
        ({"num_hidden_layers": 2, "num_attention_heads": 2, "hidden_size": 8}, [], "--max-model-len"),
        (
            {"num_hidden_layers": 2, "num_attention_heads": 2, "hidden_size": 8, "max_position_embeddings": 64},
            ["--gpu-memory", "8GiB"],
            "--weights-memory",
        ),
        (
            {"num_hidden_layers": 2, "num_attention_heads": 2, "hidden_size": 8, "max_position_embeddings": 64},
            ["--gpu-memory-utilization", "1.5", "--kv-memory", "1GiB"],
            "--gpu-memory-utilization",
        ),
        (
            {"num_hidden_layers": 2, "num_attention_heads": 2, "hidden_size": 8, "max_position_embeddings": 64},
            ["--kv-memory", "lots"],
            "--kv-memory",
        ),
        (
            {"num_hidden_layers": 2, "num_attention_heads": 2, "hidden_size": 8, "max_position_embeddings": 64},
            ["--tensor-parallel-size", "0"],
            "--tensor-parallel-size",
        ),
        ([1, 2, 3], [], "config.json"),
    ],
)
def test_bad_input_exits_2_naming_the_field(tmp_path, config, args, field):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    result = run(str(path), *args)
    assert result.exit_code == 2, result.output
    assert field in result.output
    assert "Traceback" not in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)


def test_non_json_and_missing_file(tmp_path):
    bad = tmp_path / "config.json"
    bad.write_text("{ not json")
    result = run(str(bad))
    assert result.exit_code == 2
    assert "not valid JSON" in result.output
    result = run(str(tmp_path / "nope.json"))
    assert result.exit_code == 2
    assert "no such file" in result.output
    empty = tmp_path / "empty"
    empty.mkdir()
    result = run(str(empty))
    assert result.exit_code == 2
    assert "no config.json" in result.output


def test_offline_hub_id_names_what_to_download(tmp_path):
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path)}
    proc = subprocess.run(
        [sys.executable, "-m", "kvpilot.cli", "kv", "someorg/some-model"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert proc.returncode == 2
    assert "https://huggingface.co/someorg/some-model/resolve/main/config.json" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert proc.stderr.count("\n") == 1  # one line


def _hub_at(tmp_path, endpoint: str, **extra: str) -> dict:
    """An environment whose Hub is ``endpoint``, with an empty cache and online mode."""
    env = {**os.environ, "HF_ENDPOINT": endpoint, "HF_HOME": str(tmp_path / "hf"), **extra}
    env.pop("HF_HUB_OFFLINE", None)
    env.pop("TRANSFORMERS_OFFLINE", None)
    return env


def _kv_hub(env: dict) -> subprocess.CompletedProcess:
    # The subprocess timeout bounds the run: without a bound, huggingface_hub retries the metadata
    # request 5 times with backoff (1+2+4+8+8 s of sleeps) and logs ~10 warnings, > 23 s in all.
    return subprocess.run(
        [sys.executable, "-m", "kvpilot.cli", "kv", "someorg/some-model"],
        capture_output=True,
        text=True,
        env=env,
        timeout=20,
    )


def test_unreachable_hub_fails_at_once_with_one_line(tmp_path):
    import socket

    with socket.socket() as probe:  # a loopback port nobody listens on: connection refused
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    proc = _kv_hub(_hub_at(tmp_path, f"http://127.0.0.1:{port}"))
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1, proc.stderr  # one line: no retry warnings
    assert "Retry" not in proc.stderr
    assert "Traceback" not in proc.stderr
    assert "cannot fetch config.json of someorg/some-model" in proc.stderr
    assert "Connection refused" in proc.stderr
    assert "https://huggingface.co/someorg/some-model/resolve/main/config.json" in proc.stderr


def test_silent_hub_times_out_after_hf_hub_etag_timeout(tmp_path):
    import socket

    with socket.socket() as silent:  # accepts connections (kernel backlog) but never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(16)
        env = _hub_at(tmp_path, f"http://127.0.0.1:{silent.getsockname()[1]}", HF_HUB_ETAG_TIMEOUT="1")
        proc = _kv_hub(env)
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1, proc.stderr
    assert "no answer within 1 s" in proc.stderr


def test_hub_id_downloads_config_and_weight_index(tmp_path, monkeypatch):
    import huggingface_hub

    (tmp_path / "config.json").write_text((HF_CONFIGS / "Qwen__Qwen2.5-7B-Instruct.json").read_text())
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps({"metadata": {"total_size": 15_231_233_024}}))
    calls = []

    def fake_download(repo_id, filename, **_kwargs):
        calls.append((repo_id, filename))
        return str(tmp_path / filename)

    def fake_metadata(_url, **kwargs):  # the one bounded HEAD that decides "reachable" first
        assert kwargs["timeout"] == 5.0  # kvpilot.kv.hub's default per-request bound (seconds)
        return object()

    monkeypatch.delenv("HF_HUB_ETAG_TIMEOUT", raising=False)
    monkeypatch.setattr(huggingface_hub, "hf_hub_download", fake_download)
    monkeypatch.setattr(huggingface_hub, "get_hf_file_metadata", fake_metadata)
    result = run(
        "Qwen/Qwen2.5-7B-Instruct",
        "--gpu-memory",
        "24GiB",
        "--overhead-memory",
        "1GiB",
        "--max-model-len",
        "8192",
        "-o",
        "json",
    )
    assert result.exit_code == 0, result.output
    doc = json.loads(result.output)
    assert calls == [
        ("Qwen/Qwen2.5-7B-Instruct", "config.json"),
        ("Qwen/Qwen2.5-7B-Instruct", "model.safetensors.index.json"),
    ]
    assert doc["bytes_per_token"] == 2 * 28 * 4 * 128 * 2
    assert doc["kv_memory_bytes"] == math.ceil(0.92 * 24 * GIB) - 15_231_233_024 - GIB


def test_text_output_says_when_no_utilization_can_fit():
    # 16 GiB of weights on an 8 GiB GPU: even utilization 1.0 leaves no KV memory. The smallest
    # utilization that would fit one request is (16 + 1.35 + 4,096 x 131,072 B = 0.5 GiB) / 8 = 2.23 > 1:
    # impossible, so the text must say so rather than offer 2.23 as a setting.
    result = run(LLAMA, "--gpu-memory", "8GiB", "--weights-memory", "16GiB", "--max-model-len", "4096")
    assert result.exit_code == 1, result.output  # computed; does not fit: exit 1 (kv --help)
    line = next(x for x in result.output.splitlines() if "smallest gpu_memory_utilization" in x)
    assert "2.2312" not in line
    assert "none" in line


def test_tensor_parallel_that_does_not_divide_the_heads_is_refused():
    # Llama-3.1-8B has 32 attention heads; vLLM refuses TP 3 ("Total number of attention heads (32)
    # must be divisible by tensor parallel size (3)", ModelConfig.verify_with_parallel_config)
    result = run(LLAMA, "--kv-memory", "2GiB", "-tp", "3")
    assert result.exit_code == 2, result.output
    assert "--tensor-parallel-size" in result.output
    assert "num_attention_heads" in result.output
    assert isinstance(result.exception, SystemExit)
    # TP 16 > 8 KV heads divides the 32 query heads: allowed, KV heads replicated (131,072 / 8 per GPU);
    # 3 GiB holds the default 131,072-token request (2 GiB would hold exactly it, with no room for the null block)
    ok = run(LLAMA, "--kv-memory", "3GiB", "-tp", "16", "-o", "json")
    assert ok.exit_code == 0
    assert json.loads(ok.output)["bytes_per_token"] == 131072 // 8


C20A_ARGS = ("--gpu-memory", "22.05GiB", "--free-gpu-memory", "19.77GiB", "--gpu-memory-utilization", "0.9")


def test_c20a_free_gpu_memory_through_the_cli_json():
    # Case C20a (tests/fixtures/cases/C20a_*.json): "Free memory on device cuda:1 (19.77/22.05 GiB) on startup is
    # less than desired GPU memory utilization (0.9, 19.84 GiB)". By hand: requested = 0.9 x 22.05 = 19.845 GiB;
    # 19.77 < 19.845, so vLLM refuses to start, short by 19.845 - 19.77 = 0.075 GiB; the largest feasible
    # utilization is 19.77 / 22.05 = 0.89660 (0.8966 to 4 places).
    result = run(LLAMA, *C20A_ARGS, "-o", "json")
    assert result.exit_code == 1, result.output  # computed; does not fit: exit 1 (kv --help)
    check = json.loads(result.output)["startup_memory_check"]
    assert check["feasible"] is False
    assert round(check["requested_bytes"] / GIB, 3) == 19.845
    assert round(check["free_bytes"] / GIB, 2) == 19.77
    assert round(check["shortfall_bytes"] / GIB, 3) == 0.075
    assert round(check["max_feasible_utilization"], 4) == 0.8966
    assert check["gpu_memory_utilization"] == 0.9


def test_c20a_free_gpu_memory_through_the_cli_text():
    result = run(LLAMA, *C20A_ARGS)
    assert result.exit_code == 1, result.output  # computed; does not fit: exit 1 (kv --help)
    text = " ".join(result.output.replace("│", " ").split())
    assert "19.7700 GiB of 22.0500 GiB" in text
    assert "0.9 × 22.0500 GiB = 19.8450 GiB" in text
    assert "NO: vLLM refuses to start, short by 0.0750 GiB" in text
    assert "0.8966" in text


def test_enough_free_gpu_memory_starts():
    # 0.85 x 22.05 = 18.7425 GiB requested <= 19.77 GiB free: it starts, nothing short.
    result = run(
        LLAMA,
        "--gpu-memory",
        "22.05GiB",
        "--free-gpu-memory",
        "19.77GiB",
        "--gpu-memory-utilization",
        "0.85",
        "-o",
        "json",
    )
    assert result.exit_code == 0, result.output
    check = json.loads(result.output)["startup_memory_check"]
    assert check["feasible"] is True
    assert check["shortfall_bytes"] == 0
    assert round(check["requested_bytes"] / GIB, 4) == 18.7425


def test_free_gpu_memory_needs_the_total():
    result = run(LLAMA, "--free-gpu-memory", "19.77GiB")
    assert result.exit_code == 2
    assert "--free-gpu-memory" in result.output
    assert "--gpu-memory" in result.output


@pytest.mark.parametrize("size", ["7", "12", "512"])
def test_block_size_outside_vllms_choices_is_refused(size):
    # vllm/config/cache.py: BlockSize = Literal[1, 8, 16, 32, 64, 128, 256]; vLLM refuses any other --block-size
    result = run(LLAMA, "--kv-memory", "2.89GiB", "--block-size", size)
    assert result.exit_code == 2, result.output
    assert "--block-size" in result.output
    assert "1, 8, 16, 32, 64, 128, 256" in result.output


def test_block_size_32_is_accepted():
    # floor(2.89 GiB / (32 x 131,072 B)) = floor(3,103,113,871 / 4,194,304) = floor(739.84) = 739 blocks
    # = 739 x 32 = 23,648 tokens
    result = run(LLAMA, "--kv-memory", "2.89GiB", "--block-size", "32", "-o", "json")
    assert result.exit_code == 1, result.output  # computed; does not fit: exit 1 (kv --help)
    doc = json.loads(result.output)
    assert doc["kv_blocks"] == 739
    assert doc["kv_tokens"] == 23_648


@pytest.mark.parametrize(
    ("content", "words"),
    [
        (b'{"num_hidden_layers": NaN}', "NaN is not a JSON number"),  # RFC 8259 has no NaN/Infinity
        (b'{"num_hidden_layers": Infinity}', "Infinity is not a JSON number"),
        (b'{"model_type": "\xff\xfe"}', "not UTF-8"),
        (b"[" * 100_000, "nested too deeply"),  # was RecursionError
    ],
)
def test_unreadable_configs_exit_2_naming_the_file(tmp_path, content, words):
    path = tmp_path / "config.json"
    path.write_bytes(content)
    result = run(str(path), "--kv-memory", "2GiB")
    assert result.exit_code == 2, result.output
    assert words in result.output
    assert "Traceback" not in result.output


def test_string_max_window_layers_names_the_field(tmp_path):
    config = json.loads((HF_CONFIGS / "Qwen__Qwen2.5-7B-Instruct.json").read_text())
    config.update(use_sliding_window=True, sliding_window=4096, max_window_layers="x")
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    result = run(str(path), "--kv-memory", "2GiB")
    assert result.exit_code == 2, result.output
    assert "max_window_layers: must be a whole number, got 'x'" in result.output


def test_sizes_without_a_unit_are_refused_naming_the_option():
    # "--kv-memory 10" would be 10 bytes: never a KV pool's size, so it is refused, not computed
    for option in ("--kv-memory", "--gpu-memory"):
        result = CliRunner().invoke(cli, ["kv", str(HF_CONFIGS / "Qwen__Qwen2.5-7B-Instruct.json"), option, "10"])
        assert result.exit_code == 2
        assert option in result.output
        assert "has no unit" in result.output
    ok = CliRunner().invoke(
        cli, ["kv", str(HF_CONFIGS / "Qwen__Qwen2.5-7B-Instruct.json"), "--kv-memory", "10GiB", "-o", "json"]
    )
    assert ok.exit_code == 0


def test_kv_cache_dtype_values_are_the_crds():
    from kvpilot.api import KV_CACHE_DTYPES

    # the CRD's enum (api.constants.KV_CACHE_DTYPES) is what kv accepts: float16 is not in it
    assert "float16" not in KV_CACHE_DTYPES
    bad = CliRunner().invoke(
        cli, ["kv", str(HF_CONFIGS / "Qwen__Qwen2.5-7B-Instruct.json"), "--kv-cache-dtype", "float16"]
    )
    assert bad.exit_code == 2
    assert "--kv-cache-dtype" in bad.output
    for dtype in KV_CACHE_DTYPES:
        result = CliRunner().invoke(
            cli, ["kv", str(HF_CONFIGS / "Qwen__Qwen2.5-7B-Instruct.json"), "--kv-cache-dtype", dtype]
        )
        assert result.exit_code in (0, 1), (dtype, result.output)


def test_max_num_seqs_pool_share():
    # Qwen2.5-7B: 57,344 B per token; 16 GiB / (16 x 57,344 B) = 18,724 blocks; one 8,192-token request takes
    # 8,192 / 16 = 512 blocks -> concurrency 18,724 / 512 = 36.57; 4 requests use 4 / 36.57 = 10.94 % of the pool
    args = ["kv", str(HF_CONFIGS / "Qwen__Qwen2.5-7B-Instruct.json"), "--kv-memory", "16GiB", "--max-model-len", "8192"]
    doc = json.loads(CliRunner().invoke(cli, [*args, "--max-num-seqs", "4", "-o", "json"]).output)
    share = doc["max_num_seqs_pool_share"]
    assert share["pool_share"] == pytest.approx(4 * 512 / 18724)
    assert share["full_length_requests_at_once"] == 4
    # 64 requests would need 64 x 512 = 32,768 blocks > 18,724: the whole pool, and only 36 fit at once
    doc = json.loads(CliRunner().invoke(cli, [*args, "--max-num-seqs", "64", "-o", "json"]).output)
    assert doc["max_num_seqs_pool_share"] == {"max_num_seqs": 64, "pool_share": 1.0, "full_length_requests_at_once": 36}
    text = CliRunner().invoke(cli, [*args, "--max-num-seqs", "4"], env={"COLUMNS": "200"}).output
    assert "4 / 36.57 = 10.9 % of the pool; the rest can hold only cached prefixes" in text
    # above one pool the text gives the ratio itself: 64 / 36.57 = 1.75 = 175.0 %, not 100 %
    text = CliRunner().invoke(cli, [*args, "--max-num-seqs", "64"], env={"COLUMNS": "200"}).output
    assert "64 / 36.57 = 175.0 % of the pool; only 36 full-length requests fit at once" in text


def test_derived_kv_memory_states_its_vllm_memory_accounting():
    args = [
        "kv",
        str(HF_CONFIGS / "Qwen__Qwen2.5-7B-Instruct.json"),
        "--gpu-memory",
        "24GiB",
        "--weights-memory",
        "15GiB",
    ]
    doc = json.loads(CliRunner().invoke(cli, [*args, "-o", "json"]).output)
    notes = " ".join(doc.get("notes") or [])
    assert "memory accounting of vLLM 0.21-0.29" in notes
    assert "VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS" in notes


def test_text_counts_heads_and_bytes_in_words(tmp_path):
    # an MQA config (one KV head) with an fp8 KV cache (1 byte per element): singular nouns, no "(s)"
    config = {
        "architectures": ["LlamaForCausalLM"],
        "hidden_size": 2048,
        "num_attention_heads": 16,
        "num_key_value_heads": 1,
        "num_hidden_layers": 4,
        "torch_dtype": "bfloat16",
    }
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    result = CliRunner().invoke(
        cli,
        ["kv", str(path), "--kv-memory", "1GiB", "--kv-cache-dtype", "fp8", "--max-model-len", "4096"],
        env={"COLUMNS": "200"},
    )
    assert result.exit_code == 0, result.output
    assert "(1 KV head total)" in result.output, result.output
    assert "1 byte (fp8" in result.output, result.output
    assert "(s)" not in result.output


def test_text_prints_a_path_as_written_without_console_markup_or_emoji_codes(tmp_path, monkeypatch):
    # rich reads "[bold]" as a style tag and ":thumbs_up:" as an emoji code unless the console is told not to;
    # the title names the CONFIG argument, so both must come out as typed
    monkeypatch.chdir(tmp_path)
    folder = tmp_path / "[bold]:thumbs_up:"
    folder.mkdir()
    (folder / "config.json").write_text((HF_CONFIGS / "Qwen__Qwen2.5-1.5B-Instruct.json").read_text())
    result = CliRunner().invoke(cli, ["kv", folder.name, "--kv-memory", "1GiB"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert "KV cache of [bold]:thumbs_up:" in result.output, result.output


def test_a_folder_named_safetensors_is_not_a_weight_file(tmp_path):
    (tmp_path / "config.json").write_text((HF_CONFIGS / "Qwen__Qwen2.5-1.5B-Instruct.json").read_text())
    (tmp_path / "shards.safetensors").mkdir()  # a folder: no weights, so --gpu-memory alone cannot size the pool
    result = run(str(tmp_path), "--gpu-memory", "24GiB")
    assert result.exit_code == 2, result.output
    assert "--weights-memory: needed with --gpu-memory" in result.output, result.output
