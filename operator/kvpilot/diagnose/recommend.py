"""Quantified recommendations per verdict, computed with the KV library (kvpilot.kv).

Each recommendation follows from the evidence of its verdict and never contradicts it: a KV
shortage never gets "raise --max-num-seqs", a max_num_seqs cap gets a suggestion bounded by the
KV room actually observed, a compute-bound server gets no flag that would not help.

Arithmetic (docs/diagnosis.md "Recommendations"):

- ``--gpu-memory-utilization u -> u'`` (only when u is known, not vLLM's default assumed): the KV
  pool grows by the memory the change frees,
  ``ceil(u' x GPU memory) - ceil(u x GPU memory)`` bytes (weights and activations do not change), cut
  into whole blocks (``kvpilot.kv.capacity.tokens_at_utilization``); bytes per token from the model's config.json
  (``kvpilot.kv.bytes_per_token``) or ``kv_cache_memory / kv_cache_tokens``. ``u'`` is what the
  observed demand needs, capped at 0.95 (docs/background.md §7: higher values risk OOM at startup).
- ``--kv-cache-dtype auto -> fp8``: tokens x (element bytes now / 1 byte) (``kvpilot.kv.kv_element_bytes``;
  2x for bf16/fp16).
- ``--max-num-seqs``: on a KV shortage, the concurrency whose full-length requests fit:
  ``floor(kv_cache_tokens / tokens_per_request)``; on a seqs cap, the concurrency the traffic
  needs (Little's law on a growing queue, running + waiting on a standing one), rounded up to a
  CUDA-graph batch size and bounded by what KV holds (see ``_seqs_cap``).
- ``--max-num-batched-tokens B -> 2B`` on a token-budget cap.

Pure functions, no I/O.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from kvpilot.diagnose.limits import Limits
from kvpilot.diagnose.model import Recommendation, Verdict
from kvpilot.diagnose.signals import Signals
from kvpilot.kv import KVConfigError, bytes_per_token, kv_element_bytes
from kvpilot.kv.capacity import tokens_at_utilization
from kvpilot.kv.spec import KVSpec, ModelConfig
from kvpilot.text.numbers import count, fig, gib, number, percent, significant, times
from kvpilot.vllm.defaults import CPU_DEFAULT_BLOCK_SIZE, DEFAULT_BLOCK_SIZE

#: highest --gpu-memory-utilization kvpilot suggests (docs/background.md §7: 0.95 failed at startup on WSL2)
MAX_SUGGESTED_UTILIZATION = 0.95


@dataclass
class Inputs:
    """What a recommendation may use.

    Attributes:
        signals / limits: the target's signals and limits.
        model_config: parsed config.json of the served model (optional; gives bytes per token).
    """

    signals: Signals
    limits: Limits
    model_config: ModelConfig | None = None


def _model_spec(inputs: Inputs) -> KVSpec | None:
    """The served model's KV spec, None without a readable config.json."""
    return inputs.model_config.spec if inputs.model_config is not None else None


def kv_bytes_per_token(inputs: Inputs) -> int | None:
    """Bytes per KV token per GPU from the model config (kvpilot.kv), or None when unknown/invalid."""
    spec = _model_spec(inputs)
    if spec is None:
        return None
    dtype = inputs.limits.value("kv_cache_dtype") or "auto"
    tp = inputs.limits.value("tensor_parallel_size") or 1
    try:
        return bytes_per_token(spec, kv_cache_dtype=str(dtype), tensor_parallel_size=int(tp))
    except (KVConfigError, KeyError, ValueError, TypeError):
        return None


def tokens_per_request(signals: Signals) -> float | None:
    """(prompt + generated) tokens per finished request, from the counters' rates; None when unknown."""
    p, g, f = (signals.get(k) for k in ("prompt_tokens_per_s", "generation_tokens_per_s", "requests_finished_per_s"))
    if p is None or g is None or not f:
        return None
    return (p + g) / f


def recommend(verdict: Verdict, inputs: Inputs, **overrides: int | None) -> list[Recommendation]:
    """Recommendations for ``verdict`` (empty when nothing is quantifiable or nothing would help).

    ``overrides`` replace limit values the rule inferred (e.g. ``max_num_seqs`` read off a flat
    running gauge).
    """
    fn = _BY_VERDICT.get(verdict)
    if not fn:
        return []
    return fn(inputs, **overrides) if overrides else fn(inputs)


