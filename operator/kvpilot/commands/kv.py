"""``kvpilot kv CONFIG``: KV bytes/token, capacity, concurrency and feasibility (thin; math in kvpilot.kv)."""

from __future__ import annotations

import json
import os
import re
import sys
from typing import TYPE_CHECKING, Any

import click

from kvpilot.api.constants import KV_CACHE_DTYPES
from kvpilot.commands._common import MEMORY_SIZE, fail, fail_input, read_input, trimmed_stdout
from kvpilot.kv import (
    DEFAULT_BLOCK_SIZE,
    DEFAULT_GPU_MEMORY_UTILIZATION,
    DEFAULT_MAX_NUM_BATCHED_TOKENS,
    DEFAULT_OVERHEAD_BYTES,
    GIB,
    KVCapacity,
    KVConfigError,
    KVSpec,
    StartupMemoryCheck,
    capacity,
    kv_spec_from_config,
    seqs_pool_share,
    startup_memory_check,
)
from kvpilot.kv.capacity import SeqsPoolShare, refuse_draft_with_pipeline_parallel
from kvpilot.kv.spec import FULL, LINEAR, MAMBA, NONE, SLIDING
from kvpilot.kv.speculative import DraftLayers, draft_layers, parse_speculative_config
from kvpilot.kv.weights import weights_from_index
from kvpilot.text.numbers import count, fig, gib, noun, number, percent, significant, times

if TYPE_CHECKING:
    from kvpilot.api.objects import JsonObject

_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


def _file_label(path: str, what: str) -> str:
    """The file named in an error line: ``path``, after the option that gave it (``--speculative-config model``)."""
    return f"{what}: {path}" if what.startswith("-") else path


def _read_json(path: str, what: str) -> object:
    """The JSON document at ``path``, read within the bounds of :mod:`kvpilot.text.documents` (at most
    ``MAX_JSON_BYTES``, nesting, integer digits, numbers a float holds); exits 2 naming ``what`` when it is
    unreadable or not UTF-8, the file and the field when it is not JSON (``NaN``/``Infinity`` included: RFC 8259
    has no such numbers) or beyond a bound.
    """
    from kvpilot.text.documents import MAX_JSON_BYTES, DocumentError, load_json

    text = read_input(path, MAX_JSON_BYTES, what)
    try:
        return load_json(text)
    except DocumentError as exc:
        fail_input(exc, _file_label(path, what))


def local_weights_bytes(folder: str) -> int | None:
    """Total bytes of a local model folder's weights: the safetensors index's ``metadata.total_size``,
    else the sum of ``*.safetensors`` file sizes; None when there are none.
    """
    index = os.path.join(folder, "model.safetensors.index.json")
    if os.path.isfile(index):
        total = weights_from_index(_read_json(index, "model.safetensors.index.json"))
        if total is not None:
            return total
    with os.scandir(folder) as entries:
        sizes = [e.stat().st_size for e in entries if e.name.endswith(".safetensors") and e.is_file()]
    return sum(sizes) if sizes else None


def _read_config(path: str, what: str = "CONFIG") -> JsonObject:
    """The config.json at ``path`` as a JSON object; exits 2 as :func:`_read_json` does, or when it is not an object."""
    doc = _read_json(path, what)
    if not isinstance(doc, dict):
        fail(f"{what}: config.json must be a JSON object" if what != "CONFIG" else "config.json: must be a JSON object")
    return doc


