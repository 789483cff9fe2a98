"""A real OTLP/HTTP trace receiver for tests: an aiohttp server on 127.0.0.1 that
decodes what the OpenTelemetry exporter posts to ``/v1/traces`` with the
``opentelemetry-proto`` messages, and keeps every span it was sent."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

from aiohttp import web
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2
from opentelemetry.proto.trace.v1 import trace_pb2


@dataclass(frozen=True)
class ReceivedSpan:
    """One span as received: ids in hex, its attributes as plain values."""

    name: str
    kind: str  # SERVER, CLIENT, INTERNAL, ...
    trace_id: str
    span_id: str
    parent_id: str
    service: str
    attributes: dict[str, object]
    error: bool


@dataclass
class OtlpReceiver:
    spans: list[ReceivedSpan] = field(default_factory=list)
    url: str = ""

    def named(self, name: str) -> list[ReceivedSpan]:
        return [s for s in self.spans if s.name == name]

    def one(self, name: str) -> ReceivedSpan:
        found = self.named(name)
        assert len(found) == 1, (name, [s.name for s in self.spans])
        return found[0]

    async def _traces(self, request: web.Request) -> web.Response:
        body = trace_service_pb2.ExportTraceServiceRequest.FromString(await request.read())
        for resource_spans in body.resource_spans:
            service = next(
                (
                    a.value.string_value
                    for a in resource_spans.resource.attributes
                    if a.key == "service.name"
                ),
                "",
            )
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    self.spans.append(_received(span, service))
        answer = trace_service_pb2.ExportTraceServiceResponse().SerializeToString()
        return web.Response(body=answer, content_type="application/x-protobuf")


def _value(value: object) -> object:
    kind = value.WhichOneof("value")  # type: ignore[attr-defined]
    return getattr(value, kind) if kind else None


def _received(span: trace_pb2.Span, service: str) -> ReceivedSpan:
    return ReceivedSpan(
        name=span.name,
        kind=trace_pb2.Span.SpanKind.Name(span.kind).removeprefix("SPAN_KIND_"),
        trace_id=span.trace_id.hex(),
        span_id=span.span_id.hex(),
        parent_id=span.parent_span_id.hex(),
        service=service,
        attributes={a.key: _value(a.value) for a in span.attributes},
        error=span.status.code == trace_pb2.Status.STATUS_CODE_ERROR,
    )


@contextlib.asynccontextmanager
async def otlp_receiver() -> AsyncIterator[OtlpReceiver]:
    receiver = OtlpReceiver()
    app = web.Application()
    app.router.add_post("/v1/traces", receiver._traces)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    receiver.url = f"http://127.0.0.1:{runner.addresses[0][1]}"
    try:
        yield receiver
    finally:
        await runner.cleanup()
