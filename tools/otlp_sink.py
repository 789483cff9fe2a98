"""A minimal OTLP/HTTP trace receiver for benchmarks: counts the spans posted to it.

    .venv/bin/python -P tools/otlp_sink.py PORT

``POST /v1/traces`` decodes the protobuf body (``opentelemetry-proto``) and adds its
spans to a count; ``GET /count`` answers that count. A measurement aid, never a test
(the tests' receiver is tests/support/otlp_receiver.py).
"""

from __future__ import annotations

import sys

from aiohttp import web
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2


def app() -> web.Application:
    spans = 0

    async def traces(request: web.Request) -> web.Response:
        nonlocal spans
        body = trace_service_pb2.ExportTraceServiceRequest.FromString(await request.read())
        for resource_spans in body.resource_spans:
            for scope_spans in resource_spans.scope_spans:
                spans += len(scope_spans.spans)
        answer = trace_service_pb2.ExportTraceServiceResponse().SerializeToString()
        return web.Response(body=answer, content_type="application/x-protobuf")

    async def count(_: web.Request) -> web.Response:
        return web.Response(text=str(spans))

    application = web.Application(client_max_size=64 * 1024 * 1024)
    application.router.add_post("/v1/traces", traces)
    application.router.add_get("/count", count)
    return application


if __name__ == "__main__":
    web.run_app(app(), host="127.0.0.1", port=int(sys.argv[1]), print=None)
