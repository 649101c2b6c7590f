"""Run a fitted workload through the engine model and measure the window as vLLM's metrics would show it.

The simulated timeline (seconds of the engine's clock):

1. **warm-up** ``[0, T0)``: when the window started with requests running, arrivals at the rate the window
   served (never above its arrival rate) for three request lifetimes (Little's law: running / served per
   second), at least 5 s and at most half the window, so the window starts with a running set, not with an
   empty server prefilling everything at once; none when nothing ran at the window's start;
2. **the window's queue** at ``T0``: as many requests as wait then (the window's start less what the warm-up
   left waiting), arrived before ``T0`` at the window's arrival rate (FCFS: the waiting requests are the
   latest arrivals), so their queue time counts from then;
3. **the window** ``[T0, T0 + w]``: each scrape interval's number of arrivals (``WorkloadFit.profile``) at uniformly
   drawn times inside it (``seed``; a Poisson process given its counts), prompts and outputs drawn from the
   fitted lengths, each starting with the shared prefix.

Measured over the window only, the way ``kvpilot.diagnose.signals`` reads vLLM's (``prediction`` module):
counters as the engine's metrics sink receives them, gauges sampled at the window's scrape interval
(``set_queue``'s state after the step that crosses each scrape, as the reference driver snapshots vLLM),
the binding limit from each step: with requests waiting after it, what stopped the head of the queue in
``Scheduler.schedule`` (``vllm/v1/core/sched/scheduler.py``, vLLM 0.29.0): a preemption in the step (no
admission then: ``kv_cache``), the token budget used up (``token_budget``), ``max_num_seqs`` requests running
(``max_num_seqs``), else the KV cache (``allocate_slots`` found no room: ``kv_cache``), weighted by the step's
duration. The binding limit is the one that refused it over most of the time requests waited, ``none`` when
they waited less than half the window (ties in the order max_num_seqs, token_budget, kv_cache, lora).

The requests are created as the engine reaches them (``_Arrivals``): the window's queue is a count of which the
engine holds only the head its scheduler can look at (``kvpilot.advice.limits.released_ahead``), so a replay holds
what the engine schedules, not what waits, with the same results as a queue built whole.

Pure (the engine model and arithmetic); the only clock read is the wall-clock deadline, checked between
chunks of simulated time.
"""

from __future__ import annotations

import random
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from functools import reduce
from itertools import accumulate
from operator import add, sub

from kvpilot.advice.fit import WorkloadFit
from kvpilot.advice.limits import released_ahead, replay_size_problem
from kvpilot.advice.prediction import queue_grows
from kvpilot.diagnose.model import BINDING_LIMITS, QUEUE_LIMITS, BindingLimit, Prediction
from kvpilot.engine.config import EngineConfig
from kvpilot.engine.core import Engine, StepOutput
from kvpilot.engine.request import Request
from kvpilot.vllm.defaults import BatchLimits

#: warm-up bounds (s) and its length in request lifetimes (module docstring)
WARMUP_LIFETIMES, WARMUP_MIN_S = 3.0, 5.0
#: chunks of simulated time between two looks at the wall clock
CHUNKS = 20
#: KV blocks a simulation holds at most: the engine model keeps every free block id (about 50 bytes a block),
#: so 2**22 blocks (67 million tokens at 16 a block, beyond any one vLLM engine's cache) is about 200 MiB
MAX_SIMULATED_BLOCKS = 2**22


_INF = float("inf")


class BudgetExceededError(RuntimeError):
    """The wall-clock budget of the predictions ran out during a simulation."""


@dataclass
class SimResult:
    """One simulation of the window.

    Attributes:
        prediction: the window as measured (module docstring).
        itl_mean_s: mean inter-token gap (s), the step time vLLM's ``inter_token_latency_seconds`` shows.
        arrivals: requests that arrived in the window (all replicas).
        steps: engine steps taken in the window (one replica).
        simulated_s: engine seconds simulated (warm-up included); ``wall_s`` / ``cpu_s`` what it cost.
    """

    prediction: Prediction
    itl_mean_s: float | None
    arrivals: int
    steps: int
    simulated_s: float
    wall_s: float
    cpu_s: float


