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
decodes (the last one perhaps prefilling a chunk of its prompt) through
:func:`kvpilot.engine.fast_forward.decode_run` instead, at a cost that does not grow with the running requests
(the same results).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Final, Protocol

from kvpilot.engine.block_pool import NO_HIT, BlockPool, Hit
from kvpilot.engine.config import EngineConfig
from kvpilot.engine.hardware import CostModel
from kvpilot.engine.offload import CPUOffloadTier
from kvpilot.engine.request import Request
from kvpilot.gpus import gpu_profile
from kvpilot.text.errors import InvalidValueError

_NEVER: Final = 1 << 62  # a token count no request reaches
_INF: Final = float("inf")


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


@dataclass(slots=True, init=False)
class StepOutput:
    """What one step did. Times in simulated seconds, counts in tokens unless said.

    ``num_steps`` > 1: a fast-forwarded run of steps in which the same requests decode, and the last of them
    perhaps prefills a chunk of its prompt with the budget the decodes leave (``kvpilot.engine.fast_forward``):
    ``start`` of the first, ``duration`` to the end of the last, ``durations`` each step's own (in order: the
    steps start at ``start``, ``start + durations[0]``, ...), ``num_tokens`` / ``num_scheduled`` per step (the
    same in each), ``generation_tokens`` and ``itl_counts`` summed over the steps, the state after the last.
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
    durations: list[float] = field(default_factory=list)

    def __init__(  # written out, as Admission's (the dataclass's signature; None: a new empty list)
        self,
        start: float,
        duration: float,
        num_tokens: int,
        num_scheduled: int,
        prompt_tokens: int,
        generation_tokens: int,
        preemptions: int,
        prefix_queries: int,
        prefix_hits: int,
        external_queries: int,
        external_hits: int,
        running: int,
        waiting: int,
        kv_cache_usage: float,
        finished: list[Request] | None = None,
        prompt_cached: int = 0,
        prompt_external: int = 0,
        preemptions_reported: int = 0,
        ttfts: list[float] | None = None,
        itl_counts: list[tuple[float, int]] | None = None,
        num_steps: int = 1,
        durations: list[float] | None = None,
    ) -> None:
        self.start = start
        self.duration = duration
        self.num_tokens = num_tokens
        self.num_scheduled = num_scheduled
        self.prompt_tokens = prompt_tokens
        self.generation_tokens = generation_tokens
        self.preemptions = preemptions
        self.prefix_queries = prefix_queries
        self.prefix_hits = prefix_hits
        self.external_queries = external_queries
        self.external_hits = external_hits
        self.running = running
        self.waiting = waiting
        self.kv_cache_usage = kv_cache_usage
        self.finished = [] if finished is None else finished
        self.prompt_cached = prompt_cached
        self.prompt_external = prompt_external
        self.preemptions_reported = preemptions_reported
        self.ttfts = [] if ttfts is None else ttfts
        self.itl_counts = [] if itl_counts is None else itl_counts
        self.num_steps = num_steps
        self.durations = [] if durations is None else durations

    @staticmethod
    def build(
        *,
        start: float,
        duration: float,
        num_tokens: int,
        num_scheduled: int,
        running: int,
        waiting: int,
        kv_cache_usage: float,
        generation_tokens: int = 0,
        itl_counts: list[tuple[float, int]] | None = None,
        finished: list[Request] | None = None,
        num_steps: int = 1,
        durations: list[float] | None = None,
        prompt_tokens: int = 0,
        ttfts: list[float] | None = None,
        prefix_queries: int = 0,
        prefix_hits: int = 0,
        prompt_cached: int = 0,
        preemptions: int = 0,
        preemptions_reported: int = 0,
        external_queries: int = 0,
        external_hits: int = 0,
        prompt_external: int = 0,
    ) -> StepOutput:
        """The same as ``StepOutput(...)`` with these keywords, counters 0 unless given, at a fraction of the cost.

        CPython 3.11 passes keywords to a class's ``__init__`` through a dict, and matches each keyword against the
        parameters one by one; the engine builds one of these per step with an event, so its hot paths pass only
        the fields that are not 0 here (the commonest first), and the constructor gets them by position. It names
        the class rather than taking ``cls``: compiled, a call of the class itself is a direct call of its
        constructor, one of a ``cls`` goes through Python's (a third of building the step's output).
        """
        return StepOutput(
            start,
            duration,
            num_tokens,
            num_scheduled,
            prompt_tokens,
            generation_tokens,
            preemptions,
            prefix_queries,
            prefix_hits,
            external_queries,
            external_hits,
            running,
            waiting,
            kv_cache_usage,
            finished,
            prompt_cached,
            prompt_external,
            preemptions_reported,
            ttfts,
            itl_counts,
            num_steps,
            durations,
        )


@dataclass(slots=True, init=False)
class Admission:
    """What :meth:`Engine.admit` scheduled from the waiting queue in one step (tokens unless said).

    ``budget``: tokens left in the step; ``context`` / ``pairs``: the admitted requests' part of the cost model's
    inputs (KV length after the step, attention pairs); ``prefix_queries`` / ``prefix_hits``: GPU prefix-cache
    statistics of the requests admitted for the first time; ``external_queries`` / ``external_hits``: the CPU
    tier's; ``load_tokens``: tokens loaded from the CPU tier.
    """

    budget: int
    context: int = 0
    pairs: int = 0
    prefix_queries: int = 0
    prefix_hits: int = 0
    external_queries: int = 0
    external_hits: int = 0
    load_tokens: int = 0

    def __init__(  # written out, not the dataclass's: that one is generated Python, interpreted even when compiled
        self,
        budget: int,
        context: int = 0,
        pairs: int = 0,
        prefix_queries: int = 0,
        prefix_hits: int = 0,
        external_queries: int = 0,
        external_hits: int = 0,
        load_tokens: int = 0,
    ) -> None:
        self.budget = budget
        self.context = context
        self.pairs = pairs
        self.prefix_queries = prefix_queries
        self.prefix_hits = prefix_hits
        self.external_queries = external_queries
        self.external_hits = external_hits
        self.load_tokens = load_tokens


@dataclass(slots=True, init=False)
class Sampled:
    """What :meth:`Engine.sample` produced after a step's forward pass (``IterationStats`` of vLLM's
    OutputProcessor): ``generation_tokens`` (sampled tokens), ``prompt_tokens`` (whole prompts of requests whose
    first token came), ``prompt_cached`` / ``prompt_external`` (their parts found in the GPU prefix cache / the CPU
    tier), ``preemptions_reported``, ``ttfts`` (s), ``num_common`` (requests whose inter-token gap is the step's own:
    their previous token came at its start) and ``other_gaps`` (the other inter-token gaps, s).
    """

    generation_tokens: int = 0
    prompt_tokens: int = 0
    prompt_cached: int = 0
    prompt_external: int = 0
    preemptions_reported: int = 0
    ttfts: list[float] = field(default_factory=list)
    num_common: int = 0
    other_gaps: list[float] = field(default_factory=list)

    def __init__(  # written out, as Admission's
        self,
        generation_tokens: int = 0,
        prompt_tokens: int = 0,
        prompt_cached: int = 0,
        prompt_external: int = 0,
        preemptions_reported: int = 0,
        ttfts: list[float] | None = None,
        num_common: int = 0,
        other_gaps: list[float] | None = None,
    ) -> None:
        self.generation_tokens = generation_tokens
        self.prompt_tokens = prompt_tokens
        self.prompt_cached = prompt_cached
        self.prompt_external = prompt_external
        self.preemptions_reported = preemptions_reported
        self.ttfts = [] if ttfts is None else ttfts
        self.num_common = num_common
        self.other_gaps = [] if other_gaps is None else other_gaps


@dataclass(slots=True, init=False)
class _RunningPass:
    """The running requests' part of a step: tokens left, context, attention pairs, preemptions."""

    budget: int
    context: int = 0
    pairs: int = 0
    preempted: int = 0

    def __init__(self, budget: int) -> None:  # written out, as Admission's
        self.budget = budget
        self.context = self.pairs = self.preempted = 0


