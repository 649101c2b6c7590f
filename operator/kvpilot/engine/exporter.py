"""vLLM's ``/metrics`` for the engine model: real names, types, labels, help and buckets per version.

:class:`VLLMMetrics` owns a ``prometheus_client`` ``CollectorRegistry`` laid out as the named vLLM
release lays out its own (V1 engine, ``vllm/v1/metrics/loggers.py``, single API server):

- names per version from :func:`kvpilot.metrics.catalog.names_for_version`: 0.8 exposes the old
  names (``vllm:gpu_cache_usage_perc``, ``vllm:gpu_prefix_cache_*``, ``vllm:time_per_output_token_seconds``),
  0.10 both generations side by side, 0.33 only the new names;
- no ``engine`` label before 0.8.3 (added by vLLM PR #13923, 2025-03-27);
- prefix-cache counters in **blocks** before 0.9.0 (vLLM PR #18003 switched them to tokens), so the
  token counts the engine reports are divided by ``block_size`` for those versions;
- ``vllm:num_requests_waiting_by_reason{reason}`` since 0.20; external prefix-cache counters since 0.11;
- ``vllm:cache_config_info``: a gauge set to 1 whose labels are the cache config (plus ``engine``,
  no ``model_name``), with ``kv_cache_size_tokens``/``kv_cache_max_concurrency`` only since 0.24
  (docs/background.md §2).

From vLLM 0.29 on, the families, labels, bucket edges, HELP texts and the moment each value
changes are those of vLLM 0.29.0's ``PrometheusStatLogger`` fed by its ``OutputProcessor``, proven
by the reference tier (``tests/reference/``, vLLM's own code side by side with this exporter):
``vllm:iteration_tokens_total`` observes the step's ``IterationStats`` (prompt tokens of prefills
that completed in the step, less cached ones, plus generated tokens; a step without output is not
observed), ``vllm:num_preemptions`` counts a preemption when its request next produces output,
TTFT and inter-token latencies are observed as the tokens come, ``finished_reason`` has five
values, ``vllm:cache_config_info`` carries every CacheConfig field. Older versions keep the
previous semantics (tokens scheduled per step, preemptions when they happen), not proven against
those releases.

Exposition goes through ``prometheus_client`` exactly as a vLLM server's does, so a Prometheus 2.x
asking for OpenMetrics gets sample names with ``:`` escaped to ``_`` while ``# HELP``/``# TYPE`` keep
the colon (prometheus_client >= 0.22, docs/metrics.md "Escaping"); a plain scrape (``text/plain``) gets the colon names.

Pure logic: no sockets; the CLI serves :meth:`VLLMMetrics.exposition`.
"""

from __future__ import annotations

import threading
from bisect import bisect_left
from collections.abc import Mapping, Sequence
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.exposition import choose_encoder
from prometheus_client.metrics_core import Metric

from kvpilot.kv.capacity import kv_cache_capacity
from kvpilot.metrics import catalog
from kvpilot.metrics.catalog import DEFAULT_VLLM_VERSION, names_for_version, version_tuple
from kvpilot.text.errors import InvalidValueError
from kvpilot.vllm.defaults import DEFAULT_BLOCK_SIZE, DEFAULT_GPU_MEMORY_UTILIZATION

__all__ = ["VLLMMetrics", "DEFAULT_VLLM_VERSION", "request_token_buckets"]

SEMANTICS_0_29 = (0, 29)  # vLLM 0.29.0's stat-logger semantics (module docstring), proven by tests/reference
ENGINE_LABEL_SINCE = (0, 8, 3)  # vLLM PR #13923
PREFIX_TOKENS_SINCE = (0, 9, 0)  # vLLM PR #18003: prefix counters in tokens, blocks before
KV_SIZE_LABELS_SINCE = (0, 24)  # docs/background.md §2: kv_cache_size_tokens, kv_cache_max_concurrency labels
KV_SIZE_LABELS = ("kv_cache_size_tokens", "kv_cache_max_concurrency")

