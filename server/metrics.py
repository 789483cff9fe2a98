"""The observability seam: what the bindings and the engine report, as Prometheus metrics.

One small interface (DESIGN.md, "a seam, not sprinkled calls"): a binding holds one
:class:`Meter` and calls ``start``/``done`` once per call (``observe``/``count`` and
``opened``/``closed`` for a stream); the engine is read at scrape time through
:class:`EngineGauges`, so its hot path reports nothing at all. With metrics off
(``serve --no-metrics``) every meter is :data:`NULL_METER`, whose methods do nothing.

Each :class:`Metrics` has its own ``CollectorRegistry``, never prometheus-client's
global one, so that several gateways in one process (tests, a host process) do not
share or collide on series.

Cardinality is bounded by construction: ``method`` is an rpc name of the 1.0 service
descriptor (a 0.3 method counts under its 1.0 rpc) or ``unknown``; ``binding`` is one of
:data:`BINDINGS`; ``outcome`` is ``OK``, ``CLIENT_GONE`` or an ``ErrorInfo.reason`` of
:mod:`~a2a_gateway.protocol.errors`. Any other value passed in is folded into
``unknown``/``OTHER`` before it becomes a label, so no label can ever carry a task id, a
caller key or free text.

Hot-path cost: the meters keep plain Python numbers (a dict of counts keyed by
(method, outcome), a list of bucket counts per method) and the registry reads them
through a collector at scrape time. Every report comes from the event loop's thread
(aiohttp and grpc.aio handlers run there, and so does the scrape), so no lock is taken:
prometheus-client's own Counter and Histogram take a lock per add and cost ~1.9 us per
call (counter plus histogram), against ~0.7 us here, half of it the two clock reads and
the bucket search (tools/bench_metrics.py, a loaded 2-core host).
"""

from __future__ import annotations

import asyncio
import logging
import time
from bisect import bisect_left
from collections.abc import Awaitable, Callable, Iterable, Mapping
from itertools import accumulate
from typing import Any, Final, Protocol

from prometheus_client import CollectorRegistry
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.process_collector import ProcessCollector
from prometheus_client.registry import Collector

import lf.a2a.v1.a2a_pb2 as pb
from a2a_gateway.agent.metering import PROVIDER_ERRORS, TOOL_OUTCOMES, TURN_OUTCOMES
from a2a_gateway.protocol.errors import ALL_ERRORS, A2AError
from a2a_gateway.protocol.service import SERVICE_DESCRIPTOR
from a2a_gateway.protocol.watch_metering import DELIVERY_OUTCOMES, WATCH_MODES, WATCH_OUTCOMES

#: Label values of ``binding``: the names CallContext.binding uses.
JSONRPC: Final = "JSONRPC"
HTTP_JSON: Final = "HTTP+JSON"
GRPC: Final = "GRPC"
BINDINGS: Final = (JSONRPC, HTTP_JSON, GRPC)

UNKNOWN_METHOD: Final = "unknown"
#: Every ``method`` label value: the schema's rpcs, and ``unknown``.
METHODS: Final = frozenset({m.name for m in SERVICE_DESCRIPTOR.methods} | {UNKNOWN_METHOD})

OK: Final = "OK"
#: A stream whose client left before it ended (not an error of ours).
CLIENT_GONE: Final = "CLIENT_GONE"
#: What an exception that is not an A2AError is answered as.
INTERNAL: Final = "INTERNAL_ERROR"
#: Any outcome not in :data:`OUTCOMES` (a bug in a caller of the seam, not a label).
OTHER: Final = "OTHER"
OUTCOMES: Final = frozenset(
    {OK, CLIENT_GONE, INTERNAL, OTHER} | {e.spec.reason for e in ALL_ERRORS}
)

#: Seconds. Unary calls on loopback take ~0.5-2 ms; a blocking SendMessage runs a whole
#: agent turn (seconds with a model), so the buckets reach a few minutes.
LATENCY_BUCKETS: Final = (
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
    60.0,
    300.0,
)

