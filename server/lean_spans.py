"""Spans made and queued for export at a fraction of the OpenTelemetry SDK's cost.

Tracing every call with the SDK's own spans cost a blocking send ~1.5x its instructions
(docs/performance.md, "Tracing's cost"): per span, the SDK's ``start_span`` (its
``BoundedAttributes``, a lock, the tracer's self-metrics hook, the multi-processor
fan-out), ``end`` (a ``ReadableSpan`` copy of the span) and the ``BatchSpanProcessor``'s
queue (a ``getpid`` system call per span among others), all on the event loop.

:class:`LeanTracer` implements OpenTelemetry's tracing API (``opentelemetry.trace``)
over the SDK's configuration: its ``TracerProvider``'s sampler (``OTEL_TRACES_SAMPLER``
and ``_ARG``), resource (``OTEL_SERVICE_NAME``, ``OTEL_RESOURCE_ATTRIBUTES``) and id
generator. Its :class:`LeanSpan` keeps what a span is (ids, parent, name, kind, times,
attributes, status, events, links) in slots, follows the SDK's span semantics (limits,
status rules, a warning-free no-op once ended) and, ended, is appended to the
:class:`SpanQueue` as it is: no copy. The queue is an SDK ``SpanProcessor`` too (the
provider's own spans go through it), exported from its own thread in batches by any
SDK ``SpanExporter``, its sizes and delay from the standard ``OTEL_BSP_*`` variables.

The sampler's decision is the SDK's: the default sampler (``parentbased_always_on``) is
decided here by its rule (sampled unless the parent is an unsampled one), any other is
asked (``should_sample``). Span limits other than the defaults
(``OTEL_SPAN_ATTRIBUTE_COUNT_LIMIT`` and the like), the SDK's self-metrics, or an SDK
or API release other than the one this was checked on (:data:`CHECKED_SDK`: it reads a
few of their internals) make :func:`lean_tracer` hand back the SDK's own tracer instead:
the lean path serves the default configuration of a known release only.
"""

from __future__ import annotations

import collections
import contextlib
import logging
import os
import random
import threading
import traceback
from collections.abc import Iterator, Mapping, Sequence
from importlib.metadata import version
from time import time_ns
from typing import Any, Final

from opentelemetry import trace as trace_api
from opentelemetry.attributes import BoundedAttributes
from opentelemetry.context import Context
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Event, ReadableSpan, SpanLimits, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace import Span as SdkSpan
from opentelemetry.sdk.trace.export import SpanExporter
from opentelemetry.sdk.trace.id_generator import RandomIdGenerator
from opentelemetry.sdk.trace.sampling import DEFAULT_ON
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import (
    Link,
    NonRecordingSpan,
    SpanContext,
    SpanKind,
    Status,
    StatusCode,
    TraceFlags,
    TraceState,
)
from opentelemetry.util import types

from a2a_gateway.protocol.tracing import parent_context
from a2a_gateway.server.otlp_encoding import NO_TRACE_STATE, UNSET_STATUS

log = logging.getLogger(__name__)

_SIMPLE: Final = (str, bool, int, float)
_SAMPLED: Final = TraceFlags(TraceFlags.SAMPLED)
_SAMPLED_RANDOM: Final = TraceFlags(TraceFlags.SAMPLED | TraceFlags.RANDOM_TRACE_ID)
_DROPPED: Final = TraceFlags(TraceFlags.DEFAULT)
_DROPPED_RANDOM: Final = TraceFlags(TraceFlags.DEFAULT | TraceFlags.RANDOM_TRACE_ID)
_getrandbits: Final = random.getrandbits
_SPAN_ID_BITS: Final = (1 << 64) - 1
_RANDOM_TRACE_ID: Final = int(TraceFlags.RANDOM_TRACE_ID)
_new_context: Final = tuple.__new__  # SpanContext's own constructor, minus re-checking ids

#: The SDK's default span limits (``SpanLimits()`` with no variable set).
MAX_ATTRIBUTES: Final = 128
MAX_EVENTS: Final = 128
MAX_LINKS: Final = 128


