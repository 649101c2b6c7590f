"""The vLLM command-line flags kvpilot manages, and how ``extraArgs`` is kept from touching them.

A managed flag is rendered from a spec field; giving it again in ``spec.engine.extraArgs``
would either conflict with the field or silently override it, so it is refused in every
spelling vLLM's argument parser accepts:

- dashes or underscores: ``--max-num-seqs``, ``--max_num_seqs`` (vLLM's ``FlexibleArgumentParser``
  turns underscores in option names into dashes: ``vllm/utils/argparse_utils.py``);
- ``--flag=value`` and ``--flag value``;
- prefixes: Python's argparse accepts any unambiguous prefix of a long option (``--max-num-s``
  is ``--max-num-seqs``). Any prefix of a managed flag is refused: an unambiguous one would
  reach the managed flag, an ambiguous one (``--max``) is an error in vLLM anyway;
- vLLM's short alias ``-tp`` for ``--tensor-parallel-size`` (v0.8+), in any form (``-tp 2``,
  ``-tp=2``), and its prefixes: argparse expands an unambiguous prefix of a single-dash option too
  (``-t 4`` is ``-tp 4`` in vLLM 0.29.0: ``argparse._get_option_tuples``);
- vLLM's dotted keys: ``FlexibleArgumentParser`` turns ``--kv-transfer-config.kv_connector=X``
  into ``--kv-transfer-config '{"kv_connector": "X"}'`` (``vllm/utils/argparse_utils.py``,
  ``parse_args``), so the option is the part before the first ``.`` (``--max-num-seqs.x=1`` is
  ``--max-num-seqs``).

Checked against vLLM 0.29.0's own ``FlexibleArgumentParser`` with ``AsyncEngineArgs.add_cli_args``
(the engine flags; the frontend flags ``--port``/``--host``/``--api-key`` need FastAPI and are
checked by name only) in the ``vllm_ref`` tests.

``--port`` and ``--host`` are managed because the Service, the probes and the Prometheus
annotations all point at port 8000 on the pod IP; ``--model`` because the model is the
positional argument of ``vllm serve``; ``--hf-token`` because the token comes only through
``spec.hfTokenSecretRef`` (a secretKeyRef), never on the command line. ``--kv-transfer-config`` is managed only while
``spec.kvOffload`` is set (otherwise a person may use it for another connector).
"""

from __future__ import annotations

#: flag -> the spec field that renders it (camelCase path, as in SpecError).
MANAGED_FLAGS: dict[str, str] = {
    "--model": "spec.model",
    "--served-model-name": "spec.servedModelName",
    "--port": "the fixed serving port 8000",
    "--host": "the pod's address (probes and Service need it)",
    "--gpu-memory-utilization": "spec.engine.gpuMemoryUtilization",
    "--max-model-len": "spec.engine.maxModelLen",
    "--max-num-seqs": "spec.engine.maxNumSeqs",
    "--max-num-batched-tokens": "spec.engine.maxNumBatchedTokens",
    "--tensor-parallel-size": "spec.engine.tensorParallelSize",
    "--enable-prefix-caching": "spec.engine.enablePrefixCaching",
    "--no-enable-prefix-caching": "spec.engine.enablePrefixCaching",
    "--enable-chunked-prefill": "spec.engine.enableChunkedPrefill",
    "--no-enable-chunked-prefill": "spec.engine.enableChunkedPrefill",
    "--kv-cache-dtype": "spec.engine.kvCacheDtype",
    "--kv-offloading-backend": "spec.kvOffload",
    "--kv-offloading-size": "spec.kvOffload",
    # docs/crd-reference.md: the HF token comes only through spec.hfTokenSecretRef (HF_TOKEN from a secretKeyRef),
    # never inlined into args: `--hf-token VALUE` would put it on the pod's command line.
    "--hf-token": "spec.hfTokenSecretRef",
    # vLLM 0.29.0 reads the API key from env VLLM_API_KEY as well when --api-key is absent
    # (vllm/entrypoints/serve/middleware/register.py): from a secretKeyRef it never appears in the
    # pod's command, `kvpilot render` or status.command.
    "--api-key": "spec.env VLLM_API_KEY with valueFrom.secretKeyRef",
    # a YAML file of flags (FlexibleArgumentParser._pull_args_from_config) could set any managed flag
    "--config": "the spec's own fields (a config file of flags cannot be checked)",
}

