"""A request as the engine model sees it: token counts, content identity for prefix hashing, progress.

Mirrors the fields of ``vllm/v1/request.py`` (``Request``) the scheduler uses: ``num_tokens``
(prompt + output so far), ``num_computed_tokens``, the block table (``table``, a
:class:`~kvpilot.engine.block_pool.BlockTable`), ``block_hashes`` (here :meth:`Request.hash_runs`: computed once
per prompt segment and kept across preemption), ``num_preemptions``.

Token *content* is not stored token by token. A prompt is a tuple of segments ``(key, length)``:
tokens ``0..length-1`` of segment ``key``. Two prompts share a prefix exactly when they start with
the same segments (e.g. ``(("system-prompt-A", 1200), ("req-17", 300))``). Generated tokens are
the implicit segment ``("gen", request_id)``, so they never match another request but a preempted
request finds its own blocks again, as in vLLM.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from kvpilot.engine.block_pool import BlockTable, block_hash_value, hash_block

_GEN_LEN: Final = 1 << 62  # the generated tokens' segment: longer than any request


class Request:
    """One inference request.

    Args:
        request_id: unique id (str).
        prompt_len: prompt tokens (>= 1).
        output_len: tokens to generate (>= 1); capped by ``max_model_len - prompt_len``.
        arrival_time: simulated seconds when the request reaches the server (TTFT counts from it).
        segments: prompt content as ``(key, length)`` pairs summing to ``prompt_len``; default
            one segment keyed by ``request_id`` (no shared prefix).
        lora_id, cache_salt: extra keys of every block hash (vLLM ``generate_block_hash_extra_keys``:
            LoRA id and ``cache_salt``; the salt only on the first block there, on every block here
            which is equivalent through the hash chain): the adapter's id or name, a string.
        tag: free label (e.g. the §9 pass name) copied into reports.
        finish_reason: ``finished_reason`` label when ``output_len`` is reached ("length" or "stop").

    Raises:
        ValueError: lengths < 1 or segments not summing to ``prompt_len``.
    """

    __slots__ = (
        "request_id",
        "prompt_len",
        "output_len",
        "arrival_time",
        "segments",
        "extra_keys",
        "tag",
        "finish_reason",
        "max_output",
        "num_output",
        "num_computed",
        "table",
        "capacity",
        "_runs",
        "_runs_bs",
        "num_cached_blocks",
        "num_stored_chunks",
        "num_preemptions",
        "preemptions_reported",
        "scheduled_time",
        "first_token_time",
        "last_token_time",
        "finish_time",
        "itls",
        "prefix_hit_tokens",
        "external_hit_tokens",
        "finished_reason",
        "lora_id",
        "cache_salt",
        "total",
        "next_full",
        "num_hit",
        "ff_base",
        "ff_phase",
        "ff_from",
    )

    def __init__(
        self,
        request_id: str,
        prompt_len: int,
        output_len: int,
        arrival_time: float = 0.0,
        segments: Sequence[tuple[object, int]] | None = None,
        lora_id: int | str | None = None,
        cache_salt: str | None = None,
        tag: str | None = None,
        finish_reason: str = "length",
    ) -> None:
        if prompt_len < 1:
            raise ValueError(f"prompt_len must be >= 1, got {prompt_len}")
        if output_len < 1:
            raise ValueError(f"output_len must be >= 1, got {output_len}")
        if segments is None:
            segs: tuple[tuple[object, int], ...] = ((request_id, int(prompt_len)),)
        else:
            segs = tuple((k, int(n)) for k, n in segments)
            if sum(n for _, n in segs) != prompt_len or any(n < 1 for _, n in segs):
                raise ValueError(f"segments of {request_id!r} must be positive and sum to prompt_len {prompt_len}")
        self.request_id = request_id
        self.prompt_len = prompt_len
        self.output_len = output_len
        self.arrival_time = float(arrival_time)
        # the generated tokens continue as their own segment
        self.segments = (*segs, (("gen", request_id), _GEN_LEN))
        self.lora_id = lora_id
        self.cache_salt = cache_salt
        self.extra_keys = None if lora_id is None and cache_salt is None else (lora_id, cache_salt)
        self.tag = tag
        self.finish_reason = finish_reason
        self.max_output = output_len
        self.num_output = 0
        self.total = prompt_len  # num_tokens: prompt + output so far
        self.num_computed = 0
        self.table = BlockTable()
        self.capacity = 0  # tokens the block table holds: its blocks * block_size
        self._runs: list[tuple[int, int, int]] = []  # hash_runs' per-segment runs (_build_runs)
        self._runs_bs = 0
        self.num_cached_blocks = 0
        self.next_full = 16  # tokens at which the next block becomes full (engine sets it)
        self.num_hit = 0  # tokens found in the GPU prefix cache + CPU tier at the last admission
        self.num_stored_chunks = 0
        self.num_preemptions = 0
        self.preemptions_reported = 0  # preemptions already counted in the metrics (at the next output)
        self.scheduled_time: float | None = None
        self.first_token_time: float | None = None
        self.last_token_time = 0.0
        self.finish_time: float | None = None
        self.itls: list[float] = []
        self.prefix_hit_tokens = 0
        self.external_hit_tokens = 0
        self.finished_reason: str | None = None
        # fast-forward's bookkeeping while the request decodes in a stretch (kvpilot.engine.fast_forward): its
        # computed tokens are ff_base + the stretch's step index, ff_phase the step index modulo block_size at
        # which it takes a block (-1: none in this stretch), ff_from the first stretch step it decodes in
        self.ff_base = self.ff_from = 0
        self.ff_phase = -1

    @property
    def num_tokens(self) -> int:
        """Prompt plus output tokens so far."""
        return self.total

    @property
    def blocks(self) -> list[int]:
        """Block ids of the request's table, in order (a new list; empty when it holds none)."""
        return self.table.block_ids()

    def _build_runs(self, block_size: int) -> list[tuple[int, int, int]]:
        """Per segment with blocks ending in it: (its first block index, that block's hash, blocks ending in it)."""
        runs = []
        parent: int | None = None
        extra = self.extra_keys
        s0 = 0
        *prompt, (gen_key, gen_len) = self.segments
        for key, n in prompt:
            k_lo = s0 // block_size  # the first block whose last token lies in this segment
            k_hi = (s0 + n) // block_size  # blocks k < k_hi end at or before the segment's end
            if k_hi > k_lo:
                runs.append(
                    (k_lo, block_hash_value(hash_block(parent, key, extra), (k_lo + 1) * block_size - s0), k_hi - k_lo)
                )
            parent = hash_block(parent, (key, n), extra)
            s0 += n
        k_lo = s0 // block_size
        h = block_hash_value(hash_block(parent, gen_key, extra), (k_lo + 1) * block_size - s0)
        runs.append((k_lo, h, (s0 + gen_len) // block_size - k_lo))
        self._runs = runs
        self._runs_bs = block_size
        return runs

    def hash_runs(self, start: int, end: int, block_size: int) -> list[tuple[int, int]]:
        """The hashes of full blocks ``start..end-1`` as ``(first hash, blocks)`` runs of consecutive values.

        A block's hash stands for the whole token prefix it ends (vLLM chains each block's hash through its
        parent's: ``hash_block_tokens`` in vllm/v1/core/kv_cache_utils.py, so equal hashes mean equal prefixes).
        Here the chain runs over *segments*: ``P_0 = None``, ``P_{i+1} = hash_block(P_i, (key_i, len_i), extra)``;
        a block whose last token is token ``o - 1`` of segment ``i`` gets ``block_hash_value(hash_block(P_i, key_i,
        extra), o)``. Two blocks get the same value exactly when their prefixes are the same segments (the same
        identity as a per-block chain: a segment is tokens ``0..len-1`` of its key, so a token prefix has one
        segment spelling); the blocks ending in one segment have consecutive values ``h, h + block_size, ...``, one
        run: one Python hash per segment, not per block, and one run per segment for the block pool
        (:meth:`kvpilot.engine.block_pool.BlockPool.lookup`, ``cache``). Blocks past the prompt hash the generated
        tokens (segment ``("gen", request_id)``).
        """
        runs = self._runs if self._runs_bs == block_size else self._build_runs(block_size)
        out = []
        for a, h, n in runs:
            if a >= end:
                break
            hi = a + n
            if hi > end:
                hi = end
            if start > a:
                if start < hi:
                    out.append((h + (start - a) * block_size, hi - start))
            else:
                out.append((h, hi - a))
        return out

    def first_hash(self, block_size: int) -> int | None:
        """The hash of full block 0 (None when the request has no full block: :meth:`hash_runs`)."""
        runs = self._runs if self._runs_bs == block_size else self._build_runs(block_size)
        return runs[0][1] if runs and runs[0][0] == 0 else None

    def block_hash(self, k: int, block_size: int) -> int:
        """The hash of full block ``k`` (:meth:`hash_runs`)."""
        ((h, _),) = self.hash_runs(k, k + 1, block_size)
        return h

    def hashes(self, num_blocks: int, block_size: int) -> list[int]:
        """The hashes of the first ``num_blocks`` full blocks, one by one (:meth:`hash_runs`)."""
        out: list[int] = []
        for h, n in self.hash_runs(0, num_blocks, block_size):
            out.extend(range(h, h + n * block_size, block_size))
        return out

    def __repr__(self) -> str:  # pragma: no cover - debugging aid
        return (
            f"Request({self.request_id!r}, prompt={self.prompt_len}, out={self.num_output}/"
            f"{self.max_output}, computed={self.num_computed})"
        )