def load_config(source: str, what: str = "CONFIG") -> tuple[JsonObject, str | None, str]:
    """Read CONFIG (or the draft ``model`` of ``--speculative-config``, named by ``what``): a config.json
    file, a folder holding one, or a Hugging Face model id (downloaded).

    Returns ``(config, model_folder_or_None, file)``, ``file`` the config.json as error lines name it
    (:func:`_file_label`). Exits 2 with a one-line reason on any failure.
    Paths are ``os.path`` strings, not ``pathlib`` (whose import every ``kvpilot kv`` would pay: docs/performance.md,
    "CLI start-up").
    """
    path = os.path.expanduser(source)
    if os.path.isdir(path):
        file = os.path.join(path, "config.json")
        if not os.path.isfile(file):
            fail(f"{what}: folder {path} holds no config.json")
        return _read_config(file, what), path, _file_label(file, what)
    if os.path.isfile(path):
        return _read_config(path, what), os.path.dirname(path) or ".", _file_label(path, what)
    if not _HUB_ID.match(source) or source.endswith(".json"):
        fail(f"{what}: no such file or folder: {source}")
    from kvpilot.kv.hub import HubUnavailableError, fetch_file

    try:
        downloaded = fetch_file(source, "config.json")  # one bounded request, no retry storm
    except HubUnavailableError as exc:  # offline, gated, missing repo: one line, exit 2
        fail(
            f"{what}: cannot fetch config.json of {source} from the Hugging Face Hub "
            f"({exc}); download https://huggingface.co/{source}/resolve/main/config.json "
            "and pass the file (or its folder)"
        )
    file = os.fspath(downloaded)
    return _read_config(file, what), None, _file_label(file, what)


def spec_of(config: JsonObject, file: str) -> KVSpec:
    """:func:`kvpilot.kv.kv_spec_from_config` of the config.json ``file`` (as :func:`load_config` names it);
    exits 2 naming the file and the field it cannot read.
    """
    try:
        return kv_spec_from_config(config)
    except KVConfigError as exc:
        fail_input(exc, file)


def speculative_draft(
    raw: str, target_config: JsonObject, target: KVSpec, pipeline_parallel_size: int = 1
) -> tuple[DraftLayers, int | None]:
    """``--speculative-config`` JSON -> (the draft's KV layers, its ``draft_tensor_parallel_size``), reading
    the draft's config.json (file, folder or Hub id, as CONFIG) when the method needs one. Exits 2 naming the
    option on bad input; a draft model with ``pipeline_parallel_size`` above 1 is refused before it is read
    (offline, the Hub's error would hide the reason).
    """
    from kvpilot.text.documents import DocumentError, load_json

    try:
        doc = load_json(raw)
    except DocumentError as exc:
        fail_input(exc, "--speculative-config")
    try:
        settings = parse_speculative_config(doc)
        draft, draft_config = None, None
        if settings.needs_draft_config and settings.model is not None:
            refuse_draft_with_pipeline_parallel(pipeline_parallel_size)
            draft_config, _, draft_file = load_config(settings.model, "--speculative-config model")
            draft = spec_of(draft_config, draft_file)
        return draft_layers(settings, target, target_config, draft, draft_config), settings.draft_tensor_parallel_size
    except KVConfigError as exc:
        fail_input(exc)


def _gib(value: int | float | None) -> str:
    return "-" if value is None else gib(value, 4)


def _startup_rows(check: StartupMemoryCheck) -> list[tuple[str, str]]:
    """Text rows of vLLM's startup free-memory check (GiB = 2^30 bytes)."""
    verdict = (
        "yes"
        if check.feasible
        else f"NO: vLLM refuses to start, short by {_gib(check.shortfall_bytes)} (exit status 1)"
    )
    return [
        ("free GPU memory at startup", f"{_gib(check.free_bytes)} of {_gib(check.total_bytes)}"),
        (
            "requested at startup",
            f"{fig(check.gpu_memory_utilization, 4)} × {_gib(check.total_bytes)} = {_gib(check.requested_bytes)}",
        ),
        ("starts (free >= requested)", verdict),
        ("largest feasible gpu_memory_utilization", number(check.max_feasible_utilization, 4)),
    ]