class _Arrivals:
    """The :class:`~kvpilot.engine.core.Workload` of one simulation (module docstring's timeline), streamed: requests
    are created as the engine reaches them, so what a replay holds does not grow with the requests it serves or the
    queue it starts with (``kvpilot.advice.limits``).

    Requests are released to the engine at their ``release`` time; the window's queue is released at ``t0`` with
    arrival times before it. The window's arrivals are each stretch of its profile's own count at uniformly drawn
    times inside the stretch (a Poisson process given its counts; without a profile ``arrivals`` over the whole
    window), drawn one stretch at a time; with ``every`` > 1 (one replica of ``every``) it takes every ``every``-th
    of them, as a round-robin load balancer sends them.

    The queue is FCFS: while more than ``ahead`` requests wait, the engine holds the first ``ahead``
    (:func:`kvpilot.advice.limits.released_ahead`: more than any step admits) and the rest are held here, the window's
    queue as a count and what arrives behind it as arrival times, released in order as the engine's queue shrinks
    (at each step's start, ``pop_arrivals``); ``held_at(t)`` is how many were held after the release at ``t``.

    The times are drawn with a generator of their own and the requests' lengths with one seeded alike and moved past
    the times' draws first, so every request gets the times and lengths it would get with everything drawn up front.
    """

    def __init__(
        self,
        fit: WorkloadFit,
        seed: int,
        *,
        t0: float,
        warmup_rate: float,
        arrivals: int,
        every: int,
        backlog: float,
        caching: bool,
        max_model_len: int,
        ahead: int,
    ) -> None:
        self.fit, self.t0 = fit, t0
        self.end = t0 + fit.window_seconds
        self.rate = arrivals / fit.window_seconds
        self.backlog = backlog
        self.caching = caching
        self.max_model_len = max_model_len
        self.ahead = ahead
        self.engine: Engine | None = None
        self.released_backlog = False
        self.arrived_in_window = 0
        self._n = 0
        stretches = fit.profile or ((0.0, fit.window_seconds, arrivals),)
        self._times = _arrival_times(random.Random(seed), t0, warmup_rate, stretches, every)
        self.rng = random.Random(seed)
        for _ in range(_warmup_draws(random.Random(seed), t0, warmup_rate) + sum(n for _, _, n in stretches)):
            self.rng.random()  # past the times' draws: the lengths' draws come after them, as drawn up front
        self._next: float | None = next(self._times, None)
        self._backlog_left = 0  # the window's queue not released yet (a count)
        self._backlog_n = 0
        self._gap = 0.0
        self._held: deque[float] = deque()  # arrival times behind it
        self.held_log: deque[tuple[float, int]] = deque([(-_INF, 0)])  # (release time, held after it)

    def _request(self, arrival: float) -> Request:
        fit = self.fit
        prompt = min(fit.prompt.sample(self.rng), self.max_model_len - 1)
        output = max(1, min(fit.output.sample(self.rng), self.max_model_len - prompt))
        rid = f"r{self._n}"
        self._n += 1
        shared = min(fit.shared_prefix_tokens, prompt - 1) if self.caching else 0
        segments = (("shared-prefix", shared), (rid, prompt - shared)) if shared > 0 else None
        return Request(rid, prompt, output, arrival_time=arrival, segments=segments)

    @property
    def held(self) -> int:
        """Requests waiting behind the engine's queue: the window's queue not released yet and what arrived after it."""
        return self._backlog_left + len(self._held)

    def held_at(self, t: float) -> int:
        """Requests held after the last release at or before ``t`` (s); ``t`` never decreases between calls."""
        log = self.held_log
        while len(log) > 1 and log[1][0] <= t:
            log.popleft()
        return log[0][1]

    def next_arrival_time(self) -> float | None:
        """The next release time (the window's queue at ``t0``), None when nothing is left."""
        if not self.released_backlog and self.backlog > 0:
            return self.t0 if self._next is None else min(self.t0, self._next)
        return self._next

    def pop_arrivals(self, now: float) -> list[Request]:
        """Requests released by ``now`` (s): those due, in arrival order, as long as the engine's queue holds no more
        than ``ahead``; the others wait here.
        """
        out: list[Request] = []
        self._due(now, out)
        if not self.released_backlog and now >= self.t0:
            self.released_backlog = True
            waiting = self.engine.num_waiting if self.engine is not None else 0
            n = max(0, round(self.backlog) - waiting)
            self._backlog_left = self._backlog_n = n
            self._gap = 1.0 / self.rate if self.rate > 0 else 0.0
            self._due(now, out)
        if self.held:
            room = self.ahead - len(out) - (self.engine.num_waiting if self.engine is not None else 0)
            while room > 0 and self.held:
                out.append(self._release())
                room -= 1
        held = self.held
        if held != self.held_log[-1][1]:
            self.held_log.append((now, held))
        return out

    def _due(self, now: float, out: list[Request]) -> None:
        """Take the arrivals due by ``now``: into ``out``, or held behind the window's queue while it is."""
        while self._next is not None and self._next <= now and (self._next < self.t0 or self.released_backlog):
            t = self._next
            if self.held:
                self._held.append(t)
            else:
                out.append(self._request(t))
            if t >= self.t0:
                self.arrived_in_window += 1
            self._next = next(self._times, None)

    def _release(self) -> Request:
        """The first held request: FCFS, the oldest of the window's queue first (they arrived before ``t0``, one every
        ``1/rate`` seconds), then what arrived after it.
        """
        if self._backlog_left:
            i = self._backlog_n - self._backlog_left
            self._backlog_left -= 1
            return self._request(self.t0 - (self._backlog_n - i) * self._gap)
        return self._request(self._held.popleft())

    def on_finish(self, request: Request, now: float) -> None:
        """Open loop: nothing to do."""

    def done(self) -> bool:
        """No request left to release."""
        return self._next is None and (self.released_backlog or self.backlog <= 0) and not self.held