# HELP texts of the legacy families as real servers printed them (fixtures production-stack-318 for
# 0.8, production-stack-617 for 0.10: "DEPRECATED: Use ... instead."; the missing space in
# "queriedtokens" is vLLM's own).
_LEGACY_HELP = {
    "vllm:gpu_cache_usage_perc": "GPU KV-cache usage. 1 means 100 percent usage.",
    "vllm:gpu_prefix_cache_queries": "GPU prefix cache queries, in terms of number of queriedtokens.",
    "vllm:gpu_prefix_cache_hits": "GPU prefix cache hits, in terms of number of cached tokens.",
    "vllm:time_per_output_token_seconds": "Histogram of time per output token in seconds.",
}
_BLOCK_HELP = {
    "vllm:gpu_prefix_cache_queries": "GPU prefix cache queries, in terms of number of queried blocks.",
    "vllm:gpu_prefix_cache_hits": "GPU prefix cache hits, in terms of number of cached blocks.",
}

#: labelled children vLLM creates up front: waiting reasons (v1/metrics/loggers.py, v0.20+) and the
#: finish reasons of ``vllm:request_success`` (``FinishReason``: stop, length, abort; v0.8–v0.33).
_PREINITIALISED = (
    ("vllm:num_requests_waiting_by_reason", ("capacity",)),
    ("vllm:num_requests_waiting_by_reason", ("deferred",)),
    ("vllm:request_success", ("stop",)),
    ("vllm:request_success", ("length",)),
    ("vllm:request_success", ("abort",)),
)

#: the same, from vLLM 0.29.0 (v1/metrics/loggers.py ``FinishReason`` has five values; the sleep state's three
#: labels and the prompt-token sources are created up front too)
_PREINITIALISED_0_29 = (
    ("vllm:request_success", ("error",)),
    ("vllm:request_success", ("repetition",)),
    ("vllm:prompt_tokens_by_source", ("local_compute",)),
    ("vllm:prompt_tokens_by_source", ("local_cache_hit",)),
    ("vllm:prompt_tokens_by_source", ("external_kv_transfer",)),
)

#: HELP texts of vLLM 0.29.0's families where they differ from the catalog's (v1/metrics/loggers.py, read off
#: vLLM's registry by the reference tier).
_HELP_0_29 = {
    "vllm:num_requests_waiting_by_reason": "Number of waiting requests by reason. Reason labels: 'capacity' = "
    "waiting for scheduling capacity; 'deferred' = deferred by transient constraints (LoRA budget, KV transfer, "
    "blocked status). Sum of all reasons equals vllm:num_requests_waiting.",
    "vllm:kv_cache_usage_perc": "KV-cache usage. 1 means 100 percent usage.",
    "vllm:prefix_cache_queries": "Prefix cache queries, in terms of number of queried tokens.",
    "vllm:prefix_cache_hits": "Prefix cache hits, in terms of number of cached tokens.",
    "vllm:external_prefix_cache_queries": "External prefix cache queries from KV connector cross-instance cache "
    "sharing, in terms of number of queried tokens.",
    "vllm:external_prefix_cache_hits": "External prefix cache hits from KV connector cross-instance cache sharing, "
    "in terms of number of cached tokens.",
    "vllm:num_preemptions": "Cumulative number of preemption from the engine.",
    "vllm:time_to_first_token_seconds": "Histogram of time to first token in seconds.",
    "vllm:inter_token_latency_seconds": "Histogram of inter-token latency in seconds.",
    "vllm:e2e_request_latency_seconds": "Histogram of e2e request latency in seconds.",
    "vllm:cache_config_info": "Information of the LLMEngine CacheConfig",
}

