"""The engine: vLLM V1's scheduler loop over the block pool, advancing simulated time.

One :meth:`Engine.step` is one ``EngineCore.step()``: ``Scheduler.schedule()`` then the model
forward (its duration from :class:`~kvpilot.engine.hardware.CostModel`) then
``update_from_output``. The scheduling rules follow ``vllm/v1/core/sched/scheduler.py``
(v0.21-v0.33, FCFS policy), docs/background.md §6:

1. A token budget of ``max_num_batched_tokens`` per step.
2. Running requests first, in admission order; each asks for ``num_tokens - num_computed``
   tokens (1 for a decode, the rest of the prompt for a chunked prefill), cut to the budget left.
3. A running request that needs a block when none is free preempts the *last* running request
   (``self.running.pop()``): its blocks are freed (tail first), ``num_computed_tokens`` reset to 0,
   and it goes to the *front* of the waiting queue (recompute, not swap). If the victim is the
   request itself, scheduling of running requests stops.
4. Only if nothing was preempted this step (``if not preempted_reqs``), waiting requests are
   admitted in FCFS order while ``len(running) < max_num_seqs`` and budget remains: prefix-cache
   lookup (``get_computed_blocks``, at most ``num_tokens - 1`` tokens; none with caching off),
   then the CPU tier for the rest (connector ``get_num_new_matched_tokens``), then
   ``allocate_slots``: with ``scheduler_reserve_full_isl`` (vLLM PR #37307, default) the blocks
   for the *whole* request must be free (``full_sequence_must_fit``), then those for the
   scheduled tokens; hit blocks that sit in the free queue count against the free blocks. A
   request that does not fit stops admission (no preemption on behalf of waiting requests).
   Without chunked prefill a prompt longer than the budget left waits.
5. Blocks enter the prefix cache when they are *scheduled*: ``allocate_slots`` ends with
   ``cache_blocks(request, num_computed + num_new)``, so a request admitted later in the same
   step already hits the blocks of one scheduled before it.
6. After the forward, a request whose computed tokens reach ``num_tokens`` samples one token;
   finished requests free their blocks in reverse order.

Sources: ``vllm/v1/core/sched/scheduler.py`` (``Scheduler.schedule``) and
``vllm/v1/core/kv_cache_manager.py`` (``allocate_slots``, ``get_computed_blocks``,
``record_prefix_cache_stats``) of vLLM 0.29.0; the reference tier (``tests/reference/``) runs that
code side by side with this one and asserts identical schedules.

Work per step is O(scheduled requests) plus O(new full blocks); decodes cost a few attribute
updates each. :meth:`Engine.run` with ``fast_forward`` takes the steps in which every running request
decodes through :func:`kvpilot.engine.fast_forward.decode_run` instead, at a cost that does not grow with
the running requests (the same results).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from kvpilot.engine.block_pool import BlockPool
from kvpilot.engine.config import EngineConfig
from kvpilot.engine.hardware import CostModel, model_profile
from kvpilot.engine.offload import CPUOffloadTier
from kvpilot.engine.request import Request
from kvpilot.gpus import gpu_profile

_NEVER = 1 << 62  # a token count no request reaches
_INF = float("inf")


class MetricsSink(Protocol):
    """What the engine calls on its metrics exporter (``kvpilot.engine.exporter.VLLMMetrics``)."""

    def set_queue(
        self, *, running: int, waiting: int, waiting_capacity: int, waiting_deferred: int, kv_cache_usage: float
    ) -> None:
        """Gauges after each step (once per fast-forwarded run); ``kv_cache_usage`` 0-1 (``BlockPool.usage``)."""

    def record_step(
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
        """Per-step counters (tokens; preemptions as a count) and the step's latencies (s).

        What vLLM's ``IterationStats`` holds for a step with outputs: ``prompt_tokens`` are the
        whole prompts of requests whose first token came in this step, ``prompt_cached`` /
        ``prompt_external`` the part of them found in the GPU prefix cache / the CPU tier at their
        first admission; ``preemptions_reported`` the preemptions of requests that produced output
        in this step (vLLM counts a PREEMPTED event when its request next produces output; None: the
        step's ``preemptions``), while
        ``preemptions`` counts the scheduler's preemptions of this step; ``ttfts`` / ``itls`` the
        first-token and inter-token latencies of this step's tokens; ``itl_counts`` more inter-token
        latencies as ``(gap, count)`` pairs (the engine sends these: most tokens of a step share one gap).
        """

    def record_request(
        self,
        *,
        e2e: float,
        queue_time: float,
        prefill_time: float,
        decode_time: float,
        inference_time: float,
        prompt_tokens: int,
        prompt_cached: int,
        generation_tokens: int,
        max_tokens: int,
        finished_reason: str,
    ) -> None:
        """One finished request (seconds, tokens; ``max_tokens`` the request's parameter)."""


class Workload(Protocol):
    """A source of requests (see :mod:`kvpilot.engine.workloads`)."""

    def next_arrival_time(self) -> float | None:
        """Arrival time of the next pending request, None when none is pending now."""

    def pop_arrivals(self, now: float) -> list[Request]:
        """Requests with ``arrival_time <= now`` not yet handed out, in arrival order."""

    def on_finish(self, request: Request, now: float) -> None:
        """Called for each finished request (closed-loop workloads schedule the next one)."""

    def done(self) -> bool:
        """True when no request will ever be handed out again."""


@dataclass(slots=True)
class StepOutput:
    """What one step did. Times in simulated seconds, counts in tokens unless said.

    ``num_steps`` > 1: a fast-forwarded run of steps in which the same requests only decode
    (``kvpilot.engine.fast_forward``):
    ``start`` of the first, ``duration`` to the end of the last, ``num_tokens`` / ``num_scheduled`` per step
    (the same in each), ``generation_tokens`` and ``itl_counts`` summed over the steps, the state after the last.
    ``itl_counts``: the inter-token gaps as ``(gap s, count)``.
    """

    start: float
    duration: float
    num_tokens: int
    num_scheduled: int
    prompt_tokens: int
    generation_tokens: int
    preemptions: int
    prefix_queries: int
    prefix_hits: int
    external_queries: int
    external_hits: int
    running: int
    waiting: int
    kv_cache_usage: float
    finished: list[Request] = field(default_factory=list)
    prompt_cached: int = 0
    prompt_external: int = 0
    preemptions_reported: int = 0
    ttfts: list[float] = field(default_factory=list)
    itl_counts: list[tuple[float, int]] = field(default_factory=list)
    num_steps: int = 1


def group_gaps(common: float, num_common: int, others: list[float]) -> list[tuple[float, int]]:
    """A step's inter-token gaps as ``(gap, count)``: the shared gap first, then the others one by one."""
    groups = [(common, num_common)] if num_common else []
    groups.extend((gap, 1) for gap in others)
    return groups


class Engine:
    """A simulated vLLM V1 engine.

    Args:
        config: flags and hardware; GPU-dependent defaults filled in (``EngineConfig.resolved``)
            and validated here (``EngineConfig.validate``, ValueError).
        metrics: optional :class:`MetricsSink`.
        keep_finished: keep finished requests in ``finished`` (memory grows with every request).
        track_itls: record inter-token latencies (``StepOutput.itl_counts``, and each request's ``itls``
            when ``keep_finished``); default: when there is a ``metrics`` sink or ``keep_finished``.
        fast_forward: in :meth:`run`, take the steps in which every running request decodes (arrivals,
            admissions and finishes included) without visiting each request each step
            (:func:`kvpilot.engine.fast_forward.decode_run`): the same results as stepping one by one
            (metrics, request timings, block pool); ``on_step`` called once per run of steps in which nothing
            arrives, is admitted or finishes, and a running request's progress fields brought up to date when it
            finishes and when the run ends.

    Attributes (read-only for callers): ``now`` (s), ``pool`` (:class:`BlockPool`), ``running``
    (list, admission order), ``waiting`` (deque), ``finished`` (list of finished requests, in
    finish order; ``keep_finished=False`` drops them), ``decoding_only`` (the last step scheduled and sampled every
    running request), ``offload`` (:class:`CPUOffloadTier` or
    None), counters ``num_steps``, ``num_preemptions``, ``prefix_queries``, ``prefix_hits``,
    ``external_queries``, ``external_hits``, ``prompt_tokens``, ``generation_tokens``.
    """

    def __init__(
        self,
        config: EngineConfig | None = None,
        metrics: MetricsSink | None = None,
        keep_finished: bool = True,
        track_itls: bool | None = None,
        fast_forward: bool = True,
    ) -> None:
        config = (config or EngineConfig()).resolved()
        config.validate()
        self.config = config
        self.metrics = metrics
        self.keep_finished = keep_finished
        self.fast_forward = fast_forward
        self.decoding_only = False  # after the last step every running request decodes (engine.fast_forward)
        # per-token inter-token latencies are kept only when someone reads them
        self._track_itls = metrics is not None or keep_finished if track_itls is None else track_itls
        self.block_size = config.block_size
        self.num_gpu_blocks = config.resolved_num_gpu_blocks()
        self.bytes_per_token = config.resolved_bytes_per_token()
        self.pool = BlockPool(self.num_gpu_blocks, config.block_size, config.enable_prefix_caching)
        self.cost = CostModel(
            gpu_profile(config.gpu),
            model_profile(config.model),
            bytes_per_token=self.bytes_per_token,
            tensor_parallel_size=config.tensor_parallel_size,
            bandwidth_efficiency=config.bandwidth_efficiency,
            compute_efficiency=config.compute_efficiency,
            overhead=config.step_overhead,
            weight_bytes=config.resolved_weight_bytes(),
        )
        self.offload: CPUOffloadTier | None = None
        if config.kv_offload_cpu_bytes > 0:
            self.offload = CPUOffloadTier(
                config.kv_offload_cpu_bytes,
                config.offload_chunk_tokens,
                self.bytes_per_token,
                config.offload_load_bandwidth,
                config.offload_store_bandwidth,
            )
        self.now = 0.0
        self.running: list[Request] = []
        self.waiting: deque[Request] = deque()
        self.finished: list[Request] = []
        self.num_steps = 0
        self.num_preemptions = 0
        self.prefix_queries = 0
        self.prefix_hits = 0
        self.external_queries = 0
        self.external_hits = 0
        self.prompt_tokens = 0
        self.generation_tokens = 0
        self.num_finished = 0
        self.busy_time = 0.0

    # ------------------------------------------------------------------ properties
    @property
    def usable_blocks(self) -> int:
        """Blocks a request can use: total minus the null block."""
        return self.num_gpu_blocks - 1

    @property
    def kv_cache_tokens(self) -> int:
        """``num_gpu_blocks * block_size`` (vLLM's logged "GPU KV cache size")."""
        return self.num_gpu_blocks * self.block_size

    @property
    def kv_cache_usage(self) -> float:
        """0-1, cached-but-evictable blocks counted as free."""
        return self.pool.usage()

    @property
    def num_running(self) -> int:
        """Requests in the running list."""
        return len(self.running)

    @property
    def num_waiting(self) -> int:
        """Requests in the waiting queue (all for reason "capacity"; no deferred causes modelled)."""
        return len(self.waiting)

    def is_idle(self) -> bool:
        """No running and no waiting request."""
        return not self.running and not self.waiting

    # ------------------------------------------------------------------ requests
    def add_request(self, request: Request) -> None:
        """Queue a request (``EngineCore.add_request``); its ``arrival_time`` is kept.

        Output is capped at ``max_model_len - prompt_len`` tokens (finished_reason "length").

        Raises:
            ValueError: the prompt is not shorter than ``max_model_len`` (vLLM rejects it with
                HTTP 400 before the engine sees it).
        """
        mml = self.config.max_model_len
        if request.prompt_len >= mml:
            raise ValueError(
                f"prompt_len: request {request.request_id!r} has {request.prompt_len}"
                f" prompt tokens, max_model_len is {mml}"
            )
        if request.prompt_len + request.output_len > mml:
            request.max_output = mml - request.prompt_len
            request.finish_reason = "length"
        request.next_full = self.block_size if self.config.enable_prefix_caching else _NEVER
        self.waiting.append(request)

    def advance_to(self, t: float) -> None:
        """Let simulated time pass with nothing to do (``now = max(now, t)``)."""
        if t > self.now:
            self.now = t

    # ------------------------------------------------------------------ the step
    def step(self) -> StepOutput:
        """Schedule, run one forward pass (advancing ``now``), process outputs.

        Returns:
            :class:`StepOutput`; with nothing to run ``duration`` is 0 and ``now`` unchanged.
        """
        cfg = self.config
        bs = self.block_size
        pool = self.pool
        running = self.running
        waiting = self.waiting
        offload = self.offload
        budget = cfg.max_num_batched_tokens
        assert budget is not None  # __init__ runs on config.resolved()
        step_budget = budget
        start = self.now

        self.decoding_only = False
        scheduled: list[Request] = []
        preempted = 0
        context = 0
        pairs = 0

        # 1. running requests, in order. num_computed is advanced at scheduling time, as vLLM's
        #    Scheduler._update_after_schedule does; the forward pass below cannot fail.
        sched_append = scheduled.append
        for req in running:  # safe: preemption only pops from the end of the list
            if budget <= 0:
                break
            c = req.num_computed
            n = req.total - c
            if n > budget:
                n = budget
            end = c + n
            if end > req.capacity:
                need = -(-end // bs) - len(req.blocks)
                victim = None
                while need > pool.num_free:
                    victim = running.pop()
                    self._preempt(victim)
                    preempted += 1
                    if victim is req:
                        break
                if victim is req:
                    break
                req.blocks += pool.allocate(need)
                req.capacity = len(req.blocks) * bs
            req.num_computed = end
            if end >= req.next_full:  # never true with caching off (next_full is huge)
                self._cache_full_blocks(req, end)
            sched_append(req)
            budget -= n
            context += end
            pairs += end if n == 1 else n * c + ((n * n + n) >> 1)

        # 2. waiting requests, FCFS, only if nothing was preempted
        step_pq = step_ph = step_eq = step_eh = load_tokens = 0
        if not preempted and waiting:
            budget, ctx, prs, step_pq, step_ph, step_eq, step_eh, load_tokens = self._admit(budget, start, scheduled)
            context += ctx
            pairs += prs

        num_tokens = step_budget - budget
        if not scheduled:
            return self._emit(
                StepOutput(start, 0.0, 0, 0, 0, 0, preempted, 0, 0, 0, 0, len(running), len(waiting), pool.usage())
            )

        # 3. offload stores (full prompt chunks completed by this step), then the step time
        store_tokens = 0
        if offload is not None:
            ct = offload.chunk_tokens
            per = ct // bs
            for req in scheduled:
                done = min(req.num_computed, req.prompt_len) // ct
                if done > req.num_stored_chunks:
                    hashes = req.ensure_hashes(done * per, bs)
                    for j in range(req.num_stored_chunks, done):
                        if offload.store(hashes[(j + 1) * per - 1]):
                            store_tokens += ct
                    req.num_stored_chunks = done
        dt = self.cost.step_time(num_tokens, context, pairs)
        if offload is not None:
            dt += load_tokens * offload.load_time_per_token
            dt += store_tokens * offload.store_time_per_token
        now = start + dt
        self.now = now
        self.busy_time += dt

        # 4. outputs: requests that caught up sample one token
        finished: list[Request] = []
        common_gap = now - start
        gen, prompt_done, prompt_cached, prompt_external, reported, ttfts, num_common, other_gaps = self._sample(
            scheduled, start, now, finished
        )
        # every running request was scheduled and sampled: each is one token behind, as a decode stretch needs
        self.decoding_only = gen == len(scheduled) == len(running)
        if finished:
            done_ids = {id(r) for r in finished}
            self.running = running = [r for r in running if id(r) not in done_ids]
            for req in finished:
                self._finish(req, now)

        self.num_steps += 1
        self.num_preemptions += preempted
        self.prefix_queries += step_pq
        self.prefix_hits += step_ph
        self.external_queries += step_eq
        self.external_hits += step_eh
        self.prompt_tokens += prompt_done
        self.generation_tokens += gen
        step_out = StepOutput(
            start,
            dt,
            num_tokens,
            len(scheduled),
            prompt_done,
            gen,
            preempted,
            step_pq,
            step_ph,
            step_eq,
            step_eh,
            len(running),
            len(waiting),
            pool.usage(),
            finished,
            prompt_cached,
            prompt_external,
            reported,
            ttfts,
            group_gaps(common_gap, num_common, other_gaps),
        )
        return self._emit(step_out)

    def _admit(
        self, budget: int, start: float, scheduled: list[Request]
    ) -> tuple[int, int, int, int, int, int, int, int]:
        """Admit waiting requests FCFS into ``running`` and ``scheduled`` (``Scheduler.schedule``'s waiting loop).

        Args:
            budget: tokens left in the step after the running requests (> 0 or nothing is admitted).
            start: the step's start (s), a first admission's ``scheduled_time``.
            scheduled: the step's scheduled requests; the admitted ones are appended.

        Returns:
            ``(budget left, context, attention pairs, prefix queries, prefix hits, external queries, external
            hits, tokens loaded from the CPU tier)`` of the admitted requests (the cost model's and the
            metrics' inputs).
        """
        cfg = self.config
        bs = self.block_size
        pool = self.pool
        running = self.running
        waiting = self.waiting
        caching = cfg.enable_prefix_caching
        offload = self.offload
        max_seqs = cfg.max_num_seqs
        assert max_seqs is not None  # a resolved config
        sched_append = scheduled.append
        context = pairs = 0
        step_pq = step_ph = step_eq = step_eh = load_tokens = 0
        chunked = cfg.enable_chunked_prefill
        reserve_full = cfg.scheduler_reserve_full_isl
        max_len = cfg.max_model_len
        while waiting and budget > 0 and len(running) < max_seqs:
            req = waiting[0]
            total = req.total
            hit_blocks: list[int] = []
            if caching:
                max_blocks = (total - 1) // bs
                hit_blocks = pool.lookup(req.ensure_hashes(max_blocks, bs), max_blocks)
            gpu_hit = len(hit_blocks) * bs
            ext = 0
            if offload is not None:
                ct = offload.chunk_tokens
                per = ct // bs
                max_chunks = (total - 1) // ct
                hashes = req.ensure_hashes(max_chunks * per, bs)
                keys = [hashes[(j + 1) * per - 1] for j in range(max_chunks)]
                ext_total = offload.lookup(keys) * ct
                if ext_total > gpu_hit:
                    ext = ext_total - gpu_hit
            computed = gpu_hit + ext
            n = total - computed
            if n > budget:
                if not chunked:
                    break
                n = budget
            end = computed + n
            need = -(-end // bs) - len(hit_blocks)
            ref = pool.ref_cnt
            evictable = sum(1 for b in hit_blocks if ref[b] == 0)
            if reserve_full:  # the whole request must fit (allocate_slots' full_sequence_must_fit)
                need_full = -(-min(total, max_len) // bs) - len(hit_blocks)
                if need_full + evictable > pool.num_free:
                    break
            if need + evictable > pool.num_free:
                break
            waiting.popleft()
            pool.touch(hit_blocks)
            req.blocks = hit_blocks + pool.allocate(need) if need > 0 else hit_blocks
            req.capacity = len(req.blocks) * bs
            req.num_cached_blocks = len(hit_blocks)
            req.next_full = (len(hit_blocks) + 1) * bs if caching else _NEVER
            req.num_computed = end
            req.num_hit = computed
            if end >= req.next_full:
                self._cache_full_blocks(req, end)
            if caching and req.num_preemptions == 0:
                step_pq += total
                step_ph += gpu_hit
                req.prefix_hit_tokens = gpu_hit
            if req.num_preemptions == 0:
                req.external_hit_tokens = ext
                if offload is not None:
                    step_eq += total
                    step_eh += ext
            if req.scheduled_time is None:
                req.scheduled_time = start
            load_tokens += ext
            running.append(req)
            sched_append(req)
            budget -= n
            context += end
            pairs += n * computed + ((n * n + n) >> 1)
        return budget, context, pairs, step_pq, step_ph, step_eq, step_eh, load_tokens

    def _sample(
        self, scheduled: Iterable[Request], start: float, now: float, finished: list[Request]
    ) -> tuple[int, int, int, int, int, list[float], int, list[float]]:
        """The requests of ``scheduled`` whose tokens are all computed sample one (``update_from_output``).

        Args:
            scheduled: the step's scheduled requests, in order.
            start: the step's start (s).
            now: the step's end (s).
            finished: the requests reaching their ``max_output`` are appended, in order.

        Returns:
            ``(generated tokens, prompt tokens, their GPU-cached part, their CPU-tier part, preemptions reported,
            TTFTs, requests whose inter-token gap is the step's own (their previous token came at its start),
            the other gaps)``: what ``IterationStats`` collects for the step (vLLM's OutputProcessor), gaps in s.
        """
        prompt_done = gen = prompt_cached = prompt_external = reported = 0
        track_itls = self._track_itls
        keep_itls = self.keep_finished
        ttfts: list[float] = []
        # inter-token gaps grouped: every request whose previous token came at this step's start shares one gap
        common_gap = now - start
        num_common = 0
        other_gaps: list[float] = []
        for req in scheduled:
            c = req.num_computed
            if c >= req.total:
                out = req.num_output + 1
                req.num_output = out
                req.total = c + 1
                gen += 1
                if out == 1:
                    req.first_token_time = now
                    prompt_done += req.prompt_len
                    prompt_cached += req.prefix_hit_tokens
                    prompt_external += req.external_hit_tokens
                    ttfts.append(now - req.arrival_time)
                elif track_itls:
                    last = req.last_token_time
                    if last == start:
                        num_common += 1
                        gap = common_gap
                    else:
                        gap = now - last
                        other_gaps.append(gap)
                    if keep_itls:
                        req.itls.append(gap)
                if req.num_preemptions != req.preemptions_reported:
                    reported += req.num_preemptions - req.preemptions_reported
                    req.preemptions_reported = req.num_preemptions
                req.last_token_time = now
                if out >= req.max_output:
                    finished.append(req)
        return gen, prompt_done, prompt_cached, prompt_external, reported, ttfts, num_common, other_gaps

    def _emit(self, out: StepOutput) -> StepOutput:
        m = self.metrics
        if m is not None:
            if out.num_scheduled or out.preemptions:
                m.record_step(
                    num_tokens=out.num_tokens,
                    prompt_tokens=out.prompt_tokens,
                    generation_tokens=out.generation_tokens,
                    preemptions=out.preemptions,
                    prefix_queries=out.prefix_queries,
                    prefix_hits=out.prefix_hits,
                    external_queries=out.external_queries,
                    external_hits=out.external_hits,
                    prompt_cached=out.prompt_cached,
                    prompt_external=out.prompt_external,
                    preemptions_reported=out.preemptions_reported,
                    ttfts=out.ttfts,
                    itl_counts=out.itl_counts,
                )
            m.set_queue(
                running=out.running,
                waiting=out.waiting,
                waiting_capacity=out.waiting,
                waiting_deferred=0,
                kv_cache_usage=out.kv_cache_usage,
            )
        return out

    def _cache_full_blocks(self, req: Request, num_tokens: int) -> None:
        """Register the request's blocks that ``num_tokens`` fill (``cache_blocks`` in ``allocate_slots``)."""
        bs = self.block_size
        full = num_tokens // bs
        self.pool.cache_blocks(req.blocks, req.ensure_hashes(full, bs), req.num_cached_blocks, full)
        req.num_cached_blocks = full
        req.next_full = (full + 1) * bs

    def _preempt(self, req: Request) -> None:
        """Free all blocks tail first, reset progress, put at the front of waiting."""
        self.pool.free(reversed(req.blocks))
        req.blocks = []
        req.capacity = 0
        req.num_computed = 0
        req.num_cached_blocks = 0
        req.next_full = self.block_size if self.config.enable_prefix_caching else _NEVER
        req.num_preemptions += 1
        self.waiting.appendleft(req)

    def _finish(self, req: Request, now: float) -> None:
        self.pool.free(reversed(req.blocks))
        req.blocks = []
        req.capacity = 0
        req.finish_time = now
        req.finished_reason = req.finish_reason
        self.num_finished += 1
        if self.keep_finished:
            self.finished.append(req)
        m = self.metrics
        if m is not None:
            first = req.first_token_time if req.first_token_time is not None else now
            sched = req.scheduled_time if req.scheduled_time is not None else now
            # vLLM's max_tokens: the request's own cap, or max_model_len - prompt when it stops by itself
            # (SamplingParams' default when the client sends none)
            capped = req.finished_reason == "length"
            m.record_request(
                e2e=now - req.arrival_time,
                queue_time=sched - req.arrival_time,
                prefill_time=first - sched,
                decode_time=now - first,
                inference_time=now - sched,
                prompt_tokens=req.prompt_len,
                prompt_cached=req.prefix_hit_tokens + req.external_hit_tokens,
                generation_tokens=req.num_output,
                max_tokens=req.max_output if capped else self.config.max_model_len - req.prompt_len,
                finished_reason=req.finished_reason or "length",
            )

    # ------------------------------------------------------------------ driving
    def run(
        self,
        workload: Workload | Iterable[Request],
        until: float | None = None,
        max_steps: int | None = None,
        on_step: Callable[[Engine, StepOutput | None], None] | None = None,
        tick: float | None = None,
    ) -> Engine:
        """Feed ``workload`` and step until it is done and the engine is empty.

        Args:
            workload: a :class:`Workload`, or any iterable of :class:`Request` sorted by
                ``arrival_time`` (wrapped as an open-loop trace).
            until: simulated time (s) to stop at; when given the run also lets idle time pass up
                to it, so a recording covers the whole window.
            max_steps: stop after this many steps of this call.
            on_step: called after every step with the :class:`StepOutput` (after a fast-forwarded
                run of decode-only steps once, ``num_steps`` > 1), and with ``None`` at idle points (at most ``tick``
                seconds apart when ``tick`` is given).
            tick: longest idle gap between ``on_step`` calls (s).

        Returns:
            self. Every run ends: workloads are finite, and a request always progresses.
        """
        from kvpilot.engine.workloads import as_workload

        wl = as_workload(workload)
        steps = 0
        fast_forward = self.fast_forward
        if fast_forward:
            from kvpilot.engine.fast_forward import decode_run

        def emit(out: StepOutput) -> None:
            for req in out.finished:
                wl.on_finish(req, self.now)
            if on_step is not None:
                on_step(self, out)

        while True:
            now = self.now
            if until is not None and now >= until:
                break
            if max_steps is not None and steps >= max_steps:
                break
            for req in wl.pop_arrivals(now):
                self.add_request(req)
            if not self.running and not self.waiting:
                nxt = wl.next_arrival_time()
                if nxt is None or (until is not None and nxt > until):
                    # nothing pending: a closed loop with nothing in flight is over too
                    if until is not None:
                        self._idle_to(until, tick, on_step)
                    break
                self._idle_to(nxt, tick, on_step)
                continue
            if fast_forward:
                taken = decode_run(self, wl, until, _NEVER if max_steps is None else max_steps - steps, emit)
                if taken:
                    steps += taken
                    continue
            emit(self.step())
            steps += 1
        return self

    def _idle_to(
        self, target: float, tick: float | None, on_step: Callable[[Engine, StepOutput | None], None] | None
    ) -> None:
        while self.now < target:
            nxt = target if tick is None else min(target, self.now + tick)
            self.now = nxt
            if self.metrics is not None:
                self.metrics.set_queue(
                    running=0, waiting=0, waiting_capacity=0, waiting_deferred=0, kv_cache_usage=self.pool.usage()
                )
            if on_step is not None:
                on_step(self, None)
