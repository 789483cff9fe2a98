"""What a span costs, in-process, piece by piece (docs/performance.md, issue 28).

    .venv/bin/python -P tools/bench_tracing.py

Per span, best of several rounds, on this machine:

- ``sdk start+end``: OpenTelemetry SDK's ``start_span`` and ``end`` with the attributes
  of our call span, on a provider with no processor (the span object alone);
- ``+ batch processor``: the same with a ``BatchSpanProcessor`` whose exporter does
  nothing (the processor's queue and its thread);
- ``sdk encode``: the OTLP exporter's protobuf encoding of finished spans (``encode_spans``
  and serialising), in batches of 512: what the exporter's thread does before posting;
- ``export to a receiver``: the OTLP/HTTP exporter posting batches of 512 to a local
  receiver (tools/otlp_sink.py, its own process): encoding and the HTTP post;
- ``our call span``: :class:`Traced`'s wrapper around an awaited call that does nothing,
  with the batch processor and a null exporter (start, attributes, context, end);
- ``unsampled``: the same under ``traceidratio`` 0 (the sampler drops every trace);
- ``lean``: the same with the gateway's own tracer (server/lean_spans.py: its spans and
  its queue, a null exporter), and our encoder on its spans.

The end-to-end cost per send (two spans, the service around them) is tools/bench_modes.py's.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.sdk.trace.sampling import TraceIdRatioBased
from opentelemetry.trace import SpanKind, Tracer

import lf.a2a.v1.a2a_pb2 as pb
from a2a_gateway.protocol.context import CallContext, Caller
from a2a_gateway.server.lean_spans import SpanQueue, lean_tracer
from a2a_gateway.server.otlp_encoding import encode
from a2a_gateway.server.tracing import Traced

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))  # python -P leaves the script's folder out

from load import free_port  # noqa: E402

ROUNDS = 5
SPANS = 20_000
ATTRIBUTES = {
    "rpc.system": "a2a",
    "rpc.method": "SendMessage",
    "a2a.binding": "JSONRPC",
    "a2a.caller": "anonymous",
}


class Null(SpanExporter):
    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        return SpanExportResult.SUCCESS


def best_us(fn: Callable[[], object], count: int) -> float:
    best = float("inf")
    for _ in range(ROUNDS):
        start = time.perf_counter_ns()
        fn()
        best = min(best, (time.perf_counter_ns() - start) / count / 1000)
    return best


def provider(exporter: SpanExporter | None, **kwargs: object) -> TracerProvider:
    made = TracerProvider(resource=Resource.create({SERVICE_NAME: "bench"}), **kwargs)  # type: ignore[arg-type]
    if exporter is not None:
        made.add_span_processor(BatchSpanProcessor(exporter))
    return made


def spans_loop(made: TracerProvider) -> Callable[[], None]:
    tracer = made.get_tracer("bench")

    def run() -> None:
        for _ in range(SPANS):
            tracer.start_span("A2A SendMessage", kind=SpanKind.SERVER, attributes=ATTRIBUTES).end()

    return run


def finished(count: int) -> list[ReadableSpan]:
    made = provider(None)
    tracer = made.get_tracer("bench")
    spans = []
    for _ in range(count):
        span = tracer.start_span("A2A SendMessage", kind=SpanKind.SERVER, attributes=ATTRIBUTES)
        span.set_attribute("a2a.task_id", "0" * 32)
        span.end()
        spans.append(span)
    return spans  # type: ignore[return-value]


def lean(made: TracerProvider) -> Tracer:
    """The gateway's lean tracer on ``made``, its queue exporting to nothing."""
    queue = SpanQueue(Null())
    queue.start()
    return lean_tracer(made, queue, "bench")


def lean_loop() -> Callable[[], None]:
    tracer = lean(provider(None))

    def run() -> None:
        for _ in range(SPANS):
            tracer.start_span("A2A SendMessage", kind=SpanKind.SERVER, attributes=ATTRIBUTES).end()

    return run


def lean_finished(count: int) -> list[ReadableSpan]:
    tracer = lean(provider(None))
    spans = []
    for n in range(count):
        span = tracer.start_span("A2A SendMessage", kind=SpanKind.SERVER, attributes=ATTRIBUTES)
        span.set_attribute("a2a.task_id", f"{n:032x}")
        span.end()
        spans.append(span)
    return spans  # type: ignore[return-value]


def wrapper_loop(made: TracerProvider | Tracer) -> Callable[[], None]:
    tracer = made if isinstance(made, Tracer) else made.get_tracer("bench")
    traced = Traced(None, tracer)  # type: ignore[arg-type]
    context = CallContext(caller=Caller("anonymous"), binding="JSONRPC")
    request = pb.SendMessageRequest()
    answer = pb.SendMessageResponse()

    async def call() -> pb.SendMessageResponse:
        return answer

    async def many() -> None:
        for _ in range(SPANS):
            await traced.unary("SendMessage", request, call(), context)

    def run() -> None:
        asyncio.run(many())

    return run


def main() -> None:
    batch = finished(512)
    rows = [
        ("sdk start+end, no processor", best_us(spans_loop(provider(None)), SPANS)),
        ("+ batch processor (null exporter)", best_us(spans_loop(provider(Null())), SPANS)),
        (
            "sdk encode (encode_spans + serialise), batches of 512",
            best_us(
                lambda: [encode_spans(batch).SerializePartialToString() for _ in range(8)], 8 * 512
            ),
        ),
    ]
    rows.append(
        (
            "our encode (server/otlp_encoding.py), batches of 512",
            best_us(lambda: [encode(batch) for _ in range(8)], 8 * 512),
        )
    )
    port = free_port()

    sink = subprocess.Popen([sys.executable, "-P", str(ROOT / "tools" / "otlp_sink.py"), str(port)])
    try:
        time.sleep(1.5)
        exporter = OTLPSpanExporter(endpoint=f"http://127.0.0.1:{port}/v1/traces")
        rows.append(
            (
                "export to a receiver (encode + HTTP post), batches of 512",
                best_us(lambda: [exporter.export(batch) for _ in range(8)], 8 * 512),
            )
        )
        exporter.shutdown()  # type: ignore[no-untyped-call]
    finally:
        sink.terminate()
        sink.wait()
    rows.append(
        (
            "our call span (Traced.unary), null exporter",
            best_us(wrapper_loop(provider(Null())), SPANS),
        )
    )
    dropped = provider(Null(), sampler=TraceIdRatioBased(0.0))
    rows.append(
        ("our call span, unsampled (traceidratio 0)", best_us(wrapper_loop(dropped), SPANS))
    )
    rows.append(("lean start+end and queue (null exporter)", best_us(lean_loop(), SPANS)))
    lean_batch = lean_finished(512)
    rows.append(
        (
            "our encode of lean spans, batches of 512",
            best_us(lambda: [encode(lean_batch) for _ in range(8)], 8 * 512),
        )
    )
    rows.append(("our call span, lean tracer", best_us(wrapper_loop(lean(provider(None))), SPANS)))
    for name, us in rows:
        print(f"{name:60} {us:7.2f} us")


if __name__ == "__main__":
    main()