def render_text(  # noqa: C901
    cap: KVCapacity, source: str, check: StartupMemoryCheck | None = None, seqs: SeqsPoolShare | None = None
) -> None:
    """Print the capacity (and the startup free-memory check, and ``--max-num-seqs``' pool share, when
    given) as a rich table with units (GiB = 2^30 bytes).
    """
    from rich.console import Console
    from rich.table import Table

    fp, spec = cap.fp, cap.spec
    title = f"KV cache of {source}" + ("  (estimate)" if cap.estimate else "")
    table = Table(title=title, title_justify="left", show_header=False)
    table.add_column("what", style="bold", no_wrap=True)
    table.add_column("value")  # wraps on spaces
    rows = [
        ("attention", f"{spec.attention.upper()}, {layer_kinds_text(spec)}"),
        (
            "KV heads per GPU × head dim",
            f"{fp.kv_heads_per_gpu} × {spec.head_dim} ({spec.num_kv_heads} {noun(spec.num_kv_heads, 'KV head')} total)",
        ),
        (
            "KV element",
            f"{fp.element_bytes} {noun(fp.element_bytes, 'byte')} "
            f"({cap.inputs.kv_cache_dtype}; model {spec.model_dtype})",
        ),
        ("bytes per token (per GPU)", _bytes_per_token_text(cap)),
    ]
    if cap.draft is not None:
        target_bytes = cap.bytes_per_token - cap.draft_bytes_per_token
        rows.append(
            (
                f"speculative draft ({cap.draft.method})",
                f"{count(cap.draft.num_layers)} KV layer(s) ({cap.draft.source}), "
                f"{count(cap.draft_bytes_per_token, 'B')} per token in the same pool: "
                f"target {count(target_bytes, 'B')} + draft "
                f"{count(cap.draft_bytes_per_token, 'B')} = {count(cap.bytes_per_token, 'B')}",
            )
        )
    window_bytes = cap.state_bytes_per_request - fp.state_bytes_per_request
    if fp.sliding_layers and fp.sliding_window:
        held = min(fp.sliding_window - 1 + cap.inputs.max_num_batched_tokens, cap.max_model_len)
        rows.append(
            (
                "sliding-window term per request",
                f"{count(fp.sliding_bytes_per_token, 'B')} per token x at most {count(held)} tokens "
                f"(window {count(fp.sliding_window)} - 1 + {count(cap.inputs.max_num_batched_tokens)}-token "
                f"step budget, in whole blocks + 1) = {_gib(window_bytes)}",
            )
        )
    if fp.state_bytes_per_request:
        rows.append(
            (
                "Mamba/linear state per request",
                f"{count(fp.state_bytes_per_request, 'B')} ({_gib(fp.state_bytes_per_request)})",
            )
        )
    rows.append((f"one request of {count(cap.max_model_len)} tokens", _gib(cap.request_bytes)))
    if cap.kv_memory_bytes is not None:
        rows += [
            ("KV memory per GPU", f"{_gib(cap.kv_memory_bytes)} ({cap.inputs.memory_source})"),
            ("KV tokens", count(cap.kv_tokens)),
            (
                f"KV blocks (block size {cap.block_size})",
                f"{count(cap.kv_blocks)} ({count(cap.usable_blocks)} usable + 1 null block)",
            ),
            (f"max concurrency at {count(cap.max_model_len)} tokens", f"{times(cap.max_concurrency, 2)}"),
            ("one max_model_len request fits", "yes" if cap.fits else "NO: vLLM refuses to start (exit status 1)"),
            ("largest max_model_len that fits", _fit_text(cap)),
        ]
        min_util = cap.min_gpu_memory_utilization_to_fit
        if min_util is not None:  # > 1: no utilization fits (a bigger GPU, more TP, or smaller weights)
            rows.append(
                (
                    "smallest gpu_memory_utilization that fits",
                    number(min_util, 4)
                    if min_util <= 1
                    else f"none: one request needs {number(min_util, 2)} x this GPU's memory",
                )
            )
        if cap.data_parallel_size > 1:
            rows.append(
                (
                    f"KV tokens, {cap.data_parallel_size} DP replicas",
                    count(None if cap.kv_tokens is None else cap.kv_tokens * cap.data_parallel_size),
                )
            )
    if seqs is not None and seqs["pool_share"] is not None:
        n, share, at_once = seqs["max_num_seqs"], seqs["pool_share"], seqs["full_length_requests_at_once"]
        # the ratio itself (323 % when 64 requests need 3.23 pools); JSON's pool_share is the part of the pool used
        ratio = n / cap.max_concurrency if cap.max_concurrency else share
        rows.append(
            (
                f"max_num_seqs {count(n)} at {count(cap.max_model_len)} tokens",
                f"{count(n)} / {number(cap.max_concurrency, 2)} = {percent(ratio)} of the pool"
                + (
                    "; the rest can hold only cached prefixes"
                    if share < 1
                    else f"; only {count(at_once)} full-length requests fit at once"
                ),
            )
        )
    if check is not None:
        rows += _startup_rows(check)
    for name, value in rows:
        table.add_row(name, value)
    # Text wraps on spaces at the terminal's width ($COLUMNS when piped). Every string is printed as written:
    # no console markup ("[bold]" in a path stays) and no ":name:" emoji codes (their table costs a start-up's
    # load: docs/performance.md, "CLI start-up").
    console = Console(file=trimmed_stdout(), highlight=False, markup=False, emoji=False)
    console.print(table)
    if cap.kv_memory_bytes is None:
        console.print("Give --kv-memory, or --gpu-memory with --weights-memory, for tokens, blocks and concurrency.")
    if cap.notes:
        notes = Table.grid(padding=(0, 1))
        notes.add_column(no_wrap=True)
        notes.add_column()  # wraps on spaces, indented under the first line
        for note in cap.notes:
            notes.add_row("note:", note)
        console.print(notes)