#: managed only when spec.kvOffload is set
KV_OFFLOAD_FLAGS: dict[str, str] = {"--kv-transfer-config": "spec.kvOffload"}

#: single-dash aliases vLLM registers for managed flags (vllm/engine/arg_utils.py).
SHORT_ALIASES: dict[str, str] = {"-tp": "--tensor-parallel-size"}


def option_name(arg: str) -> str | None:
    """The option an argv element names, normalised, or None when it is not an option.

    ``"--max_num_seqs=8"`` -> ``"--max-num-seqs"``; ``"-tp=2"`` -> ``"-tp"``; ``"8"`` -> None;
    ``"--"`` (end of options) -> None.
    """
    text = arg.strip()
    if not text.startswith("-") or text == "--" or len(text) < 2:
        return None
    if text[1:2].isdigit() or text[1:2] == ".":  # a negative number is a value, not an option
        return None
    head = text.split("=", 1)[0].split(None, 1)[0]
    if head.startswith("--"):
        return "--" + head[2:].split(".", 1)[0].replace("_", "-")  # dotted keys set the option before the "."
    return head


def managed_flag_matches(arg: str, kv_offload: bool = False) -> list[tuple[str, str]]:
    """Every managed flag ``arg`` could set in vLLM, as ``(flag, spec field)`` pairs; empty when none.

    An exact name (in any spelling) gives that flag alone; a prefix gives every managed flag it
    begins (``--max-num`` -> ``--max-num-seqs`` and ``--max-num-batched-tokens``: argparse refuses
    such an ambiguous prefix, an unambiguous one reaches the flag).

    Args:
        arg: one element of ``spec.engine.extraArgs``.
        kv_offload: True when ``spec.kvOffload`` is set (``--kv-transfer-config`` is then managed).
    """
    name = option_name(arg)
    if name is None:
        return []
    flags = dict(MANAGED_FLAGS, **(KV_OFFLOAD_FLAGS if kv_offload else {}))
    if not name.startswith("--"):  # -tp, -tp2, and the prefix -t (argparse expands it to -tp)
        return [
            (alias, flags[flag])
            for alias, flag in SHORT_ALIASES.items()
            if name.startswith(alias) or (len(name) >= 2 and alias.startswith(name))
        ][:1]
    if len(name) <= 2:
        return []
    if name in flags:
        return [(name, flags[name])]
    return [(flag, field) for flag, field in flags.items() if flag.startswith(name)]


def refusal(arg: str, matches: list[tuple[str, str]]) -> str:
    """Why ``extraArgs`` refuses ``arg`` (``matches`` from :func:`managed_flag_matches`, not empty), in one line.

    Exact: ``'--max_num_seqs=8' sets the managed flag --max-num-seqs; use spec.engine.maxNumSeqs instead``;
    a prefix of one flag says so; an ambiguous prefix names every managed flag it could mean.
    """
    name = option_name(arg)
    fields = list(dict.fromkeys(field for _, field in matches))
    if len(matches) == 1:
        flag, field = matches[0]
        if name == flag or not flag.startswith("--"):
            return f"{arg!r} sets the managed flag {flag}; use {field} instead"
        return (
            f"{arg!r} is a prefix of the managed flag {flag} (vLLM's argparse takes it as that flag, or "
            f"refuses it as ambiguous if other vLLM flags share the prefix); use {field} instead"
        )
    flags = ", ".join(flag for flag, _ in matches)
    return (
        f"{arg!r} is ambiguous: a prefix of the managed flags {flags} (vLLM's argparse refuses an "
        f"ambiguous prefix); spell an unmanaged flag in full, and set {' / '.join(fields)} instead"
    )