Platform = Literal["cpu", "gpu"]


def platform(limits: Limits) -> tuple[Platform, str]:
    """The device the server runs on and the evidence for it, in words.

    CPU when the GPU named is ``cpu`` (``--gpu-name cpu``), or, with no GPU named, when ``vllm:cache_config_info``
    shows a KV pool set in bytes (``kv_cache_memory_bytes``: vLLM's CPU backend is sized so) with the block size
    vLLM's CPU platform picks (:data:`~kvpilot.vllm.defaults.CPU_DEFAULT_BLOCK_SIZE`); a GPU otherwise.
    """
    name = (limits.gpu_name or "").strip().lower()
    if name == "cpu":
        return "cpu", "--gpu-name cpu"
    if name:
        return "gpu", f"GPU {limits.gpu_name}"
    if limits.value("kv_cache_memory_bytes") and limits.value("block_size") == CPU_DEFAULT_BLOCK_SIZE:
        return "cpu", (
            f"KV set in bytes with block size {CPU_DEFAULT_BLOCK_SIZE}, as vLLM's CPU backend runs "
            f"({limits.kv_cache_memory_bytes.source})"
        )
    return "gpu", "no CPU evidence"


@dataclass(frozen=True)
class Need:
    """The concurrency the window's traffic needs (:func:`concurrency_needed`).

    Attributes:
        requests: requests that must run at once to serve the arrivals (and drain a growing backlog).
        keep_up: the requests that just keep up with the arrivals (Little's law), None when not computed so.
        how: the arithmetic, in words.
    """

    requests: float
    keep_up: float | None
    how: str


def concurrency_needed(s: Signals, now: float, held: str) -> Need | None:
    """How many requests must run at once, from ``now`` running at once (``held``: what holds them, ``slots``).

    - Queue growing (open loop), completion rate known: by Little's law each of the ``now`` requests completes
      ``served / now`` req/s, so ``now x arrival / served`` keep up, with arrival = served + queue growth (req/s);
      x (1 + :data:`DRAIN_MARGIN`) to drain the backlog. Admitting the whole queue would size for a backlog that
      only says how long the window was.
    - Queue growing, completion rate unknown, or the queue's trend unknown (one scrape in the window): ``2 now``.
    - Standing queue (closed loop: clients wait for answers; its trend known): ``running + waiting``, everyone
      admitted.

    None without the running and waiting gauges.
    """
    run_avg, wait_avg = s.get("running_avg"), s.get("waiting_avg")
    if not now or run_avg is None or wait_avg is None:
        return None
    trend, served = s.get("waiting_trend_per_s"), s.get("requests_finished_per_s")
    growing = trend is not None and trend * s.window_seconds >= 1
    if growing and served and trend is not None:  # growing: trend is known
        arrival = served + trend
        keep_up = now * arrival / served
        need = keep_up * (1 + DRAIN_MARGIN)
        how = (
            f"with {fig(now, 1)} {held} now the queue grows: arrivals {number(served, 2)} served + "
            f"{number(trend, 2)} queued = "
            f"{number(arrival, 2, 'req/s')}; {fig(now, 1)} {held} x {number(arrival, 2)} / {number(served, 2)} = "
            f"{number(keep_up, 1)} {held} keep up (Little's law), +{percent(DRAIN_MARGIN, 0)} to drain the backlog = "
            f"{number(need, 1)}"
        )
        return Need(need, keep_up, how)
    if growing or trend is None:  # a trend unknown (one scrape in the window) is no evidence of a standing queue
        why = "the queue grows and the completion rate is unknown" if growing else "whether the queue grows is unknown"
        return Need(2 * now, None, f"with {fig(now, 1)} {held} now {why}: 2 x {fig(now, 1)} = {fig(2 * now, 1)}")
    need = run_avg + wait_avg
    how = (
        f"with {fig(now, 1)} {held} now a queue stands: {number(run_avg, 1)} running + "
        f"{number(wait_avg, 1)} waiting = "
        f"{number(need, 1)} admitted at once"
    )
    return Need(need, None, how)


