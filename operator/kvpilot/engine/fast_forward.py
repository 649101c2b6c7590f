"""Fast-forward: many pure-decode steps of :class:`~kvpilot.engine.core.Engine` at once, identical to stepping.

A *pure-decode* step is one in which every running request is scheduled for exactly one token (its next output),
nothing is admitted, nothing is preempted, no request produces its first token and none finishes. From a state
where that holds, the next ``k`` steps are fully determined (``Scheduler.schedule`` in
``vllm/v1/core/sched/scheduler.py``, as :meth:`Engine.step` models it):

- each step schedules the same ``R`` requests one token each: ``num_tokens = R``, the context after step ``j``
  (0-based) is ``C + R (j + 1)`` with ``C`` the computed tokens before, attention pairs equal to the context, so
  its time is ``CostModel.step_time(R, C + R (j + 1), C + R (j + 1))``, added to the clock one step at a time
  (the same float additions as stepping);
- request ``i`` with ``c`` computed tokens and ``cap`` tokens of blocks needs a new block at step
  ``cap - c`` and every ``block_size`` steps after; a block fills (enters the prefix cache) at step
  ``next_full - c - 1`` and every ``block_size`` steps after. Step by step, request ``i`` at step ``j`` first
  allocates, then caches, in running order: :func:`decode_stretch` replays exactly those events in exactly that
  order (allocations that follow each other in one ``BlockPool.allocate`` call), so block ids, the free queue's
  order, the cached hashes and evictions are those of stepping;
- the stretch stops before the first step that would see an arrival (its start ``>= t_stop``), in which a request
  finishes, or whose allocations the free blocks would not cover (that step would preempt): those run as ordinary
  steps. Admission cannot happen inside a stretch when nothing waits, when ``max_num_seqs`` requests run, or when
  the running requests take the whole token budget; other states are not fast-forwarded.

The metrics sink gets one ``record_step`` per step, as stepping sends them (inter-token gaps grouped as
``(gap, count)``), and ``set_queue`` once with the state at the end (stepping sets the same gauges after every
step; only the last value is ever read). tests/unit/engine/test_fast_forward.py runs every scenario and the
reference tier's random workloads both ways and compares the exported metrics, the report and the pool.
"""

from __future__ import annotations

from kvpilot.engine.core import Engine, StepOutput, group_gaps
from kvpilot.engine.request import Request

__all__ = ["decode_stretch"]

_ALLOC, _CACHE = 0, 1