def _warmup_draws(rng: random.Random, t0: float, rate: float) -> int:
    """How many draws the warm-up's arrival times take of ``rng`` (:func:`_arrival_times`), the last one past ``t0``."""
    draws, t = 0, 0.0
    while rate > 0:
        t += rng.expovariate(rate)
        draws += 1
        if t >= t0:
            break
    return draws


def _arrival_times(
    rng: random.Random, t0: float, warmup_rate: float, stretches: Sequence[tuple[float, float, int]], every: int
) -> Iterator[float]:
    """The arrival times in order (s): the warm-up's (a Poisson process at ``warmup_rate`` before ``t0``), then each
    stretch's ``(from, to, count)`` at uniform times inside it, one stretch drawn at a time (the stretches follow one
    another, so sorting each sorts them all), every ``every``-th of the window's.
    """
    t = 0.0
    while warmup_rate > 0:
        t += rng.expovariate(warmup_rate)
        if t >= t0:
            break
        yield t
    i = 0
    for a, b, n in stretches:
        start, span = t0 + a, b - a
        times = sorted([start + rng.random() * span for _ in range(n)])
        first = -i % every
        i += n
        yield from times[first::every]


def _none_held(_t: float) -> int:
    return 0


@dataclass
class _Window:
    """What the window's steps and requests add up to: the engine's ``on_step`` observer (no metrics sink: every
    counter the sink's ``record_step`` / ``record_request`` would get is on the step's :class:`StepOutput`, one
    call a step instead of three).

    ``t0`` / ``end``: the window on the engine's clock; ``interval``: seconds between scrapes; ``held``: the requests
    waiting behind the engine's queue after the release at a time (``_Arrivals.held_at``), which its waiting gauge
    counts too.
    """

    config: EngineConfig
    t0: float
    end: float
    interval: float
    active: bool = False
    finished: int = 0
    prompt_tokens: int = 0
    generation_tokens: int = 0
    preemptions: int = 0
    queue_time_sum: float = 0.0
    ttft_sum: float = 0.0
    ttft_count: int = 0
    itl_sum: float = 0.0
    itl_count: int = 0
    steps: int = 0
    shares: dict[BindingLimit, float] = field(default_factory=lambda: dict.fromkeys(BINDING_LIMITS, 0.0))
    samples: list[tuple[float, int, int, float]] = field(default_factory=list)  # (t, running, waiting, kv)
    next_sample: float = 0.0
    held: Callable[[float], int] = _none_held
    limits: BatchLimits = field(init=False)  # the config's, resolved once (every step's refusal reads them)

    def __post_init__(self) -> None:
        self.limits = self.config.batch_limits()

    def sample(self, now: float, state: tuple[int, int, float]) -> None:
        """The gauges ``(running, waiting, KV usage)`` at every scrape up to ``now`` not taken yet."""
        while self.next_sample <= now + 1e-9 and self.next_sample <= self.end + 1e-9:
            self.samples.append((self.next_sample, *state))
            self.next_sample += self.interval

    def _count(self, out: StepOutput, now: float) -> None:
        """A step's counters as vLLM counts them (``vllm:prompt_tokens``, ``generation_tokens``,
        ``num_preemptions``, TTFT and inter-token histograms) and its finished requests (``request_success``,
        ``request_queue_time_seconds``: scheduled - arrived), as the engine's exporter gets them.
        """
        if out.num_scheduled or out.preemptions:
            self.steps += out.num_steps
            self.prompt_tokens += out.prompt_tokens
            self.generation_tokens += out.generation_tokens
            self.preemptions += out.preemptions_reported
            if out.ttfts:
                self.ttft_sum += sum(out.ttfts)
                self.ttft_count += len(out.ttfts)
            for gap, n in out.itl_counts:
                self.itl_sum += gap * n
                self.itl_count += n
        for req in out.finished:
            self.finished += 1
            sched = req.scheduled_time
            self.queue_time_sum += (sched if sched is not None else now) - req.arrival_time

    def on_step(self, engine: Engine, out: StepOutput | None) -> None:
        """Count the step, sample the gauges at each scrape it passed; count the binding limit over its duration."""
        if out is None:
            if engine.now >= self.next_sample - 1e-9:
                waiting = engine.num_waiting + self.held(engine.now)
                self.sample(engine.now, (engine.num_running, waiting, engine.kv_cache_usage))
            return
        if engine.now >= self.next_sample - 1e-9:  # the state after the last step, whose start released last
            last = reduce(add, out.durations[:-1], out.start)  # its start as the engine added it up
            self.sample(engine.now, (out.running, out.waiting + self.held(last), out.kv_cache_usage))
        if not self.active:
            return
        self._count(out, engine.now)
        if out.duration <= 0:
            return
        self._share(refusal(out, self.limits), out)

    def _share(self, key: BindingLimit, out: StepOutput) -> None:
        """Add the part of ``out``'s duration inside the window to the binding limit ``key``; a fast-forwarded run
        step by step, the same sums as stepping one by one (its steps' starts as the engine added them up, each
        step's share added in turn).
        """
        t0, end = self.t0, self.end
        if not out.durations:
            start, stop = max(out.start, t0), min(out.start + out.duration, end)
            if stop > start:
                self.shares[key] += stop - start
            return
        starts = list(accumulate(out.durations, initial=out.start))
        if starts[0] >= t0 and starts[-1] <= end:  # inside the window: each step's share is its whole duration
            self.shares[key] = reduce(add, map(sub, starts[1:], starts), self.shares[key])
            return
        share = self.shares[key]
        for t, nxt in zip(starts, starts[1:], strict=False):
            start, stop = max(t, t0), min(nxt, end)
            if stop > start:
                share += stop - start
        self.shares[key] = share