def _span_context(trace_id: int, span_id: int, flags: TraceFlags, state: TraceState) -> SpanContext:
    """A local span's context; its ids, generated here, are valid by construction."""
    made: SpanContext = _new_context(SpanContext, (trace_id, span_id, False, flags, state, True))
    return made


def _span_id() -> int:
    span_id = _getrandbits(64)
    while not span_id:
        span_id = _getrandbits(64)
    return span_id


def _trace_id() -> int:
    trace_id = _getrandbits(128)
    while not trace_id:
        trace_id = _getrandbits(128)
    return trace_id


def _root_ids() -> tuple[int, int]:
    """A new trace's id and its root span's: one 192-bit draw split (the SDK's generator
    draws 128 and 64 bits apart; the same uniform ids, one call fewer)."""
    bits = _getrandbits(192)
    trace_id, span_id = bits >> 64, bits & _SPAN_ID_BITS
    if not trace_id or not span_id:  # never zero (the SDK's rule)
        return _trace_id(), _span_id()
    return trace_id, span_id


def _clean(key: str, value: Any) -> Any:
    """A value the SDK would keep for ``key`` (sequences as tuples), or ``None``."""
    if type(value) in _SIMPLE:
        return value
    return BoundedAttributes(None, {key: value}).get(key)


class LeanSpan(trace_api.Span):
    """A recording span (the module docstring). Its fields are those of the SDK's
    ``ReadableSpan`` by the same names, so any SDK exporter reads it as one."""

    # The fields every span sets are slots; the rest are class-level defaults that a
    # span overrides in its own ``__dict__`` when it changes them (an event, a status),
    # and the tracer's resource, scope and queue are class attributes of a subclass
    # per tracer (:meth:`LeanTracer.__init__`): fewer stores per span made.
    __slots__ = (
        "attributes",
        "context",
        "end_time",
        "kind",
        "name",
        "parent",
        "start_time",
    )
    status: Status = UNSET_STATUS
    events: Sequence[Event] = ()
    links: Sequence[Link] = ()
    dropped_attributes = 0
    dropped_events = 0
    dropped_links = 0
    resource: Resource
    instrumentation_scope: InstrumentationScope
    _queue: SpanQueue

    def __init__(
        self,
        name: str,
        context: SpanContext,
        parent: SpanContext | None,
        kind: SpanKind,
        attributes: dict[str, Any],
        start_time: int,
    ) -> None:
        self.name = name
        self.context = context
        self.parent = parent
        self.kind = kind
        self.attributes = attributes
        self.start_time = start_time
        self.end_time: int | None = None

    def __repr__(self) -> str:
        return f'LeanSpan(name="{self.name}", context={self.context})'

    def get_span_context(self) -> SpanContext:
        return self.context

    def is_recording(self) -> bool:
        return self.end_time is None

    def end(self, end_time: int | None = None) -> None:
        if self.end_time is not None:
            return
        self.end_time = end_time or time_ns()
        self._queue.append(self)

    def set_attribute(self, key: str, value: types.AnyValue) -> None:
        """The SDK's rules: a value cleaned (sequences as tuples, others dropped), a key
        set again moved last, the oldest dropped once 128 are held."""
        if self.end_time is not None:
            return
        if not key or type(key) is not str:
            self.dropped_attributes += 1
            return
        attributes = self.attributes
        if type(value) not in _SIMPLE:
            value = _clean(key, value)
            if value is None:  # not a value an attribute may hold
                self.dropped_attributes += 1
                return
        if key in attributes:
            del attributes[key]
        elif len(attributes) >= MAX_ATTRIBUTES:
            del attributes[next(iter(attributes))]
            self.dropped_attributes += 1
        attributes[key] = value

    def set_attributes(self, attributes: Mapping[str, types.AnyValue]) -> None:
        for key, value in attributes.items():
            self.set_attribute(key, value)

    def add_event(
        self, name: str, attributes: types.Attributes = None, timestamp: int | None = None
    ) -> None:
        if self.end_time is not None:
            return
        if len(self.events) >= MAX_EVENTS:
            self.dropped_events += 1
            return
        if not isinstance(self.events, list):
            self.events = []
        bounded = BoundedAttributes(MAX_ATTRIBUTES, attributes, immutable=True)
        self.events.append(Event(name=name, attributes=bounded, timestamp=timestamp))

    def add_link(self, context: SpanContext, attributes: types.Attributes = None) -> None:
        if self.end_time is not None or not (context.is_valid or attributes or context.trace_state):
            return
        if len(self.links) >= MAX_LINKS:
            self.dropped_links += 1
            return
        bounded = BoundedAttributes(MAX_ATTRIBUTES, attributes, immutable=True)
        self.links = [*self.links, Link(context, bounded)]

    def update_name(self, name: str) -> None:
        if self.end_time is None:
            self.name = name

    def set_status(self, status: Status | StatusCode, description: str | None = None) -> None:
        """The SDK's rules: ``OK`` is final, ``UNSET`` changes nothing."""
        if self.end_time is not None or self.status.status_code is StatusCode.OK:
            return
        if isinstance(status, Status):
            if status.status_code is not StatusCode.UNSET:
                self.status = status
        elif status is not StatusCode.UNSET:
            self.status = Status(status, description)

    def record_exception(
        self,
        exception: BaseException,
        attributes: types.Attributes = None,
        timestamp: int | None = None,
        escaped: bool = False,
    ) -> None:
        """The SDK's ``exception`` event (type, message, stack trace)."""
        module = type(exception).__module__
        qualname = type(exception).__qualname__
        named = f"{module}.{qualname}" if module and module != "builtins" else qualname
        recorded: dict[str, types.AnyValue] = {
            "exception.type": named,
            "exception.message": str(exception),
            "exception.stacktrace": "".join(traceback.format_exception(exception)),
            "exception.escaped": str(escaped),
        }
        if attributes:
            recorded.update(attributes)
        self.add_event("exception", recorded, timestamp)


