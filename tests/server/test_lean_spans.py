"""The lean tracer (server/lean_spans.py): spans made the SDK's way at a lower cost.

- the SDK versions it was checked against, and the SDK internals it reads, pinned: a
  new SDK fails here first, loudly, not in a trace that silently changes shape;
- the sampler's decision is the SDK's: the default (parent-based, always on) decided
  here for a root, a sampled and an unsampled parent, remote or local, with the trace
  state passed on; any other sampler (``OTEL_TRACES_SAMPLER``) asked;
- span semantics: attributes and their limit, status rules, nothing changes once ended,
  events and links (exported through the SDK's encoder);
- non-default span limits hand back the SDK's own tracer;
- the queue exports every ended, sampled span in batches of its configured size
  (``OTEL_BSP_*``), drops spans ended before it starts, and exports what is left at
  shutdown.
"""

from __future__ import annotations

import asyncio
import contextvars
from importlib.metadata import version

import pytest
from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Tracer as SdkTracer
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.sampling import DEFAULT_ON
from opentelemetry.trace import (
    NonRecordingSpan,
    SpanContext,
    SpanKind,
    Status,
    StatusCode,
    TraceFlags,
    TraceState,
    set_span_in_context,
)
from opentelemetry.trace.propagation import _SPAN_KEY

from a2a_gateway.protocol import tracing
from a2a_gateway.server import lean_spans
from a2a_gateway.server.lean_spans import CHECKED_SDK, LeanSpan, LeanTracer, SpanQueue, lean_tracer
from a2a_gateway.server.otlp_encoding import encode

#: The SDK releases this module was written against and measured with. A new one:
#: re-read its Tracer.start_span, sampling and context runtime, re-run
#: tools/bench_modes.py --callgrind, then widen this.
TESTED_SDK = (CHECKED_SDK,)

STATE = TraceState([("vendor", "v1")])
TRACE_ID = 0x0AF7651916CD43DD8448EB211C80319C


def parent(*, sampled: bool, remote: bool = True) -> otel_context.Context:
    flags = TraceFlags(TraceFlags.SAMPLED if sampled else TraceFlags.DEFAULT)
    context = SpanContext(TRACE_ID, 0xB7AD6B7169203331, remote, flags, STATE)
    return set_span_in_context(NonRecordingSpan(context))