def refusal(out: StepOutput, limits: BatchLimits) -> BindingLimit:
    """Why the head of the waiting queue was not admitted in the step ``out`` (module docstring), or ``none``;
    ``limits``: the engine's (``EngineConfig.batch_limits``).
    """
    if out.waiting == 0:
        return "none"
    if out.preemptions:
        return "kv_cache"
    if out.num_tokens >= limits.max_num_batched_tokens:
        return "token_budget"
    if out.running + len(out.finished) >= limits.max_num_seqs:
        return "max_num_seqs"
    return "kv_cache"


def warmup_seconds(fit: WorkloadFit) -> float:
    """Length of the warm-up (module docstring), 0 when nothing ran at the window's start."""
    if fit.running_start < 0.5:
        return 0.0
    lifetime = fit.running_start / fit.served_rate if fit.served_rate > 0 else fit.window_seconds
    return min(fit.window_seconds / 2, max(WARMUP_MIN_S, WARMUP_LIFETIMES * lifetime))


def simulate(
    config: EngineConfig,
    fit: WorkloadFit,
    *,
    replicas: int = 1,
    seed: int = 0,
    deadline: float | None = None,
    fast_forward: bool = True,
) -> SimResult:
    """The window of ``fit`` on a server with ``config`` (module docstring), split over ``replicas``.

    ``fast_forward``: the engine's (``Engine(fast_forward=...)``); the same result either way (a fast-forwarded run
    of steps is counted step by step, and the engine's runs end with the step that reaches each scrape).

    With ``replicas`` > 1 each replica gets every ``replicas``-th arrival (round robin), ``1/replicas`` of the queue
    and of the running set; one replica is simulated and its rates multiplied.
    ``mean_running``, ``mean_waiting`` and ``max_kv_usage`` are then per replica, rates and the queue's trend
    for all of them.

    Raises:
        BudgetExceededError: ``time.monotonic()`` passed ``deadline``.
        ValueError: ``config`` is not one vLLM would start with (``EngineConfig.validate``), or the window asks for
            more requests than a replay serves or accepts waiting (:func:`kvpilot.advice.limits.replay_size_problem`).
    """
    blocks = config.resolved_num_gpu_blocks()
    if blocks > MAX_SIMULATED_BLOCKS:
        raise ValueError(
            f"a KV cache of {blocks:,} blocks is more than the engine model simulates ({MAX_SIMULATED_BLOCKS:,})"
        )
    wall0, cpu0 = time.monotonic(), time.process_time()
    scaled = _per_replica(fit, replicas)
    t0 = warmup_seconds(scaled)
    too_large = replay_size_problem(
        scaled.waiting_start, min(scaled.served_rate, scaled.arrival_rate) * t0, fit.arrivals / max(1, replicas)
    )
    if too_large is not None:  # before any request is built (advice/limits.py)
        raise ValueError(too_large)
    batch = config.batch_limits()
    arrivals = _Arrivals(
        scaled,
        seed,
        t0=t0,
        warmup_rate=min(scaled.served_rate, scaled.arrival_rate),
        arrivals=round(fit.arrivals),
        every=max(1, replicas),
        backlog=scaled.waiting_start,
        caching=config.enable_prefix_caching,
        max_model_len=config.max_model_len,
        ahead=released_ahead(batch.max_num_seqs, batch.max_num_batched_tokens),
    )
    end = t0 + fit.window_seconds
    window = _Window(config.resolved(), t0, end, fit.sample_interval, next_sample=t0, held=arrivals.held_at)
    engine = Engine(config, keep_finished=False, track_itls=True, fast_forward=fast_forward)
    arrivals.engine = engine
    if t0 > 0:
        window.next_sample = _INF  # the window's first scrape comes at t0, once its queue is in
        _run(engine, arrivals, window, t0, deadline)
        _queue_window_start(engine, arrivals, window, t0)
    else:  # the window starts with the server as it was: its queue waiting, nothing running yet
        window.sample(0.0, (0, round(scaled.waiting_start), 0.0))
    window.active = True
    _run(engine, arrivals, window, end, deadline)
    waiting = engine.num_waiting + arrivals.held_at(engine.now)
    window.sample(end, (engine.num_running, waiting, engine.kv_cache_usage))  # scrapes after the last step
    prediction = _prediction(window, fit, replicas, arrivals.arrived_in_window)
    return SimResult(
        prediction=prediction,
        itl_mean_s=window.itl_sum / window.itl_count if window.itl_count else None,
        arrivals=arrivals.arrived_in_window * replicas,
        steps=window.steps,
        simulated_s=engine.now,
        wall_s=time.monotonic() - wall0,
        cpu_s=time.process_time() - cpu0,
    )


