"""The exporter's plain-http transport (server/tracing.py, ``PlainHttpTransport``): the
SDK's OTLP/HTTP client posting over one kept-alive ``http.client`` connection.

- chosen for a plain ``http://`` endpoint only, and not when a proxy or a credential
  provider is configured in the environment (then the SDK's ``requests`` session);
- its posts reach a real receiver, on one connection while it stays open, and on a new
  one after the receiver closed it (the SDK's client retries a connection error);
- a receiver's error status is reported as the SDK's client reports it.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import pytest
from aiohttp import web
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from a2a_gateway.server.lean_spans import SpanQueue, lean_tracer
from a2a_gateway.server.tracing import PlainHttpTransport, exporter_for

PROXY_ENV = ("http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY")


@pytest.fixture(autouse=True)
def _no_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in (*PROXY_ENV, "no_proxy", "NO_PROXY"):
        monkeypatch.delenv(name, raising=False)


def transport_of(exporter: object) -> object:
    return exporter._client._transport  # type: ignore[attr-defined]


class Receiver:
    """A receiver that records, per post, the client's address (its connection) and the
    span names; ``status`` answers every post with that status."""

    def __init__(self) -> None:
        self.posts: list[tuple[object, list[str]]] = []
        self.status = 200
        self.port = 0
        self._runner: web.AppRunner | None = None

    async def _traces(self, request: web.Request) -> web.Response:
        body = trace_service_pb2.ExportTraceServiceRequest.FromString(await request.read())
        names = [s.name for r in body.resource_spans for ss in r.scope_spans for s in ss.spans]
        self.posts.append((request.transport.get_extra_info("peername"), names))  # type: ignore[union-attr]
        answer = trace_service_pb2.ExportTraceServiceResponse().SerializeToString()
        return web.Response(body=answer, status=self.status, content_type="application/x-protobuf")

    async def start(self) -> None:
        app = web.Application()
        app.router.add_post("/v1/traces", self._traces)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", self.port)
        await site.start()
        self.port = self._runner.addresses[0][1]

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None


@contextlib.asynccontextmanager
async def receiving() -> AsyncIterator[Receiver]:
    receiver = Receiver()
    await receiver.start()
    try:
        yield receiver
    finally:
        await receiver.stop()


def spans(*names: str) -> list[object]:
    tracer = lean_tracer(
        TracerProvider(resource=Resource.create({})), SpanQueue(InMemorySpanExporter()), "t"
    )
    made = []
    for name in names:
        span = tracer.start_span(name)
        span.end()
        made.append(span)
    return made


def test_the_plain_transport_only_for_plain_http_without_proxy_or_credentials(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert isinstance(transport_of(exporter_for("http://127.0.0.1:4318")), PlainHttpTransport)
    assert not isinstance(transport_of(exporter_for("https://127.0.0.1:4318")), PlainHttpTransport)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://127.0.0.1:4318/v1/traces")
    assert isinstance(transport_of(exporter_for("")), PlainHttpTransport)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "https://collector:4318/v1/traces")
    assert not isinstance(transport_of(exporter_for("")), PlainHttpTransport)
    monkeypatch.setenv("HTTP_PROXY", "http://proxy.invalid:3128")
    assert not isinstance(transport_of(exporter_for("http://127.0.0.1:4318")), PlainHttpTransport)


async def test_posts_reach_the_receiver_on_one_connection_and_on_a_new_one_after_it_closed() -> (
    None
):
    async with receiving() as receiver:
        exporter = exporter_for(f"http://127.0.0.1:{receiver.port}")
        assert isinstance(transport_of(exporter), PlainHttpTransport)
        for names in (("a", "b"), ("c",)):
            assert (
                await asyncio.to_thread(exporter.export, spans(*names)) is SpanExportResult.SUCCESS
            )  # type: ignore[arg-type]
        assert [names for _, names in receiver.posts] == [["a", "b"], ["c"]]
        assert receiver.posts[0][0] == receiver.posts[1][0]  # the same connection
        # The receiver restarts on its port: the kept connection is dead; the post is
        # retried on a new one.
        await receiver.stop()
        await receiver.start()
        assert await asyncio.to_thread(exporter.export, spans("d")) is SpanExportResult.SUCCESS  # type: ignore[arg-type]
        assert receiver.posts[-1][1] == ["d"]
        assert receiver.posts[-1][0] != receiver.posts[0][0]
        # A refusal is the SDK client's failure (400: not retried).
        receiver.status = 400
        assert await asyncio.to_thread(exporter.export, spans("e")) is SpanExportResult.FAILURE  # type: ignore[arg-type]
        exporter.shutdown()


async def test_an_unreachable_receiver_is_a_failure_not_a_crash() -> None:
    async with receiving() as receiver:
        port = receiver.port
    exporter = exporter_for(f"http://127.0.0.1:{port}")
    exporter._client._timeout = 0.5  # type: ignore[attr-defined]  # retries bounded by it
    assert await asyncio.to_thread(exporter.export, spans("x")) is SpanExportResult.FAILURE  # type: ignore[arg-type]
    exporter.shutdown()