CONTENT_TYPE: Final = CONTENT_TYPE_LATEST
#: Distinct tool names counted; a host with more tools counts the rest as ``OTHER``.
MAX_TOOL_LABELS: Final = 64

_clock = time.perf_counter
log = logging.getLogger(__name__)


def outcome_of(error: BaseException) -> str:
    """The ``outcome`` label of a call that failed with ``error``."""
    if isinstance(error, A2AError):
        return error.spec.reason
    return INTERNAL


class Meter(Protocol):
    """What one binding reports. ``start`` returns the call's start (opaque); ``done``
    is a finished unary call (or a stream refused before its first event); a stream
    reports its latency (to the first event) with ``observe``, its outcome at the end
    with ``count``, and is open between ``opened`` and ``closed``."""

    def start(self) -> float: ...

    def done(self, method: str, outcome: str, started: float) -> None: ...

    def observe(self, method: str, started: float) -> None: ...

    def count(self, method: str, outcome: str) -> None: ...

    def opened(self) -> None: ...

    def closed(self) -> None: ...


class _NullMeter:
    """Metrics off: every report is a call that does nothing."""

    __slots__ = ()

    def start(self) -> float:
        return 0.0

    def done(self, method: str, outcome: str, started: float) -> None:
        pass

    def observe(self, method: str, started: float) -> None:
        pass

    def count(self, method: str, outcome: str) -> None:
        pass

    def opened(self) -> None:
        pass

    def closed(self) -> None:
        pass


NULL_METER: Final[Meter] = _NullMeter()


class _Timing:
    """One histogram series: a count per bucket (not cumulative; the last is +Inf)."""

    __slots__ = ("buckets", "total")

    def __init__(self) -> None:
        self.buckets = [0] * (len(LATENCY_BUCKETS) + 1)
        self.total = 0.0


class BindingMeter:
    """The meter of one binding: plain counts, read at scrape time (see the module doc).
    Only values of the fixed label sets become keys, so a stray value cannot grow them."""

    __slots__ = ("_counts", "_timings", "binding", "open")

    def __init__(self, binding: str) -> None:
        self.binding = binding
        self._counts: dict[tuple[str, str], int] = {}
        self._timings: dict[str, _Timing] = {}
        self.open = 0

    #: The clock itself, not a method around it: no Python frame per call.
    start = staticmethod(_clock)

    def done(self, method: str, outcome: str, started: float) -> None:
        # observe() and count() written out: this runs once per unary call.
        elapsed = _clock() - started
        timing = self._timings.get(method)
        if timing is None:
            timing = self._timing(method)
        timing.buckets[bisect_left(LATENCY_BUCKETS, elapsed)] += 1
        timing.total += elapsed
        key = (method, outcome)
        counts = self._counts
        if key in counts:
            counts[key] += 1
        else:
            self._count(method, outcome)

    def observe(self, method: str, started: float) -> None:
        elapsed = _clock() - started
        timing = self._timings.get(method)
        if timing is None:
            timing = self._timing(method)
        # bisect_left: the first bound >= elapsed, i.e. the bucket ``le`` it falls in.
        timing.buckets[bisect_left(LATENCY_BUCKETS, elapsed)] += 1
        timing.total += elapsed

    def count(self, method: str, outcome: str) -> None:
        key = (method, outcome)
        counts = self._counts
        if key in counts:
            counts[key] += 1
        else:
            self._count(method, outcome)

    def opened(self) -> None:
        self.open += 1

    def closed(self) -> None:
        self.open -= 1

    # The slow paths: once per label set.
    def _timing(self, method: str) -> _Timing:
        method = method if method in METHODS else UNKNOWN_METHOD
        timing = self._timings.get(method)
        if timing is None:
            timing = self._timings[method] = _Timing()
        return timing

    def _count(self, method: str, outcome: str) -> None:
        method = method if method in METHODS else UNKNOWN_METHOD
        outcome = outcome if outcome in OUTCOMES else OTHER
        key = (method, outcome)
        self._counts[key] = self._counts.get(key, 0) + 1

    # -- scrape time ---------------------------------------------------------------------

    def counts(self) -> list[tuple[tuple[str, str], int]]:
        return list(self._counts.items())

    def timings(self) -> list[tuple[str, list[int], float]]:
        return [(method, list(t.buckets), t.total) for method, t in self._timings.items()]