def _queue_window_start(engine: Engine, arrivals: _Arrivals, window: _Window, t0: float) -> None:
    """After the warm-up (the engine at or just past ``t0``): the window's queue at its start (the backlog, released
    at ``t0``) and what arrived since join the engine, as its next step would take them, and the window's first
    scrape reads them: vLLM's waiting gauge at the window's start counts that queue.
    """
    for req in arrivals.pop_arrivals(engine.now):
        engine.add_request(req)
    window.next_sample = t0
    waiting = engine.num_waiting + arrivals.held_at(engine.now)
    window.sample(engine.now, (engine.num_running, waiting, engine.kv_cache_usage))


def _run(engine: Engine, arrivals: _Arrivals, window: _Window, until: float, deadline: float | None) -> None:
    chunk = max(1.0, window.interval, (until - engine.now) / CHUNKS)
    while engine.now < until:
        if deadline is not None and time.monotonic() > deadline:
            raise BudgetExceededError("the predictions' time budget ran out")
        stop = min(until, engine.now + chunk)
        scrape = window.next_sample - 1e-9  # the run ends with the step that reaches the next scrape, whose state
        if engine.now < scrape < stop:  # it samples (a fast-forwarded run's state is that after its last step)
            stop = scrape
        engine.run(arrivals, until=stop, on_step=window.on_step, tick=window.interval)
        if arrivals.done() and engine.is_idle():
            engine.advance_to(until)
            window.on_step(engine, None)
            break


