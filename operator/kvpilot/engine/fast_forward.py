"""Fast-forward: runs of decode steps of :class:`~kvpilot.engine.core.Engine` whose cost does not grow with the
number of running requests, identical to stepping one by one.

From a state where every running request is one token behind (the last step scheduled and sampled all of them:
``Engine.decoding_only``), each following step of ``Scheduler.schedule`` (``vllm/v1/core/sched/scheduler.py``, as
:meth:`Engine.step` models it) schedules every running request for exactly one token, in running order, as long as
their number fits the token budget and no allocation runs out of free blocks (that step would preempt). What such
a step does to a request is known in advance, so a request is not visited each step; it is visited only when it
needs attention:

- its *computed tokens* are ``ff_base + g`` before stretch step ``g`` (one global step counter instead of a
  per-request update); the sum over the running requests, the cost model's context, is kept incrementally
  (``CostModel.step_time(num_tokens, context, pairs)`` with ``pairs == context`` for one-token decodes);
- a *calendar* (``dict`` step -> events) holds, per request, the step of its next block allocation
  (``capacity - computed`` steps ahead, then every ``block_size``), of its next block becoming full (it enters the
  prefix cache: ``next_full - computed - 1`` steps ahead, then every ``block_size``) and of its finish
  (``max_output - num_output - 1`` steps ahead). A step's events are handled in running order (``ff_seq``), the
  allocation before the caching of one request, as the scheduling loop does them; consecutive allocations are
  one ``BlockPool.allocate`` call (taking ``n`` blocks at once from the front of the free queue is taking them one
  by one), so block ids, free-queue order, hashes and evictions are those of stepping (``BlockPool.get_new_blocks``
  and ``cache_full_blocks`` in vllm/v1/core/block_pool.py);
- finished requests leave after the forward in scheduled order and free their blocks tail first
  (``Engine._finish``: ``free_blocks`` in vllm/v1/core/single_type_kv_cache_manager.py), as stepping does;
- arrivals are taken at each step's start (``Workload.pop_arrivals``, as :meth:`Engine.run` does) and waiting
  requests are admitted by the same code as :meth:`Engine.step` (``Engine._admit``) with the budget the decodes
  leave; an admitted request whose whole prompt is scheduled samples its first token in that step and decodes from
  the next one on.

The run stops before a step that starts at or after ``until``, that would exceed ``max_steps``, that finds nothing
running, whose decodes exceed the budget or whose allocations exceed the free blocks (it would preempt), or, with a
CPU tier, that would try an admission; and after a step that admits a request only partly (a chunked prefill goes
on in the next step). :meth:`Engine.step` takes it from there.

What callers see is what stepping gives: the metrics sink gets the same ``record_request`` / ``record_step`` calls
in the same order (inter-token gaps grouped as ``(gap, count)``), ``set_queue`` once with the state at the end
(stepping sets the same gauges after each step; only the last value is ever read); ``on_step`` gets one
:class:`~kvpilot.engine.core.StepOutput` per step in which something arrives, is admitted or finishes, and one for
each run of steps between them (``num_steps`` > 1; running, waiting constant and KV usage not decreasing inside such
a run, so its end state holds its peaks); ``Workload.on_finish`` is called at the end of the step a request
finishes in. A running request's progress fields (``num_computed``, ``num_output``, ``last_token_time``, ``itls``)
are brought up to date when it finishes and when the run ends, not in between.
tests/unit/engine/test_fast_forward.py runs every scenario and the reference tier's random workloads both ways and
compares the exported metrics, the report, every request's timings and the whole block pool.
"""

from __future__ import annotations

from collections.abc import Callable
from heapq import heappop, heappush

from kvpilot.engine.core import Engine, StepOutput, Workload, group_gaps
from kvpilot.engine.request import Request

__all__ = ["decode_run"]

_ALLOC, _CACHE, _FINISH = 0, 1, 2
_INF = float("inf")


class _Calendar:
    """Events by stretch step: ``events`` maps a step to ``[(ff_seq, kind, request)]``; ``steps`` is a heap of the
    steps that have some (the next one is ``steps[0]``, so steps without events are taken in a tight loop).
    """

    __slots__ = ("events", "steps")

    def __init__(self) -> None:
        self.events: dict[int, list[tuple[int, int, Request]]] = {}
        self.steps: list[int] = []

    def add(self, step: int, seq: int, kind: int, req: Request) -> None:
        """Enter event ``kind`` of ``req`` (running order ``seq``) at ``step``."""
        events = self.events.get(step)
        if events is None:
            self.events[step] = [(seq, kind, req)]
            heappush(self.steps, step)
        else:
            events.append((seq, kind, req))

    def next_step(self, g: int) -> int | None:
        """The first step ``>= g`` with events, None when there is none."""
        steps = self.steps
        while steps and steps[0] < g:
            heappop(steps)
        return steps[0] if steps else None


