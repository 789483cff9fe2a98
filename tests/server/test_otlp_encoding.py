"""Our OTLP encoding of finished spans (server/otlp_encoding.py) against the SDK's own
encoder: the same ExportTraceServiceRequest, decoded with ``opentelemetry-proto``, for
spans of every shape (kinds, statuses, attribute types, a remote and a local parent,
trace state, two resources and two scopes, and the shapes it hands to the SDK: events,
links, sequence attributes); the lean tracer's spans the same way."""

from __future__ import annotations

from typing import Any

from opentelemetry.attributes import BoundedAttributes
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import (
    Link,
    NonRecordingSpan,
    SpanContext,
    SpanKind,
    Status,
    StatusCode,
    TraceFlags,
    TraceState,
    set_span_in_context,
)

from a2a_gateway.server.lean_spans import SpanQueue, lean_tracer
from a2a_gateway.server.otlp_encoding import encode

REMOTE = SpanContext(
    0x0AF7651916CD43DD8448EB211C80319C,
    0xB7AD6B7169203331,
    is_remote=True,
    trace_flags=TraceFlags(1),
    trace_state=TraceState([("vendor", "v1")]),
)


def spans() -> list[ReadableSpan]:
    made: list[ReadableSpan] = []
    one = TracerProvider(resource=Resource.create({"service.name": "a"}))
    two = TracerProvider(resource=Resource.create({"service.name": "b", "n": 3}))
    tracers = [
        one.get_tracer("a2a_gateway"),
        one.get_tracer("other", "1.2", schema_url="https://example.com/s"),
        two.get_tracer("a2a_gateway"),
    ]
    for n, tracer in enumerate(tracers):
        for kind in SpanKind:
            span = tracer.start_span(
                f"span {n} {kind.name}",
                kind=kind,
                attributes={"s": "text", "b": True, "i": -7, "f": 2.5},
            )
            span.end()
            made.append(span)  # type: ignore[arg-type]
    tracer = tracers[0]
    remote_child = tracer.start_span(
        "from a caller", context=set_span_in_context(NonRecordingSpan(REMOTE))
    )
    remote_child.set_status(Status(StatusCode.ERROR, "TaskNotFoundError"))
    local_child = tracer.start_span("local child", context=set_span_in_context(remote_child))
    local_child.set_status(Status(StatusCode.OK))
    local_child.end()
    remote_child.end()
    # A child of a local root: no trace state (its ids packed at once by the encoder).
    root_child = tracer.start_span("child of a root", context=set_span_in_context(made[0]))  # type: ignore[arg-type]
    root_child.end()
    odd = tracer.start_span("odd", attributes={"list": ["a", "b"]}, links=[Link(REMOTE, {"k": 1})])
    odd.add_event("happened", {"when": 1})
    odd.end()
    made += [remote_child, local_child, root_child, odd]  # type: ignore[list-item]
    return made


def test_the_request_is_the_sdks() -> None:
    batch = spans()
    ours = ExportTraceServiceRequest.FromString(encode(batch))
    sdk = ExportTraceServiceRequest.FromString(encode_spans(batch).SerializeToString())
    assert ours == sdk
    assert sum(len(s.spans) for r in ours.resource_spans for s in r.scope_spans) == len(batch)
    assert len(ours.resource_spans) == 2


def test_an_empty_batch() -> None:
    assert ExportTraceServiceRequest.FromString(encode([])) == ExportTraceServiceRequest()


def test_lean_spans_encode_as_the_sdk_encodes_the_same_fields() -> None:
    """Spans of the lean tracer (server/lean_spans.py), of every shape our code makes,
    against the SDK's encoder given a ReadableSpan of the same fields."""
    provider = TracerProvider(resource=Resource.create({"service.name": "lean"}))
    tracer = lean_tracer(provider, SpanQueue(InMemorySpanExporter()), "a2a_gateway")
    made: list[Any] = []
    for kind in SpanKind:
        span = tracer.start_span(
            f"A2A {kind.name}",
            kind=kind,
            attributes={"rpc.method": "SendMessage", "b": True, "i": -7, "f": 2.5},
        )
        span.set_attribute("a2a.task_id", f"task-{kind.value}" * 9)  # past the one-byte length
        span.end()
        made.append(span)
    remote = tracer.start_span(
        "from a caller", context=set_span_in_context(NonRecordingSpan(REMOTE))
    )
    remote.set_status(Status(StatusCode.ERROR, "TaskNotFoundError"))
    local = tracer.start_span("local", context=set_span_in_context(remote))
    local.set_status(StatusCode.OK)
    local.end()
    remote.end()
    root_child = tracer.start_span("child of a root", context=set_span_in_context(made[0]))
    root_child.end()
    odd = tracer.start_span("odd", attributes={"list": ["a", "b"], "long": "x" * 300})
    odd.add_event("happened", {"when": 1})
    odd.end()
    made += [remote, local, root_child, odd]
    copies = [
        ReadableSpan(
            name=s.name,
            context=s.context,
            parent=s.parent,
            resource=s.resource,
            attributes=BoundedAttributes(None, s.attributes),
            events=s.events,
            links=s.links,
            kind=s.kind,
            status=s.status,
            start_time=s.start_time,
            end_time=s.end_time,
            instrumentation_scope=s.instrumentation_scope,
        )
        for s in made
    ]
    ours = ExportTraceServiceRequest.FromString(encode(made))
    sdk = ExportTraceServiceRequest.FromString(encode_spans(copies).SerializeToString())
    assert ours == sdk
    assert sum(len(s.spans) for r in ours.resource_spans for s in r.scope_spans) == len(made)