class LeanTracer(trace_api.Tracer):
    """A tracer making :class:`LeanSpan` s, configured by an SDK ``TracerProvider``."""

    def __init__(self, provider: TracerProvider, queue: SpanQueue, name: str) -> None:
        self.sampler = provider.sampler
        self.resource: Resource = provider.resource
        self.id_generator = provider.id_generator
        self.scope = InstrumentationScope(name)
        self.queue = queue
        self._span: type[LeanSpan] = type(
            "LeanSpan",
            (LeanSpan,),
            {
                "__slots__": (),
                "resource": self.resource,
                "instrumentation_scope": self.scope,
                "_queue": queue,
            },
        )
        # The default configuration, decided without calls (the module docstring).
        self._default_sampler = self.sampler is DEFAULT_ON
        self._random_ids = type(self.id_generator) is RandomIdGenerator

    def start_span(
        self,
        name: str,
        context: Context | None = None,
        kind: SpanKind = SpanKind.INTERNAL,
        attributes: types.Attributes = None,
        links: Sequence[Link] | None = (),
        start_time: int | None = None,
        record_exception: bool = True,
        set_status_on_exception: bool = True,
    ) -> trace_api.Span:
        parent = parent_context(context)
        if self._default_sampler and self._random_ids and not links:
            # parentbased_always_on: a root or a sampled parent's child is sampled, an
            # unsampled parent's child is not; the trace state is the parent's. (The
            # parent's context read as the tuple it is: trace id, flags, state.)
            if parent is None:
                trace_id, span_id = _root_ids()
                flags, state = _SAMPLED_RANDOM, NO_TRACE_STATE
            else:
                trace_id, _, _, parent_flags, state, _ = parent
                span_id = _span_id()
                random_ids = parent_flags & _RANDOM_TRACE_ID
                if parent_flags & TraceFlags.SAMPLED:
                    flags = _SAMPLED_RANDOM if random_ids else _SAMPLED
                else:
                    flags = _DROPPED_RANDOM if random_ids else _DROPPED
                    return NonRecordingSpan(_span_context(trace_id, span_id, flags, state))
            made: SpanContext = _new_context(  # _span_context(...), inlined
                SpanContext, (trace_id, span_id, False, flags, state, True)
            )
            # Values are checked by the encoder, which hands odd ones to the SDK's.
            recorded = dict(attributes) if attributes else {}
            if len(recorded) > MAX_ATTRIBUTES:
                recorded = dict(BoundedAttributes(MAX_ATTRIBUTES, recorded))
            return self._span(name, made, parent, kind, recorded, start_time or time_ns())
        return self._sampled_span(name, context, parent, kind, attributes, links, start_time)

    def _sampled_span(
        self,
        name: str,
        context: Context | None,
        parent: SpanContext | None,
        kind: SpanKind,
        attributes: types.Attributes,
        links: Sequence[Link] | None,
        start_time: int | None,
    ) -> trace_api.Span:
        """``start_span`` by the SDK's own steps, for any sampler and id generator."""
        links = [link for link in links or () if link]
        generator = self.id_generator
        trace_id = generator.generate_trace_id() if parent is None else parent.trace_id
        result = self.sampler.should_sample(context, trace_id, name, kind, attributes, links)
        sampled = result.decision.is_sampled()  # type: ignore[no-untyped-call]
        random_ids = (
            generator.is_trace_id_random() if parent is None else parent.trace_flags.random_trace_id
        )
        flags = TraceFlags(
            (TraceFlags.SAMPLED if sampled else TraceFlags.DEFAULT)
            | (TraceFlags.RANDOM_TRACE_ID if random_ids else 0)
        )
        span_context = SpanContext(
            trace_id,
            generator.generate_span_id(),
            is_remote=False,
            trace_flags=flags,
            trace_state=result.trace_state,
        )
        if not result.decision.is_recording():  # type: ignore[no-untyped-call]
            return NonRecordingSpan(span_context)
        recorded = dict(BoundedAttributes(MAX_ATTRIBUTES, result.attributes))
        kept = links[:MAX_LINKS]
        made = self._span(name, span_context, parent, kind, recorded, start_time or time_ns())
        made.dropped_links = len(links) - len(kept)
        made.links = [
            Link(link.context, BoundedAttributes(MAX_ATTRIBUTES, link.attributes, immutable=True))
            for link in kept
        ]
        return made

    @contextlib.contextmanager  # the same protocol as the API's own decorator
    def start_as_current_span(  # type: ignore[override]
        self,
        name: str,
        context: Context | None = None,
        kind: SpanKind = SpanKind.INTERNAL,
        attributes: types.Attributes = None,
        links: Sequence[Link] | None = (),
        start_time: int | None = None,
        record_exception: bool = True,
        set_status_on_exception: bool = True,
        end_on_exit: bool = True,
    ) -> Iterator[trace_api.Span]:
        made = self.start_span(name, context, kind, attributes, links, start_time, record_exception)
        with trace_api.use_span(
            made,
            end_on_exit=end_on_exit,
            record_exception=record_exception,
            set_status_on_exception=set_status_on_exception,
        ) as current:
            yield current