#: ``str()`` of the vLLM 0.29.0 ``CacheConfig`` fields ``vllm:cache_config_info`` carries besides the ones the
#: engine knows (block_size, num_gpu_blocks, gpu_memory_utilization, enable_prefix_caching, cache_dtype and the
#: derived kv_cache_size_tokens / kv_cache_max_concurrency): their defaults for a server started with
#: ``--block-size``, read off vLLM 0.29.0's own ``log_engine_initialized`` by the reference tier; the block size
#: and utilization are vLLM's defaults (:mod:`kvpilot.vllm.defaults`), which the engine's own values replace.
CACHE_CONFIG_DEFAULTS_0_29 = {
    "_block_size_resolved": "True",
    "block_size": str(DEFAULT_BLOCK_SIZE),
    "cache_dtype": "auto",
    "enable_prefix_caching": "True",
    "gpu_memory_utilization": str(DEFAULT_GPU_MEMORY_UTILIZATION),
    "is_attention_free": "False",
    "kv_cache_dtype_skip_layers": "[]",
    "kv_cache_layout": "None",
    "kv_cache_max_concurrency": "None",
    "kv_cache_memory_bytes": "None",
    "kv_cache_size_tokens": "None",
    "kv_offloading_backend": "native",
    "kv_offloading_size": "None",
    "kv_sharing_fast_prefill": "False",
    "mamba_block_size": "None",
    "mamba_cache_dtype": "auto",
    "mamba_cache_mode": "none",
    "mamba_page_size_padded": "None",
    "mamba_ssm_cache_dtype": "float32",
    "num_cpu_blocks": "None",
    "num_gpu_blocks": "None",
    "num_gpu_blocks_override": "None",
    "prefix_cache_retention_interval": "0",
    "prefix_caching_hash_algo": "sha256",
    "prefix_match_unit": "None",
    "replayssm_buffer_len": "16",
    "skip_page_size_padded": "None",
    "sliding_window": "None",
    "use_kda_recoverssm": "False",
    "use_replayssm": "False",
    "user_specified_block_size": "True",
    "user_specified_mamba_block_size": "False",
}

_BUCKETS = {
    "vllm:iteration_tokens_total": catalog.ITERATION_TOKENS_BUCKETS,
    "vllm:time_to_first_token_seconds": catalog.TTFT_BUCKETS,
    "vllm:inter_token_latency_seconds": catalog.ITL_BUCKETS,
    "vllm:e2e_request_latency_seconds": catalog.REQUEST_LATENCY_BUCKETS,
    "vllm:request_queue_time_seconds": catalog.REQUEST_LATENCY_BUCKETS,
    "vllm:request_prefill_time_seconds": catalog.REQUEST_LATENCY_BUCKETS,
    "vllm:request_decode_time_seconds": catalog.REQUEST_LATENCY_BUCKETS,
    "vllm:request_inference_time_seconds": catalog.REQUEST_LATENCY_BUCKETS,
    "vllm:request_time_per_output_token_seconds": catalog.ITL_BUCKETS,
    "vllm:request_params_n": (1, 2, 5, 10, 20),  # build_buckets([1, 2, 5], 20), v1/metrics/loggers.py
}


def request_token_buckets(max_model_len: int) -> tuple[float, ...]:
    """1, 2, 5, 10, 20, 50, ... up to ``max_model_len`` (vLLM ``build_1_2_5_buckets``, v1/metrics/loggers.py).

    Raises:
        InvalidValueError: ``max_model_len`` < 1.
    """
    if max_model_len < 1:
        raise InvalidValueError("max_model_len", f"must be >= 1, got {max_model_len}")
    out: list[float] = []
    exponent = 0
    while True:
        for m in (1, 2, 5):
            value = m * 10**exponent
            if value > max_model_len:
                return tuple(out)
            out.append(float(value))
        exponent += 1


#: one exposed family's metric object
_Metric = Gauge | Counter | Histogram


class _Flush:
    """A collector with no metrics: collecting it applies :class:`VLLMMetrics`' buffered updates."""

    def __init__(self, owner: VLLMMetrics):
        self._owner = owner

    def describe(self) -> list[Metric]:
        return []

    def collect(self) -> list[Metric]:
        self._owner._flush()
        return []