def decode_stretch(engine: Engine, t_stop: float, max_steps: int) -> StepOutput | None:
    """Run the pure-decode steps that come next (at most ``max_steps``) at once; None when there are none.

    Args:
        engine: the engine, between steps (arrivals due at ``engine.now`` already added).
        t_stop: simulated time (s) at which the next event outside the engine happens (the next arrival, the end
            of the run); a step starting at or after it is not taken.
        max_steps: at most this many steps (>= 1).

    Returns:
        one :class:`StepOutput` for the stretch: ``num_steps`` steps, ``start`` of the first, ``duration`` up to the
        end of the last, per-step ``num_tokens``/``num_scheduled``, ``generation_tokens`` and ``itl_counts`` over all
        of them, the state (running, waiting, KV usage) after the last; or None (nothing done) when the next step
        is not pure decode.
    """
    running = engine.running
    num = len(running)
    if not num or max_steps < 1 or not engine.decoding_only:
        return None
    cfg = engine.config
    budget = cfg.max_num_batched_tokens
    assert budget is not None and cfg.max_num_seqs is not None  # a resolved config
    if num > budget:
        return None
    if engine.waiting and num < cfg.max_num_seqs and num < budget:
        return None  # a waiting request might be admitted: step normally
    # the last step scheduled and sampled every running request (Engine.decoding_only): each is one token behind,
    # has its first token, its preemptions reported and its prompt chunks stored; the steps before the one
    # that finishes the first of them can go
    start = engine.now
    k = min(max_steps, min([req.max_output - req.num_output for req in running]) - 1)
    if k < 1:
        return None
    context = sum([req.num_computed for req in running])

    # the clock: step j starts at starts[j]; a step starting at or after t_stop is not taken
    step_time = engine.cost.step_time
    durations: list[float] = []
    now = start
    for j in range(k):
        if j and now >= t_stop:
            k = j
            break
        ctx = context + num * (j + 1)
        dt = step_time(num, ctx, ctx)
        durations.append(dt)
        now += dt

    # block events in stepping order (step, running position, allocate before cache), cut where the pool runs out
    bs = engine.block_size
    events: list[tuple[int, int, int]] = []
    for i, req in enumerate(running):
        c = req.num_computed
        first = req.capacity - c
        if first < k:
            events.extend([(j, i, _ALLOC) for j in range(first, k, bs)])
        first = req.next_full - c - 1
        if first < k:
            events.extend([(j, i, _CACHE) for j in range(first, k, bs)])
    if events:
        events.sort()
        pool = engine.pool
        free = pool.num_free
        allocs = 0
        for n, (j, _, kind) in enumerate(events):
            if kind == _ALLOC:
                allocs += 1
                if allocs > free:  # step j would preempt: stop before it
                    k = j
                    del events[n:]
                    while events and events[-1][0] >= k:
                        events.pop()
                    break
        if k < 1:
            return None
        _apply_block_events(engine, events)
    del durations[k:]

    # the clock and the per-request state after k steps
    now = start
    busy = engine.busy_time
    ends = []
    for dt in durations:
        now += dt
        busy += dt
        ends.append(now)
    engine.now = now
    engine.busy_time = busy
    gaps = [ends[j] - ends[j - 1] for j in range(1, k)]
    common0 = ends[0] - start
    num_common0 = 0
    others0: list[float] = []
    track = engine._track_itls
    keep = engine.keep_finished and track
    for req in running:
        last = req.last_token_time
        if track:
            if last == start:
                num_common0 += 1
                gap0 = common0
            else:
                gap0 = ends[0] - last
                others0.append(gap0)
            if keep:
                req.itls.append(gap0)
                req.itls.extend(gaps)
        req.num_computed += k
        req.total += k
        req.num_output += k
        req.last_token_time = now
    engine.num_steps += k
    engine.generation_tokens += num * k

    itl_counts = group_gaps(common0, num_common0, others0) if track else []
    metrics = engine.metrics
    if metrics is not None:
        for step_itls in (itl_counts, *(((gap, num),) if track else () for gap in gaps)):
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
                itl_counts=step_itls,
            )
    all_itls = itl_counts + [(gap, num) for gap in gaps] if track else []
    usage = engine.pool.usage()
    waiting = len(engine.waiting)
    if metrics is not None:
        metrics.set_queue(
            running=num, waiting=waiting, waiting_capacity=waiting, waiting_deferred=0, kv_cache_usage=usage
        )
    return StepOutput(
        start,
        now - start,
        num,
        num,
        0,
        num * k,
        0,
        0,
        0,
        0,
        0,
        num,
        waiting,
        usage,
        itl_counts=all_itls,
        num_steps=k,
    )


def _apply_block_events(engine: Engine, events: list[tuple[int, int, int]]) -> None:
    """Allocate and cache as stepping would, in ``events``' order (consecutive allocations in one call)."""
    running = engine.running
    pool = engine.pool
    bs = engine.block_size
    n = len(events)
    e = 0
    while e < n:
        j, i, kind = events[e]
        if kind == _ALLOC:
            run_end = e + 1
            while run_end < n and events[run_end][2] == _ALLOC:
                run_end += 1
            blocks = pool.allocate(run_end - e)
            for b, (_, i2, _) in zip(blocks, events[e:run_end], strict=True):
                req: Request = running[i2]
                req.blocks.append(b)
                req.capacity += bs
            e = run_end
            continue
        req = running[i]
        engine._cache_full_blocks(req, req.num_computed + j + 1)
        e += 1
