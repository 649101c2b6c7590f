"""Fast-forward: runs of decode steps of :class:`~kvpilot.engine.core.Engine` whose cost does not grow with the
number of running requests, and of the chunked prefill beside them, identical to stepping one by one.

From a state where every running request is one token behind (the last step scheduled and sampled all of them:
``Engine.decoding_only``), or all but the last, which is part-way through its prompt (``Engine.prefilling_last``:
a chunked prefill), each following step of ``Scheduler.schedule`` (``vllm/v1/core/sched/scheduler.py``, as
:meth:`Engine.step` models it) schedules every decoding request for exactly one token, in running order, as long as
their number fits the token budget and no allocation runs out of free blocks (that step would preempt), then the
prefilling request for the rest of the budget (``min(its prompt left, budget - decodes)`` tokens). What such a step
does to a request is known in advance, so a request is not visited each step; it is visited only when it needs
attention:

- its *computed tokens* are ``ff_base + g`` before stretch step ``g`` (one global step counter instead of a
  per-request update); the sum over the running requests, the cost model's context, is kept incrementally
  (``CostModel.step_time(num_tokens, context, pairs)`` with ``pairs == context`` for one-token decodes);
- its *block allocations* come every ``block_size`` steps, at the steps ``g`` with ``g % block_size`` equal to its
  phase (its first one ``capacity - computed`` steps ahead): a request is in the list of its phase, in running
  order, and a step takes one block from the front of the free queue for each request of its phase's list, in
  that order (``BlockPool.grow_tails``: taking ``n`` blocks at once from the front of the queue is taking them one
  by one, ``get_new_blocks`` in vllm/v1/core/block_pool.py), so block ids, free-queue order and evictions are
  those of stepping;
- the blocks its decodes fill enter the prefix cache when it finishes or the run ends (``Engine.cache_full_blocks``
  then registers every full block in order, as stepping did one at a time): their hashes are those of its own
  generated tokens (segment ``("gen", request_id)``), which no other request's lookup can ask for, and a block in
  use is never evicted, so no step in between can tell the difference;
- its *finish* is ``max_output - num_output - 1`` steps ahead: finished requests leave after the forward in
  scheduled order and free their blocks tail first (``Engine.finish``: ``free_blocks`` in
  vllm/v1/core/single_type_kv_cache_manager.py), as stepping does;
- the *prefilling request* takes ``m = budget - decodes`` tokens a step until the step whose chunk is the rest of
  its prompt, ``ceil(left / m) - 1`` steps ahead; its blocks come after the decodes' in each step (``ceil(computed /
  block_size)`` of them held: ``BlockPool.grow_runs``), and its full blocks enter the prefix cache with its last
  chunk (before that step's admissions) or when the run ends: while it takes the rest of the budget no request is
  admitted, so no lookup happens in between. With its last chunk it samples (its first token) and decodes from the
  next step on;
- arrivals are taken at each step's start (``Workload.pop_arrivals``, as :meth:`Engine.run` does) and waiting
  requests are admitted by the same code as :meth:`Engine.step` (``Engine.admit``) with the budget the decodes and
  the prefilling request leave; an admitted request whose whole prompt is scheduled samples its first token in that
  step (``Engine.sample``) and decodes from the next one on; one whose prompt the budget cut is the prefilling
  request from the next step on (the last admitted: the budget is used up). A waiting request that did not fit
  keeps not fitting, with the same budget left to it, until a request finishes or another arrives (decode steps
  only take free blocks), so the steps in between do not try again. While the prefilling request takes the rest of
  the budget, arrivals only queue.

The run stops before a step that starts at or after ``until``, that would exceed ``max_steps``, that finds nothing
running, whose decodes exceed the budget (or, with a prefilling request, leave it nothing) or whose allocations
exceed the free blocks (it would preempt), or, with a CPU tier, that would try an admission (with a CPU tier the
chunked prefills stay in :meth:`Engine.step` too: their chunks are stored as they are computed). :meth:`Engine.step`
takes it from there.

What callers see is what stepping gives: the metrics sink gets the same ``record_request`` / ``record_step`` calls
in the same order (inter-token gaps grouped as ``(gap, count)``), ``set_queue`` once with the state at the end
(stepping sets the same gauges after each step; only the last value is ever read); ``on_step`` gets one
:class:`~kvpilot.engine.core.StepOutput` per step in which something arrives (but can only queue), is admitted (or
tried), samples its first token or finishes, and one for each run of steps between them (``num_steps`` > 1, each
step's duration in ``durations``; running, waiting, tokens and scheduled requests constant and KV usage not
decreasing inside such a run, so its end state holds its peaks); ``Workload.on_finish`` is called at the end of the
step a request finishes in. A running request's progress fields (``num_computed``, ``num_output``,
``last_token_time``, ``itls``, ``capacity``, its full blocks' hashes) are brought up to date when it finishes and
when the run ends, not in between.
tests/unit/engine/test_fast_forward.py runs every scenario, chunked-prefill workloads and the reference tier's random
workloads both ways and compares the exported metrics, the report, every request's timings, every step's
``StepOutput`` and the whole block pool.
"""