#: sizes of KV memory suggested are whole MiB
_MIB = 1 << 20


@dataclass(frozen=True)
class _Shortfall:
    """The KV the window's traffic needs: ``need`` requests at ``per_request`` tokens each, ``tokens`` in all."""

    need: Need
    per_request: float
    tokens: float
    capacity: int

    def covered_by(self, tokens: float) -> bool:
        return tokens >= self.tokens

    def text(self) -> str:
        return (
            f"{self.need.how} requests; x {count(self.per_request)} tokens each = {count(self.tokens)} KV tokens "
            f"needed, {times(self.tokens / self.capacity, 2)} the {count(self.capacity)} there are"
        )


def _kv_shortfall(inputs: Inputs) -> _Shortfall | None:
    """The KV tokens the window's queue needs (its requests at once x KV per request), None when not measured or
    when no more than the pool holds.
    """
    s, kv_tokens = inputs.signals, inputs.limits.value("kv_cache_tokens")
    per_request, running, peak = tokens_per_request(s), s.get("running_avg"), s.get("running_max")
    if not kv_tokens or not per_request:
        return None
    need = concurrency_needed(s, running, "requests in KV") if running else None
    if need is None and peak:  # no queue gauges over the window: what the running requests held at their peak
        need = Need(peak, None, f"the observed peak of {count(peak)} running")
    if need is None or need.requests * per_request <= kv_tokens:
        return None
    return _Shortfall(need, per_request, need.requests * per_request, kv_tokens)


def _kv_bytes(inputs: Inputs, short: _Shortfall | None, bpt: int | None) -> Recommendation | None:
    """``--kv-cache-memory-bytes X -> Y`` for a pool set in bytes: vLLM sizes KV from it, whatever the device's
    memory utilization (``Worker.determine_available_memory``, ``CPUWorker.determine_available_memory``).
    Y = the tokens needed x bytes per token (``X / kv_cache_tokens``, or the model config's), whole MiB; 2X when
    the shortfall is not measured.
    """
    lim = inputs.limits
    now, kv_tokens = lim.value("kv_cache_memory_bytes"), lim.value("kv_cache_tokens")
    if not now:
        return None
    per_token = now / kv_tokens if kv_tokens else bpt
    device = "the node's RAM" if platform(lim)[0] == "cpu" else "the GPU"
    if short is not None and per_token:
        target = math.ceil(short.tokens * per_token / _MIB) * _MIB
        effect = (
            f"{short.text()}: {count(short.tokens)} x {number(per_token)} B per token = "
            f"{_mib(target)} (now {_mib(now)}, {count(kv_tokens)} tokens)"
        )
    else:
        target = 2 * now
        effect = f"2 x {_mib(now)}: twice the KV tokens" + (
            f" ({count(kv_tokens)} -> {count(2 * kv_tokens)})" if kv_tokens else ""
        )
    effect += f"; vLLM refuses to start when {device} cannot spare it."
    return Recommendation("--kv-cache-memory-bytes", now, target, effect)


def _mib(n_bytes: float) -> str:
    return f"{number(n_bytes / _MIB)} MiB"