#: The ``le`` label values, as prometheus-client writes them ("0.0005", "1.0", "+Inf").
_BOUNDS = [repr(bound) for bound in LATENCY_BUCKETS] + ["+Inf"]


class _CallCollector(Collector):
    """The bindings' meters as Prometheus families, built at scrape time."""

    def __init__(self, meters: Iterable[BindingMeter]) -> None:
        self._meters = tuple(meters)

    def collect(self) -> Iterable[Metric]:
        requests = CounterMetricFamily(
            "a2a_requests",
            "A2A calls by rpc, binding and outcome (OK, CLIENT_GONE or an ErrorInfo reason).",
            labels=("method", "binding", "outcome"),
        )
        latency = HistogramMetricFamily(
            "a2a_request_duration_seconds",
            "A2A call latency by rpc and binding: until the answer (unary) or the first"
            " event (streams).",
            labels=("method", "binding"),
        )
        streams = GaugeMetricFamily(
            "a2a_open_streams", "Streams (SSE or gRPC) open to clients.", labels=("binding",)
        )
        for meter in self._meters:
            for (method, outcome), n in sorted(meter.counts()):
                requests.add_metric((method, meter.binding, outcome), n)
            for method, buckets, total in sorted(meter.timings()):
                cumulative = list(accumulate(buckets))
                latency.add_metric(
                    (method, meter.binding),
                    list(zip(_BOUNDS, cumulative, strict=True)),
                    sum_value=total,
                )
            streams.add_metric((meter.binding,), meter.open)
        return [requests, latency, streams]

    def describe(self) -> Iterable[Metric]:
        return []  # nothing to check for name clashes at registration: the names are ours


class EngineGauges(Protocol):
    """What the engine tells at scrape time (counts it keeps anyway: no scan of the
    store, nothing on its hot path)."""

    def gauges(self) -> Mapping[str, int]: ...


#: The engine's gauges: name (as :meth:`EngineGauges.gauges` gives it) -> help text.
ENGINE_GAUGES: Final = {
    "runs_in_flight": "Agent runs in flight in this process.",
    "context_claims": "Contexts with an unfinished task (one run per context at a time).",
    "stream_subscribers": "Subscribers of task streams in this process (all bindings).",
}


class _EngineCollector(Collector):
    def __init__(self, engine: EngineGauges) -> None:
        self._engine = engine

    def collect(self) -> Iterable[Metric]:
        values = self._engine.gauges()
        for name, text in ENGINE_GAUGES.items():
            yield GaugeMetricFamily(f"a2a_{name}", text, value=values.get(name, 0))

    def describe(self) -> Iterable[Metric]:
        # Describing without collecting: registration must not call the engine.
        return [GaugeMetricFamily(f"a2a_{name}", text) for name, text in ENGINE_GAUGES.items()]


#: Seconds, for the model's answers (first token, whole call): a local model answers in
#: tens of milliseconds, a hosted one in seconds, a long answer in minutes.
MODEL_BUCKETS: Final = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)
#: Attempts one push notification took (delivered, failed or dropped).
ATTEMPT_BUCKETS: Final = (1.0, 2.0, 3.0, 5.0, 8.0)
PUSH_OUTCOMES: Final = ("delivered", "failed", "dropped")
#: The tool label of a call to a tool that is not in the turn's registry.
NO_TOOL: Final = "none"