def _env_int(name: str, default: int) -> int:
    """A positive whole number from the environment (the SDK's ``OTEL_BSP_*`` rules:
    anything else is reported and the default used)."""
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        value = int(raw)
    except ValueError:
        value = 0
    if value <= 0:
        log.warning("tracing: %s=%r is not a positive number; %d used", name, raw, default)
        return default
    return value


class SpanQueue(SpanProcessor):
    """Ended spans, exported in batches from one thread (the SDK's
    ``BatchSpanProcessor``'s job and settings, at a lower cost per span).

    Ending a span appends it to a ``deque`` (atomic under the GIL: no lock, no system
    call) and, once a batch is waiting, wakes the worker, which exports the full
    batches waiting; every schedule delay it exports whatever is queued. A full queue
    drops its oldest spans (reported once per export). Settings:
    ``OTEL_BSP_SCHEDULE_DELAY`` (ms, 5000), ``OTEL_BSP_MAX_QUEUE_SIZE`` (2048),
    ``OTEL_BSP_MAX_EXPORT_BATCH_SIZE`` (512).
    """

    def __init__(self, exporter: SpanExporter) -> None:
        self.exporter = exporter
        self.delay_s = _env_int("OTEL_BSP_SCHEDULE_DELAY", 5000) / 1000
        self.max_queue = _env_int("OTEL_BSP_MAX_QUEUE_SIZE", 2048)
        self.batch = min(_env_int("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", 512), self.max_queue)
        self._queue: collections.deque[ReadableSpan] = collections.deque(maxlen=self.max_queue)
        self._wake = threading.Event()
        self._awake = False
        self._stopping = True  # until started: spans ended before are dropped
        self._export_lock = threading.Lock()
        self._worker: threading.Thread | None = None

    def start(self) -> None:
        """Start the worker thread."""
        if self._worker is None:
            self._stopping = False
            self._worker = threading.Thread(target=self._work, name="a2a-span-export", daemon=True)
            self._worker.start()

    def on_start(self, span: SdkSpan, parent_context: Context | None = None) -> None:
        """Nothing: spans are queued once ended."""

    def on_end(self, span: ReadableSpan) -> None:
        """An SDK span ended: queued if sampled (as the batch processor does)."""
        if span.context and span.context.trace_flags.sampled:
            self.append(span)

    def append(self, span: ReadableSpan | LeanSpan) -> None:
        """Queue a sampled span for export (a :class:`LeanSpan` ending comes here)."""
        if self._stopping:
            return
        queue = self._queue
        queue.append(span)  # type: ignore[arg-type]  # a LeanSpan is read as a ReadableSpan
        if len(queue) >= self.batch and not self._awake:
            self._awake = True
            self._wake.set()

    def _work(self) -> None:
        while not self._stopping:
            woken = self._wake.wait(self.delay_s)
            self._wake.clear()
            self._awake = False
            # Woken by a full batch: full batches only (spans ending meanwhile wait for
            # theirs: a post per handful of spans would cost more than the spans).
            # The delay passed: what is queued now, full batch or not.
            self._export(full_only=woken)
        self._export(full_only=False)

    def _export(self, *, full_only: bool) -> None:
        with self._export_lock:
            queue = self._queue
            if len(queue) == self.max_queue:
                log.warning("tracing: the span queue was full; its oldest spans were dropped")
            left = len(queue)  # those queued now; not the ones ending while we post
            while left and not (full_only and left < self.batch):
                take = queue.popleft
                batch = [take() for _ in range(min(self.batch, left, len(queue)))]
                left -= len(batch)
                if not batch:
                    return
                try:
                    self.exporter.export(batch)
                except Exception:  # never let the worker die on one batch
                    log.exception("tracing: a batch of %d spans was not exported", len(batch))

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        """Export what is queued, on the calling thread (the exporter bounds its posts)."""
        self._export(full_only=False)
        return True

    def shutdown(self) -> None:
        """Stop the worker once it has exported what is queued, then the exporter."""
        if self._stopping and self._worker is None:
            self.exporter.shutdown()
            return
        if self._stopping:
            return
        self._stopping = True
        self._wake.set()
        if self._worker is not None:
            self._worker.join(30)
        self.exporter.shutdown()