def _plan(cal: _Calendar, req: Request, g: int, computed: int, block_size: int) -> None:
    """Enter ``req``'s next allocation, next full block and finish, counted from step ``g`` with ``computed`` before."""
    seq = req.ff_seq
    finish = g + req.max_output - req.num_output - 1
    req.ff_finish = finish
    step = g + req.capacity - computed  # the step whose token does not fit the blocks it has
    if step <= finish:
        cal.add(step, seq, _ALLOC, req)
    step = g + req.next_full - computed - 1  # the step whose token fills a block
    if step <= finish:
        cal.add(step, seq, _CACHE, req)
    cal.add(finish, seq, _FINISH, req)


def decode_run(
    engine: Engine,
    workload: Workload,
    until: float | None,
    max_steps: int,
    emit: Callable[[StepOutput], None],
) -> int:
    """Take the steps that come next while every running request decodes; return how many (0: none taken).

    Args:
        engine: the engine between steps, arrivals due at ``engine.now`` already added.
        workload: where arrivals come from (``pop_arrivals`` at each step's start).
        until: simulated time (s): a step starting at or after it is not taken (None: no limit).
        max_steps: at most this many steps.
        emit: called with each :class:`StepOutput` in order, as :meth:`Engine.run` hands them on (``on_finish``,
            ``on_step``).
    """
    running = engine.running
    if not running or max_steps < 1 or not engine.decoding_only:
        return 0
    cfg = engine.config
    budget = cfg.max_num_batched_tokens
    max_seqs = cfg.max_num_seqs
    assert budget is not None and max_seqs is not None  # a resolved config
    pool = engine.pool
    bs = engine.block_size
    waiting = engine.waiting
    metrics = engine.metrics
    track = engine._track_itls
    keep = engine.keep_finished and track
    step_time = engine.cost.step_time
    stop_at = _INF if until is None else until
    no_admission = engine.offload is not None  # the CPU tier's loads and stores are left to Engine.step

    cal = _Calendar()
    context = 0  # computed tokens of the decoding requests before the next step
    for i, req in enumerate(running):
        c = req.num_computed
        context += c
        req.ff_seq = i
        req.ff_base = c
        req.ff_from = 0
        _plan(cal, req, 0, c, bs)
    next_seq = num = len(running)  # num: the decoding requests
    gaps: list[float] = []  # each stretch step's gap (end - start), for the requests' own itls
    now = engine.now
    g = 0  # steps taken
    # a run of steps in which nothing arrives, is admitted or finishes: handed on as one StepOutput
    run = _Run()
    partial = False
    try:
        while g < max_steps and now < stop_at:
            if g and 0 < num <= budget and not (waiting and num < max_seqs and num < budget):
                # steps in which nothing can happen but decodes and their block allocations and full blocks, up to
                # the next finish, the next arrival, or an allocation the free blocks do not cover
                t_arrival = workload.next_arrival_time()
                t_stop = stop_at if t_arrival is None or t_arrival > stop_at else t_arrival
                nxt = cal.next_step(g)
                if now < t_stop and (nxt is None or nxt > g or _blocks_only(cal.events[g], pool.num_free)):
                    first = now
                    taken = 0
                    busy = engine.busy_time
                    itl_counts = run.itl_counts if run.steps else []
                    while g < max_steps and now < t_stop:
                        if nxt == g:
                            events = cal.events[g]
                            if len(events) == 1:  # the common case: one request's allocation or full block
                                kind = events[0][1]
                                if kind == _FINISH or (kind == _ALLOC and not pool.num_free):
                                    break
                            elif _blocks_only(events, pool.num_free):
                                events.sort()
                            else:
                                break
                            del cal.events[g]
                            _apply(engine, cal, events, g, [])
                            nxt = cal.next_step(g + 1)
                        start = now
                        ctx = context + num
                        dt = step_time(num, ctx, ctx)
                        now = start + dt
                        busy += dt
                        common = now - start
                        if keep:
                            gaps.append(common)
                        context = ctx
                        g += 1
                        taken += 1
                        if track:
                            itl_counts.append((common, num))
                        if metrics is not None:
                            metrics.record_step(
                                num_tokens=num,
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
                                itl_counts=((common, num),) if track else (),
                            )
                    engine.now = now
                    engine.busy_time = busy
                    engine.num_steps += taken
                    engine.generation_tokens += num * taken
                    if taken:
                        run.add_steps(first, now, taken, num, len(waiting), pool.usage(), itl_counts)
                        continue
            start = now
            arrived = workload.pop_arrivals(start) if g else []
            if not num or num > budget:
                _add(engine, arrived)
                break
            admit = bool(waiting or arrived) and num < max_seqs and num < budget
            events = cal.events.pop(g, [])
            allocs = finishes = 0
            if events:
                events.sort()
                for e in events:
                    if e[1] == _ALLOC:
                        allocs += 1
                    elif e[1] == _FINISH:
                        finishes += 1
            if arrived or admit or finishes:
                # the run so far is handed on before anything changes, so on_step sees the state after its last step
                run.flush(emit)
            _add(engine, arrived)
            if (admit and no_admission) or allocs > pool.num_free:  # left to Engine.step; the second would preempt
                break
            finished: list[Request] = []  # in scheduled order: decoding requests in running order, then admitted
            if events:
                _apply(engine, cal, events, g, finished)

            # admissions, with the budget the decodes leave (Engine.step's waiting loop)
            dec = num
            scheduled: list[Request] = []
            num_tokens = dec
            ctx = pairs = context + dec
            step_pq = step_ph = step_eq = step_eh = 0
            if admit:
                left, c2, p2, step_pq, step_ph, step_eq, step_eh, _ = engine._admit(budget - dec, start, scheduled)
                num_tokens += budget - dec - left
                ctx += c2
                pairs += p2
            dt = step_time(num_tokens, ctx, pairs)
            now = start + dt
            engine.now = now
            engine.busy_time += dt
            common = now - start
            if keep:
                gaps.append(common)

            # outputs: every decoding request samples, so does an admitted one whose prompt is all computed
            num_common = dec if track else 0
            others: list[float] = []
            if g == 0 and track:  # the first step: a request's previous token may be older than the step's start
                num_common = 0
                for req in running[:dec]:
                    last = req.last_token_time
                    if last == start:
                        num_common += 1
                        gap = common
                    else:
                        gap = now - last
                        others.append(gap)
                    if keep:
                        req.itls.append(gap)
            for req in finished:  # decoding requests finishing: brought up to date
                c = req.ff_base + g + 1
                d = c - req.num_computed
                req.num_computed = c
                req.total += d
                req.num_output += d
                req.last_token_time = now
                if keep:
                    req.itls.extend(gaps[max(req.ff_from, 1) : g + 1])
                context -= c
            context += dec
            complete = [r for r in scheduled if r.num_computed >= r.total]
            partial = len(complete) < len(scheduled)  # a chunked prefill: the next step is not all decodes
            gen, prompt_done, prompt_cached, prompt_external, reported, ttfts, adm_common, adm_others = engine._sample(
                complete, start, now, finished
            )
            gen += dec
            num_common += adm_common
            others += adm_others
            joined = [r for r in complete if r.num_output < r.max_output]
            for req in scheduled:
                req.ff_from = g + 1  # not decoding in this stretch before the next step
            for req in joined:
                req.ff_seq = next_seq
                next_seq += 1
                c = req.num_computed
                req.ff_base = c - g - 1
                _plan(cal, req, g + 1, c, bs)
                context += c
            if finished:
                for req in finished:  # in place: the running list keeps its order (Engine.step filters a copy)
                    running.remove(req)
                for req in finished:
                    engine._finish(req, now)
            num = len(running)
            itl_counts = group_gaps(common, num_common, others)
            engine.num_steps += 1
            engine.prefix_queries += step_pq
            engine.prefix_hits += step_ph
            engine.external_queries += step_eq
            engine.external_hits += step_eh
            engine.prompt_tokens += prompt_done
            engine.generation_tokens += gen
            if metrics is not None:
                metrics.record_step(
                    num_tokens=num_tokens,
                    prompt_tokens=prompt_done,
                    generation_tokens=gen,
                    preemptions=0,
                    prefix_queries=step_pq,
                    prefix_hits=step_ph,
                    external_queries=step_eq,
                    external_hits=step_eh,
                    prompt_cached=prompt_cached,
                    prompt_external=prompt_external,
                    preemptions_reported=reported,
                    ttfts=ttfts,
                    itl_counts=itl_counts,
                )
            g += 1
            if arrived or admit or finished:  # a step of its own
                step_out = StepOutput(
                    start,
                    dt,
                    num_tokens,
                    dec + len(scheduled),
                    prompt_done,
                    gen,
                    0,
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
                    itl_counts,
                )
                emit(step_out)
                if partial:
                    break
            else:
                run.add(start, now, dec, len(waiting), pool.usage(), itl_counts)
    finally:
        run.flush(emit)
        for req in engine.running:  # bring the decoding requests up to date
            if req.ff_from < g:
                c = req.ff_base + g
                d = c - req.num_computed
                if d:
                    req.num_computed = c
                    req.total += d
                    req.num_output += d
                    req.last_token_time = now
                    if keep:
                        req.itls.extend(gaps[max(req.ff_from, 1) : g])
        if g:
            engine.decoding_only = not partial
            if metrics is not None:
                w = len(waiting)
                metrics.set_queue(
                    running=len(engine.running),
                    waiting=w,
                    waiting_capacity=w,
                    waiting_deferred=0,
                    kv_cache_usage=pool.usage(),
                )
    return g