def _kv_utilization(inputs: Inputs, short: _Shortfall | None, bpt: int | None) -> tuple[Recommendation, bool] | None:
    """``--gpu-memory-utilization u -> u'`` (a GPU whose pool is not set in bytes, u known) and whether it covers
    the shortfall: u' = u + the tokens short x bytes per token / GPU memory, at most
    :data:`MAX_SUGGESTED_UTILIZATION`.
    """
    lim = inputs.limits
    util, gpu, kv_tokens = lim.value("gpu_memory_utilization"), lim.gpu_memory_bytes, lim.value("kv_cache_tokens")
    # only from a known utilization: a guessed default may not be what the server runs with
    util_known = lim.gpu_memory_utilization.source not in ("default", "unknown")
    if util is None or util >= MAX_SUGGESTED_UTILIZATION or not util_known:
        return None
    covers = False
    if bpt and gpu and kv_tokens and short is not None:
        needed = (short.tokens - kv_tokens) * bpt / gpu
        target = min(MAX_SUGGESTED_UTILIZATION, math.ceil((util + needed) * 100) / 100)
        covers = util + needed <= MAX_SUGGESTED_UTILIZATION
    else:
        target = min(MAX_SUGGESTED_UTILIZATION, round(util + 0.1, 2))
    if bpt and gpu:
        block = lim.value("block_size") or DEFAULT_BLOCK_SIZE
        extra = tokens_at_utilization(kv_tokens or 0, block, bpt, gpu, util, target) - (kv_tokens or 0)
        effect = (
            f"+{count(extra)} KV tokens: ({number(target, 2)} - {number(util, 2)}) x {gib(gpu, 0)} / "
            f"{count(bpt, 'B')} per token"
            + (f" ({count(kv_tokens)} -> {count(kv_tokens + extra)})" if kv_tokens else "")
        )
        if short is not None:
            effect += f"; {short.text()}" + ("" if covers else f": {count(short.capacity + extra)} do not cover it")
        effect += "; startup may fail if the GPU cannot spare it."
    else:
        missing = " and ".join(
            f for f, known in (("--gpu-memory", gpu), ("--model-config", bpt)) if not known
        )  # only what is missing: a flag given is never asked for again
        effect = (
            f"+{number(target - util, 2)} x GPU memory for KV (give {missing} to count tokens); "
            "startup may fail if the GPU cannot spare it."
        )
    return Recommendation("--gpu-memory-utilization", util, target, effect), covers


def _kv_dtype(inputs: Inputs, short: _Shortfall | None) -> tuple[Recommendation, bool] | None:
    """``--kv-cache-dtype auto -> fp8`` and whether its tokens (x element bytes now / 1) cover the shortfall."""
    lim = inputs.limits
    kv_tokens = lim.value("kv_cache_tokens")
    dtype = str(lim.value("kv_cache_dtype") or "auto")
    if dtype.startswith("fp8"):
        return None
    try:
        model_dtype = "bfloat16"
        if inputs.model_config is not None:
            if inputs.model_config.dtype is None:  # a dtype the config names and vLLM does not know
                return None
            model_dtype = inputs.model_config.dtype
        factor = kv_element_bytes(dtype, model_dtype) / kv_element_bytes("fp8", model_dtype)
    except (KVConfigError, KeyError):
        return None
    if factor <= 1:
        return None
    effect = f"{times(factor, 2)} KV tokens per byte"
    covers = False
    if kv_tokens:
        effect += f": {count(kv_tokens)} -> {count(kv_tokens * factor)} tokens"
        if short is not None:
            covers = short.covered_by(kv_tokens * factor)
            effect += f" ({'cover' if covers else 'short of'} the {count(short.tokens)} needed)"
    return Recommendation("--kv-cache-dtype", dtype, "fp8", effect + " (small accuracy cost; check quality)."), covers


def _kv_replicas(short: _Shortfall) -> Recommendation:
    """As many replicas as the shortfall needs KV pools: ``ceil(tokens needed / tokens per server)``."""
    n = max(2, math.ceil(short.tokens / short.capacity - 1e-9))
    return Recommendation(
        "replicas (scale out)",
        1,
        n,
        f"none of the flag changes below holds the KV the traffic needs: {short.text()}; "
        f"ceil({count(short.tokens)} / {count(short.capacity)}) = {count(n)} servers, each taking 1/{n} of the "
        "arrivals.",
    )