from __future__ import annotations

from collections.abc import Callable
from heapq import heappop, heappush
from typing import Final

from kvpilot.engine.core import Admission, Engine, Sampled, StepOutput, Workload, group_gaps
from kvpilot.engine.request import Request

__all__ = ["decode_run"]

_INF: Final = float("inf")
_NEVER: Final = 1 << 62  # a stretch step no request decodes from
_NO_ADMISSION: Final = Admission(0)  # read only: a step that admitted nobody
_NOT_SAMPLED: Final = Sampled()  # read only: a step whose admissions sampled nothing


def decode_run(
    engine: Engine,
    workload: Workload,
    until: float | None,
    max_steps: int,
    emit: Callable[[StepOutput], None],
) -> int:
    """Take the steps that come next while every running request decodes, the last one perhaps prefilling a chunk of
    its prompt with the budget left; return how many (0: none taken).

    Args:
        engine: the engine between steps, arrivals due at ``engine.now`` already added.
        workload: where arrivals come from (``pop_arrivals`` at each step's start).
        until: simulated time (s): a step starting at or after it is not taken (None: no limit).
        max_steps: at most this many steps.
        emit: called with each :class:`StepOutput` in order, as :meth:`Engine.run` hands them on (``on_finish``,
            ``on_step``).
    """
    if not engine.running or max_steps < 1:
        return 0
    if not engine.decoding_only and not (engine.prefilling_last and engine.offload is None):
        return 0
    stretch = _Stretch(engine, workload, until, max_steps, emit)
    try:
        stretch.run()
    finally:
        stretch.close()
    return stretch.g