def _per_replica(fit: WorkloadFit, replicas: int) -> WorkloadFit:
    if replicas <= 1:
        return fit
    from dataclasses import replace

    return replace(
        fit,
        arrival_rate=fit.arrival_rate / replicas,
        arrivals=fit.arrivals / replicas,
        served_rate=fit.served_rate / replicas,
        running_start=fit.running_start / replicas,
        waiting_start=fit.waiting_start / replicas,
    )


def _trend(samples: list[tuple[float, int, int, float]]) -> float | None:
    """Least-squares slope of the waiting samples (requests/s), PromQL ``deriv``."""
    if len(samples) < 2:
        return None
    ts = [s[0] for s in samples]
    ws = [float(s[2]) for s in samples]
    t_mean, w_mean = sum(ts) / len(ts), sum(ws) / len(ws)
    sxx = sum((t - t_mean) ** 2 for t in ts)
    if sxx <= 0:
        return None
    return sum((t - t_mean) * (w - w_mean) for t, w in zip(ts, ws, strict=True)) / sxx


def _prediction(window: _Window, fit: WorkloadFit, replicas: int, arrived: int) -> Prediction:
    w = fit.window_seconds
    samples = window.samples
    queued: dict[BindingLimit, float] = {k: v for k, v in window.shares.items() if k != "none"}
    total = sum(queued.values())
    binding: BindingLimit = "none"
    if total >= w / 2:  # requests waited at least half the window (idle time has no queue)
        binding = max(QUEUE_LIMITS, key=lambda k: (queued[k], -QUEUE_LIMITS.index(k)))
    trend = _trend(samples)
    trend_all = trend * replicas if trend is not None else None
    return Prediction(
        requests_finished_per_s=window.finished * replicas / w,
        prompt_tokens_per_s=window.prompt_tokens * replicas / w,
        generation_tokens_per_s=window.generation_tokens * replicas / w,
        queue_time_mean_s=window.queue_time_sum / window.finished if window.finished else None,
        ttft_mean_s=window.ttft_sum / window.ttft_count if window.ttft_count else None,
        mean_running=sum(s[1] for s in samples) / len(samples) if samples else None,
        max_kv_usage=max(s[3] for s in samples) if samples else None,
        preemptions_per_s=window.preemptions * replicas / w,
        binding_limit=binding,
        mean_waiting=sum(s[2] for s in samples) / len(samples) if samples else None,
        waiting_trend_per_s=trend_all,
        queue_growing=queue_grows(trend_all, w, arrived * replicas),
        binding_shares={k: v / w for k, v in queued.items() if v > 0},
    )