class _Run:
    """Consecutive steps in which nothing arrives, is admitted or finishes: the same requests decode in each."""

    __slots__ = ("start", "end", "steps", "num", "waiting", "usage", "itl_counts")

    def __init__(self) -> None:
        self.steps = 0
        self.start = self.end = self.usage = 0.0
        self.num = self.waiting = 0
        self.itl_counts: list[tuple[float, int]] = []

    def add(
        self, start: float, end: float, num: int, waiting: int, usage: float, itls: list[tuple[float, int]]
    ) -> None:
        """One more step from ``start`` to ``end`` (s) with ``num`` decoding requests; the state after it."""
        if not self.steps:
            self.start = start
            self.itl_counts = []
        self.steps += 1
        self.end, self.num, self.waiting, self.usage = end, num, waiting, usage
        self.itl_counts.extend(itls)

    def add_steps(
        self, start: float, end: float, steps: int, num: int, waiting: int, usage: float, itls: list[tuple[float, int]]
    ) -> None:
        """``steps`` more steps from ``start`` to ``end`` (s); ``itls``: the run's gaps so far with theirs added."""
        if not self.steps:
            self.start = start
        self.itl_counts = itls
        self.steps += steps
        self.end, self.num, self.waiting, self.usage = end, num, waiting, usage

    def flush(self, emit: Callable[[StepOutput], None]) -> None:
        """Hand the run on as one StepOutput (``num_steps`` steps) and start a new one."""
        if not self.steps:
            return
        n = self.num
        emit(
            StepOutput(
                self.start,
                self.end - self.start,
                n,
                n,
                0,
                n * self.steps,
                0,
                0,
                0,
                0,
                0,
                n,
                self.waiting,
                self.usage,
                itl_counts=self.itl_counts,
                num_steps=self.steps,
            )
        )
        self.steps = 0