def _fit_text(cap: KVCapacity) -> str:
    """The longest ``--max-model-len`` vLLM would start with, and when the model's context caps it, what the pool
    could hold (``131,072 (the model's context; the pool could hold 469,312)``).
    """
    fit, pool = cap.max_model_len_that_fits, cap.pool_max_model_len
    if fit is None:
        return "no limit from KV"
    if pool is None or pool > fit:
        more = "longer requests" if pool is None else count(pool)
        return f"{count(fit)} (the model's context; the pool could hold {more})"
    return count(fit)


def layer_kinds_text(spec: KVSpec) -> str:
    """``52 layers: 6 full attention, 23 Mamba, 23 without KV cache (MLP/MoE)``: every layer counted once."""
    kinds = [
        (spec.count(FULL), "full attention"),
        (spec.count(SLIDING), f"sliding-window ({count(spec.sliding_window)} tokens)"),
        (spec.count(MAMBA), "Mamba"),
        (spec.count(LINEAR), "linear attention"),
        (spec.count(NONE), "without KV cache (MLP/MoE)"),
    ]
    parts = [f"{n} {what}" for n, what in kinds if n]
    if spec.count(FULL) == spec.num_layers:
        return f"{spec.num_layers} layers"
    return f"{spec.num_layers} layers: " + ", ".join(parts)


def _bytes_per_token_text(cap: KVCapacity) -> str:
    """Bytes each token adds for the whole request; when no layer grows with the request, says what
    a request holds instead (the window and state terms).
    """
    fp = cap.fp
    text = f"{count(cap.bytes_per_token, 'B')} ({significant(cap.bytes_per_token / 1024, 6)} KiB)"
    if fp.full_layers and (fp.sliding_layers or fp.state_layers):
        return text + ", full-attention layers; the others hold a fixed amount per request (below)"
    if not fp.full_layers:
        return (
            f"{text}: no layer grows with the whole request; each request holds "
            f"{_gib(cap.state_bytes_per_request)} for its window and state (below)"
        )
    return text


EPILOG = """\b
Examples:
  kvpilot kv config.json --kv-memory 2.89GiB --max-model-len 29000
  kvpilot kv ./Qwen2.5-7B-Instruct --gpu-memory 24GiB \\
      --gpu-memory-utilization 0.9
  kvpilot kv Qwen/Qwen2.5-1.5B-Instruct --kv-cache-dtype fp8 -o json
  kvpilot kv config.json --tensor-parallel-size 2 --gpu-memory 24GiB \\
      --weights-memory 13.95GB
  kvpilot kv config.json --gpu-memory 22.05GiB --free-gpu-memory 19.77GiB \\
      --gpu-memory-utilization 0.9
  kvpilot kv DeepSeek-V3/config.json --kv-memory 16GiB \\
      --speculative-config '{"method": "mtp"}'
"""


