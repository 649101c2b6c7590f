"""The cache-turnover finding: how long a prompt survives in the prefix cache, and what offload would hold.

Under LRU a cached prompt survives until the prompt tokens entering the cache after it fill the KV capacity: its
horizon is ``kv_cache_tokens / (prompt tokens entering the cache per second)`` (those that missed: queried - hits,
``vllm:prefix_cache_queries_total`` and ``_hits_total``). A prompt re-read later than that finds its blocks
evicted; a cyclic re-read of documents larger than the cache always finds the block it needs just evicted and hits
nothing (the founding experiment: ten documents of about 5,011 tokens re-read in order on a 21,520-token cache, 0
hits; reversed, the most recent first, 21,488).

Stated when prefix caching is on (tokens were queried), prompts are long (at least one offload chunk: only full
chunks can be served from an offload tier), their hits are no more than incidental (at most
:data:`~kvpilot.diagnose.rules.INCIDENTAL_BLOCKS` blocks a request: nothing re-read was found) and the cache turned
over in the window (more tokens entered than it holds). A pass that hits (the reversed one) gives no such finding.

What offload would buy: a CPU tier holding the window's missed prompt tokens (the working set of traffic that
re-reads within the window) takes ``tokens x KV bytes per token``; a re-read prompt then loads its full chunks
(:func:`kvpilot.kv.offload.offloaded_tokens`) at the tier's load bandwidth and computes only the rest, so the
predicted TTFT is the time outside prefill (TTFT - prefill time: queueing, the frontend) + the prefill time scaled
to the tokens still computed + the load time. Without the prefill time, the whole TTFT is scaled (an
underestimate by the time outside prefill).

Pure functions, no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvpilot.diagnose.limits import Limits
from kvpilot.diagnose.signals import Signals
from kvpilot.kv.offload import OFFLOAD_CHUNK_TOKENS, OFFLOAD_LOAD_BANDWIDTH, offloaded_tokens
from kvpilot.text.numbers import count, fig, gib, number, significant
from kvpilot.vllm.defaults import DEFAULT_BLOCK_SIZE


@dataclass(frozen=True)
class Turnover:
    """The cache-turnover figures of one window (module docstring).

    Attributes:
        horizon_s: seconds a prompt survives in the cache.
        entering_per_s: prompt tokens entering the cache per second (queried - hits over the window).
        kv_tokens: the KV capacity (tokens).
        prompt_tokens: mean prompt tokens per request.
        missed_tokens: prompt tokens that missed in the window (the working set to hold).
        offload_bytes: CPU bytes holding them (None: KV bytes per token unknown).
        ttft_s / ttft_offload_s: mean TTFT measured and predicted with that offload (None: unknown).
        loaded_tokens: tokens of a prompt the tier holds (full chunks).
        hits_per_request: prefix-cache hits per request (tokens; incidental at most).
    """

    horizon_s: float
    entering_per_s: float
    kv_tokens: int
    prompt_tokens: float
    missed_tokens: float
    offload_bytes: float | None
    ttft_s: float | None
    ttft_offload_s: float | None
    loaded_tokens: int
    hits_per_request: float


def cache_turnover(
    signals: Signals, limits: Limits, bytes_per_token: int | None, incidental_blocks: int
) -> Turnover | None:
    """The turnover figures when long prompts miss a prefix cache that turned over (module docstring), else None.

    Args:
        signals: the target's signals.
        limits: the target's limits (``kv_cache_tokens`` and ``block_size`` used).
        bytes_per_token: KV bytes per token (the model's config), or None: ``kv_cache_memory_bytes`` over
            ``kv_cache_size_tokens`` of ``vllm:cache_config_info`` when exported (vLLM 0.32).
        incidental_blocks: hits per request of at most this many blocks count as none.
    """
    s = signals.get
    queries, hits, window = s("prefix_queries_increase"), s("prefix_hits_increase"), signals.window_seconds
    kv_tokens = limits.value("kv_cache_tokens")
    finished = s("requests_finished_increase")
    if not queries or queries <= 0 or hits is None or not kv_tokens or not window or not finished or finished <= 0:
        return None
    prompt = queries / finished
    block = limits.value("block_size") or DEFAULT_BLOCK_SIZE
    missed = queries - hits
    if prompt < OFFLOAD_CHUNK_TOKENS or hits / finished > incidental_blocks * block or missed <= kv_tokens:
        return None
    entering = missed / window
    bpt = bytes_per_token or _info_bytes_per_token(signals)
    loaded = offloaded_tokens(prompt)
    ttft = _mean(signals.fit.get("ttft_sum_increase"), signals.fit.get("ttft_count_increase"))
    prefill = s("prefill_time_mean_s")
    predicted = None
    if ttft is not None and bpt:
        computed_share = (prompt - loaded) / prompt
        load_s = loaded * bpt / OFFLOAD_LOAD_BANDWIDTH
        if prefill is not None and prefill <= ttft:
            predicted = (ttft - prefill) + prefill * computed_share + load_s
        else:
            predicted = ttft * computed_share + load_s
    return Turnover(
        horizon_s=kv_tokens / entering,
        entering_per_s=entering,
        kv_tokens=kv_tokens,
        prompt_tokens=prompt,
        missed_tokens=missed,
        offload_bytes=missed * bpt if bpt else None,
        ttft_s=ttft,
        ttft_offload_s=predicted,
        loaded_tokens=loaded,
        hits_per_request=hits / finished,
    )


def _mean(total: float | None, n: float | None) -> float | None:
    return total / n if total is not None and n else None


def _info_bytes_per_token(signals: Signals) -> int | None:
    """KV bytes per token from ``vllm:cache_config_info`` (vLLM 0.32: ``kv_cache_memory_bytes`` and
    ``kv_cache_size_tokens``), or None.
    """
    try:
        memory = float(signals.cache_config.get("kv_cache_memory_bytes", ""))
        tokens = float(signals.cache_config.get("kv_cache_size_tokens", ""))
    except ValueError:
        return None
    return round(memory / tokens) if tokens > 0 and memory > 0 else None


def turnover_evidence(t: Turnover) -> list[str]:
    """The finding in sentences: the horizon, the re-read distance it implies, the offload and its TTFT."""
    out = [
        f"Cache turnover: a prompt survives about {significant(t.horizon_s, 3)} s in the prefix cache (KV capacity "
        f"{count(t.kv_tokens)} tokens / {number(t.entering_per_s)} prompt tokens entering it per second: "
        "vllm:prefix_cache_queries_total less _hits_total). Prompts averaged "
        f"{number(t.prompt_tokens)} tokens and found "
        + (
            "none of it cached"
            if t.hits_per_request == 0
            else f"only {number(t.hits_per_request)} of them cached on average (a template's block or two at most)"
        )
        + f", so any prompt re-read came more than "
        f"{significant(t.horizon_s, 3)} s (more than {count(t.kv_tokens)} tokens of other prompts) after its last "
        "use: a re-read distance beyond the cache's horizon, which LRU always evicts first (a cyclic re-read of "
        "more than the cache hits nothing)."
    ]
    if t.offload_bytes is None:
        out.append(
            f"A CPU offload tier (LMCache) holding the window's {number(t.missed_tokens)} missed prompt tokens would "
            "hold that working set; its size in bytes needs the KV bytes per token (pass --model-config)."
        )
        return out
    line = (
        f"A CPU offload tier (LMCache) of {gib(t.offload_bytes, 2)} would hold the window's "
        f"{number(t.missed_tokens)} missed prompt tokens (the working set of traffic that re-reads within the "
        f"window); a re-read prompt would load its {count(t.loaded_tokens)} tokens in whole "
        f"{fig(OFFLOAD_CHUNK_TOKENS)}-token chunks at {fig(OFFLOAD_LOAD_BANDWIDTH / 1e9)} GB/s instead of "
        "computing them"
    )
    if t.ttft_s is not None and t.ttft_offload_s is not None:
        line += (
            f": predicted TTFT {significant(t.ttft_offload_s * 1000, 3)} ms against {significant(t.ttft_s * 1000, 3)} "
            "ms measured (the time outside prefill, plus the prefill time of the tokens still computed, plus the "
            "load)"
        )
    out.append(line + ".")
    return out