class _Series:
    """One histogram series over ``bounds``: counts per bucket (the last is +Inf)."""

    __slots__ = ("bounds", "buckets", "total")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self.buckets = [0] * (len(bounds) + 1)
        self.total = 0.0

    def add(self, value: float) -> None:
        self.buckets[bisect_left(self.bounds, value)] += 1
        self.total += value

    def cumulative(self) -> list[tuple[str, float]]:
        """(upper bound, count at or below it) per bucket, as a family takes them."""
        bounds = [repr(b) for b in self.bounds] + ["+Inf"]
        return list(zip(bounds, accumulate(self.buckets), strict=True))

    def family(self, name: str, text: str) -> HistogramMetricFamily:
        family = HistogramMetricFamily(name, text)
        family.add_metric([], self.cumulative(), sum_value=self.total)
        return family


def _counters(
    name: str, text: str, labels: tuple[str, ...], counts: Mapping[Any, int]
) -> CounterMetricFamily:
    """A counter family from counts keyed by label values (a tuple, or one value)."""
    family = CounterMetricFamily(name, text, labels=labels)
    for key, n in sorted(counts.items()):
        family.add_metric(key if isinstance(key, tuple) else (key,), n)
    return family


def _tally(counts: dict[str, int], key: str, allowed: Iterable[str], other: str = OTHER) -> None:
    key = key if key in allowed else other
    counts[key] = counts.get(key, 0) + 1


class AssistantMeter(Collector):
    """The assistant's turns, model calls, tokens and tool calls (the runtime's
    :class:`~a2a_gateway.agent.metering.RuntimeMeter`). Tool names are the registry's
    (a call to a tool the model made up counts under ``none``), so labels stay bounded."""

    def __init__(self) -> None:
        self.turns: dict[str, int] = {}
        self.tool_calls: dict[tuple[str, str], int] = {}
        self.provider_errors: dict[str, int] = {}
        self.tokens_in = 0
        self.tokens_out = 0
        self.first_token = _Series(MODEL_BUCKETS)
        self.model_calls = _Series(MODEL_BUCKETS)
        #: Tool names seen (bounded: a registry has a few; past this, ``other``).
        self._tools: set[str] = set()

    def turn(self, outcome: str) -> None:
        _tally(self.turns, outcome, TURN_OUTCOMES)

    def model_call(self, first_s: float | None, total_s: float, error: str | None) -> None:
        if first_s is not None:
            self.first_token.add(first_s)
        self.model_calls.add(total_s)
        if error is not None:
            _tally(self.provider_errors, error, PROVIDER_ERRORS)

    def tokens(self, prompt: int, completion: int) -> None:
        self.tokens_in += max(0, prompt)
        self.tokens_out += max(0, completion)

    def tool_call(self, tool: str, outcome: str) -> None:
        if not tool:
            tool = NO_TOOL
        elif tool not in self._tools:
            if len(self._tools) >= MAX_TOOL_LABELS:
                tool = OTHER
            else:
                self._tools.add(tool)
        outcome = outcome if outcome in TOOL_OUTCOMES else OTHER
        key = (tool, outcome)
        self.tool_calls[key] = self.tool_calls.get(key, 0) + 1

    def collect(self) -> Iterable[Metric]:
        turns = _counters(
            "a2a_assistant_turns", "Assistant turns by how they ended.", ("outcome",), self.turns
        )
        tools = _counters(
            "a2a_assistant_tool_calls",
            "Tool calls by tool and outcome.",
            ("tool", "outcome"),
            self.tool_calls,
        )
        errors = _counters(
            "a2a_assistant_provider_errors",
            "Failed model calls by kind.",
            ("kind",),
            self.provider_errors,
        )
        tokens = CounterMetricFamily(
            "a2a_assistant_tokens",
            "Tokens the model used, as its provider reported them (in: prompt, out: answer).",
            labels=("direction",),
        )
        tokens.add_metric(("in",), self.tokens_in)
        tokens.add_metric(("out",), self.tokens_out)
        return [
            turns,
            tools,
            errors,
            tokens,
            self.first_token.family(
                "a2a_assistant_first_token_seconds", "Model calls: time to the first piece."
            ),
            self.model_calls.family(
                "a2a_assistant_model_call_seconds", "Model calls: time to the whole answer."
            ),
        ]

    def describe(self) -> Iterable[Metric]:
        return []