def _kv_exhaustion(inputs: Inputs) -> list[Recommendation]:
    """The KV changes, sized from the shortfall when the window measures it (:func:`_kv_shortfall`): those that
    cover it first, then, when none does, as many replicas as it needs; then the ones that do not cover it, and
    the smaller ``max_num_seqs`` that stops preemptions. A pool set in bytes gets bytes, never a utilization
    vLLM would not read; a CPU no tensor parallelism (its sockets are not known from the metrics).
    """
    s, lim = inputs.signals, inputs.limits
    kv_tokens = lim.value("kv_cache_tokens")
    per_request = tokens_per_request(s)
    running_max = s.get("running_max")
    demand = running_max * per_request if running_max and per_request else None
    bpt = kv_bytes_per_token(inputs)
    short = _kv_shortfall(inputs)
    sized: list[tuple[Recommendation, bool]] = []
    in_bytes = _kv_bytes(inputs, short, bpt)
    if in_bytes is not None:
        sized.append((in_bytes, short is not None))
    else:
        util = _kv_utilization(inputs, short, bpt)
        if util is not None:
            sized.append(util)
    dtype = _kv_dtype(inputs, short)
    if dtype is not None:
        sized.append(dtype)
    covering = [rec for rec, covers in sized if covers]
    out = covering[:]
    if short is not None and not covering:
        out.append(_kv_replicas(short))
    out += [rec for rec, covers in sized if not covers]
    if platform(lim)[0] == "gpu":
        tp_rec = _tensor_parallel(inputs, kv_tokens)
        if tp_rec:
            out.append(tp_rec)
    n_seqs = lim.value("max_num_seqs")
    if kv_tokens and per_request:
        safe = int(kv_tokens // per_request)
        if safe >= 1 and (n_seqs is None or safe < n_seqs) and (running_max is None or safe < running_max):
            effect = (
                f"at most {count(safe)} requests of {count(per_request)} tokens fit in {count(kv_tokens)} KV tokens "
                f"(floor({count(kv_tokens)} / {count(per_request)}))"
            )
            if demand:
                effect += (
                    f"; the observed peak of {count(running_max)} running needs {count(demand)} tokens, "
                    f"{times(demand / kv_tokens, 2)} the capacity"
                )
            out.append(Recommendation("--max-num-seqs", n_seqs, safe, effect + ": fewer preemptions, no recompute."))
    return out


#: margin over the concurrency that just keeps up with arrivals: drains the backlog (at about a
#: fifth of the arrival rate) and absorbs the slightly longer steps of a larger batch
DRAIN_MARGIN = 0.25

#: share of the KV pool a raised max_num_seqs may fill at each request's full footprint; the rest
#: is headroom for requests longer than the average
KV_FILL = 0.9


def capture_sizes_around(n: float) -> tuple[int, int]:
    """The CUDA-graph batch sizes just below and at-or-above ``n`` (requests; ``n >= 1``).

    vLLM captures CUDA graphs for batch sizes 1, 2, 4, then multiples of 8 up to 256, then
    multiples of 16 (vllm/config/vllm.py ``_set_cudagraph_sizes``, v0.10-v0.33), so a
    ``max_num_seqs`` on one of these sizes decodes a full batch in a captured graph.

    Returns:
        ``(floor_size, ceil_size)``: the largest size ``<= n`` and the smallest size ``>= n``.
    """
    if n <= 4:
        sizes = [1, 2, 4, 8]
    else:
        step = 8 if n < 256 else 16
        lo = int(n // step) * step
        sizes = [4, lo, lo + step] if lo < 8 else [lo, lo + step]
    below = max((x for x in sizes if x <= n), default=1)
    above = min(x for x in sizes if x >= n)
    return below, above


def _tensor_parallel(inputs: Inputs, kv_tokens: int | None) -> Recommendation | None:
    """``--tensor-parallel-size t -> 2t`` on a KV shortage, quantified with the model's KV heads.

    Each GPU stores ``bytes_per_token(2t)`` instead of ``bytes_per_token(t)`` per KV token
    (``kvpilot.kv``: KV heads split while there are at least 2t of them, else replicated), so the
    same per-GPU KV memory holds ``kv_cache_tokens x bpt(t) / bpt(2t)`` tokens - a lower bound, since
    each GPU also holds half the weights and the memory they free becomes KV. None without a model
    config (heads unknown), when 2t is not a valid TP size for the model, or when it gains no tokens
    per GPU (KV heads already replicated). ``t`` unknown is assumed 1 and said.
    """
    spec = _model_spec(inputs)
    if spec is None:
        return None
    lim = inputs.limits
    known = lim.value("tensor_parallel_size")
    tp = int(known or 1)
    dtype = str(lim.value("kv_cache_dtype") or "auto")
    try:
        now = bytes_per_token(spec, kv_cache_dtype=dtype, tensor_parallel_size=tp)
        then = bytes_per_token(spec, kv_cache_dtype=dtype, tensor_parallel_size=2 * tp)
    except (KVConfigError, KeyError, ValueError, TypeError):
        return None
    if then >= now:
        return None
    ratio = now / then
    effect = f"{count(now)} -> {count(then, 'B')} per KV token on each GPU (the KV heads split over {2 * tp} GPUs)"
    if kv_tokens:
        effect += f": at least {count(kv_tokens)} x {fig(ratio, 3)} = {count(kv_tokens * ratio)} KV tokens"
    effect += (
        ", more as each GPU holds 1/"
        + str(2 * tp)
        + " of the weights; needs "
        + str(2 * tp)
        + " GPUs with a fast interconnect (all-reduce every layer)"
        + ("" if known else "; current size unknown, assumed 1 (pass --tensor-parallel-size)")
        + "."
    )
    return Recommendation("--tensor-parallel-size", tp if known else None, 2 * tp, effect)


def _seqs_cap(inputs: Inputs, max_num_seqs: int | None = None) -> list[Recommendation]:
    """``--max-num-seqs N -> N'``: the concurrency the traffic needs, bounded by what KV holds.

    - Queue growing (open loop), completion rate known: by Little's law each slot completes
      ``served / N`` req/s, so ``N x arrival / served`` slots keep up, with arrival = served +
      queue growth (req/s); x (1 + :data:`DRAIN_MARGIN`) to drain the backlog. Admitting the whole
      queue would size for a backlog that only says how long the window was.
    - Queue growing, completion rate unknown, or the queue's trend unknown (one scrape in the window): ``2N``.
    - Standing queue (closed loop: clients wait for answers; its trend known): ``running + waiting``, everyone
      admitted.
    Then at least ``N + 1``, rounded up to a CUDA-graph batch size (:func:`capture_sizes_around`),
    and bounded by KV: ``floor(KV_FILL / share)`` requests, with share = one request's KV
    footprint, the larger of the observed ``kv_usage_avg / running_avg`` and its full size
    ``(prompt + generated tokens per request) / kv_cache_tokens`` (the bound is rounded down to a
    capture size). No recommendation when KV holds no more than N.
    """
    s, lim = inputs.signals, inputs.limits
    n_seqs = max_num_seqs or lim.value("max_num_seqs")
    needed = concurrency_needed(s, n_seqs, "slots") if n_seqs else None
    if not n_seqs or needed is None:
        return []
    need, how, keep_up = needed.requests, needed.how, needed.keep_up
    demand = max(n_seqs + 1, math.ceil(need - 1e-9))
    graphs = platform(lim)[0] == "gpu"  # a CPU server captures no CUDA graphs: no batch size to round to
    suggested = capture_sizes_around(demand)[1] if graphs else demand
    how += f"; rounded up to vLLM's CUDA-graph batch size {count(suggested)}" if suggested != demand else ""
    share, whose = _request_share(inputs)
    if share:
        # two figures (0.027 %, never 0.0 %), as the rules' evidence prints a request's share, and whose share it is
        each = significant(share * 100, 2, "%")
        bound = math.floor(KV_FILL / share)
        if bound <= n_seqs:
            return []  # KV holds no more requests than now: raising the cap would trade the queue for preemptions
        if suggested > bound:
            suggested = max(n_seqs + 1, capture_sizes_around(bound)[0] if graphs else bound)
            how += (
                f"; bounded by KV: {percent(KV_FILL, 0)} of the pool / {each} per request ({whose}) = "
                f"{count(bound)} "
                f"-> {count(suggested)}"
            )
            if keep_up is not None and suggested < keep_up:
                how += f", fewer than the {number(keep_up, 1)} that keep up: the queue would still grow"
        rises = percent(min(1.0, suggested * share))
        how += f"; KV usage rises to about {rises} ({count(suggested)} x {each}, {whose})"
    out = [
        Recommendation(
            "--max-num-seqs",
            n_seqs,
            suggested,
            how + "; per-token latency rises a little as more requests share each step.",
        )
    ]
    budget = lim.value("max_num_batched_tokens")
    if budget and budget < suggested:
        out.append(
            Recommendation(
                "--max-num-batched-tokens", budget, suggested, "vLLM requires max_num_batched_tokens >= max_num_seqs."
            )
        )
    return out


def active_seqs_cap(inputs: Inputs, active: int, configured: int) -> list[Recommendation]:
    """``--max-num-active-seqs A -> A'`` for an admission cap below the configured ``max_num_seqs`` (vLLM 0.31+):
    the concurrency :func:`_seqs_cap` sizes for ``A`` slots, at most ``configured`` (the active cap may not exceed
    max_num_seqs); none when KV holds no more.
    """
    sized = _seqs_cap(inputs, max_num_seqs=active)
    if not sized or not isinstance(sized[0].suggested, int):
        return []
    suggested = min(configured, sized[0].suggested)
    return [
        Recommendation(
            "--max-num-active-seqs",
            active,
            suggested,
            f"admits up to {count(suggested)} requests into RUNNING (at most --max-num-seqs {count(configured)}, "
            f"which already sizes the runner: raising it changes nothing); {sized[0].expected_effect}",
        )
    ]


def _request_share(inputs: Inputs) -> tuple[float | None, str]:
    """One request's share of the KV pool and whose it is: the larger of the observed ``kv_usage_avg /
    running_avg`` and its full size ``(prompt + generated tokens per request) / kv_cache_tokens``; (None, "")
    when neither is known.
    """
    s, lim = inputs.signals, inputs.limits
    run_avg, kv_avg = s.get("running_avg"), s.get("kv_usage_avg")
    shares: list[tuple[float, str]] = []
    if kv_avg and run_avg:
        shares.append((kv_avg / run_avg, "as the running requests held it"))
    per_request, kv_tokens = tokens_per_request(s), lim.value("kv_cache_tokens")
    if per_request and kv_tokens:
        shares.append((per_request / kv_tokens, "a request's KV at its full prompt + output"))
    return max(shares) if shares else (None, "")


def _budget_cap(inputs: Inputs, max_num_batched_tokens: int | None = None) -> list[Recommendation]:
    """``--max-num-batched-tokens B -> 2B`` on a token-budget cap, with its effect on prefill.

    Each step gives waiting prompts what the running decodes leave of B: ``B - d`` prefill tokens,
    d = generated tokens per step (``generation_tokens_per_s / steps_per_s``, steps from
    ``vllm:iteration_tokens_total_count``). A prompt of P tokens then needs ``ceil(P / (B - d))``
    steps to prefill, ``ceil(P / (2B - d))`` at 2B: TTFT's prefill part shrinks by that ratio while
    step time stays flat (below the compute knee; above it steps lengthen, the rule says so).
    Inter-token latency of co-scheduled decodes rises with the longer steps.
    """
    s = inputs.signals
    budget = max_num_batched_tokens or inputs.limits.value("max_num_batched_tokens")
    if not budget:
        return []
    steps, gen = s.get("iteration_steps_increase"), s.get("generation_tokens_per_s")
    window, prompt = s.window_seconds, s.get("prompt_tokens_per_request")
    effect = f"up to {count(budget * 2)} tokens per step (2x)"
    if steps and window and gen is not None and prompt:
        d = gen / (steps / window)
        now, then = budget - d, 2 * budget - d
        if now > 0:
            n_now, n_then = math.ceil(prompt / now), math.ceil(prompt / then)
            effect += (
                f": prefill tokens per step {number(now)} -> {number(then)} ({count(budget)} or "
                f"{count(2 * budget)} minus {fig(d, 1)} decode tokens per step), so a {number(prompt)}-token "
                f"prompt prefills in {count(n_then)} steps instead of {count(n_now)}"
            )
            if steps:
                step_s = window / steps
                effect += (
                    f" (about {number(n_now * step_s * 1000)} -> {number(n_then * step_s * 1000)} ms of TTFT at "
                    f"{fig(step_s * 1000, 2)} ms per step)"
                )
    return [
        Recommendation(
            "--max-num-batched-tokens",
            budget,
            budget * 2,
            effect + "; waiting prompts are admitted sooner; inter-token latency of co-scheduled decodes rises.",
        )
    ]


def _compute_bound(inputs: Inputs) -> list[Recommendation]:
    s = inputs.signals
    served, offered = s.get("prompt_tokens_per_s"), s.get("offered_prompt_tokens_per_s")
    if not served or not offered or offered <= served:
        return []
    replicas = math.ceil(offered / served)
    return [
        Recommendation(
            "replicas (scale out)",
            1,
            replicas,
            f"offered {count(offered)} prompt tok/s / served {count(served)} per replica = "
            f"{number(offered / served, 2)}: {count(replicas)} replicas keep up. Scale on waiting depth or "
            "prompt-token rate, not KV usage; a larger token budget or more slots will not help.",
        )
    ]


def _prefix(inputs: Inputs) -> list[Recommendation]:
    s, lim = inputs.signals, inputs.limits
    kv_tokens, queries = lim.value("kv_cache_tokens"), s.get("prefix_queries_increase")
    written = queries - (s.get("prefix_hits_increase") or 0.0) if queries else None
    if kv_tokens and written and written > kv_tokens:  # the cache turned over: LRU evicted reused prefixes
        return [
            Recommendation(
                "--kv-transfer-config (KV offload to CPU, e.g. LMCache)",
                None,
                "enabled",
                f"the window's prompts wrote {count(written, 'tokens')} to the cache, {times(written / kv_tokens)} "
                f"the GPU KV capacity of {count(kv_tokens, 'tokens')}, so LRU evicted prefixes before they were "
                "reused; a CPU KV cache sized to the reused prefixes (at most that many tokens) keeps them "
                "reachable, and a hit costs a transfer instead of a prefill.",
            )
        ]
    return []


def _lora_slots(inputs: Inputs) -> list[Recommendation]:
    """``--max-loras M -> K`` on a LoRA slot cap: K = the adapters seen with requests over the window
    (``vllm:lora_requests_info``), at least M + 1, so each of them can join a step.

    vLLM 0.29 (``vllm/config/lora.py``): ``max_loras`` defaults to 1, and ``max_cpu_loras`` (default
    ``max_loras``) must be at least ``max_loras``. Each GPU slot holds one adapter's weights up to
    ``max_lora_rank``, memory the KV pool no longer gets. vLLM's gauge names an adapter only once a request of
    it was scheduled, so adapters whose requests only waited are not counted: K is a lower bound.
    """
    s = inputs.signals
    slots, seen, deferred = s.get("lora_max_loras"), s.get("lora_adapters_seen"), s.get("waiting_deferred_avg")
    if slots is None:
        return []
    current = int(slots)
    suggested = max(current + 1, int(seen or 0))
    effect = (
        f"{count(seen)} adapters had requests over the window for {count(current)} batch slots, so requests of the "
        "others were deferred"
        + (f" ({fig(deferred, 1)} on average)" if deferred else "")
        + f"; with {count(suggested)} slots that many can join one step (vLLM names an adapter only once a request "
        f"of it ran, so more may be waiting). Raise --max-cpu-loras to at least {count(suggested)} too (vLLM requires "
        "max_cpu_loras >= max_loras); each slot holds one adapter's weights up to --max-lora-rank on the GPU, "
        "memory the KV cache no longer gets."
    )
    return [Recommendation("--max-loras", current, suggested, effect)]


def _unexplained(_inputs: Inputs) -> list[Recommendation]:
    """What to check on a queue no admission limit explains (rules.rule_unexplained_queue): the two flags
    of vLLM 0.29 that hold a queue outside the limits kvpilot measures, with what each would show.
    """
    return [
        Recommendation(
            "--enable-chunked-prefill",
            None,
            "check: on (vLLM's default)",
            "off (--no-enable-chunked-prefill), a waiting prompt is admitted only in a step whose running "
            "requests leave room for all of it (Scheduler.schedule: break when the prompt exceeds the budget "
            "left), so steps stay short of the budget while prompts wait; on, a prompt takes what is left.",
        ),
        Recommendation(
            "--scheduling-policy",
            None,
            "check: fcfs (vLLM's default)",
            "with priority, requests of lower priority wait behind higher ones whatever the limits; the "
            "request_queue_time of each priority class tells (the clients' priority values).",
        ),
    ]


#: verdict -> its recommendation function (``inputs``, then the inferred-limit overrides it takes)
_BY_VERDICT: dict[Verdict, Callable[..., list[Recommendation]]] = {
    "kv_cache_exhaustion": _kv_exhaustion,
    "max_num_seqs_cap": _seqs_cap,
    "token_budget_cap": _budget_cap,
    "compute_bound": _compute_bound,
    "prefix_cache_ineffective": _prefix,
    "lora_slot_cap": _lora_slots,
    "unexplained_queue": _unexplained,
}
