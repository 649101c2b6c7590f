"""The vLLM metric catalog: canonical names, types, renames across versions, and name matching.

Source: docs/background.md §8 (condensed from vLLM's ``vllm/v1/metrics/loggers.py`` and the
metrics design doc, v0.9–v0.33) and the rename case C19 in the project fixtures.

Vocabulary used throughout kvpilot:

- a *canonical name* is today's vLLM family name with the colon and without the counter
  suffix, e.g. ``vllm:num_preemptions`` (scraped as ``vllm:num_preemptions_total``);
- an *exposed name* is what a scrape or a Prometheus actually holds: old or new generation
  (``vllm:gpu_cache_usage_perc``), with ``_total``/``_bucket``/``_sum``/``_count``/``_created``
  suffixes, and possibly with the colon escaped to ``_`` (``vllm_num_requests_running``), which
  newer ``prometheus_client`` releases do when an older Prometheus asks for OpenMetrics.

Pure data and string functions: no I/O.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

PREFIX = "vllm:"

#: the vLLM release whose metric names the engine model exposes unless told otherwise (``--vllm-version``);
#: the release the project's background is written against (docs/background.md, v0.33.0 source).
DEFAULT_VLLM_VERSION = "0.33.0"


@dataclass(frozen=True)
class MetricSpec:
    """One vLLM metric family.

    Attributes:
        name: canonical family name (``vllm:...``, no ``_total`` suffix).
        type: ``gauge`` | ``counter`` | ``histogram`` | ``info``.
        unit: ``requests``, ``ratio`` (0–1), ``tokens``, ``seconds``, ``events`` or ``""``.
        legacy: older family names with the same meaning, newest first.
        since: first vLLM version (``"0.9.0"``-style string) exposing ``name`` ("" = always).
        legacy_until: first vLLM version that no longer exposes the legacy names by default
            (hidden; removed one release later). "" = still exposed.
        labels: label names besides ``model_name``/``engine`` that vLLM attaches.
        note: unit changes and other caveats a reader must know.
    """

    name: str
    type: str
    unit: str
    help: str
    legacy: tuple[str, ...] = ()
    since: str = ""
    legacy_until: str = ""
    labels: tuple[str, ...] = ()
    note: str = ""


#: Histogram bucket edges vLLM uses (v0.10–v0.33 ``loggers.py``); read ``le`` from the data when
#: diagnosing, since versions differ. Seconds unless stated.
TTFT_BUCKETS = (
    0.001,
    0.005,
    0.01,
    0.02,
    0.04,
    0.06,
    0.08,
    0.1,
    0.25,
    0.5,
    0.75,
    1.0,
    2.5,
    5.0,
    7.5,
    10.0,
    20.0,
    40.0,
    80.0,
    160.0,
    640.0,
    2560.0,
)
ITL_BUCKETS = (
    0.01,
    0.025,
    0.05,
    0.075,
    0.1,
    0.15,
    0.2,
    0.3,
    0.4,
    0.5,
    0.75,
    1.0,
    2.5,
    5.0,
    7.5,
    10.0,
    20.0,
    40.0,
    80.0,
)
REQUEST_LATENCY_BUCKETS = (
    0.3,
    0.5,
    0.8,
    1.0,
    1.5,
    2.0,
    2.5,
    5.0,
    10.0,
    15.0,
    20.0,
    30.0,
    40.0,
    50.0,
    60.0,
    120.0,
    240.0,
    480.0,
    960.0,
    1920.0,
    7680.0,
)
#: tokens per engine step (``vllm:iteration_tokens_total``), 1…16384 as docs/background.md §8 states.
ITERATION_TOKENS_BUCKETS = (1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384)

CATALOG: tuple[MetricSpec, ...] = (
    MetricSpec("vllm:num_requests_running", "gauge", "requests", "Number of requests in model execution batches."),
    MetricSpec("vllm:num_requests_waiting", "gauge", "requests", "Number of requests waiting to be processed."),
    MetricSpec(
        "vllm:num_requests_waiting_by_reason",
        "gauge",
        "requests",
        "Number of waiting requests by reason (capacity: no KV room; deferred).",
        since="0.20.0",
        labels=("reason",),
    ),
    MetricSpec(
        "vllm:kv_cache_usage_perc",
        "gauge",
        "ratio",
        "KV-cache usage. 1 means 100 percent usage (cached but evictable blocks count as free).",
        legacy=("vllm:gpu_cache_usage_perc",),
        since="0.9.2",
        legacy_until="0.11.0",
        note="0.9–0.11 may carry a pid label",
    ),
    MetricSpec("vllm:num_preemptions", "counter", "events", "Cumulative number of preemptions."),
    MetricSpec(
        "vllm:prefix_cache_queries",
        "counter",
        "tokens",
        "Prefix cache queries (tokens queried).",
        legacy=("vllm:gpu_prefix_cache_queries",),
        since="0.9.2",
        legacy_until="0.11.0",
        note="counted blocks before vLLM 0.9.0, tokens after",
    ),
    MetricSpec(
        "vllm:prefix_cache_hits",
        "counter",
        "tokens",
        "Prefix cache hits (tokens hit).",
        legacy=("vllm:gpu_prefix_cache_hits",),
        since="0.9.2",
        legacy_until="0.11.0",
        note="counted blocks before vLLM 0.9.0, tokens after",
    ),
    MetricSpec(
        "vllm:external_prefix_cache_queries",
        "counter",
        "tokens",
        "External (KV connector, e.g. LMCache) prefix cache queries, in tokens.",
        since="0.11.0",
    ),
    MetricSpec(
        "vllm:external_prefix_cache_hits",
        "counter",
        "tokens",
        "External (KV connector, e.g. LMCache) prefix cache hits, in tokens.",
        since="0.11.0",
    ),
    MetricSpec("vllm:prompt_tokens", "counter", "tokens", "Number of prefill tokens processed."),
    MetricSpec("vllm:generation_tokens", "counter", "tokens", "Number of generation tokens processed."),
    MetricSpec(
        "vllm:request_success",
        "counter",
        "requests",
        "Count of successfully processed requests.",
        labels=("finished_reason",),
    ),
    MetricSpec("vllm:iteration_tokens_total", "histogram", "tokens", "Histogram of number of tokens per engine_step."),
    MetricSpec(
        "vllm:request_prompt_tokens",
        "histogram",
        "tokens",
        "Number of prefill tokens processed.",
        note="per request; buckets 1, 2, 5, 10, 20, 50, ... up to max_model_len (build_1_2_5_buckets)",
    ),
    MetricSpec(
        "vllm:request_generation_tokens",
        "histogram",
        "tokens",
        "Number of generation tokens processed.",
        note="per request; buckets 1, 2, 5, 10, 20, 50, ... up to max_model_len (build_1_2_5_buckets)",
    ),
    MetricSpec("vllm:time_to_first_token_seconds", "histogram", "seconds", "Histogram of time to first token."),
    MetricSpec(
        "vllm:inter_token_latency_seconds",
        "histogram",
        "seconds",
        "Histogram of inter-token latency.",
        legacy=("vllm:time_per_output_token_seconds",),
        since="0.10.0",
        legacy_until="0.15.0",
    ),
    MetricSpec("vllm:e2e_request_latency_seconds", "histogram", "seconds", "Histogram of e2e request latency."),
    MetricSpec(
        "vllm:request_queue_time_seconds",
        "histogram",
        "seconds",
        "Histogram of time spent in WAITING phase for request.",
    ),
    MetricSpec(
        "vllm:request_prefill_time_seconds",
        "histogram",
        "seconds",
        "Histogram of time spent in PREFILL phase for request.",
    ),
    MetricSpec(
        "vllm:request_decode_time_seconds",
        "histogram",
        "seconds",
        "Histogram of time spent in DECODE phase for request.",
    ),
    # Families read off vLLM 0.29.0's PrometheusStatLogger (v1/metrics/loggers.py) by the reference
    # tier (tests/reference/). ``since`` is the version proven, not the release that added them.
    MetricSpec(
        "vllm:prompt_tokens_by_source",
        "counter",
        "tokens",
        "Number of prompt tokens by source.",
        since="0.29.0",
        labels=("source",),
        note="source: local_compute, local_cache_hit, external_kv_transfer; counted when the prefill completes",
    ),
    MetricSpec(
        "vllm:prompt_tokens_cached",
        "counter",
        "tokens",
        "Number of cached prompt tokens (local + external).",
        since="0.29.0",
    ),
    MetricSpec(
        "vllm:request_prefill_kv_computed_tokens",
        "histogram",
        "tokens",
        "Histogram of new KV tokens computed during prefill (excluding cached tokens).",
        since="0.29.0",
    ),
    MetricSpec(
        "vllm:request_inference_time_seconds",
        "histogram",
        "seconds",
        "Histogram of time spent in RUNNING phase for request.",
        since="0.29.0",
    ),
    MetricSpec(
        "vllm:request_time_per_output_token_seconds",
        "histogram",
        "seconds",
        "Histogram of time_per_output_token_seconds per request.",
        since="0.29.0",
        note="per request: decode time / (generation tokens - 1), 0 for one token",
    ),
    MetricSpec(
        "vllm:request_max_num_generation_tokens",
        "histogram",
        "tokens",
        "Histogram of maximum number of requested generation tokens.",
        since="0.29.0",
    ),
    MetricSpec("vllm:request_params_n", "histogram", "", "Histogram of the n request parameter.", since="0.29.0"),
    MetricSpec(
        "vllm:request_params_max_tokens",
        "histogram",
        "tokens",
        "Histogram of the max_tokens request parameter.",
        since="0.29.0",
    ),
    MetricSpec(
        "vllm:engine_sleep_state",
        "gauge",
        "",
        "Engine sleep state; awake = 0 means engine is sleeping; awake = 1 means engine is awake; "
        "weights_offloaded = 1 means sleep level 1; discard_all = 1 means sleep level 2.",
        since="0.29.0",
        labels=("sleep_state",),
    ),
    MetricSpec(
        "vllm:estimated_flops_per_gpu",
        "counter",
        "",
        "Estimated number of floating point operations per GPU (for Model Flops Utilization calculations).",
        since="0.29.0",
    ),
    MetricSpec(
        "vllm:estimated_read_bytes_per_gpu",
        "counter",
        "",
        "Estimated number of bytes read from memory per GPU (for Model Flops Utilization calculations).",
        since="0.29.0",
    ),
    MetricSpec(
        "vllm:estimated_write_bytes_per_gpu",
        "counter",
        "",
        "Estimated number of bytes written to memory per GPU (for Model Flops Utilization calculations).",
        since="0.29.0",
    ),
    MetricSpec(
        "vllm:mm_cache_queries",
        "counter",
        "",
        "Multi-modal cache queries, in terms of number of queried items.",
        since="0.29.0",
    ),
    MetricSpec(
        "vllm:mm_cache_hits",
        "counter",
        "",
        "Multi-modal cache hits, in terms of number of cached items.",
        since="0.29.0",
    ),
    MetricSpec(
        "vllm:lora_requests_info",
        "info",
        "",
        "Running stats on lora requests.",
        labels=("max_lora", "waiting_lora_adapters", "running_lora_adapters"),
        note="only with --enable-lora; value = the time the label set was last current (set_to_current_time); "
        "no model_name or engine label; in v0.29 both adapter labels list the adapters with a request scheduled",
    ),
    MetricSpec(
        "vllm:cache_config_info",
        "info",
        "",
        "Information of the LLMEngine CacheConfig.",
        note="labels = cache config (block_size, num_gpu_blocks, gpu_memory_utilization, ...); "
        "kv_cache_size_tokens and kv_cache_max_concurrency since v0.24; no model_name label",
    ),
)

BY_NAME: dict[str, MetricSpec] = {m.name: m for m in CATALOG}

#: legacy family name -> canonical family name
LEGACY_TO_CANONICAL: dict[str, str] = {old: m.name for m in CATALOG for old in m.legacy}

_SAMPLE_SUFFIXES = ("_total", "_bucket", "_sum", "_count", "_created", "_info")


@dataclass(frozen=True)
class NameMatch:
    """How an exposed sample name maps onto the catalog.

    Attributes:
        canonical: canonical family name (e.g. ``vllm:num_preemptions``).
        suffix: the sample suffix (``""``, ``_total``, ``_bucket``, ``_sum``, ``_count``, ``_created``).
        legacy: True when the exposed name is an old-generation name (e.g. ``gpu_cache_usage_perc``).
        escaped: True when the colon was escaped to ``_`` (``vllm_...``).
    """

    canonical: str
    suffix: str
    legacy: bool
    escaped: bool


def _unescape(name: str) -> tuple[str, bool]:
    if name.startswith("vllm:"):
        return name, False
    if name.startswith("vllm_"):
        return "vllm:" + name[len("vllm_") :], True
    return name, False


def match_name(exposed: str) -> NameMatch | None:
    """Map an exposed sample or family name onto the catalog.

    Accepts both generations (``vllm:gpu_cache_usage_perc`` and ``vllm:kv_cache_usage_perc``),
    the colon escaped to an underscore (``vllm_kv_cache_usage_perc``), and the sample suffixes
    ``_total``, ``_bucket``, ``_sum``, ``_count``, ``_created``.

    Returns:
        a :class:`NameMatch`, or ``None`` for names that are not in the catalog.
    """
    name, escaped = _unescape(exposed)
    candidates = [(name, "")]
    for suffix in _SAMPLE_SUFFIXES:
        if name.endswith(suffix):
            candidates.append((name[: -len(suffix)], suffix))
    # ``vllm:iteration_tokens_total`` is a histogram whose family name itself ends in _total.
    for base, suffix in candidates:
        if base in BY_NAME:
            return NameMatch(base, suffix, False, escaped)
        if base in LEGACY_TO_CANONICAL:
            return NameMatch(LEGACY_TO_CANONICAL[base], suffix, True, escaped)
    return None


def exposed_names(canonical: str) -> tuple[str, ...]:
    """All family names (new first, then legacy) under which ``canonical`` may be exposed, with the colon."""
    spec = BY_NAME[canonical]
    return (spec.name, *spec.legacy)


def version_tuple(version: str) -> tuple[int, ...]:
    """``"0.10.1.post1"`` -> ``(0, 10, 1)``; unparsable parts stop the tuple."""
    out: list[int] = []
    for part in version.split("."):
        m = re.match(r"\d+", part)
        if not m:
            break
        out.append(int(m.group()))
    return tuple(out)


def names_for_version(canonical: str, version: str) -> tuple[str, ...]:
    """Family names vLLM ``version`` exposes for ``canonical`` (empty when it does not exist yet).

    Follows vLLM's deprecation policy (deprecated in X.Y, hidden in X.Y+1, removed in X.Y+2):
    from ``since`` on the new name exists; legacy names are exposed by default until
    ``legacy_until`` (the version that hides them; ``--show-hidden-metrics-for-version`` can
    bring them back for one more release, which this function does not model). Versions
    between the two expose both (e.g. 0.10 exposes ``gpu_cache_usage_perc`` and
    ``kv_cache_usage_perc`` side by side).
    """
    spec = BY_NAME[canonical]
    v = version_tuple(version)
    names: list[str] = []
    if not spec.since or v >= version_tuple(spec.since):
        names.append(spec.name)
    elif not spec.legacy:
        return ()
    if spec.legacy and (not spec.legacy_until or v < version_tuple(spec.legacy_until)):
        names.extend(spec.legacy)
    return tuple(names)