class PushMeter(Collector):
    """Push notifications by outcome, and how many attempts each took."""

    def __init__(self) -> None:
        self.outcomes: dict[str, int] = {}
        self.attempts = _Series(ATTEMPT_BUCKETS)

    def record(self, outcome: str, attempts: int) -> None:
        _tally(self.outcomes, outcome, PUSH_OUTCOMES)
        if attempts:
            self.attempts.add(float(attempts))

    def collect(self) -> Iterable[Metric]:
        deliveries = _counters(
            "a2a_push_notifications",
            "Push notifications by outcome (delivered, failed after retries, dropped).",
            ("outcome",),
            self.outcomes,
        )
        return [
            deliveries,
            self.attempts.family("a2a_push_attempts", "Attempts per push notification sent."),
        ]

    def describe(self) -> Iterable[Metric]:
        return []


class PendingWatches(Protocol):
    """What a watch registry tells at scrape time (WatchRegistry.pending_by_mode)."""

    def pending_by_mode(self) -> Mapping[str, int]: ...


class WatchesMeter(Collector):
    """The watches of a host (the client's :class:`~a2a_gateway.protocol.watch_metering.
    WatchMeter`): how each ended by mode, each delivery, and those pending now (read
    from the registry given to :meth:`count_pending` at scrape time)."""

    def __init__(self) -> None:
        self.ended_as: dict[tuple[str, str], int] = {}
        self.deliveries: dict[str, int] = {}
        self._registry: PendingWatches | None = None

    def ended(self, mode: str, outcome: str) -> None:
        mode = mode if mode in WATCH_MODES else OTHER
        outcome = outcome if outcome in WATCH_OUTCOMES else OTHER
        key = (mode, outcome)
        self.ended_as[key] = self.ended_as.get(key, 0) + 1

    def delivery(self, outcome: str) -> None:
        _tally(self.deliveries, outcome, DELIVERY_OUTCOMES)

    def count_pending(self, registry: PendingWatches) -> None:
        self._registry = registry

    def collect(self) -> Iterable[Metric]:
        families: list[Metric] = [
            _counters(
                "a2a_watches",
                "Watches of remote tasks, by mode and how they ended.",
                ("mode", "outcome"),
                self.ended_as,
            ),
            _counters(
                "a2a_watch_deliveries",
                "Attempts to deliver a watch's result into its conversation, by outcome.",
                ("outcome",),
                self.deliveries,
            ),
        ]
        if self._registry is not None:
            pending = GaugeMetricFamily(
                "a2a_watches_pending", "Watches following a task now, by mode.", labels=("mode",)
            )
            counts = self._registry.pending_by_mode()
            for mode in WATCH_MODES:
                pending.add_metric((mode,), counts.get(mode, 0))
            families.append(pending)
        return families

    def describe(self) -> Iterable[Metric]:
        return []


class TaskCounts(Protocol):
    """What a task store tells at scrape time (TaskStore.count_by_state)."""

    async def count_by_state(self) -> Mapping[int, int] | None: ...


#: Every ``state`` label value: the schema's TaskState names (UNSPECIFIED is no state).
TASK_STATES: Final = {
    v.number: v.name
    for v in pb.TaskState.DESCRIPTOR.values
    if v.number != pb.TASK_STATE_UNSPECIFIED
}
#: Seconds a scrape waits for the store's count; past it, the gauge is left out.
TASK_COUNT_TIMEOUT_S: Final = 2.0