def _blocks_only(events: list[tuple[int, int, Request]], num_free: int) -> bool:
    """A step's events are allocations and full blocks only, and the free blocks cover the allocations."""
    allocs = 0
    for e in events:
        if e[1] == _FINISH:
            return False
        allocs += e[1] == _ALLOC
    return allocs <= num_free


def _add(engine: Engine, arrived: list[Request]) -> None:
    """Queue the requests that arrived (``Engine.add_request``)."""
    for req in arrived:
        engine.add_request(req)


def _apply(
    engine: Engine, cal: _Calendar, events: list[tuple[int, int, Request]], g: int, finished: list[Request]
) -> None:
    """Step ``g``'s allocations and full blocks in running order (consecutive allocations in one call); the
    requests finishing in it appended to ``finished``; each request's next allocation and full block entered.
    """
    pool = engine.pool
    bs = engine.block_size
    nxt = g + bs
    n = len(events)
    e = 0
    while e < n:
        _, kind, req = events[e]
        if kind == _ALLOC:
            end = e + 1
            while end < n and events[end][1] == _ALLOC:
                end += 1
            for b, (seq, _, r) in zip(pool.allocate(end - e), events[e:end], strict=True):
                r.blocks.append(b)
                r.capacity += bs
                if nxt <= r.ff_finish:
                    cal.add(nxt, seq, _ALLOC, r)
            e = end
            continue
        if kind == _CACHE:  # Engine._cache_full_blocks for the one block this token fills
            k = req.num_cached_blocks  # next_full == (k + 1) * block_size is the token count reached now
            hashes = req.block_hashes
            pool.cache_block(req.blocks[k], hashes[k] if k < len(hashes) else req.ensure_hashes(k + 1, bs)[k])
            req.num_cached_blocks = k + 1
            req.next_full += bs
            if nxt <= req.ff_finish:
                cal.add(nxt, req.ff_seq, _CACHE, req)
        else:
            finished.append(req)
        e += 1
