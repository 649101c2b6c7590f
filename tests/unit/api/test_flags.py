"""extraArgs refuses the managed flags in every spelling vLLM's parser accepts."""

from __future__ import annotations

import pytest

from kvpilot.api import SpecError, parse_spec
from kvpilot.api.flags import managed_flag_matches, option_name


def refused(args, **over):
    body = {"model": "m", "engine": {"extraArgs": args}}
    body.update(over)
    with pytest.raises(SpecError) as info:
        parse_spec(body)
    return info.value


@pytest.mark.parametrize(
    ("arg", "flag"),
    [
        ("--max-num-seqs", "--max-num-seqs"),
        ("--max_num_seqs", "--max-num-seqs"),
        ("--max-num-seqs=8", "--max-num-seqs"),
        ("--max_num_seqs=8", "--max-num-seqs"),
        ("--max-num-s", "--max-num-seqs"),  # unambiguous argparse prefix
        ("--max-num-b", "--max-num-batched-tokens"),
        ("--max-model", "--max-model-len"),
        ("--gpu-memory-utilization=0.95", "--gpu-memory-utilization"),
        ("--gpu_memory", "--gpu-memory-utilization"),
        ("--tensor-parallel-size", "--tensor-parallel-size"),
        ("-tp", "-tp"),
        ("-tp=2", "-tp"),
        ("--enable-prefix-caching", "--enable-prefix-caching"),
        ("--no-enable-prefix-caching", "--no-enable-prefix-caching"),
        ("--no_enable_prefix", "--no-enable-prefix-caching"),
        ("--enable-chunked-prefill", "--enable-chunked-prefill"),
        ("--no-enable-chunked-prefill", "--no-enable-chunked-prefill"),
        ("--kv-cache-dtype=fp8", "--kv-cache-dtype"),
        ("--kv-offloading-size", "--kv-offloading-size"),
        ("--kv-offloading-backend=native", "--kv-offloading-backend"),
        ("--port=9000", "--port"),
        ("--host", "--host"),
        ("--model", "--model"),
        ("--served-model-name", "--served-model-name"),
        ("--max-num-seqs 8", "--max-num-seqs"),  # one argv element with a space
    ],
)
def test_managed_flags_are_refused_in_every_spelling(arg, flag):
    err = refused(["--enforce-eager", arg])
    assert err.field == "spec.engine.extraArgs[1]"
    assert flag in err.message
    assert [f for f, _ in managed_flag_matches(arg)] == [flag]


def test_the_message_points_at_the_field_to_use():
    err = refused(["--max_num_seqs=8"])
    assert str(err) == (
        "spec.engine.extraArgs[0]: '--max_num_seqs=8' sets the managed flag --max-num-seqs; "
        "use spec.engine.maxNumSeqs instead"
    )


@pytest.mark.parametrize(
    "arg",
    [
        "--enforce-eager",
        "--max-log-len",
        "--max-num-partial-prefills=2",
        "--disable-log-requests",
        "8",
        "-0.5",
        "--",
        "--swap-space=4",
        "--kv-transfer-config",
        "--model-impl=vllm",
        "--trust-remote-code",
        "--dtype=half",
        "--quantization",
        "-q",
    ],
)
def test_unmanaged_arguments_pass(arg):
    assert managed_flag_matches(arg) == []
    assert parse_spec({"model": "m", "engine": {"extraArgs": [arg]}}).engine.extra_args == [arg]


def test_kv_transfer_config_is_managed_only_with_kv_offload():
    assert managed_flag_matches("--kv-transfer-config") == []
    assert managed_flag_matches("--kv-transfer-config", kv_offload=True) == [("--kv-transfer-config", "spec.kvOffload")]
    err = refused(
        ['--kv-transfer-config={"kv_connector":"NixlConnector"}'], kvOffload={"backend": "lmcache", "cpuMemory": "1Gi"}
    )
    assert err.field == "spec.engine.extraArgs[0]"


@pytest.mark.parametrize(
    ("arg", "name"),
    [
        ("--max_num_seqs=8", "--max-num-seqs"),
        ("-tp=2", "-tp"),
        ("8", None),
        ("--", None),
        ("-1", None),
        ("--a b", "--a"),
    ],
)
def test_option_name(arg, name):
    assert option_name(arg) == name


@pytest.mark.parametrize("arg", ["--hf-token=hf_abc123", "--hf_token", "--hf-token"])
def test_hf_token_is_never_inlined_through_extra_args(arg):
    # docs/crd-reference.md: hfTokenSecretRef is never inlined into args or env values; vLLM's --hf-token VALUE
    # would put the token on the pod's command line, readable by anyone who can get the pod
    err = refused([arg, "hf_abc123"] if "=" not in arg else [arg])
    assert err.field == "spec.engine.extraArgs[0]"
    assert "spec.hfTokenSecretRef" in err.message
    assert managed_flag_matches("--hf-config-path") == []  # other --hf-* flags stay free


def test_an_ambiguous_prefix_says_so_and_names_every_flag_it_could_mean():
    err = refused(["--max-num"])
    assert err.field == "spec.engine.extraArgs[0]"
    assert "ambiguous" in err.message
    assert "--max-num-seqs" in err.message
    assert "--max-num-batched-tokens" in err.message
    assert "spec.engine.maxNumSeqs" in err.message
    assert "spec.engine.maxNumBatchedTokens" in err.message
    both = refused(["--enable_"])  # --enable-prefix-caching and --enable-chunked-prefill
    assert "ambiguous" in both.message
    assert "--enable-prefix-caching" in both.message
    assert "--enable-chunked-prefill" in both.message


def test_a_prefix_of_one_managed_flag_says_it_is_a_prefix():
    # vLLM also has --kv-cache-memory-bytes, so "--kv-cache" may be ambiguous there: the message must not
    # claim the user typed --kv-cache-dtype.
    err = refused(["--kv-cache", "fp8"])
    assert err.message.startswith("'--kv-cache' is a prefix of the managed flag --kv-cache-dtype")
    assert "ambiguous" in err.message
    assert "spec.engine.kvCacheDtype" in err.message


@pytest.mark.parametrize(
    ("arg", "flag"),
    [
        ("-t", "-tp"),  # argparse expands a single-dash prefix: vLLM 0.29.0 parses `-t 4` as -tp 4
        ("--kv-transfer-config.kv_connector=X", "--kv-transfer-config"),  # vLLM's dotted JSON keys
        ("--kv_transfer_config.kv_role", "--kv-transfer-config"),
        ("--max-num-seqs.x=1", "--max-num-seqs"),
        ("--tensor_parallel_size.a.b", "--tensor-parallel-size"),
        ("--api-key=abc", "--api-key"),
        ("--config", "--config"),
    ],
)
def test_short_prefixes_dotted_keys_and_secrets_are_managed(arg, flag):
    assert flag in [f for f, _ in managed_flag_matches(arg, kv_offload=True)]