class _TaskCollector(Collector):
    """``a2a_tasks{state}``: the store's counts, read before each scrape renders
    (:meth:`Metrics.refresh`); absent when the last read failed or took too long."""

    def __init__(self, store: TaskCounts) -> None:
        self.store = store
        self.counts: Mapping[int, int] | None = None
        self._failing = False

    async def refresh(self) -> None:
        try:
            async with asyncio.timeout(TASK_COUNT_TIMEOUT_S):
                self.counts = await self.store.count_by_state()
        except Exception as exc:  # any failure omits the gauge, never fails the scrape
            self.counts = None
            if not self._failing:  # once per streak: a scrape comes every few seconds
                log.warning("metrics: tasks by state not counted: %s", type(exc).__name__)
            self._failing = True
        else:
            self._failing = False

    def collect(self) -> Iterable[Metric]:
        counts = self.counts
        if counts is None:
            return []
        tasks = GaugeMetricFamily(
            "a2a_tasks", "Stored tasks by state (all owners).", labels=("state",)
        )
        for number, name in TASK_STATES.items():  # a number not in the schema: not a label
            tasks.add_metric((name,), counts.get(number, 0))
        return [tasks]

    def describe(self) -> Iterable[Metric]:
        return []


#: The store operations timed (what the engine asks of its task store, all async;
#: ``lookup_or_claim``: a new message's retry lookup with its context's claim, one
#: statement on PostgreSQL, the two calls, each timed, on the other stores).
STORE_OPERATIONS: Final = (
    "load",
    "save",
    "listing",
    "active_ids",
    "lookup_message",
    "lookup_or_claim",
)
#: Every ``store`` label value (TaskStore.kind), and ``other``.
STORE_KINDS: Final = frozenset({"memory", "files", "postgres", OTHER})
#: Seconds: a memory store answers in microseconds, a file in tens of them (a cold
#: one from disk, or a fsynced write, in milliseconds), PostgreSQL in a millisecond or
#: more; a store in trouble in seconds.
STORE_BUCKETS: Final = (
    0.00005,
    0.0001,
    0.00025,
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
)
#: What a store may report at scrape time (TaskStore.store_gauges): name -> (counter
#: or gauge, help text); the series is ``a2a_store_<name>{store}``.
STORE_GAUGES: Final = {
    "index_rebuilds": ("counter", "Task index rebuilds from the task files (file store)."),
    "pool_size": ("gauge", "PostgreSQL connections open in the pool."),
    "pool_in_use": ("gauge", "PostgreSQL connections of the pool in use."),
    "pool_max": ("gauge", "The most connections the PostgreSQL pool opens."),
    "listen_reconnects": (
        "counter",
        "Times the PostgreSQL LISTEN connection was lost and opened again.",
    ),
}


class StoreGauges(Protocol):
    """What a task store tells at scrape time (TaskStore.kind and store_gauges)."""

    @property
    def kind(self) -> str: ...

    def store_gauges(self) -> Mapping[str, int]: ...


class StoreMeter(Collector):
    """A task store's operations (latency by operation) and what it counts (index
    rebuilds; PostgreSQL's pool and LISTEN reconnects). Labels: ``store`` (its kind) and
    ``operation`` (:data:`STORE_OPERATIONS`), both fixed sets."""

    def __init__(self, store: StoreGauges) -> None:
        self.store = store
        self.kind = store.kind if store.kind in STORE_KINDS else OTHER
        self.operations = {op: _Series(STORE_BUCKETS) for op in STORE_OPERATIONS}

    def observe(self, operation: str, seconds: float) -> None:
        self.operations[operation].add(seconds)

    def collect(self) -> Iterable[Metric]:
        family = HistogramMetricFamily(
            "a2a_store_operation_seconds",
            "Task store operations by store and operation: how long they took.",
            labels=("store", "operation"),
        )
        for operation, series in self.operations.items():
            family.add_metric([self.kind, operation], series.cumulative(), sum_value=series.total)
        families: list[Metric] = [family]
        values = self.store.store_gauges()
        for name, (kind, text) in STORE_GAUGES.items():
            if name not in values:
                continue
            made: CounterMetricFamily | GaugeMetricFamily = (
                CounterMetricFamily(f"a2a_store_{name}", text, labels=("store",))
                if kind == "counter"
                else GaugeMetricFamily(f"a2a_store_{name}", text, labels=("store",))
            )
            made.add_metric((self.kind,), values[name])
            families.append(made)
        return families

    def describe(self) -> Iterable[Metric]:
        return []