def made(
    monkeypatch: pytest.MonkeyPatch | None = None,
) -> tuple[trace.Tracer, SpanQueue, InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    queue = SpanQueue(exporter)
    provider = TracerProvider(resource=Resource.create({"service.name": "lean"}))
    return lean_tracer(provider, queue, "a2a_gateway"), queue, exporter


def test_the_sdk_is_a_version_and_shape_this_was_checked_on() -> None:
    assert version("opentelemetry-sdk").startswith(TESTED_SDK), version("opentelemetry-sdk")
    assert version("opentelemetry-api").startswith(TESTED_SDK), version("opentelemetry-api")
    # What is read directly: a SpanContext as its tuple, the default sampler's object,
    # the context variable behind OpenTelemetry's current context.
    context = SpanContext(1, 2, True, TraceFlags(1), STATE)
    assert tuple(context) == (1, 2, True, TraceFlags(1), STATE, True)
    assert TracerProvider().sampler is DEFAULT_ON
    assert isinstance(tracing._OTEL_CONTEXT, contextvars.ContextVar)
    token = otel_context.attach(parent(sampled=True))
    try:
        assert tracing._OTEL_CONTEXT.get() is otel_context.get_current()
    finally:
        otel_context.detach(token)


def test_a_root_and_the_children_of_sampled_parents_are_recorded() -> None:
    tracer, _, _ = made()
    assert isinstance(tracer, LeanTracer)
    root = tracer.start_span("root", kind=SpanKind.SERVER, attributes={"a": "b"})
    assert isinstance(root, LeanSpan) and root.is_recording()
    ids = root.get_span_context()
    assert ids.is_valid and not ids.is_remote and ids.trace_flags.sampled
    assert ids.trace_flags.random_trace_id  # as the SDK's random id generator marks it
    assert root.parent is None and root.kind is SpanKind.SERVER and root.attributes == {"a": "b"}
    for remote in (True, False):
        child = tracer.start_span("child", context=parent(sampled=True, remote=remote))
        assert isinstance(child, LeanSpan)
        assert child.context.trace_id == TRACE_ID and child.context.trace_state == STATE
        assert child.parent is not None and child.parent.span_id == 0xB7AD6B7169203331
        assert child.parent.is_remote is remote
    local = tracer.start_span("local", context=set_span_in_context(root))
    assert local.get_span_context().trace_id == ids.trace_id
    assert local.parent.span_id == ids.span_id  # type: ignore[attr-defined]


@pytest.mark.parametrize("remote", [True, False])
def test_a_child_of_an_unsampled_parent_is_not_recorded_and_carries_the_trace(remote: bool) -> None:
    tracer, queue, exporter = made()
    queue.start()
    child = tracer.start_span("child", context=parent(sampled=False, remote=remote))
    assert isinstance(child, NonRecordingSpan) and not child.is_recording()
    ids = child.get_span_context()
    assert ids.trace_id == TRACE_ID and not ids.trace_flags.sampled and ids.trace_state == STATE
    assert ids.span_id != 0xB7AD6B7169203331
    child.end()
    queue.shutdown()
    assert exporter.get_finished_spans() == ()


@pytest.mark.parametrize(
    ("sampler", "argument", "recorded"),
    [
        ("always_off", "", False),
        ("traceidratio", "0", False),
        ("traceidratio", "1", True),
        ("parentbased_always_off", "", False),
    ],
)
def test_another_sampler_from_the_environment_decides(
    monkeypatch: pytest.MonkeyPatch, sampler: str, argument: str, recorded: bool
) -> None:
    monkeypatch.setenv("OTEL_TRACES_SAMPLER", sampler)
    monkeypatch.setenv("OTEL_TRACES_SAMPLER_ARG", argument)
    tracer, queue, exporter = made()
    queue.start()
    span = tracer.start_span("root", attributes={"k": 1})
    assert span.is_recording() is recorded
    assert span.get_span_context().trace_flags.sampled is recorded
    span.end()
    queue.shutdown()
    assert [s.name for s in exporter.get_finished_spans()] == (["root"] if recorded else [])


def test_span_semantics_follow_the_sdks() -> None:
    tracer, _, _ = made()
    ours = tracer.start_span("s")
    assert isinstance(ours, LeanSpan)
    sdk = TracerProvider().get_tracer("sdk").start_span("s")
    for span in (ours, sdk):  # the same calls on both
        span.set_attribute("n", 1)
        span.set_attributes({"list": ["a", "b"], "none": None, "": 1})
        span.set_attribute("n", 2)  # set again: moved last
        for n in range(200):
            span.set_attribute(f"k{n}", n)  # past 128: the oldest dropped
        span.set_status(StatusCode.UNSET)
        span.set_status(Status(StatusCode.ERROR, "Boom"))
        span.set_status(StatusCode.OK)
        span.set_status(StatusCode.ERROR, "ignored")  # OK is final
        span.update_name("renamed")
        span.end()
        span.set_attribute("late", 1)
        span.end()
    assert list(ours.attributes.items()) == list((sdk.attributes or {}).items())  # type: ignore[attr-defined]
    assert ours.attributes["k199"] == 199 and len(ours.attributes) == 128
    assert ours.dropped_attributes == sdk.dropped_attributes  # type: ignore[attr-defined]
    assert ours.status.status_code is StatusCode.OK is sdk.status.status_code  # type: ignore[attr-defined]
    assert ours.name == "renamed" and not ours.is_recording()


def test_events_links_and_odd_values_are_encoded_as_the_sdk_would() -> None:
    tracer, _, _ = made()
    span = tracer.start_span("odd", attributes={"list": ["a", "b"]})
    assert isinstance(span, LeanSpan)
    span.add_event("happened", {"when": 1})
    span.record_exception(ValueError("no"))
    span.add_link(SpanContext(TRACE_ID, 5, True, TraceFlags(1)), {"k": 1})
    span.end()
    plain = tracer.start_span("plain", kind=SpanKind.CLIENT, attributes={"b": True, "f": 2.5})
    plain.set_status(Status(StatusCode.ERROR, "TaskNotFoundError"))
    plain.end()
    request = ExportTraceServiceRequest.FromString(encode([span, plain]))  # type: ignore[arg-type]
    (resource,) = request.resource_spans
    (scope,) = resource.scope_spans
    assert scope.scope.name == "a2a_gateway"
    odd, simple = scope.spans
    assert [e.name for e in odd.events] == ["happened", "exception"]
    assert {a.key for a in odd.events[1].attributes} >= {"exception.type", "exception.message"}
    assert odd.links[0].span_id == (5).to_bytes(8, "big")
    assert list(odd.attributes[0].value.array_value.values[1].string_value) == list("b")
    assert simple.kind == simple.SpanKind.SPAN_KIND_CLIENT
    assert simple.status.code == simple.status.StatusCode.STATUS_CODE_ERROR
    assert simple.status.message == "TaskNotFoundError"
    assert {a.key: a.value.double_value or a.value.bool_value for a in simple.attributes} == {
        "b": True,
        "f": 2.5,
    }


def test_limits_other_than_the_defaults_get_the_sdks_tracer(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OTEL_SPAN_ATTRIBUTE_COUNT_LIMIT", "3")
    tracer, queue, exporter = made()
    assert isinstance(tracer, SdkTracer)
    queue.start()
    span = tracer.start_span("sdk", attributes={"a": 1, "b": 2, "c": 3, "d": 4})
    span.end()
    queue.shutdown()
    (exported,) = exporter.get_finished_spans()
    assert len(exported.attributes or {}) == 3  # the SDK's span, through our queue


@pytest.mark.parametrize("release", ["1.46.0", "2.0.0"])
def test_an_sdk_release_this_was_not_checked_on_gets_the_sdks_tracer(
    monkeypatch: pytest.MonkeyPatch, release: str
) -> None:
    # The installed release cannot change in a test: the lookup of it is what changes.
    monkeypatch.setattr(lean_spans, "version", lambda _distribution: release)
    tracer, queue, _exporter = made()
    assert isinstance(tracer, SdkTracer)
    assert not isinstance(tracer, LeanTracer)
    queue.shutdown()


def test_the_queue_exports_in_batches_and_what_is_left_at_shutdown(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "4")
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "3600000")  # only a full batch wakes it
    tracer, queue, exporter = made()
    tracer.start_span("before the start").end()  # dropped: not exporting yet
    queue.start()
    for n in range(10):
        tracer.start_span(f"s{n}").end()
    queue.force_flush()
    assert [s.name for s in exporter.get_finished_spans()] == [f"s{n}" for n in range(10)]
    tracer.start_span("last").end()
    queue.shutdown()
    assert exporter.get_finished_spans()[-1].name == "last"
    tracer.start_span("after").end()
    assert len(exporter.get_finished_spans()) == 11


def test_a_full_queue_drops_its_oldest_spans(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTEL_BSP_MAX_QUEUE_SIZE", "5")
    monkeypatch.setenv("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "100")  # bounded by the queue: 5
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "3600000")
    tracer, queue, exporter = made()
    assert queue.batch == 5
    queue._stopping = False  # accepting, with no worker: nothing exported meanwhile
    for n in range(8):
        tracer.start_span(f"s{n}").end()
    queue.force_flush()
    assert [s.name for s in exporter.get_finished_spans()] == [f"s{n}" for n in range(3, 8)]
    queue.shutdown()


async def test_the_run_span_is_the_calls_child_and_current_inside() -> None:
    tracer, _, _ = made()
    call = tracer.start_span("A2A SendMessage", kind=SpanKind.SERVER)
    with tracing.Current(call, tracer):
        child = tracing.start_child("A2A run", attributes={"a2a.task_id": "t"})
        assert isinstance(child, LeanSpan)
        assert child.parent is not None and child.parent.span_id == call.get_span_context().span_id
        with tracing.Current(child, tracer):
            assert trace.get_current_span() is child
            headers: dict[str, str] = {}
            tracing.inject(headers)
            assert headers["traceparent"].split("-")[2] == f"{child.context.span_id:016x}"
        assert trace.get_current_span() is call
    assert tracing.start_child("outside") is None
    assert trace.get_current_span() is not call


async def test_a_task_made_in_a_traced_call_starts_with_its_span_current() -> None:
    # The engine's run: its span started where the run is made, its task created in a
    # context where that span is current; the call's own context unchanged.
    tracer, _, _ = made()
    call = tracer.start_span("A2A SendMessage", kind=SpanKind.SERVER)
    seen: list[object] = []

    async def run() -> None:
        seen.append(trace.get_current_span())
        seen.append(tracing.current_tracer())
        seen.append(tracing.parent_context())

    with tracing.Current(call, tracer):
        made_here = tracing.start_task_span("A2A run", {"a2a.task_id": "t"})
        assert made_here is not None
        child, context = made_here
        assert isinstance(child, LeanSpan) and context is not None
        assert child.parent is not None and child.parent.span_id == call.get_span_context().span_id
        assert child.attributes == {"a2a.task_id": "t"}
        assert trace.get_current_span() is call
        await asyncio.create_task(run(), context=context)
        assert trace.get_current_span() is call
    assert seen == [child, tracer, child.get_span_context()]
    assert tracing.start_task_span("outside") is None
    with tracing.Current(NonRecordingSpan(parent_context_of(sampled=False)), tracer):
        assert tracing.start_task_span("unsampled") is None  # no child of an unsampled trace


def parent_context_of(*, sampled: bool) -> SpanContext:
    flags = TraceFlags(TraceFlags.SAMPLED if sampled else TraceFlags.DEFAULT)
    return SpanContext(TRACE_ID, 0xB7AD6B7169203331, True, flags, STATE)


def test_the_current_span_is_read_as_the_api_reads_it() -> None:
    tracer, _, _ = made()
    assert tracing.parent_context() is None
    assert tracing.parent_context(parent(sampled=False)) == parent_context_of(sampled=False)
    not_a_span = otel_context.set_value(_SPAN_KEY, "not a span")
    assert trace.get_current_span(not_a_span) is trace.INVALID_SPAN
    assert tracing.parent_context(not_a_span) is None
    invalid = set_span_in_context(trace.INVALID_SPAN)
    assert tracing.parent_context(invalid) is None
    root = tracer.start_span("root")
    assert tracing.parent_context(set_span_in_context(root)) is root.get_span_context()
    # A root's ids (one random draw, split) are never zero, and differ span to span.
    ids = {tracer.start_span("r").get_span_context()[:2] for _ in range(50)}
    assert len(ids) == 50 and all(trace_id and span_id for trace_id, span_id in ids)
