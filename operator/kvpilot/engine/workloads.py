"""Workloads: where requests come from, with seeded randomness and a guaranteed end.

- :class:`OpenLoop` — requests at fixed arrival times (Poisson, traces): arrivals do not depend
  on the server.
- :class:`ClosedLoop` — ``concurrency`` clients, each sending its next request when the previous
  one finishes (``think_time`` later): the §9 "one at a time" experiment is concurrency 1.
- :func:`poisson` — Poisson arrivals (exponential gaps, ``random.Random(seed)``), prompt/output
  length distributions (:class:`LengthSampler`), optional shared-prefix groups.
- :func:`document_scan` — docs/background.md §9: N documents, no shared prefixes, sent in order, again
  in order, then reversed.
- :func:`trace_requests` — a JSON Lines trace read for :func:`from_dict` (fields documented there).
- :func:`from_dict` — any of these from a plain dict (the CLI loads YAML into it).
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any, Final, TypedDict, cast

from kvpilot.engine.bounds import MAX_COUNT, MAX_LOGNORMAL_SIGMA, MAX_TRACE_TIME
from kvpilot.engine.request import Request
from kvpilot.text.documents import DocumentError, JsonObject, JsonValue, load_json
from kvpilot.text.errors import InvalidValueError

_INF: Final = float("inf")
_TWO_PI: Final = 2.0 * math.pi


def expovariate(rng: random.Random, rate: float) -> float:
    """The draw ``rng.expovariate(rate)`` gives (the inverse transform of one ``rng.random()``), computed here: a
    Poisson trace draws one a request (its arrival gap) besides :func:`gauss`'s two, and the library's own are
    interpreted Python.
    """
    return -math.log(1.0 - rng.random()) / rate


def gauss(rng: random.Random, mu: float, sigma: float) -> float:
    """The draw ``rng.gauss(mu, sigma)`` gives, computed here (as :func:`expovariate`): Box-Muller from two
    ``rng.random()``, the pair's second normal kept for the next draw in ``rng.gauss_next``, where
    ``random.Random.gauss`` keeps it, so either may follow the other (tests/unit/engine/test_workloads_draws.py
    holds the two to the same sequences).
    """
    z: float | None = rng.gauss_next  # type: ignore[attr-defined]
    rng.gauss_next = None  # type: ignore[attr-defined]
    if z is None:
        x2pi = rng.random() * _TWO_PI
        g2rad = math.sqrt(-2.0 * math.log(1.0 - rng.random()))
        z = math.cos(x2pi) * g2rad
        rng.gauss_next = math.sin(x2pi) * g2rad  # type: ignore[attr-defined]
    return mu + z * sigma


#: A token count: fixed (a number) or a distribution, a dict (:class:`LengthSampler`, which checks it and names the
#: field: the generators pass what a workload file gave unchecked, so its error is this one and not a type error).
LengthSpec = Any


class OpenLoop:
    """Requests handed out at their ``arrival_time`` (sorted here; ties keep input order)."""

    def __init__(self, requests: Iterable[Request]) -> None:
        self.requests = sorted(requests, key=lambda r: r.arrival_time)
        self._i = 0

    def __len__(self) -> int:
        return len(self.requests)

    def next_arrival_time(self) -> float | None:
        """Arrival of the next request not yet handed out, or None."""
        return self.requests[self._i].arrival_time if self._i < len(self.requests) else None

    def pop_arrivals(self, now: float) -> list[Request]:
        """Requests with ``arrival_time <= now`` (s) not yet handed out."""
        reqs, i, out = self.requests, self._i, []
        while i < len(reqs) and reqs[i].arrival_time <= now:
            out.append(reqs[i])
            i += 1
        self._i = i
        return out

    def on_finish(self, request: Request, now: float) -> None:
        """Open loop: nothing to do."""

    def done(self) -> bool:
        """All requests handed out."""
        return self._i >= len(self.requests)


class ArrivalStream:
    """Open-loop requests drawn from an iterator already in arrival order, one ahead of the clock.

    Unlike :class:`OpenLoop` nothing is held but the next request: memory O(1) whatever the number of requests
    (``kvpilot simulate``'s report mode and ``--serve``/``--record`` use it for Poisson workloads).

    Raises:
        InvalidValueError: the iterator goes back in time (``arrival_time`` below the previous one).
    """

    def __init__(self, requests: Iterable[Request]) -> None:
        self._it = iter(requests)
        self._head: Request | None = next(self._it, None)

    def next_arrival_time(self) -> float | None:
        """Arrival of the next request not yet handed out, or None."""
        return None if self._head is None else self._head.arrival_time

    def pop_arrivals(self, now: float) -> list[Request]:
        """Requests with ``arrival_time <= now`` (s) not yet handed out."""
        out = []
        head = self._head
        while head is not None and head.arrival_time <= now:
            out.append(head)
            nxt = next(self._it, None)
            if nxt is not None and nxt.arrival_time < head.arrival_time:
                raise InvalidValueError(
                    "arrival_time", f"request {nxt.request_id!r} arrives before {head.request_id!r}"
                )
            head = nxt
        self._head = head
        return out

    def on_finish(self, request: Request, now: float) -> None:
        """Open loop: nothing to do."""

    def done(self) -> bool:
        """All requests handed out."""
        return self._head is None


class ClosedLoop:
    """``concurrency`` clients sending ``requests`` in order, one each at a time.

    A request's ``arrival_time`` is set when a client sends it: ``start`` for the first
    ``concurrency`` requests, then the finish time of the client's previous request plus
    ``think_time`` (s).

    Raises:
        InvalidValueError: ``concurrency < 1`` or ``think_time < 0``.
    """

    def __init__(
        self, requests: Sequence[Request], concurrency: int = 1, think_time: float = 0.0, start: float = 0.0
    ) -> None:
        if concurrency < 1:
            raise InvalidValueError("concurrency", f"must be >= 1, got {concurrency}")
        if think_time < 0:
            raise InvalidValueError("think_time", f"must be >= 0, got {think_time}")
        self.requests = list(requests)
        self.think_time = think_time
        self._next = 0
        self._ready: list[float] = []
        for _ in range(min(concurrency, len(self.requests))):
            self._release(start)

    def _release(self, t: float) -> None:
        if self._next < len(self.requests):
            self.requests[self._next].arrival_time = t
            self._ready.append(t)

    def next_arrival_time(self) -> float | None:
        """Send time of the next request, None while every client waits for a response."""
        return self._ready[0] if self._ready else None

    def pop_arrivals(self, now: float) -> list[Request]:
        """Requests whose client has sent them by ``now``."""
        out = []
        while self._ready and self._ready[0] <= now:
            self._ready.pop(0)
            out.append(self.requests[self._next])
            self._next += 1
        return out

    def on_finish(self, _request: Request, now: float) -> None:
        """The client of the finished request sends its next one ``think_time`` later."""
        if self._next + len(self._ready) < len(self.requests):
            t = now + self.think_time
            self.requests[self._next + len(self._ready)].arrival_time = t
            self._ready.append(t)

    def done(self) -> bool:
        """Every request sent."""
        return self._next >= len(self.requests)


def as_workload(source: Any) -> Any:
    """``source`` itself when it has ``pop_arrivals``, else an :class:`OpenLoop` over it."""
    if hasattr(source, "pop_arrivals"):
        return source
    return OpenLoop(source)


#: Each distribution's parameters, in the order :class:`LengthSampler` reads them.
_PARAMS = {
    "fixed": ("value",),
    "uniform": ("min", "max"),
    "normal": ("mean", "std"),
    "lognormal": ("mean", "sigma"),
    "exponential": ("mean",),
}


def _distribution(spec: object, field: str) -> tuple[JsonObject, str, tuple[str, ...]]:
    """``(spec, its distribution, that distribution's parameters)`` of a length spec that is not a number."""
    if not isinstance(spec, dict):
        raise InvalidValueError(field, f"{spec!r} is neither a number nor a distribution")
    kind = spec.get("dist", "fixed")
    names = _PARAMS.get(kind) if isinstance(kind, str) else None
    if names is None or not isinstance(kind, str):
        raise InvalidValueError(
            field, f"unknown distribution {kind!r} (fixed, uniform, normal, lognormal, exponential)"
        )
    for name in names:
        if name not in spec:
            raise InvalidValueError(field, f"distribution {kind!r} needs {name!r}")
    return spec, kind, names


def _param(value: object, field: str, name: str, low: float, high: float) -> float:
    """A length spec's number ``value`` when finite and in ``[low, high]``, else refused naming ``field``."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidValueError(field, f"{name} {value!r} is not a number")
    number = float(value)
    if not low <= number <= high:  # False for NaN
        raise InvalidValueError(field, f"{name} must be from {low:g} to {high:g}, got {value!r}")
    return number


class LengthSampler:
    """Token counts >= 1 drawn from one length spec, read once: a generator draws two a request (reading the
    spec's dict at each draw was about a seventh of drawing a Poisson trace).

    ``spec``: an int (fixed), or a dict ``{"dist": "fixed", "value": n}``, ``{"dist": "uniform",
    "min": a, "max": b}`` (inclusive), ``{"dist": "normal", "mean": m, "std": s}``,
    ``{"dist": "lognormal", "mean": m, "sigma": s}`` (``m`` the median, tokens),
    ``{"dist": "exponential", "mean": m}``; optional ``"min"``/``"max"`` clip the normal,
    lognormal and exponential draws.

    Raises:
        InvalidValueError: naming ``field`` for an unknown distribution or missing parameter.
    """

    __slots__ = ("kind", "a", "b", "lo", "hi", "fixed")

    def __init__(self, spec: object, field: str = "length") -> None:
        self.a = self.b = 0.0
        self.lo, self.hi = -_INF, float(MAX_COUNT)  # no draw above the largest count a request holds
        self.fixed = 0
        if isinstance(spec, (int, float)) and not isinstance(spec, bool):
            self.kind = "number"
            self.fixed = max(1, int(_param(spec, field, "value", 0.0, MAX_COUNT)))
            return
        spec, kind, names = _distribution(spec, field)
        self.kind = kind
        if kind == "uniform":
            low, high = (
                _param(spec["min"], field, "min", 0.0, MAX_COUNT),
                _param(spec["max"], field, "max", 0.0, MAX_COUNT),
            )
            if low > high:
                raise InvalidValueError(field, f"uniform min {spec['min']!r} is above max {spec['max']!r}")
            self.a, self.b = float(int(low)), float(int(high))  # whole tokens, drawn as ints
            return
        self.a = _param(spec[names[0]], field, names[0], 0.0, MAX_COUNT)
        if kind == "exponential":
            if self.a <= 0:
                raise InvalidValueError(field, f"exponential mean must be above 0, got {spec['mean']!r}")
            self.a = 1.0 / self.a
        elif len(names) > 1:
            high = MAX_LOGNORMAL_SIGMA if kind == "lognormal" else MAX_COUNT
            self.b = _param(spec[names[1]], field, names[1], 0.0, high)
        if "min" in spec:
            self.lo = _param(spec["min"], field, "min", 0.0, MAX_COUNT)
        if "max" in spec:
            self.hi = _param(spec["max"], field, "max", 0.0, MAX_COUNT)

    def draw(self, rng: random.Random) -> int:
        """One token count (the same draws of ``rng`` for the same spec, whichever way it is called)."""
        kind = self.kind
        if kind == "number":
            return self.fixed
        if kind == "uniform":
            return max(1, rng.randint(int(self.a), int(self.b)))
        if kind == "normal":
            v = gauss(rng, self.a, self.b)
        elif kind == "lognormal":
            v = self.a * math.exp(gauss(rng, 0.0, self.b))
        elif kind == "exponential":
            v = expovariate(rng, self.a)
        else:  # fixed
            v = self.a
        v = max(v, self.lo)  # max/min as before: a NaN draw stays NaN
        v = min(v, self.hi)
        return max(1, int(round(v)))


def poisson(
    rate: float,
    *,
    duration: float | None = None,
    num_requests: int | None = None,
    prompt_len: LengthSpec = 1000,
    output_len: LengthSpec = 200,
    seed: int = 0,
    prefix_groups: int = 0,
    prefix_len: int = 0,
    start: float = 0.0,
    id_prefix: str = "req",
    lazy: bool = False,
) -> OpenLoop | ArrivalStream:
    """Poisson arrivals at ``rate`` requests/s for ``duration`` s or ``num_requests`` requests.

    ``lazy``: an :class:`ArrivalStream` drawing each request when the clock reaches it (the same requests, memory
    O(1)); default an :class:`OpenLoop` over the whole list (``.requests``).

    Shared prefixes: with ``prefix_groups`` > 0 each request picks a group uniformly and its
    prompt starts with that group's ``prefix_len`` tokens (the prompt is at least
    ``prefix_len + 1`` tokens).

    Raises:
        InvalidValueError: ``rate <= 0``, neither ``duration`` nor ``num_requests`` (unbounded), or bad
            length specs.
    """
    if rate <= 0:
        raise InvalidValueError("rate", f"must be > 0 requests/s, got {rate}")
    if duration is None and num_requests is None:
        raise InvalidValueError("duration", "a Poisson workload needs duration or num_requests (bounded)")
    reqs = _poisson_requests(
        rate, duration, num_requests, prompt_len, output_len, seed, prefix_groups, prefix_len, start, id_prefix
    )
    return ArrivalStream(reqs) if lazy else OpenLoop(list(reqs))


def _poisson_requests(
    rate: float,
    duration: float | None,
    num_requests: int | None,
    prompt_len: LengthSpec,
    output_len: LengthSpec,
    seed: int,
    prefix_groups: int,
    prefix_len: int,
    start: float,
    id_prefix: str,
) -> Iterator[Request]:
    rng = random.Random(seed)
    prompts, outputs = LengthSampler(prompt_len, "prompt_len"), LengthSampler(output_len, "output_len")
    t = start
    i = 0
    while True:
        t += expovariate(rng, rate)
        if duration is not None and t >= start + duration:
            return
        if num_requests is not None and i >= num_requests:
            return
        rid = f"{id_prefix}-{i}"
        p = prompts.draw(rng)
        o = outputs.draw(rng)
        segments = None
        if prefix_groups > 0 and prefix_len > 0:
            g = rng.randrange(prefix_groups)
            p = max(p, prefix_len + 1)
            segments = ((f"prefix-{g}", prefix_len), (rid, p - prefix_len))
        i += 1
        yield Request(rid, p, o, arrival_time=t, segments=segments)


def document_scan(
    num_docs: int = 10,
    doc_tokens: int = 5033,
    passes: Sequence[str] = ("first", "second", "reversed"),
    output_len: int = 1,
    concurrency: int = 1,
) -> ClosedLoop:
    """docs/background.md §9: documents with no shared prefix, sent one at a time, pass by pass.

    Pass names ``first``/``second`` (or any name not starting with ``rev``) send documents
    0..N-1; a name starting with ``rev`` sends N-1..0. Each request is tagged with its pass name
    and keyed ``doc-<i>`` so the same document has the same content in every pass.
    """
    reqs = []
    for name in passes:
        order = range(num_docs - 1, -1, -1) if name.startswith("rev") else range(num_docs)
        for d in order:
            reqs.append(
                Request(f"{name}-doc-{d}", doc_tokens, output_len, segments=((f"doc-{d}", doc_tokens),), tag=name)
            )
    return ClosedLoop(reqs, concurrency=concurrency)


_TRACE_FIELDS = (
    "arrival_time",
    "timestamp",
    "prompt_tokens",
    "prompt_len",
    "output_len",
    "output_tokens",
    "prefix_group",
    "prefix_len",
    "request_id",
    "cache_salt",
    "lora_id",
    "tag",
)


class TraceRequest(TypedDict, total=False):
    """One request of a trace as :func:`trace_requests` read it: a line's fields (validated: numbers in range,
    ``request_id`` set), and any others the line had (ignored).
    """

    arrival_time: float
    timestamp: float
    prompt_tokens: float
    prompt_len: float
    output_len: float
    output_tokens: float
    prefix_group: JsonValue
    prefix_len: float
    request_id: JsonValue
    cache_salt: str
    lora_id: int | str
    tag: JsonValue


class WorkloadSpec(TypedDict, total=False):
    """A workload as a scenario, a scenario file or a command line gives it (:func:`from_dict` builds it): ``type``
    and the keys of its generator, each value as given (JSON; :func:`from_dict` checks it, naming the key). A
    trace's ``requests`` are JSON objects, or the items :func:`trace_requests` read.
    """

    type: JsonValue
    rate: JsonValue
    duration: JsonValue
    num_requests: JsonValue
    seed: JsonValue
    prompt_len: JsonValue
    output_len: JsonValue
    prefix_groups: JsonValue
    prefix_len: JsonValue
    start: JsonValue
    id_prefix: JsonValue
    num_docs: JsonValue
    doc_tokens: JsonValue
    passes: JsonValue
    concurrency: JsonValue
    think_time: JsonValue
    requests: JsonValue | list[TraceRequest]


def trace_requests(lines: Iterable[str]) -> list[TraceRequest]:
    """The JSON Lines trace as :func:`from_dict`'s ``{"type": "trace", "requests": [...]}`` items, one object
    per line (blank lines and ``#`` comments skipped), each validated.

    Fields: ``arrival_time`` (s, or ``timestamp``; required), ``prompt_tokens`` or
    ``prompt_len`` (required, >= 1), ``output_len`` or ``output_tokens`` (default 1),
    ``prefix_group`` (str: requests of a group share their first ``prefix_len`` tokens),
    ``prefix_len`` (tokens, default 0), ``request_id`` (default ``trace-<line>``),
    ``cache_salt``, ``lora_id``, ``tag``. Unknown fields are ignored.

    Raises:
        InvalidValueError: ``"trace line N: <field>: <reason>"``.
    """
    items: list[TraceRequest] = []
    for lineno, obj in _trace_objects(lines):
        _trace_request(obj, f"trace line {lineno}", f"trace-{lineno}")
        items.append(cast(TraceRequest, {"request_id": f"trace-{lineno}", **obj}))
    return items


def _trace_objects(lines: Iterable[str]) -> list[tuple[int, JsonObject]]:
    """``(line number, object)`` of each JSON line; blank lines and ``#`` comments skipped."""
    out = []
    for lineno, line in enumerate(lines, 1):
        text = line.strip()
        if not text or text.startswith("#"):
            continue
        try:
            obj = load_json(text)  # bounded: nesting, integer digits, numbers a float holds
        except DocumentError as exc:
            where = f"trace line {lineno}"
            raise InvalidValueError(f"{where}: {exc.field}" if exc.field else where, exc.message) from None
        if not isinstance(obj, dict):
            raise InvalidValueError(f"trace line {lineno}", "expected an object")
        out.append((lineno, obj))
    return out


def _trace_number(
    obj: JsonObject,
    names: tuple[str, ...],
    where: str,
    default: Any = None,
    whole: bool = True,
    high: float = MAX_COUNT,
) -> Any:
    """The first of ``names`` in a trace line: a JSON number (not a bool, not a string) from 0 to ``high``, a whole
    one when ``whole``; ``default`` when none is given (None: required).
    """
    for n in names:
        if n in obj:
            value = obj[n]
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise InvalidValueError(f"{where}: {n}", f"{value!r} is not a number")
            if not 0 <= value <= high:  # False for NaN
                raise InvalidValueError(f"{where}: {n}", f"must be from 0 to {high:g}, got {value!r}")
            if whole and value != int(value):
                raise InvalidValueError(f"{where}: {n}", f"{value!r} is not a whole number")
            return int(value) if whole else float(value)
    if default is None:
        raise InvalidValueError(f"{where}: {names[0]}", "required")
    return default


def _trace_request(obj: JsonObject, where: str, default_id: str) -> Request:
    t = _trace_number(obj, ("arrival_time", "timestamp"), where, whole=False, high=MAX_TRACE_TIME)
    p = _trace_number(obj, ("prompt_tokens", "prompt_len"), where)
    o = _trace_number(obj, ("output_len", "output_tokens"), where, default=1)
    rid = str(obj.get("request_id", default_id))
    group = obj.get("prefix_group")
    plen = _trace_number(obj, ("prefix_len",), where, default=0)
    if p < 1:
        raise InvalidValueError(f"{where}: prompt_tokens", "must be >= 1")
    if o < 1:
        raise InvalidValueError(f"{where}: output_len", "must be >= 1")
    segments = None
    if group is not None and plen > 0:
        if plen >= p:
            raise InvalidValueError(f"{where}: prefix_len", f"{plen} must be smaller than the prompt ({p})")
        segments = ((f"prefix-{group}", plen), (rid, p - plen))
    return Request(
        rid,
        p,
        o,
        arrival_time=t,
        segments=segments,
        cache_salt=_optional(obj, "cache_salt", (str,), "a string", where),
        lora_id=_optional(obj, "lora_id", (int, str), "an adapter's id (an integer) or name", where),
        tag=None if obj.get("tag") is None else str(obj["tag"]),
    )


def _optional(obj: JsonObject, key: str, types: tuple[type, ...], what: str, where: str) -> Any:
    """``obj[key]`` when it is one of ``types`` (not a bool), None when absent or null."""
    value = obj.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, types):
        raise InvalidValueError(f"{where}: {key}", f"{value!r} is not {what}")
    return value


#: The keys of each workload type that are numbers or names, and what each must be: ``int`` (a whole number),
#: ``float``, ``str`` (a name: a number is taken as its text), ``None`` allowed where the generator takes it
#: (:func:`from_dict` checks them; the generators would raise a bare type error).
_POISSON_TYPES: dict[str, tuple[type, bool]] = {
    "rate": (float, False),
    "duration": (float, True),
    "num_requests": (int, True),
    "seed": (int, False),
    "prefix_groups": (int, False),
    "prefix_len": (int, False),
    "start": (float, False),
    "id_prefix": (str, False),
}
_TYPES: dict[str, dict[str, tuple[type, bool]]] = {
    "poisson": _POISSON_TYPES,
    "closed_loop": {**_POISSON_TYPES, "concurrency": (int, False), "think_time": (float, False)},
    "document_scan": {
        "num_docs": (int, False),
        "doc_tokens": (int, False),
        "output_len": (int, False),
        "concurrency": (int, False),
    },
}


def _typed(spec: Mapping[str, object], types: dict[str, tuple[type, bool]]) -> dict[str, Any]:
    """``spec`` with the keys of ``types`` checked and converted: ``7.0`` is the whole number 7, ``'2'`` is no
    number (``workload.<key>: <reason>``); a document scan's ``passes`` are names.
    """
    out: dict[str, Any] = dict(spec)  # the generator's keyword arguments
    for key, (kind, optional) in types.items():
        value = out.get(key)
        if value is None:
            if key in out and not optional:
                raise InvalidValueError(f"workload.{key}", "must be given a value (it is null)")
            continue
        if kind is str:
            out[key] = str(value)
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise InvalidValueError(f"workload.{key}", f"{value!r} is not a number")
        if kind is int and value != int(value):
            raise InvalidValueError(f"workload.{key}", f"{value!r} is not a whole number")
        out[key] = int(value) if kind is int else float(value)
    if isinstance(out.get("passes"), list):
        out["passes"] = [str(name) for name in out["passes"]]
    return out


def from_dict(spec: WorkloadSpec | JsonObject | None) -> Any:  # noqa: C901
    """A workload from a plain dict (YAML); ``type`` selects it.


    - ``poisson``: keys of :func:`poisson` (``rate``, ``duration`` or ``num_requests``,
      ``prompt_len``, ``output_len``, ``seed``, ``prefix_groups``, ``prefix_len``);
    - ``closed_loop``: ``concurrency``, ``num_requests``, ``prompt_len``, ``output_len``, ``seed``,
      ``think_time``, ``prefix_groups``, ``prefix_len``;
    - ``document_scan``: keys of :func:`document_scan`;
    - ``trace``: ``requests``, a list of objects with :func:`trace_requests`'s fields;
    - ``idle``: no requests.

    Raises:
        InvalidValueError: ``"workload.<key>: <reason>"``.
    """
    given: dict[str, object] = dict(spec) if spec else {"type": "idle"}
    kind = given.pop("type", None)
    args = _typed(given, _TYPES.get(kind, {}) if isinstance(kind, str) else {})
    try:
        if kind == "idle":
            return OpenLoop([])
        if kind == "poisson":
            return poisson(**args, lazy=True)
        if kind == "document_scan":
            return document_scan(**args)
        if kind == "closed_loop":
            conc = int(args.pop("concurrency", 1))
            think = float(args.pop("think_time", 0.0))
            n = args.pop("num_requests", None)
            if n is None:
                raise InvalidValueError("workload.num_requests", "required for closed_loop")
            ol = poisson(1.0, num_requests=int(n), **args, lazy=False)
            if not isinstance(ol, OpenLoop):  # lazy=False: the whole list
                raise TypeError(f"poisson(lazy=False) returned {type(ol).__name__}, not OpenLoop")
            return ClosedLoop(ol.requests, concurrency=conc, think_time=think)
        if kind == "trace":
            for key in args:
                if key != "requests":
                    raise ValueError(f"workload.{key}: unknown for a trace (it takes 'requests', a list)")
            items = args.get("requests")
            if not isinstance(items, list):
                raise InvalidValueError("workload.requests", f"a trace needs a list of requests, got {items!r}")
            return OpenLoop(_trace_request(o, f"workload.requests[{i}]", f"trace-{i}") for i, o in enumerate(items))
    except TypeError as exc:
        raise InvalidValueError("workload", str(exc)) from None
    raise InvalidValueError("workload.type", f"{kind!r} is not one of poisson, closed_loop, document_scan, trace, idle")