def _timed(
    method: Callable[..., Awaitable[Any]], operation: str, meter: StoreMeter
) -> Callable[..., Awaitable[Any]]:
    # StoreMeter.observe and _Series.add written out: a blocking send makes two or three
    # store operations, and the two calls were ~1,400 of the wrapper's ~5,300
    # instructions (docs/performance.md, "Metrics on the gRPC path").
    series = meter.operations[operation]
    buckets, bounds = series.buckets, series.bounds

    async def timed(*args: Any) -> Any:
        started = _clock()
        try:
            return await method(*args)
        finally:
            elapsed = _clock() - started
            buckets[bisect_left(bounds, elapsed)] += 1
            series.total += elapsed

    return timed


def _timed_found(
    method: Callable[..., Any], operation: str, meter: StoreMeter
) -> Callable[..., Any]:
    """A synchronous read timed as ``operation`` when it finds something (None: the
    caller asks the timed operation next, which is observed then, not twice)."""
    series = meter.operations[operation]
    buckets, bounds = series.buckets, series.bounds

    def timed(*args: Any) -> Any:
        started = _clock()
        found = method(*args)
        if found is not None:
            elapsed = _clock() - started
            buckets[bisect_left(bounds, elapsed)] += 1
            series.total += elapsed
        return found

    return timed


def _timed_check(
    prepare: Callable[..., Callable[[], bool] | None], meter: StoreMeter
) -> Callable[..., Callable[[], bool] | None]:
    """The store's ``replay_check``, whose checks are timed: one that holds stands for
    the retried send's retry-key lookup and its load (what the engine's path makes
    then), so it counts one of each, its time split evenly between them (one pair of
    clock reads for both: each is a few microseconds)."""
    lookup, load = meter.operations["lookup_message"], meter.operations["load"]
    bounds = lookup.bounds  # (STORE_BUCKETS, as load's)

    def prepared(*args: Any) -> Callable[[], bool] | None:
        check = prepare(*args)
        if check is None:
            return None

        def timed() -> bool:
            started = _clock()
            if not check():
                return False
            half = (_clock() - started) / 2
            bucket = bisect_left(bounds, half)
            lookup.buckets[bucket] += 1
            lookup.total += half
            load.buckets[bucket] += 1
            load.total += half
            return True

        return timed

    return prepared


#: Synchronous reads that stand in for an operation of STORE_OPERATIONS, timed as it:
#: ``stored_json`` and ``stored_bytes`` are a retried send's (or GetTask's) load,
#: answered from the file store's files or cache; ``found_message`` its retry-key
#: lookup, when a stored answer is given again.
STORE_FOUND_OPERATIONS: Final = (
    ("stored_json", "load"),
    ("stored_bytes", "load"),
    ("found_message", "lookup_message"),
)