@click.command(
    name="kv", epilog=EPILOG, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 110}
)
@click.argument("config", metavar="CONFIG")
@click.option(
    "--kv-cache-dtype",
    default="auto",
    show_default=True,
    type=click.Choice(KV_CACHE_DTYPES),
    help="vLLM KV cache dtype, the VLLMServer CRD's values (auto = the model's dtype; fp8* = 1 byte).",
)
@click.option(
    "--tensor-parallel-size",
    "-tp",
    type=int,
    default=1,
    show_default=True,
    help="GPUs per replica; divides KV heads (not MLA).",
)
@click.option(
    "--pipeline-parallel-size",
    "-pp",
    type=int,
    default=1,
    show_default=True,
    help="Pipeline stages; each GPU holds its stage's layers, the stage with the most layers binds.",
)
@click.option(
    "--data-parallel-size", "-dp", type=int, default=1, show_default=True, help="Replicas; never divides per-GPU KV."
)
@click.option(
    "--max-model-len",
    type=int,
    default=None,
    show_default="the model's context, as vLLM derives it from the config",
    help="Tokens of one request.",
)
@click.option("--block-size", type=int, default=DEFAULT_BLOCK_SIZE, show_default=True, help="Tokens per KV block.")
@click.option(
    "--gpu-memory-utilization",
    type=float,
    default=DEFAULT_GPU_MEMORY_UTILIZATION,
    show_default=True,
    help="Fraction (0-1] of GPU memory vLLM may use.",
)
@click.option(
    "--max-num-batched-tokens",
    type=int,
    default=DEFAULT_MAX_NUM_BATCHED_TOKENS,
    show_default=True,
    help="Token budget per step (bounds sliding-window blocks).",
)
@click.option(
    "--max-num-seqs",
    type=click.IntRange(min=1),
    default=None,
    help="vLLM --max-num-seqs: shows how much of the pool that many full-length requests can ever use.",
)
@click.option(
    "--kv-memory",
    type=MEMORY_SIZE,
    default=None,
    help="KV pool per GPU, as vLLM logs 'Available KV cache memory' (e.g. 2.89GiB).",
)
@click.option("--gpu-memory", type=MEMORY_SIZE, default=None, help="Memory of one GPU (e.g. 24GiB, 80GB).")
@click.option(
    "--weights-memory",
    type=MEMORY_SIZE,
    default=None,
    show_default="*.safetensors of a local model folder ÷ TP",
    help="Weights per GPU.",
)
@click.option(
    "--overhead-memory",
    type=MEMORY_SIZE,
    default=None,
    show_default=f"{number(DEFAULT_OVERHEAD_BYTES / GIB, 2)}GiB, an estimate",
    help="Activations + CUDA context + graphs per GPU.",
)
@click.option(
    "--free-gpu-memory",
    type=MEMORY_SIZE,
    default=None,
    help="Free memory of one GPU when vLLM starts (needs --gpu-memory): vLLM refuses to start when it is "
    "below gpu_memory_utilization × total.",
)
@click.option(
    "--speculative-config",
    default=None,
    metavar="JSON",
    help='vLLM --speculative-config, e.g. \'{"method": "eagle", "model": "yuhuili/EAGLE-LLaMA3-Instruct-8B"}\' '
    'or \'{"method": "mtp"}\': the draft\'s KV layers share the pool (model: a config.json, folder or Hub id).',
)
@click.option(
    "-o", "--output", type=click.Choice(["text", "json"]), default="text", show_default=True, help="Output format."
)
def command(
    config: str,
    kv_cache_dtype: str,
    tensor_parallel_size: int,
    pipeline_parallel_size: int,
    data_parallel_size: int,
    max_model_len: int | None,
    block_size: int,
    gpu_memory_utilization: float,
    max_num_batched_tokens: int,
    max_num_seqs: int | None,
    kv_memory: int | None,
    gpu_memory: int | None,
    weights_memory: int | None,
    overhead_memory: int | None,
    free_gpu_memory: int | None,
    speculative_config: str | None,
    output: str,
) -> None:
    """KV bytes/token, capacity, concurrency and feasibility of a model, from its config.json.

    CONFIG is a config.json file, a folder holding one (its *.safetensors give the weight size), or a
    Hugging Face model id (config.json is downloaded). Sizes accept GiB/MiB/GB suffixes (GiB = 2^30 bytes).
    With --free-gpu-memory it also runs vLLM's startup check (requested = utilization × total; it refuses to
    start when free < requested; the largest feasible utilization is free / total).
    Exit status: 0 computed and one --max-model-len request fits (or the fit is unknown: no
    memory given); 1 computed, but it does not fit (fits: false in JSON) or vLLM's startup check
    fails; 2 bad input.
    """
    check = None
    if free_gpu_memory is not None:
        if gpu_memory is None:
            fail("--free-gpu-memory: needs --gpu-memory (the GPU's total memory)")
        try:
            check = startup_memory_check(gpu_memory, free_gpu_memory, gpu_memory_utilization)
        except KVConfigError as exc:
            fail_input(exc)
    cfg, folder, config_file = load_config(config)
    weights_source = "--weights-memory" if weights_memory is not None else None
    if weights_memory is None and gpu_memory is not None and kv_memory is None:
        from kvpilot.kv.hub import hub_weights_bytes  # here: a local config.json needs no Hub client

        total = local_weights_bytes(folder) if folder is not None else hub_weights_bytes(config)
        if total is not None:
            weights_memory = total // max(1, tensor_parallel_size)
            where = (
                os.path.join(folder, "*.safetensors")
                if folder is not None
                else f"{config} model.safetensors.index.json"
            )
            weights_source = f"{where} ÷ TP"
    # The startup check needs only the totals; KV tokens from --gpu-memory need the weights too.
    kv_gpu_memory = None if check is not None and kv_memory is None and weights_memory is None else gpu_memory
    spec = spec_of(cfg, config_file)
    draft, draft_tp = (
        (None, None)
        if speculative_config is None
        else speculative_draft(speculative_config, cfg, spec, pipeline_parallel_size)
    )
    try:
        cap = capacity(
            spec,
            kv_cache_dtype=kv_cache_dtype,
            tensor_parallel_size=tensor_parallel_size,
            data_parallel_size=data_parallel_size,
            pipeline_parallel_size=pipeline_parallel_size,
            max_model_len=max_model_len,
            block_size=block_size,
            max_num_batched_tokens=max_num_batched_tokens,
            kv_memory_bytes=kv_memory,
            gpu_memory_bytes=kv_gpu_memory,
            gpu_memory_utilization=gpu_memory_utilization,
            weights_bytes=weights_memory,
            overhead_bytes=overhead_memory,
            draft=draft,
            draft_tensor_parallel_size=draft_tp,
        )
        seqs = None if max_num_seqs is None else seqs_pool_share(cap, max_num_seqs)
    except KVConfigError as exc:  # an option, or the options against the config (named by the field)
        fail_input(exc)
    if output == "json":
        doc: dict[str, Any] = cap.to_json()
        doc["startup_memory_check"] = None if check is None else check.to_json()
        doc["max_num_seqs_pool_share"] = seqs
        doc["inputs"].update(
            {
                "config": config,
                "weights_source": weights_source,
                "gpu_memory_bytes": gpu_memory,
                "free_gpu_memory_bytes": free_gpu_memory,
                "hf_offline": os.environ.get("HF_HUB_OFFLINE"),
            }
        )
        click.echo(json.dumps(doc, indent=2))
    else:
        render_text(cap, config, check, seqs)
    if cap.fits is False or (check is not None and not check.feasible):
        sys.exit(1)  # computed; it does not fit (scripts: kvpilot kv ... && deploy)