class _Stretch:
    """One fast-forwarded run of steps: set up from the engine's running requests (``__init__``), the event loop
    (:meth:`run`: runs of quiet steps, :meth:`quiet_steps`, and steps with events, :meth:`event_step`), and the
    flush (:meth:`close`).

    ``g``: steps taken; ``now``: the start of the next step (s); ``num``: decoding requests; ``context``: their
    computed tokens before the next step; ``pre``: the request prefilling its prompt with the budget the decodes
    leave (the last running one), None when every running request decodes; ``phases[p]``: for the requests that
    take a block at the steps with ``g % block_size == p``, the ids of their tables' unhashed last extents, in
    running order (keyed by the lists' ``id``: a dict keeps insertion order and takes one out in O(1));
    ``finishing[g]``: the decoding requests finishing in step ``g``, in running order (``finish_steps``: a heap of
    those steps); ``gaps``: each step's inter-token gap, for the requests' own
    ``itls``; ``blocked_at``: the budget left to the waiting queue at which its head last did not fit, while
    nothing has freed blocks or arrived since (-1: none).
    """

    __slots__ = (
        "engine",
        "workload",
        "emit",
        "stop_at",
        "max_steps",
        "budget",
        "max_seqs",
        "bs",
        "caching",
        "no_admission",
        "track",
        "keep",
        "observed",
        "phases",
        "finishing",
        "finish_steps",
        "context",
        "num",
        "pre",
        "g",
        "now",
        "gaps",
        "run_steps",
        "blocked_at",
        "done",
    )

    def __init__(
        self,
        engine: Engine,
        workload: Workload,
        until: float | None,
        max_steps: int,
        emit: Callable[[StepOutput], None],
    ) -> None:
        cfg = engine.config
        self.engine = engine
        self.workload = workload
        self.emit = emit
        self.stop_at = _INF if until is None else until
        self.max_steps = max_steps
        self.budget = engine.limits.max_num_batched_tokens
        self.max_seqs = engine.limits.max_num_seqs
        self.bs = engine.block_size
        self.caching = cfg.enable_prefix_caching
        self.no_admission = engine.offload is not None  # the CPU tier's loads and stores are left to Engine.step
        self.track = engine.track_itls
        self.keep = engine.keep_finished and self.track
        self.observed = self.track or engine.metrics is not None  # quiet steps' gaps are recorded
        self.phases: list[dict[int, list[int]]] = [{} for _ in range(self.bs)]
        self.finishing: dict[int, list[Request]] = {}
        self.finish_steps: list[int] = []
        self.context = 0
        self.g = 0
        self.now = engine.now
        self.gaps: list[float] = []
        self.run_steps = _Run()  # the quiet steps not yet handed on
        self.blocked_at = -1
        self.done = False
        decoding = engine.running
        self.pre: Request | None = None
        if not engine.decoding_only:  # Engine.prefilling_last: the last one prefills
            *decoding, pre = decoding
            pre.ff_from = _NEVER  # not decoding (close() leaves it as it is)
            self.pre = pre
        for req in decoding:
            self.join(req, 0)
        self.num = len(decoding)

    def join(self, req: Request, g0: int) -> None:
        """``req`` decodes from step ``g0`` on, its ``num_computed`` tokens computed before it."""
        c = req.num_computed
        req.ff_base = c - g0
        req.ff_from = g0
        finish = g0 + req.max_output - req.num_output - 1
        alloc = g0 + req.capacity - c  # the step whose token does not fit its blocks (capacity - c < block_size)
        if alloc <= finish:
            req.ff_phase = alloc % self.bs
            tail = self.engine.pool.open_tail(req.table)
            self.phases[req.ff_phase][id(tail)] = tail
        else:
            req.ff_phase = -1
        same = self.finishing.get(finish)
        if same is None:
            self.finishing[finish] = [req]
            heappush(self.finish_steps, finish)
        else:
            same.append(req)
        self.context += c

    def run(self) -> None:
        """Take steps until one the stretch cannot take (module docstring)."""
        while not self.done and self.g < self.max_steps and self.now < self.stop_at:
            # the quiet steps up to the next one with an event (none in the first step: its gaps are its own)
            if self.g:
                self.quiet_steps()
                if self.done or self.g >= self.max_steps or self.now >= self.stop_at:
                    break
                if self._queue_arrivals():
                    continue
            self.event_step()

    def _queue_arrivals(self) -> bool:
        """Requests arriving at the start of step ``g`` while the prefilling request takes the rest of the budget in
        it: they can only queue (the run so far handed on first), and the step is quiet; False when it is not.
        """
        pre = self.pre
        left = self.budget - self.num
        if pre is None or left <= 0 or pre.total - pre.num_computed <= left:
            return False
        if self.finish_steps and self.finish_steps[0] == self.g:
            return False
        arrived = self.workload.pop_arrivals(self.now)
        if not arrived:
            return False
        self.run_steps.flush(self.emit)
        self._add(arrived)
        self.blocked_at = -1
        return True

    def _quiet_end(self) -> int | None:
        """The first step that may not be quiet (the next finish, the prefilling request's last chunk, or
        ``max_steps``), None when this very step may not be quiet (nothing runs, too much decodes, a waiting request
        may be admitted).
        """
        num = self.num
        budget = self.budget
        pre = self.pre
        g_end = self.finish_steps[0] if self.finish_steps else self.max_steps
        if g_end > self.max_steps:
            g_end = self.max_steps
        if pre is not None:
            left = budget - num
            if left <= 0:
                return None
            last = self.g + (-(-(pre.total - pre.num_computed) // left)) - 1  # the step of its last chunk
            return last if last < g_end else g_end
        if not 0 < num <= budget or (
            self.engine.waiting and num < self.max_seqs and num < budget and self.blocked_at != budget - num
        ):
            return None
        return g_end

    def _quiet_bounds(self) -> tuple[int, float] | None:
        """(the first step that may not be quiet: :meth:`_quiet_end`; the time a quiet step must start before: the
        next arrival or ``until``), None when this very step may not be quiet.
        """
        g_end = self._quiet_end()
        if g_end is None:
            return None
        t_arrival = self.workload.next_arrival_time()
        t_stop = self.stop_at if t_arrival is None or t_arrival > self.stop_at else t_arrival
        if self.g >= g_end or self.now >= t_stop:
            return None
        return g_end, t_stop

    def quiet_steps(self) -> int:
        """Steps in which nothing can happen but decodes, the prefilling request's chunks and their block allocations,
        up to the next finish, the prefilling request's last chunk, the next arrival or an allocation the free
        blocks do not cover (then the stretch is done); how many were taken.

        Their allocations are made at the end, all at once, in step order then running order, and so are their
        records (inter-token gaps, ``record_step``) and the prefilling request's full blocks entering the prefix
        cache: nothing else takes blocks from the queue, gives some back, looks a prompt up or reaches the metrics
        sink in between, so each block is the one stepping would have taken.
        """
        bounds = self._quiet_bounds()
        if bounds is None:
            return 0
        engine = self.engine
        g0, first = self.g, self.now
        pre = self.pre
        pool = engine.pool
        num = self.num
        g_end, t_stop = bounds  # passed by position, not as *bounds: compiled, that is a direct call
        if pre is None:
            tails, gaps, durations = self._decode_steps(g_end, t_stop)
            if tails:
                pool.grow_tails(tails)
            tokens = num
        else:
            runs, gaps, durations = self._chunk_steps(pre, g_end, t_stop)
            if runs:
                pool.grow_runs(runs)
            tokens = self.budget
        taken = self.g - g0
        engine.now = self.now
        if taken:
            engine.count_decode_steps(taken, num * taken)
            itls = self._observe_quiet(gaps, num, tokens)
            self.run_steps.add_steps(
                first, self.now, taken, tokens, num + (pre is not None), num, len(engine.waiting), pool.usage(), itls
            )
            self.run_steps.durations += durations
        return taken

    def _decode_steps(self, g_end: int, t_stop: float) -> tuple[list[list[int]], list[float], list[float]]:
        """Quiet steps in which every running request decodes: (their allocations' tails in order, their gaps when
        observed, their durations); ``g``, ``now``, ``context`` and the engine's busy time moved on.
        """
        engine = self.engine
        cost = engine.cost  # cost.step_time(...), not a bound method: compiled, that is a direct call
        num, phases, bs, observed = self.num, self.phases, self.bs, self.observed
        g = self.g
        now = self.now
        context = self.context
        busy = engine.busy_time
        free = engine.pool.num_free
        allocating: list[list[int]] = []
        gaps: list[float] = []
        durations: list[float] = []
        while g < g_end and now < t_stop:
            tails = phases[g % bs]
            if tails:
                free -= len(tails)
                if free < 0:  # this step preempts: Engine.step's
                    self.done = True
                    break
                allocating += tails.values()
            context += num
            dt = cost.step_time(num, context, context)
            start = now
            now = start + dt
            busy += dt
            g += 1
            durations.append(dt)
            if observed:
                gaps.append(now - start)
        self.g, self.now, self.context = g, now, context
        engine.busy_time = busy
        return allocating, gaps, durations

    def _chunk_steps(
        self, pre: Request, g_end: int, t_stop: float
    ) -> tuple[list[tuple[list[int], int]], list[float], list[float]]:
        """Quiet steps in which every running request decodes but ``pre``, which prefills a chunk of the budget they
        leave (``m`` tokens: never its last one), after them: :meth:`_decode_steps`'s (the allocations as ``(tail,
        blocks)`` runs), and ``pre``'s computed tokens and capacity moved on (its blocks come after the decodes' of
        the same step; its full blocks enter the prefix cache with its last chunk or when the stretch ends: no lookup
        happens before).
        """
        engine = self.engine
        cost = engine.cost  # cost.step_time(...), not a bound method: compiled, that is a direct call
        num, phases, bs, observed = self.num, self.phases, self.bs, self.observed
        m = self.budget - num
        tri = (m * m + m) >> 1  # attention pairs of m new tokens among themselves
        tokens = num + m
        c = pre.num_computed
        cap = pre.capacity
        tail = engine.pool.open_tail(pre.table)
        g = self.g
        now = self.now
        context = self.context
        busy = engine.busy_time
        free = engine.pool.num_free
        allocating: list[tuple[list[int], int]] = []
        gaps: list[float] = []
        durations: list[float] = []
        while g < g_end and now < t_stop:
            tails = phases[g % bs]
            end = c + m
            need = -(-end // bs) - cap // bs
            if tails or need:
                free -= len(tails) + need
                if free < 0:  # this step preempts: Engine.step's
                    self.done = True
                    break
                if tails:
                    allocating += [(t, 1) for t in tails.values()]
                if need:
                    allocating.append((tail, need))
                    cap += need * bs
            context += num
            dt = cost.step_time(tokens, context + end, context + m * c + tri)
            c = end
            start = now
            now = start + dt
            busy += dt
            g += 1
            durations.append(dt)
            if observed:
                gaps.append(now - start)
        pre.num_computed, pre.capacity = c, cap
        self.g, self.now, self.context = g, now, context
        engine.busy_time = busy
        return allocating, gaps, durations

    def _observe_quiet(self, gaps: list[float], num: int, tokens: int) -> list[tuple[float, int]]:
        """Record quiet steps' inter-token ``gaps`` (each the gap of all ``num`` decoding requests; ``tokens`` a step):
        the requests' own ``itls`` (``gaps``), one ``record_step`` each for the metrics sink; return them as
        ``(gap, count)`` pairs.
        """
        if self.keep:
            self.gaps += gaps
        metrics = self.engine.metrics
        track = self.track and num > 0
        if metrics is not None:
            for gap in gaps:
                metrics.record_step(
                    num_tokens=tokens,
                    prompt_tokens=0,
                    generation_tokens=num,
                    preemptions=0,
                    prefix_queries=0,
                    prefix_hits=0,
                    external_queries=0,
                    external_hits=0,
                    prompt_cached=0,
                    prompt_external=0,
                    preemptions_reported=0,
                    ttfts=(),
                    itl_counts=((gap, num),) if track else (),
                )
        return [(gap, num) for gap in gaps] if track else []

    def _runs_out(self) -> bool:
        """Step ``g`` cannot be taken here: nothing decodes and nothing prefills, the decodes exceed the budget, or
        they leave the prefilling request none.
        """
        num = self.num
        if self.pre is None:
            return not 0 < num <= self.budget
        return num >= self.budget

    def event_step(self) -> None:
        """One step in which something may arrive, be admitted or finish (``done`` when it cannot be taken here)."""
        engine = self.engine
        g = self.g
        arrived = self.workload.pop_arrivals(self.now) if g else []
        if self._runs_out():
            self._add(arrived)
            self.done = True
            return
        finishing = None
        if self.finish_steps and self.finish_steps[0] == g:
            heappop(self.finish_steps)
            finishing = self.finishing.pop(g)
        if arrived:
            self.blocked_at = -1
        pre = self.pre
        left = self.budget - self.num
        rest = 0 if pre is None else pre.total - pre.num_computed
        chunk = rest if rest < left else left
        left -= chunk
        event = bool(arrived) or (pre is not None and chunk == rest)  # the prefilling request's last chunk: it samples
        admit = left > 0 and bool(engine.waiting or arrived) and len(engine.running) < self.max_seqs
        admit = admit and left != self.blocked_at
        event = event or admit
        if event or finishing:
            # the run so far is handed on before anything changes, so on_step sees the state after its last step
            self.run_steps.flush(self.emit)
        self._add(arrived)
        tails = self.phases[g % self.bs]
        need = 0 if pre is None else self._chunk_blocks(pre, chunk)
        if (admit and self.no_admission) or len(tails) + need > engine.pool.num_free:  # the 2nd preempts
            self.done = True
            return
        if tails:
            engine.pool.grow_tails(tails.values())
        scheduled = (0, 0, 0) if pre is None else self._schedule_chunk(pre, chunk, need)
        self._forward(finishing or [], admit, event, scheduled)

    def _chunk_blocks(self, pre: Request, n: int) -> int:
        """The blocks ``pre`` needs for ``n`` more tokens (``allocate_slots``)."""
        end = pre.num_computed + n
        return -(-end // self.bs) - pre.capacity // self.bs if end > pre.capacity else 0

    def _schedule_chunk(self, pre: Request, n: int, need: int) -> tuple[int, int, int]:
        """Schedule ``n`` tokens of ``pre``'s prompt, after the decodes' allocations: its ``need`` blocks, its full
        blocks into the prefix cache (``Engine.step``'s running loop); ``(n, its context, its attention pairs)``.
        """
        if need:
            self.engine.pool.grow(pre.table, need)
            pre.capacity += need * self.bs
        c = pre.num_computed
        end = pre.num_computed = c + n
        if end >= pre.total and end >= pre.next_full:  # its last chunk: before any lookup (_chunk_steps)
            self.engine.cache_full_blocks(pre, end)
        return n, end, n * c + ((n * n + n) >> 1)

    def _forward(self, finishing: list[Request], admit: bool, event: bool, chunk: tuple[int, int, int]) -> None:
        """Step ``g`` after its decodes' allocations and the prefilling request's ``chunk`` (tokens, context,
        attention pairs): admissions with the budget they leave, the forward pass, the outputs. ``finishing``: the
        decoding requests whose last token this step is.
        """
        engine = self.engine
        start = self.now
        num = self.num
        n, chunk_context, chunk_pairs = chunk
        ctx = self.context + num
        tokens = num + n
        scheduled: list[Request] = []
        if admit:
            adm = engine.admit(self.budget - tokens, start, scheduled)
            if not scheduled:
                self.blocked_at = self.budget - tokens
            num_tokens = self.budget - adm.budget
            dt = engine.cost.step_time(num_tokens, ctx + chunk_context + adm.context, ctx + chunk_pairs + adm.pairs)
        else:
            adm = _NO_ADMISSION
            num_tokens = tokens
            dt = engine.cost.step_time(tokens, ctx + chunk_context, ctx + chunk_pairs)
        now = self.now = engine.now = start + dt
        engine.busy_time += dt
        if self.keep:
            self.gaps.append(now - start)
        self._outputs(start, dt, finishing, scheduled, adm, num_tokens, event)

    def _outputs(
        self,
        start: float,
        dt: float,
        finished: list[Request],
        scheduled: list[Request],
        adm: Admission,
        num_tokens: int,
        event: bool,
    ) -> None:
        """Step ``g``'s outputs: every decoding request samples, so does the prefilling or an admitted one whose
        prompt is all computed; finished requests leave; the step is counted, recorded and handed on (its own
        :class:`StepOutput` when something arrived, was admitted or tried, sampled its first token or finished, else
        as part of the run of quiet steps).
        """
        engine = self.engine
        g = self.g
        now = self.now
        common = now - start
        dec = self.num
        num_common, others = self._gaps_before(start, common)
        for req in finished:  # decoding requests finishing: brought up to date
            self._catch_up(req, req.ff_base + g + 1, g + 1, True)
        self.context += dec
        pre = self.pre
        if pre is not None and pre.num_computed >= pre.total:  # its last chunk: it samples with the admitted ones
            scheduled.insert(0, pre)
            self.pre = None
        num_scheduled = dec + len(scheduled) + (self.pre is not None)
        out = _NOT_SAMPLED
        if scheduled:
            out = self._sample_prompts(scheduled, start, finished)
            num_common += out.num_common
            others += out.other_gaps
        if finished:
            self._leave(finished, now)
        self.num = len(engine.running) - (self.pre is not None)
        itl_counts = group_gaps(common, num_common, others)
        engine.count_step(adm, out, 0, dec)
        step_out = StepOutput.build(
            start=start,
            duration=dt,
            num_tokens=num_tokens,
            num_scheduled=num_scheduled,
            running=len(engine.running),
            waiting=len(engine.waiting),
            kv_cache_usage=engine.pool.usage(),
            generation_tokens=out.generation_tokens + dec,
            itl_counts=itl_counts,
            finished=finished,
        )
        _admission_fields(step_out, adm, out)
        if engine.metrics is not None:
            engine.record_step(step_out)
        self.g = g + 1
        if event or finished:  # a step of its own
            self.emit(step_out)
        else:
            self.run_steps.add(step_out, dec)

    def _leave(self, finished: list[Request], now: float) -> None:
        """The requests that finished at ``now`` leave the running list and free their blocks (``Engine.finish``)."""
        running = self.engine.running
        for req in finished:  # in place: the running list keeps its order (Engine.step filters a copy)
            running.remove(req)
        for req in finished:
            self.engine.finish(req, now)
        self.blocked_at = -1

    def _gaps_before(self, start: float, common: float) -> tuple[int, list[float]]:
        """The decoding requests' inter-token gaps of this step: ``(requests whose gap is the step's own, the other
        gaps)``; in the first step a request's previous token may be older than the step's start.
        """
        if not self.track:
            return 0, []
        if self.g:
            return self.num, []
        return self._first_gaps(start, common)

    def _sample_prompts(self, scheduled: list[Request], start: float, finished: list[Request]) -> Sampled:
        """The requests scheduled for their prompt (the prefilling one's last chunk, the admitted ones) whose prompt
        is all computed sample a token (``Engine.sample``) and decode from the next step on; one that is not (a
        chunked prefill: the last admitted, which the budget cut) prefills from the next step on.
        """
        g = self.g
        complete = [r for r in scheduled if r.num_computed >= r.total]
        out = self.engine.sample(complete, start, self.now, finished)
        if len(complete) < len(scheduled):
            pre = self.pre = scheduled[-1]
            pre.ff_from = _NEVER  # not decoding (close() leaves it as it is)
        for req in complete:
            if req.num_output < req.max_output:
                self.join(req, g + 1)
        return out

    def _first_gaps(self, start: float, common: float) -> tuple[int, list[float]]:
        """The first step's inter-token gaps: a request's previous token may be older than the step's start."""
        num_common = 0
        others: list[float] = []
        now = self.now
        keep = self.keep
        for req in self.engine.running[: self.num]:
            last = req.last_token_time
            if last == start:
                num_common += 1
                gap = common
            else:
                gap = now - last
                others.append(gap)
            if keep:
                req.itls.append(gap)
        return num_common, others

    def _catch_up(self, req: Request, c: int, upto: int, finishing: bool = False) -> None:
        """Bring decoding ``req`` up to ``c`` computed tokens after ``upto`` stretch steps (``now`` its last token):
        its progress, its inter-token gaps, its capacity (its blocks hold exactly the computed tokens' blocks: each
        came when a token did not fit) and its full blocks' hashes; ``finishing``: it also leaves the decoding ones.
        """
        if finishing:
            if req.ff_phase >= 0:  # before its blocks are hashed: its tail is the list in its phase
                del self.phases[req.ff_phase][id(req.table.exts[-1].ids)]
            self.context -= c
        d = c - req.num_computed
        req.num_computed = c
        req.total += d
        req.num_output += d
        req.last_token_time = self.now
        if self.keep:
            req.itls.extend(self.gaps[max(req.ff_from, 1) : upto])
        bs = self.bs
        req.capacity = -(-c // bs) * bs
        if self.caching:
            self.engine.cache_full_blocks(req, c)

    def _add(self, arrived: list[Request]) -> None:
        """Queue the requests that arrived (``Engine.add_request``)."""
        for req in arrived:
            self.engine.add_request(req)

    def close(self) -> None:
        """Hand on the last run of steps, bring the decoding requests up to date, set the gauges."""
        self.run_steps.flush(self.emit)
        g = self.g
        for req in self.engine.running:
            if req.ff_from < g:
                self._catch_up(req, req.ff_base + g, g)
        pre = self.pre
        if pre is not None and pre.num_computed >= pre.next_full:  # its full blocks into the prefix cache
            self.engine.cache_full_blocks(pre, pre.num_computed)
        if g:
            self.engine.decoding_only = self.pre is None
            self.engine.prefilling_last = self.pre is not None
            self.engine.set_gauges()


def _admission_fields(step_out: StepOutput, adm: Admission, out: Sampled) -> None:
    """A step's admission and first-token fields (the keywords of its ``StepOutput.build`` are the ones every step
    has).
    """
    if adm is not _NO_ADMISSION:
        step_out.prefix_queries = adm.prefix_queries
        step_out.prefix_hits = adm.prefix_hits
        step_out.external_queries = adm.external_queries
        step_out.external_hits = adm.external_hits
    if out is not _NOT_SAMPLED:
        step_out.prompt_tokens = out.prompt_tokens
        step_out.ttfts = out.ttfts
        step_out.prompt_cached = out.prompt_cached
        step_out.prompt_external = out.prompt_external
        step_out.preemptions_reported = out.preemptions_reported


class _Run:
    """Consecutive steps in which nothing arrives, is admitted or finishes: the same requests decode in each (and the
    same one prefills, with the same budget).
    """

    __slots__ = ("start", "end", "steps", "tokens", "scheduled", "num", "waiting", "usage", "itl_counts", "durations")

    def __init__(self) -> None:
        self.steps = 0
        self.start = self.end = self.usage = 0.0
        self.tokens = self.scheduled = self.num = self.waiting = 0
        self.itl_counts: list[tuple[float, int]] = []
        self.durations: list[float] = []

    def add(self, out: StepOutput, num: int) -> None:
        """One more step, ``out`` (``num`` decoding requests); the state after it."""
        if not self.steps:
            self.start = out.start
            self.itl_counts = []
            self.durations = []
        self.steps += 1
        self.end = out.start + out.duration
        self.tokens, self.scheduled, self.num = out.num_tokens, out.num_scheduled, num
        self.waiting, self.usage = out.waiting, out.kv_cache_usage
        self.itl_counts.extend(out.itl_counts)
        self.durations.append(out.duration)

    def add_steps(
        self,
        start: float,
        end: float,
        steps: int,
        tokens: int,
        scheduled: int,
        num: int,
        waiting: int,
        usage: float,
        itls: list[tuple[float, int]],
    ) -> None:
        """``steps`` more steps from ``start`` to ``end`` (s), each of ``tokens`` tokens for ``scheduled`` requests of
        which ``num`` decode, their gaps ``itls``; the state after them. Their durations are the caller's to add.
        """
        if self.steps:
            self.itl_counts += itls
        else:
            self.start = start
            self.itl_counts = itls
            self.durations = []
        self.steps += steps
        self.end, self.tokens, self.scheduled, self.num = end, tokens, scheduled, num
        self.waiting, self.usage = waiting, usage

    def flush(self, emit: Callable[[StepOutput], None]) -> None:
        """Hand the run on as one StepOutput (``num_steps`` steps) and start a new one."""
        if not self.steps:
            return
        emit(
            StepOutput.build(
                start=self.start,
                duration=self.end - self.start,
                num_tokens=self.tokens,
                num_scheduled=self.scheduled,
                generation_tokens=self.num * self.steps,
                running=self.scheduled,
                waiting=self.waiting,
                kv_cache_usage=self.usage,
                itl_counts=self.itl_counts,
                num_steps=self.steps,
                durations=self.durations,
            )
        )
        self.steps = 0