def meter_store(store: StoreGauges, meter: StoreMeter) -> None:
    """Time ``store``'s operations (:data:`STORE_OPERATIONS`) into ``meter``: each is
    replaced, on this one instance, by a wrapper around its bound method (the class,
    and every other store, are untouched; with metrics off nothing is wrapped)."""
    for operation in STORE_OPERATIONS:
        method = getattr(store, operation, None)
        if method is not None:
            setattr(store, operation, _timed(method, operation, meter))
    for name, operation in STORE_FOUND_OPERATIONS:
        method = getattr(store, name, None)
        if method is not None:
            setattr(store, name, _timed_found(method, operation, meter))
    prepare = getattr(store, "replay_check", None)
    if prepare is not None:
        setattr(store, "replay_check", _timed_check(prepare, meter))  # noqa: B010 (a role)


class Metrics:
    """The metrics of one gateway, in a registry of its own (see the module doc)."""

    def __init__(self, *, process: bool = True) -> None:
        self.registry = CollectorRegistry()
        meters = [BindingMeter(binding) for binding in BINDINGS]
        self.registry.register(_CallCollector(meters))
        if process:  # CPU, memory, file descriptors: read from /proc at scrape time
            ProcessCollector(registry=self.registry)
        self.jsonrpc: Meter = meters[0]
        self.rest: Meter = meters[1]
        self.grpc: Meter = meters[2]
        self.assistant = AssistantMeter()
        self.push = PushMeter()
        self.registry.register(self.assistant)
        self.registry.register(self.push)
        self.watches = WatchesMeter()
        self.registry.register(self.watches)
        self._engine: _EngineCollector | None = None
        self._tasks: _TaskCollector | None = None
        self._store: StoreMeter | None = None

    def watch_engine(self, engine: EngineGauges) -> None:
        """Report ``engine``'s gauges (one engine per registry)."""
        if self._engine is not None:
            self.registry.unregister(self._engine)
        self._engine = _EngineCollector(engine)
        self.registry.register(self._engine)

    def count_tasks(self, store: TaskCounts) -> None:
        """Report ``store``'s tasks by state, read by :meth:`refresh` (one store)."""
        if self._tasks is not None:
            self.registry.unregister(self._tasks)
        self._tasks = _TaskCollector(store)
        self.registry.register(self._tasks)

    def watch_store(self, store: StoreGauges) -> None:
        """Time ``store``'s operations and report what it counts (one store, once)."""
        if self._store is not None:
            raise RuntimeError("this registry already watches a store")
        self._store = StoreMeter(store)
        meter_store(store, self._store)
        self.registry.register(self._store)

    async def refresh(self) -> None:
        """Read what is asked for before a scrape renders (the store's task counts;
        bounded by :data:`TASK_COUNT_TIMEOUT_S`, a failure only leaves the gauge out)."""
        if self._tasks is not None:
            await self._tasks.refresh()

    def exposition(self) -> bytes:
        """The registry in the text exposition format (version 0.0.4)."""
        return generate_latest(self.registry)


class _NullMetrics:
    """Metrics off: the bindings take :data:`NULL_METER`; nothing is served."""

    jsonrpc: Final[Meter] = NULL_METER
    rest: Final[Meter] = NULL_METER
    grpc: Final[Meter] = NULL_METER


#: Either a :class:`Metrics` or metrics off; what the bindings hold.
MetricsLike = Metrics | _NullMetrics
NULL_METRICS: Final = _NullMetrics()

__all__ = [
    "BINDINGS",
    "CLIENT_GONE",
    "CONTENT_TYPE",
    "ENGINE_GAUGES",
    "GRPC",
    "HTTP_JSON",
    "INTERNAL",
    "JSONRPC",
    "METHODS",
    "NULL_METER",
    "NULL_METRICS",
    "OK",
    "OTHER",
    "OUTCOMES",
    "STORE_GAUGES",
    "STORE_OPERATIONS",
    "TASK_STATES",
    "UNKNOWN_METHOD",
    "BindingMeter",
    "EngineGauges",
    "Meter",
    "Metrics",
    "MetricsLike",
    "StoreMeter",
    "TaskCounts",
    "WatchesMeter",
    "outcome_of",
]