class VLLMMetrics:
    """A vLLM server's metrics registry, fed by the engine model.

    Args:
        vllm_version: the vLLM release to imitate (``"0.8.0"`` … ``"0.33.0"``; default
            :data:`DEFAULT_VLLM_VERSION`). Decides names, labels and units (module docstring).
        model_name: value of the ``model_name`` label (vLLM: ``--served-model-name`` or the model id).
        engine: value of the ``engine`` label (data-parallel rank; ``"0"`` for one engine).
        cache_config: label set of ``vllm:cache_config_info`` (strings, as vLLM ``str()``s each
            CacheConfig field): e.g. ``block_size``, ``num_gpu_blocks``, ``gpu_memory_utilization``,
            ``enable_prefix_caching``, ``cache_dtype``, ``kv_cache_size_tokens``,
            ``kv_cache_max_concurrency``. ``block_size`` (default vLLM's, ``"16"``) also converts prefix
            counters to blocks before 0.9.0. The two ``kv_cache_*`` labels are dropped before 0.24.
        registry: a registry to fill (default: a new one; never the process-global ``REGISTRY``).
        max_model_len: top of the per-request token histograms' buckets (default 8192, the
            founding experiment's ``--max-model-len``, docs/background.md §7).

    Raises:
        InvalidValueError: unparsable ``vllm_version`` or ``block_size``.
    """

    def __init__(
        self,
        *,
        vllm_version: str = DEFAULT_VLLM_VERSION,
        model_name: str,
        engine: str = "0",
        cache_config: Mapping[str, str],
        registry: CollectorRegistry | None = None,
        max_model_len: int = 8192,
    ):
        v = version_tuple(vllm_version)
        if len(v) < 2:
            raise InvalidValueError("vllm_version", f"{vllm_version!r} is not a version such as 0.10.1")
        self.vllm_version = vllm_version
        self.version = v
        self.registry = registry if registry is not None else CollectorRegistry()
        self.model_name = model_name
        self.engine = str(engine)
        self.has_engine_label = v >= ENGINE_LABEL_SINCE
        self.semantics_0_29 = v >= SEMANTICS_0_29
        self.max_model_len = max_model_len
        self.prefix_in_blocks = v < PREFIX_TOKENS_SINCE
        try:
            self.block_size = int(cache_config.get("block_size", str(DEFAULT_BLOCK_SIZE)))
        except ValueError:
            raise InvalidValueError(
                "cache_config.block_size", f"{cache_config['block_size']!r} is not an integer"
            ) from None
        if self.block_size < 1:
            raise InvalidValueError("cache_config.block_size", f"must be >= 1, got {self.block_size}")
        self._labelnames = ("model_name", "engine") if self.has_engine_label else ("model_name",)
        self._labelvalues = (model_name, self.engine) if self.has_engine_label else (model_name,)
        self._pending_lock = threading.Lock()
        self._gauges: dict[tuple[str, ...], float] = {}  # (canonical name, extra label values...) -> value
        self._counts: dict[tuple[str, ...], float] = {}
        self.registry.register(_Flush(self))  # registered first, so it runs before the families are read
        self._prefix_tokens = {"queries": 0, "hits": 0}
        self._families: dict[str, list[_Metric]] = {}  # canonical name -> metric objects, one per exposed name
        self._child_cache: dict[tuple[str, ...], list[Any]] = {}
        self._build(max_model_len)
        self._cache_config_info(cache_config)

    # ------------------------------------------------------------------ layout
    def _help(self, canonical: str, exposed: str) -> str:
        spec = catalog.BY_NAME[canonical]
        if exposed == canonical:
            if self.semantics_0_29:
                return _HELP_0_29.get(canonical, spec.help)
            return spec.help
        if self.prefix_in_blocks and exposed in _BLOCK_HELP:
            return _BLOCK_HELP[exposed]
        text = _LEGACY_HELP.get(exposed, spec.help)
        if canonical in names_for_version(canonical, self.vllm_version):  # both generations: legacy is deprecated
            text += f" DEPRECATED: Use {canonical} instead."
        return text

    def _build(self, max_model_len: int) -> None:  # noqa: C901
        token_buckets = request_token_buckets(max_model_len)
        for spec in catalog.CATALOG:
            if spec.type == "info":
                continue
            labels = self._labelnames + spec.labels
            children: list[_Metric] = []
            for exposed in names_for_version(spec.name, self.vllm_version):
                doc = self._help(spec.name, exposed)
                metric: _Metric
                if spec.type == "gauge":
                    metric = Gauge(exposed, doc, labels, registry=self.registry)
                elif spec.type == "counter":
                    metric = Counter(exposed, doc, labels, registry=self.registry)
                else:
                    buckets = _BUCKETS.get(spec.name, token_buckets)
                    metric = Histogram(exposed, doc, labels, buckets=buckets, registry=self.registry)
                children.append(metric)
            self._families[spec.name] = children
        # vLLM creates every labelled child at startup, so each series is exposed (at 0) from the first scrape.
        preinitialised = _PREINITIALISED + (_PREINITIALISED_0_29 if self.semantics_0_29 else ())
        for canonical, extra in preinitialised:
            for metric in self._families.get(canonical, []):
                metric.labels(*self._labelvalues, *extra)
        for canonical, children in self._families.items():
            if not catalog.BY_NAME[canonical].labels:
                for metric in children:
                    metric.labels(*self._labelvalues)
        # record_sleep_state() at start-up: awake (v1/metrics/loggers.py, vLLM 0.29.0)
        for state, value in (("awake", 1), ("weights_offloaded", 0), ("discard_all", 0)):
            for metric in self._families.get("vllm:engine_sleep_state", []):
                if isinstance(metric, Gauge):  # always: the catalog types it a gauge
                    metric.labels(*self._labelvalues, state).set(value)

    def _cache_config_info(self, cache_config: Mapping[str, str]) -> None:
        spec = catalog.BY_NAME["vllm:cache_config_info"]
        labels = {str(k): str(val) for k, val in cache_config.items()}
        if self.semantics_0_29:
            labels = {**CACHE_CONFIG_DEFAULTS_0_29, **labels}
            if labels["num_gpu_blocks"] != "None":  # vLLM derives these two from the blocks (kvpilot.kv.capacity)
                tokens, concurrency = kv_cache_capacity(
                    int(labels["num_gpu_blocks"]), int(labels["block_size"]), self.max_model_len
                )
                labels["kv_cache_size_tokens"] = str(tokens)
                labels["kv_cache_max_concurrency"] = str(concurrency)
        if self.version < KV_SIZE_LABELS_SINCE:
            for key in KV_SIZE_LABELS:
                labels.pop(key, None)
        if self.has_engine_label:
            labels["engine"] = self.engine
        names = sorted(labels)
        self.cache_config_labels = dict(labels)
        info = Gauge("vllm:cache_config_info", self._help(spec.name, spec.name), names, registry=self.registry)
        info.labels(**labels).set(1)

    def _children(self, canonical: str, *extra: str) -> list[Any]:
        # ``labels()`` costs a lock and a dict lookup per call; the engine calls this per step, so cache.
        # Any: the children are Gauge, Counter or Histogram children, as the catalog types ``canonical``;
        # each caller (_flush's set/inc, _observe) calls the method of its family's type.
        key = (canonical, *extra)
        children = self._child_cache.get(key)
        if children is None:
            children = [m.labels(*self._labelvalues, *extra) for m in self._families.get(canonical, [])]
            self._child_cache[key] = children
        return children

    # Gauge sets and counter increments are buffered in plain dicts (callers hold ``_pending_lock``)
    # and applied to the prometheus_client objects by ``_flush``, which runs first whenever the
    # registry is collected (exposition, recording). The engine calls these ~10 times per step, and
    # prometheus_client's per-call locking made the exporter cost more than the engine step itself.
    def _set(self, canonical: str, value: float, *extra: str) -> None:
        self._gauges[(canonical, *extra)] = value

    def _inc(self, canonical: str, amount: float, *extra: str) -> None:
        if amount:
            key = (canonical, *extra)
            self._counts[key] = self._counts.get(key, 0) + amount

    def _flush(self) -> None:
        with self._pending_lock:
            gauges, self._gauges = self._gauges, {}
            counts, self._counts = self._counts, {}
        for (canonical, *extra), value in gauges.items():
            for child in self._children(canonical, *extra):
                child.set(value)
        for (canonical, *extra), amount in counts.items():
            for child in self._children(canonical, *extra):
                child.inc(amount)

    def _observe(self, canonical: str, value: float) -> None:
        for child in self._children(canonical):
            child.observe(value)

    def _observe_n(self, canonical: str, value: float, n: int) -> None:
        """``n`` observations of ``value`` at once: bucket ``+= n``, ``_sum += value * n``.

        What ``n`` calls of ``Histogram.observe`` do (prometheus_client's ``metrics.Histogram.observe``: the
        first bucket whose upper bound is >= the value, then the sum), except that the sum gets one product
        instead of ``n`` additions (equal to within ``n`` float roundings). Uses the child's ``_buckets``,
        ``_upper_bounds`` and ``_sum``, the attributes ``observe`` itself updates.
        """
        if n == 1:
            self._observe(canonical, value)
            return
        for child in self._children(canonical):
            child._sum.inc(value * n)
            child._buckets[bisect_left(child._upper_bounds, value)].inc(n)

    # ------------------------------------------------------------------ engine calls
    def set_queue(
        self, *, running: int, waiting: int, waiting_capacity: int, waiting_deferred: int, kv_cache_usage: float
    ) -> None:
        """Set the scheduler gauges after a step.

        Args:
            running: requests in the running list (``vllm:num_requests_running``).
            waiting: requests in the waiting queue (``vllm:num_requests_waiting``).
            waiting_capacity: waiting requests blocked by KV capacity
                (``vllm:num_requests_waiting_by_reason{reason="capacity"}``, v0.20+).
            waiting_deferred: waiting requests deferred for another reason
                (``vllm:num_requests_waiting_by_reason{reason="deferred"}``, v0.20+).
            kv_cache_usage: used blocks / usable blocks, ratio 0–1, cached-but-free blocks count
                as free (``vllm:kv_cache_usage_perc``, or ``gpu_cache_usage_perc`` before 0.11).
        """
        with self._pending_lock:
            self._set("vllm:num_requests_running", running)
            self._set("vllm:num_requests_waiting", waiting)
            self._set("vllm:num_requests_waiting_by_reason", waiting_capacity, "capacity")
            self._set("vllm:num_requests_waiting_by_reason", waiting_deferred, "deferred")
            self._set("vllm:kv_cache_usage_perc", kv_cache_usage)

    def record_step(  # noqa: C901
        self,
        *,
        num_tokens: int,
        prompt_tokens: int,
        generation_tokens: int,
        preemptions: int,
        prefix_queries: int,
        prefix_hits: int,
        external_queries: int = 0,
        external_hits: int = 0,
        prompt_cached: int = 0,
        prompt_external: int = 0,
        preemptions_reported: int | None = None,
        ttfts: Sequence[float] = (),
        itls: Sequence[float] = (),
        itl_counts: Sequence[tuple[float, int]] = (),
    ) -> None:
        """Account for one engine step.

        Args:
            num_tokens: tokens scheduled in the step. Before vLLM 0.29 this is what
                ``vllm:iteration_tokens_total`` observes (a step with 0 tokens is not observed).
            prompt_tokens: whole prompts of the requests whose first token came in this step
                (``vllm:prompt_tokens_total``).
            generation_tokens: tokens sampled in the step (``vllm:generation_tokens_total``).
            preemptions: requests the scheduler preempted in the step (``vllm:num_preemptions_total``
                before 0.29).
            prefix_queries: prompt tokens looked up in the GPU prefix cache; converted to blocks
                (``// block_size`` of the running totals) before vLLM 0.9.0.
            prefix_hits: prompt tokens found there (same conversion).
            external_queries: the same as ``prefix_queries`` for a KV connector tier (LMCache-like), tokens.
            external_hits: the same as ``prefix_hits`` for that tier, tokens.
            prompt_cached: of ``prompt_tokens``, those found in the GPU prefix cache at first admission.
            prompt_external: of ``prompt_tokens``, those loaded from the KV connector tier.
            preemptions_reported: preemptions of the requests that produced output in this step, which
                is when vLLM 0.29 counts them (``IterationStats.num_preempted_reqs``); None: ``preemptions``.
            ttfts: first-token latencies of this step's first tokens, s (``vllm:time_to_first_token_seconds``).
            itls: inter-token latencies of this step's other tokens, s (``vllm:inter_token_latency_seconds``,
                and ``vllm:time_per_output_token_seconds`` where exposed).
            itl_counts: more inter-token latencies as ``(gap s, count)``: ``count`` observations of ``gap``
                (:meth:`_observe_n`; the engine sends its gaps so, most tokens of a step sharing one).

        From vLLM 0.29 (``PrometheusStatLogger.record`` with the step's ``IterationStats``): a step
        without output records no token counts; ``vllm:iteration_tokens_total`` observes
        ``prompt_tokens - prompt_cached - prompt_external + generation_tokens``;
        ``vllm:prompt_tokens_by_source`` splits ``prompt_tokens`` into local_compute /
        local_cache_hit / external_kv_transfer, ``vllm:prompt_tokens_cached`` counts the cached part.

        Raises:
            ValueError: a negative count.
        """
        reported = preemptions if preemptions_reported is None else preemptions_reported
        counts = {
            "num_tokens": num_tokens,
            "prompt_tokens": prompt_tokens,
            "generation_tokens": generation_tokens,
            "preemptions": preemptions,
            "prefix_queries": prefix_queries,
            "prefix_hits": prefix_hits,
            "external_queries": external_queries,
            "external_hits": external_hits,
            "prompt_cached": prompt_cached,
            "prompt_external": prompt_external,
            "preemptions_reported": reported,
        }
        for field_name, count in counts.items():  # validate before touching any counter
            if count < 0:
                raise ValueError(f"{field_name}: must be >= 0, got {count}")
        if prompt_cached + prompt_external > prompt_tokens:
            raise ValueError(f"prompt_cached: {prompt_cached} + {prompt_external} external > {prompt_tokens} prompt")
        for ttft in ttfts:
            self._observe("vllm:time_to_first_token_seconds", ttft)
        for gap in itls:
            self._observe("vllm:inter_token_latency_seconds", gap)
        for gap, n in itl_counts:
            self._observe_n("vllm:inter_token_latency_seconds", gap, n)
        if self.semantics_0_29:
            computed = prompt_tokens - prompt_cached - prompt_external
            if generation_tokens > 0:  # IterationStats exist only for steps with outputs
                self._observe("vllm:iteration_tokens_total", computed + generation_tokens)
            preempted = reported
        else:
            if num_tokens > 0:
                self._observe("vllm:iteration_tokens_total", num_tokens)
            preempted = preemptions
        with self._pending_lock:
            self._inc("vllm:prompt_tokens", prompt_tokens)
            self._inc("vllm:generation_tokens", generation_tokens)
            self._inc("vllm:num_preemptions", preempted)
            if self.semantics_0_29:
                self._inc(
                    "vllm:prompt_tokens_by_source", prompt_tokens - prompt_cached - prompt_external, "local_compute"
                )
                self._inc("vllm:prompt_tokens_by_source", prompt_cached, "local_cache_hit")
                self._inc("vllm:prompt_tokens_by_source", prompt_external, "external_kv_transfer")
                self._inc("vllm:prompt_tokens_cached", prompt_cached + prompt_external)
            queries, hits = self._prefix_increments(prefix_queries, prefix_hits)
            self._inc("vllm:prefix_cache_queries", queries)
            self._inc("vllm:prefix_cache_hits", hits)
            self._inc("vllm:external_prefix_cache_queries", external_queries)
            self._inc("vllm:external_prefix_cache_hits", external_hits)

    def _prefix_increments(self, queries: int, hits: int) -> tuple[float, float]:
        """Token counts -> counter increments: tokens from 0.9.0, whole blocks of the running totals before."""
        if not self.prefix_in_blocks:
            return queries, hits
        out = []
        for key, tokens in (("queries", queries), ("hits", hits)):
            before = self._prefix_tokens[key]
            self._prefix_tokens[key] = before + tokens
            out.append(self._prefix_tokens[key] // self.block_size - before // self.block_size)
        return out[0], out[1]

    def record_request(
        self,
        *,
        e2e: float,
        queue_time: float,
        prefill_time: float,
        decode_time: float,
        prompt_tokens: int,
        generation_tokens: int,
        finished_reason: str,
        inference_time: float | None = None,
        prompt_cached: int = 0,
        max_tokens: int | None = None,
    ) -> None:
        """Account for one finished request (seconds and tokens).

        Args:
            e2e: arrival → finish, s (``vllm:e2e_request_latency_seconds``).
            queue_time: s in WAITING, arrival to first scheduled (``vllm:request_queue_time_seconds``).
            prefill_time: first scheduled → first token, s (``vllm:request_prefill_time_seconds``).
            decode_time: first → last token, s (``vllm:request_decode_time_seconds``).
            prompt_tokens: the request's prompt tokens (``vllm:request_prompt_tokens``).
            generation_tokens: the request's output tokens (``vllm:request_generation_tokens``, and from
                0.29 ``vllm:request_max_num_generation_tokens``, with ``n`` = 1 in ``vllm:request_params_n``).
            finished_reason: ``stop`` | ``length`` | ``abort`` | ``error`` | ``repetition``
                (``vllm:request_success_total``).
            inference_time: first scheduled → last token, s (``vllm:request_inference_time_seconds``,
                0.29+; default ``prefill_time + decode_time``).
            prompt_cached: prompt tokens not computed (prefix cache + connector) at first admission
                (``vllm:request_prefill_kv_computed_tokens`` observes ``prompt_tokens - prompt_cached``, 0.29+).
            max_tokens: the request's ``max_tokens`` parameter (``vllm:request_params_max_tokens``, 0.29+;
                not observed when None or 0, as vLLM skips a falsy value).

        TTFT and inter-token latencies are observed per step (:meth:`record_step`), as vLLM does.
        ``vllm:request_time_per_output_token_seconds`` (0.29+) observes ``decode_time /
        (generation_tokens - 1)``, 0 for a single token (``IterationStats.update_from_finished_request``).
        """
        self._observe("vllm:e2e_request_latency_seconds", e2e)
        self._observe("vllm:request_queue_time_seconds", queue_time)
        self._observe("vllm:request_prefill_time_seconds", prefill_time)
        self._observe("vllm:request_decode_time_seconds", decode_time)
        self._observe("vllm:request_prompt_tokens", prompt_tokens)
        self._observe("vllm:request_generation_tokens", generation_tokens)
        if self.semantics_0_29:
            inference = prefill_time + decode_time if inference_time is None else inference_time
            self._observe("vllm:request_inference_time_seconds", inference)
            self._observe("vllm:request_prefill_kv_computed_tokens", prompt_tokens - max(prompt_cached, 0))
            tpot = decode_time / (generation_tokens - 1) if generation_tokens > 1 else 0
            self._observe("vllm:request_time_per_output_token_seconds", tpot)
            self._observe("vllm:request_max_num_generation_tokens", generation_tokens)
            self._observe("vllm:request_params_n", 1)
            if max_tokens:
                self._observe("vllm:request_params_max_tokens", max_tokens)
        with self._pending_lock:
            self._inc("vllm:request_success", 1, finished_reason)

    # ------------------------------------------------------------------ reading
    def collect(self) -> list[Metric]:
        """``registry.collect()``: the families now, for :func:`kvpilot.metrics.recording.write_recording`."""
        return list(self.registry.collect())

    def exposition(self, accept: str | None = None) -> tuple[bytes, str]:
        """The ``/metrics`` body and its Content-Type for an ``Accept`` header.

        ``text/plain`` (or none) → Prometheus text 0.0.4 with colon names; ``application/openmetrics-text``
        → OpenMetrics as ``prometheus_client.exposition.choose_encoder`` picks it (sample names
        escaped to ``_`` unless the request asks for ``escaping=allow-utf-8``), as real vLLM servers answer.
        """
        encoder, content_type = choose_encoder(accept or "")
        return encoder(self.registry), content_type
