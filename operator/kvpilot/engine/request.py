"""A request as the engine model sees it: token counts, content identity for prefix hashing, progress.

Mirrors the fields of ``vllm/v1/request.py`` (``Request``) the scheduler uses: ``num_tokens``
(prompt + output so far), ``num_computed_tokens``, the block table, ``block_hashes`` (computed
once per full block and kept across preemption), ``num_preemptions``.

Token *content* is not stored token by token. A prompt is a tuple of segments ``(key, length)``:
tokens ``0..length-1`` of segment ``key``. Two prompts share a prefix exactly when they start with
the same segments (e.g. ``(("system-prompt-A", 1200), ("req-17", 300))``). Generated tokens are
the implicit segment ``("gen", request_id)``, so they never match another request but a preempted
request finds its own blocks again, as in vLLM.
"""

from __future__ import annotations

from collections.abc import Sequence

from kvpilot.engine.block_pool import hash_block


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
            which is equivalent through the hash chain).
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
        "blocks",
        "capacity",
        "block_hashes",
        "_seg_i",
        "_seg_start",
        "_seg_parent",
        "_seg_base",
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
        "ff_seq",
        "ff_from",
        "ff_finish",
    )

    def __init__(
        self,
        request_id: str,
        prompt_len: int,
        output_len: int,
        arrival_time: float = 0.0,
        segments: Sequence[tuple[object, int]] | None = None,
        lora_id: int | None = None,
        cache_salt: str | None = None,
        tag: str | None = None,
        finish_reason: str = "length",
    ) -> None:
        if prompt_len < 1:
            raise ValueError(f"prompt_len must be >= 1, got {prompt_len}")
        if output_len < 1:
            raise ValueError(f"output_len must be >= 1, got {output_len}")
        if segments is None:
            segments = ((request_id, prompt_len),)
        segs = tuple((k, int(n)) for k, n in segments)
        if sum(n for _, n in segs) != prompt_len or any(n < 1 for _, n in segs):
            raise ValueError(f"segments of {request_id!r} must be positive and sum to prompt_len {prompt_len}")
        self.request_id = request_id
        self.prompt_len = prompt_len
        self.output_len = output_len
        self.arrival_time = float(arrival_time)
        # the generated tokens continue as their own segment
        self.segments = segs + ((("gen", request_id), 1 << 62),)
        self.lora_id = lora_id
        self.cache_salt = cache_salt
        self.extra_keys = None if lora_id is None and cache_salt is None else (lora_id, cache_salt)
        self.tag = tag
        self.finish_reason = finish_reason
        self.max_output = output_len
        self.num_output = 0
        self.total = prompt_len  # num_tokens: prompt + output so far
        self.num_computed = 0
        self.blocks: list[int] = []
        self.capacity = 0  # tokens the block table holds: len(blocks) * block_size
        self.block_hashes: list[int] = []
        # ensure_hashes' place in the segments: segment _seg_i starts at token _seg_start; _seg_parent chains
        # the segments before it, _seg_base is the hash base of its blocks
        self._seg_i = 0
        self._seg_start = 0
        self._seg_parent: int | None = None
        self._seg_base = hash_block(None, self.segments[0][0], self.extra_keys) << 64
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
        # computed tokens are ff_base + the stretch's step index, ff_seq its running order, ff_from the first
        # stretch step it decodes in, ff_finish the step it finishes in
        self.ff_base = self.ff_seq = self.ff_from = self.ff_finish = 0

    @property
    def num_tokens(self) -> int:
        """Prompt plus output tokens so far."""
        return self.total

    def ensure_hashes(self, num_blocks: int, block_size: int) -> list[int]:
        """Extend ``block_hashes`` to cover the first ``num_blocks`` full blocks; return it.

        A block's hash stands for the whole token prefix it ends (vLLM chains each block's hash through its
        parent's: ``hash_block_tokens`` in vllm/v1/core/kv_cache_utils.py, so equal hashes mean equal prefixes).
        Here the chain runs over *segments*: ``P_0 = None``, ``P_{i+1} = hash_block(P_i, (key_i, len_i), extra)``;
        a block whose last token is token ``o - 1`` of segment ``i`` gets ``(hash_block(P_i, key_i, extra) << 64)
        + o``. Two blocks get the same value exactly when their prefixes are the same segments (the same
        identity as a per-block chain: a segment is tokens ``0..len-1`` of its key, so a token prefix has one
        segment spelling), and the blocks of one segment are a ``range`` built in C: one Python hash per
        segment, not per block.
        """
        hashes = self.block_hashes
        k = len(hashes)
        if k >= num_blocks:
            return hashes
        if k == num_blocks - 1 and k:  # one more block (a decode's): in the segment of the last one, its value + size
            s0 = self._seg_start
            end = num_blocks * block_size
            if s0 < end - block_size and end <= s0 + self.segments[self._seg_i][1]:
                hashes.append(hashes[-1] + block_size)
                return hashes
        segs = self.segments
        si, s0, base = self._seg_i, self._seg_start, self._seg_base
        key, n = segs[si]
        end = (k + 1) * block_size  # tokens up to the end of block k
        stop = num_blocks * block_size
        while True:
            if end > s0 + n:  # block k ends past segment si: move on to the segment holding its last token
                while end > s0 + n:
                    self._seg_parent = hash_block(self._seg_parent, (key, n), self.extra_keys)
                    s0 += n
                    si += 1
                    key, n = segs[si]
                base = hash_block(self._seg_parent, key, self.extra_keys) << 64
            last = min(stop, s0 + n)  # last token count inside this segment to cover
            last -= (last - end) % block_size
            hashes.extend(range(base + end - s0, base + last - s0 + 1, block_size))
            end = last + block_size
            if end > stop:
                break
        self._seg_i, self._seg_start, self._seg_base = si, s0, base
        return hashes

    def __repr__(self) -> str:  # pragma: no cover - debugging aid
        return (
            f"Request({self.request_id!r}, prompt={self.prompt_len}, out={self.num_output}/"
            f"{self.max_output}, computed={self.num_computed})"
        )