def group_gaps(common: float, num_common: int, others: list[float]) -> list[tuple[float, int]]:
    """A step's inter-token gaps as ``(gap, count)``: the shared gap first, then the others one by one."""
    groups = [(common, num_common)] if num_common else []
    if others:
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
        fast_forward: in :meth:`run`, take the steps in which every running request decodes, the last perhaps
            prefilling a chunk of its prompt (arrivals, admissions and finishes included), without visiting each
            request each step
            (:func:`kvpilot.engine.fast_forward.decode_run`): the same results as stepping one by one
            (metrics, request timings, block pool); ``on_step`` called once per run of steps in which nothing
            arrives, is admitted or finishes, and a running request's progress fields brought up to date when it
            finishes and when the run ends.

    Attributes (read-only for callers): ``now`` (s), ``pool`` (:class:`BlockPool`), ``running``
    (list, admission order), ``waiting`` (deque), ``finished`` (list of finished requests, in
    finish order; ``keep_finished=False`` drops them), ``decoding_only`` (the last step scheduled and sampled every
    running request), ``prefilling_last`` (it sampled every running request but the last, which it scheduled for
    part of its prompt: a chunked prefill), ``track_itls``, ``offload`` (:class:`CPUOffloadTier` or
    None), counters ``num_steps``, ``num_stepped`` (calls of :meth:`step`: the steps not fast-forwarded),
    ``num_preemptions``, ``prefix_queries``, ``prefix_hits``,
    ``external_queries``, ``external_hits``, ``prompt_tokens``, ``generation_tokens``, ``num_finished``,
    ``busy_time`` (s).

    A driver of its own (:mod:`kvpilot.engine.fast_forward` is one) uses :meth:`admit`, :meth:`sample`,
    :meth:`cache_full_blocks`, :meth:`finish`, :meth:`count_step` and :meth:`count_decode_steps`: the pieces
    :meth:`step` is made of.
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
        self.limits = config.batch_limits()  # the resolved config's limits, as ints
        # read at every arrival, admission and finish, so kept here: compiled, an attribute of the engine is a
        # field, one of the config (an uncompiled class) a lookup by name; a config is never changed once built
        # (EngineConfig.replace makes a copy)
        self.max_num_seqs = self.limits.max_num_seqs
        self.max_model_len = config.max_model_len
        self.caching = config.enable_prefix_caching
        self.chunked_prefill = config.enable_chunked_prefill
        self.reserve_full_isl = config.scheduler_reserve_full_isl
        self.metrics = metrics
        self.keep_finished = keep_finished
        self.fast_forward = fast_forward
        self.decoding_only = False  # after the last step every running request decodes (engine.fast_forward)
        self.prefilling_last = False  # ... every one but the last, part-way through its prompt
        # per-token inter-token latencies are kept only when someone reads them
        self.track_itls = metrics is not None or keep_finished if track_itls is None else track_itls
        self.block_size = config.block_size
        self.num_gpu_blocks = config.resolved_num_gpu_blocks()
        self.bytes_per_token = config.resolved_bytes_per_token()
        self.pool = BlockPool(self.num_gpu_blocks, config.block_size, config.enable_prefix_caching)
        self.cost = CostModel(
            gpu_profile(config.gpu),
            config.resolved_model_profile(),
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
        self.num_stepped = 0  # calls of step(): the steps not fast-forwarded
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
            InvalidValueError: the prompt is not shorter than ``max_model_len`` (vLLM rejects it with
                HTTP 400 before the engine sees it).
        """
        mml = self.max_model_len
        if request.prompt_len >= mml:
            raise InvalidValueError(
                "prompt_len",
                f"request {request.request_id!r} has {request.prompt_len} prompt tokens, max_model_len is {mml}",
            )
        if request.prompt_len + request.output_len > mml:
            request.max_output = mml - request.prompt_len
            request.finish_reason = "length"
        request.next_full = self.block_size if self.caching else _NEVER
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
        self.num_stepped += 1
        budget = self.limits.max_num_batched_tokens
        start = self.now
        self.decoding_only = self.prefilling_last = False
        scheduled: list[Request] = []
        # 1. running requests, in order; 2. waiting requests, FCFS, only if nothing was preempted
        rp = self._schedule_running(budget, scheduled)
        adm = self.admit(rp.budget, start, scheduled) if not rp.preempted and self.waiting else None
        if not scheduled:
            return self.record(
                StepOutput.build(
                    start=start,
                    duration=0.0,
                    num_tokens=0,
                    num_scheduled=0,
                    prompt_tokens=0,
                    generation_tokens=0,
                    preemptions=rp.preempted,
                    prefix_queries=0,
                    prefix_hits=0,
                    external_queries=0,
                    external_hits=0,
                    running=len(self.running),
                    waiting=len(self.waiting),
                    kv_cache_usage=self.pool.usage(),
                )
            )
        # 3. the forward pass: its time, with the CPU tier's loads and stores
        if adm is None:
            num_tokens = budget - rp.budget
            dt = self.cost.step_time(num_tokens, rp.context, rp.pairs)
        else:
            num_tokens = budget - adm.budget
            dt = self.cost.step_time(num_tokens, rp.context + adm.context, rp.pairs + adm.pairs)
        offload = self.offload
        if offload is not None:
            dt += (0 if adm is None else adm.load_tokens) * offload.load_time_per_token
            dt += self._store_chunks(offload, scheduled) * offload.store_time_per_token
        now = start + dt
        self.now = now
        self.busy_time += dt
        # 4. outputs: requests that caught up sample one token; finished ones leave
        finished: list[Request] = []
        out = self.sample(scheduled, start, now, finished)
        # every running request was scheduled and sampled: each is one token behind, as a decode stretch needs; or
        # all but the last, scheduled for part of its prompt (a chunked prefill): a stretch takes that too
        n = len(scheduled)
        self.decoding_only = out.generation_tokens == n == len(self.running)
        self.prefilling_last = (
            out.generation_tokens == n - 1 == len(self.running) - 1 and scheduled[-1].last_token_time != now
        )
        if finished:
            done_ids = {id(r) for r in finished}
            self.running = [r for r in self.running if id(r) not in done_ids]
            for req in finished:
                self.finish(req, now)
        self.count_step(adm, out, rp.preempted)
        step_out = StepOutput.build(
            start=start,
            duration=dt,
            num_tokens=num_tokens,
            num_scheduled=len(scheduled),
            running=len(self.running),
            waiting=len(self.waiting),
            kv_cache_usage=self.pool.usage(),
            generation_tokens=out.generation_tokens,
            itl_counts=group_gaps(now - start, out.num_common, out.other_gaps),
            finished=finished,
            prompt_tokens=out.prompt_tokens,
            ttfts=out.ttfts,
            preemptions=rp.preempted,
            preemptions_reported=out.preemptions_reported,
        )
        if adm is not None:  # the admission's fields (the keywords above are the ones a decode step has)
            step_out.prefix_queries = adm.prefix_queries
            step_out.prefix_hits = adm.prefix_hits
            step_out.external_queries = adm.external_queries
            step_out.external_hits = adm.external_hits
        if out.prompt_tokens:  # first tokens: their prompts' cached parts
            step_out.prompt_cached = out.prompt_cached
            step_out.prompt_external = out.prompt_external
        return self.record(step_out)

    def _schedule_running(self, budget: int, scheduled: list[Request]) -> _RunningPass:
        """Schedule the running requests in order (``Scheduler.schedule``'s running loop); preempt when out of blocks.

        ``num_computed`` is advanced at scheduling time, as vLLM's ``Scheduler._update_after_schedule`` does (the
        forward pass cannot fail). A request that needs a block when none is free preempts the last running
        request, itself included (then the loop stops).
        """
        bs = self.block_size
        pool = self.pool
        running = self.running
        rp = _RunningPass(budget)
        context = pairs = 0
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
                need = -(-end // bs) - req.capacity // bs
                if need > pool.num_free and self._preempt_for(req, need, rp):
                    break
                pool.grow(req.table, need)
                req.capacity += need * bs
            req.num_computed = end
            if end >= req.next_full:  # never true with caching off (next_full is huge)
                self.cache_full_blocks(req, end)
            sched_append(req)
            budget -= n
            context += end
            pairs += end if n == 1 else n * c + ((n * n + n) >> 1)
        rp.budget, rp.context, rp.pairs = budget, context, pairs
        return rp

    def _preempt_for(self, req: Request, need: int, rp: _RunningPass) -> bool:
        """Preempt the last running requests until ``need`` blocks are free; True when ``req`` itself went."""
        running = self.running
        while need > self.pool.num_free:
            victim = running.pop()
            self._preempt(victim)
            rp.preempted += 1
            if victim is req:
                return True
        return False

    def _store_chunks(self, offload: CPUOffloadTier, scheduled: list[Request]) -> int:
        """Store the full prompt chunks this step completes in the CPU tier; return the tokens newly stored."""
        bs = self.block_size
        ct = offload.chunk_tokens
        per = ct // bs
        store_tokens = 0
        for req in scheduled:
            done = min(req.num_computed, req.prompt_len) // ct
            if done > req.num_stored_chunks:
                for j in range(req.num_stored_chunks, done):
                    if offload.store(req.block_hash((j + 1) * per - 1, bs)):
                        store_tokens += ct
                req.num_stored_chunks = done
        return store_tokens

    def admit(self, budget: int, start: float, scheduled: list[Request]) -> Admission:
        """Admit waiting requests FCFS into ``running`` and ``scheduled`` (``Scheduler.schedule``'s waiting loop).

        While the budget lasts and ``len(running) < max_num_seqs``, the head of the queue is looked up in the GPU
        prefix cache (none with caching off), then the CPU tier for the rest, then admitted if its blocks are free
        (``allocate_slots``); a request that does not fit stops admission.

        Args:
            budget: tokens left in the step after the running requests (> 0 or nothing is admitted).
            start: the step's start (s), a first admission's ``scheduled_time``.
            scheduled: the step's scheduled requests; the admitted ones are appended.

        Returns:
            :class:`Admission`: the budget left and the admitted requests' cost-model and metric inputs.
        """
        adm = Admission(budget)
        max_seqs = self.max_num_seqs
        running = self.running
        waiting = self.waiting
        while waiting and adm.budget > 0 and len(running) < max_seqs and self._admit_head(adm, start):
            req = running[-1]
            scheduled.append(req)
        return adm

    def _admit_head(self, adm: Admission, start: float) -> bool:
        """Admit the head of the waiting queue if it fits (appended to ``running``); False when it does not.

        ``allocate_slots``: with ``scheduler_reserve_full_isl`` (vLLM PR #37307, default) the blocks for the
        *whole* request must be free (``full_sequence_must_fit``), then those for the scheduled tokens; hit blocks
        that sit in the free queue count against the free blocks. Without chunked prefill a prompt longer than the
        budget left waits. Prefix-cache statistics count first admissions only (``record_prefix_cache_stats``).
        """
        caching = self.caching
        bs = self.block_size
        pool = self.pool
        req = self.waiting[0]
        total = req.total
        hit = self._prefix_hit(req) if caching else NO_HIT
        hit_blocks = hit.num_blocks
        gpu_hit = hit_blocks * bs
        offload = self.offload
        ext = 0 if offload is None else self._offload_hit(offload, req, gpu_hit)
        computed = gpu_hit + ext
        n = total - computed
        if n > adm.budget:
            if not self.chunked_prefill:
                return False
            n = adm.budget
        end = computed + n
        need = -(-end // bs) - hit_blocks
        free = pool.num_free - hit.num_free
        if need > free or (self.reserve_full_isl and -(-min(total, self.max_model_len) // bs) - hit_blocks > free):
            return False
        self.waiting.popleft()
        table = req.table
        if hit_blocks:
            pool.take(table, hit)
        pool.grow(table, need)
        req.capacity = (hit_blocks + need) * bs
        req.num_cached_blocks = hit_blocks
        req.num_computed = end
        req.num_hit = computed
        if caching:
            req.next_full = (hit_blocks + 1) * bs
            if end >= req.next_full:
                self.cache_full_blocks(req, end)
        else:
            req.next_full = _NEVER
        adm.load_tokens += ext
        if not req.num_preemptions:
            self._count_first_admission(adm, req, gpu_hit, ext)
        if req.scheduled_time is None:
            req.scheduled_time = start
        self.running.append(req)
        adm.budget -= n
        adm.context += end
        adm.pairs += n * computed + ((n * n + n) >> 1)
        return True

    def _prefix_hit(self, req: Request) -> Hit:
        """The GPU prefix cache's hit for ``req`` (``get_computed_blocks``): at most ``num_tokens - 1`` tokens."""
        bs = self.block_size
        pool = self.pool
        if not pool.may_hit(req.first_hash(bs)):
            return NO_HIT
        max_blocks = (req.total - 1) // bs
        return pool.lookup(req.hash_runs(0, max_blocks, bs), max_blocks)

    def _count_first_admission(self, adm: Admission, req: Request, gpu_hit: int, ext: int) -> None:
        """Prefix-cache statistics of a request admitted for the first time (``record_prefix_cache_stats``)."""
        if self.caching:
            adm.prefix_queries += req.total
            adm.prefix_hits += gpu_hit
            req.prefix_hit_tokens = gpu_hit
        req.external_hit_tokens = ext
        if self.offload is not None:
            adm.external_queries += req.total
            adm.external_hits += ext

    def _offload_hit(self, offload: CPUOffloadTier, req: Request, gpu_hit: int) -> int:
        """Tokens the CPU tier holds beyond the GPU hit (``get_num_new_matched_tokens``), whole chunks."""
        bs = self.block_size
        ct = offload.chunk_tokens
        per = ct // bs
        max_chunks = (req.total - 1) // ct
        hashes = req.hashes(max_chunks * per, bs)
        ext_total = offload.lookup([hashes[(j + 1) * per - 1] for j in range(max_chunks)]) * ct
        return ext_total - gpu_hit if ext_total > gpu_hit else 0

    def sample(self, scheduled: Iterable[Request], start: float, now: float, finished: list[Request]) -> Sampled:
        """The requests of ``scheduled`` whose tokens are all computed sample one (``update_from_output``).

        Args:
            scheduled: the step's scheduled requests, in order.
            start: the step's start (s).
            now: the step's end (s).
            finished: the requests reaching their ``max_output`` are appended, in order.

        Returns:
            :class:`Sampled`: what ``IterationStats`` collects for the step (vLLM's OutputProcessor).
        """
        track_itls = self.track_itls
        keep_itls = self.keep_finished
        ttfts: list[float] = []
        # inter-token gaps grouped: every request whose previous token came at this step's start shares one gap
        common_gap = now - start
        other_gaps: list[float] = []
        num_common = gen = reported = prompt = cached = external = 0
        for req in scheduled:
            c = req.num_computed
            if c < req.total:
                continue
            num = req.num_output + 1
            req.num_output = num
            req.total = c + 1
            gen += 1
            if num == 1:
                req.first_token_time = now
                prompt += req.prompt_len
                cached += req.prefix_hit_tokens
                external += req.external_hit_tokens
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
            if num >= req.max_output:
                finished.append(req)
        return Sampled(gen, prompt, cached, external, reported, ttfts, num_common, other_gaps)

    def count_step(self, adm: Admission | None, out: Sampled, preemptions: int, decoded: int = 0) -> None:
        """Add one step to the counters: its admissions (None: nobody), its outputs (plus ``decoded`` tokens of
        requests it only decoded, when :meth:`sample` did not see them) and its preemptions.
        """
        self.num_steps += 1
        self.num_preemptions += preemptions
        if adm is not None:
            self.prefix_queries += adm.prefix_queries
            self.prefix_hits += adm.prefix_hits
            self.external_queries += adm.external_queries
            self.external_hits += adm.external_hits
        self.prompt_tokens += out.prompt_tokens
        self.generation_tokens += out.generation_tokens + decoded

    def count_decode_steps(self, steps: int, generation_tokens: int) -> None:
        """Add ``steps`` steps that only decoded, ``generation_tokens`` in all, to the counters."""
        self.num_steps += steps
        self.generation_tokens += generation_tokens

    def record(self, out: StepOutput) -> StepOutput:
        """Send one step to the metrics sink (:meth:`record_step`, then the gauges); return it."""
        if self.metrics is not None:
            self.record_step(out)
            self.set_gauges()
        return out

    def record_step(self, out: StepOutput) -> None:
        """The metrics sink's ``record_step`` for a step that scheduled or preempted something (none without a sink)."""
        m = self.metrics
        if m is not None and (out.num_scheduled or out.preemptions):
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

    def set_gauges(self) -> None:
        """The metrics sink's queue gauges and KV usage, from the engine's state now."""
        m = self.metrics
        if m is not None:
            w = len(self.waiting)
            m.set_queue(
                running=len(self.running),
                waiting=w,
                waiting_capacity=w,
                waiting_deferred=0,
                kv_cache_usage=self.pool.usage(),
            )

    def cache_full_blocks(self, req: Request, num_tokens: int) -> None:
        """Register the request's blocks that ``num_tokens`` fill (``cache_blocks`` in ``allocate_slots``)."""
        bs = self.block_size
        full = num_tokens // bs
        k = req.num_cached_blocks
        if full > k:
            self.pool.cache(req.table, req.hash_runs(k, full, bs))
            req.num_cached_blocks = full
        req.next_full = (full + 1) * bs

    def _preempt(self, req: Request) -> None:
        """Free all blocks tail first, reset progress, put at the front of waiting."""
        self.pool.release(req.table)
        req.capacity = 0
        req.num_computed = 0
        req.num_cached_blocks = 0
        req.next_full = self.block_size if self.caching else _NEVER
        req.num_preemptions += 1
        self.waiting.appendleft(req)

    def finish(self, req: Request, now: float) -> None:
        """A request reached its last token at ``now``: free its blocks tail first, record it (``record_request``)."""
        self.pool.release(req.table)
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
                max_tokens=req.max_output if capped else self.max_model_len - req.prompt_len,
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
        left = _NEVER if max_steps is None else max_steps
        fast_forward: Callable[[Engine, Workload, float | None, int, Callable[[StepOutput], None]], int] | None = None
        if self.fast_forward:
            from kvpilot.engine import fast_forward as stretches  # (a module: it imports this one)

            fast_forward = stretches.decode_run

        def emit(out: StepOutput) -> None:
            for req in out.finished:
                wl.on_finish(req, self.now)
            if on_step is not None:
                on_step(self, out)

        while left > 0 and (until is None or self.now < until):
            for req in wl.pop_arrivals(self.now):
                self.add_request(req)
            if not self.running and not self.waiting:
                if not self._idle_until_arrival(wl, until, tick, on_step):
                    break
                continue
            taken = 0 if fast_forward is None else fast_forward(self, wl, until, left, emit)
            if not taken:
                emit(self.step())
                taken = 1
            left -= taken
        return self

    def _idle_until_arrival(
        self,
        wl: Workload,
        until: float | None,
        tick: float | None,
        on_step: Callable[[Engine, StepOutput | None], None] | None,
    ) -> bool:
        """Nothing to run: let time pass to the next arrival (True), or to ``until`` when none comes before (False)."""
        nxt = wl.next_arrival_time()
        if nxt is None or (until is not None and nxt > until):
            # nothing pending: a closed loop with nothing in flight is over too
            if until is not None:
                self._idle_to(until, tick, on_step)
            return False
        self._idle_to(nxt, tick, on_step)
        return True

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