#: The opentelemetry-sdk and -api releases whose internals this reads (the span
#: context's layout, the default sampler, the current context's variable):
#: tests/server/test_lean_spans.py pins them; another release gets the SDK's tracer.
CHECKED_SDK: Final = "1.45."
CHECKED_DISTRIBUTIONS: Final = ("opentelemetry-sdk", "opentelemetry-api")


def lean_tracer(provider: TracerProvider, queue: SpanQueue, name: str) -> trace_api.Tracer:
    """A :class:`LeanTracer` on ``provider``'s configuration, or the SDK's own tracer when
    that configuration is not one the lean path serves (the module docstring)."""
    provider.add_span_processor(queue)
    self_metrics = os.environ.get("OTEL_PYTHON_SDK_INTERNAL_METRICS_ENABLED", "").lower() == "true"
    limits = SpanLimits()
    default_limits = (
        limits.max_span_attributes == MAX_ATTRIBUTES
        and limits.max_event_attributes == MAX_ATTRIBUTES
        and limits.max_link_attributes == MAX_ATTRIBUTES
        and limits.max_events == MAX_EVENTS
        and limits.max_links == MAX_LINKS
        and limits.max_span_attribute_length is None
        and limits.max_attribute_length is None
    )
    known = all(version(dist).startswith(CHECKED_SDK) for dist in CHECKED_DISTRIBUTIONS)
    if self_metrics or not default_limits or not known:
        return provider.get_tracer(name)
    return LeanTracer(provider, queue, name)


__all__ = ["CHECKED_SDK", "LeanSpan", "LeanTracer", "SpanQueue", "lean_tracer"]
