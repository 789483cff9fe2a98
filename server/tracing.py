"""Traces of a gateway: a span per inbound call, exported over OTLP/HTTP.

Off unless ``serve --otlp-endpoint URL`` or the standard
``OTEL_EXPORTER_OTLP_ENDPOINT`` / ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` is set; off, the
service is not wrapped at all and nothing below runs. On, :class:`Traced` wraps the
gateway's service: every call becomes a ``SERVER`` span, a child of the caller's W3C
``traceparent`` when the binding found one (:attr:`CallContext.traceparent`), with the
binding, the rpc, the caller's name and the task id as attributes. The call then runs
"traced by" this gateway's tracer (:mod:`a2a_gateway.protocol.tracing`), so the engine's
run, the model's calls, the tools and our client's outbound calls add their own spans
to the same trace and pass it on to the next agent.

Configuration is OpenTelemetry's (a ``TracerProvider`` from the standard ``OTEL_*``
variables: sampler, resource, span limits, ``OTEL_BSP_*``; the SDK's OTLP/HTTP
exporter), but spans are made by :mod:`a2a_gateway.server.lean_spans` (the SDK's own
span cost a blocking send ~1.5x its instructions; docs/performance.md) and exported in
batches from that module's queue thread (never on the event loop);
:meth:`Tracing.aclose` flushes what is left, within a bound.
"""

from __future__ import annotations

import asyncio
import dataclasses
import http.client
import logging
import os
import threading
import urllib.parse
import urllib.request
from collections.abc import AsyncIterator, Awaitable, Mapping, Sequence
from typing import Any, Final, TypeVar

from google.protobuf import message
from opentelemetry.exporter.http.transport._base import BaseHTTPResult, BaseHTTPTransport
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SpanExportResult
from opentelemetry.trace import Span, SpanKind, Tracer

import lf.a2a.v1.a2a_pb2 as pb
from a2a_gateway.protocol.closing import Startable
from a2a_gateway.protocol.context import CallContext
from a2a_gateway.protocol.service import A2AService
from a2a_gateway.protocol.service_wrapper import WrappedService
from a2a_gateway.protocol.tracing import (
    TRACEPARENT,
    TRACESTATE,
    Current,
    enter_context,
    extract,
    leave_context,
    mark_failed,
    with_span,
)
from a2a_gateway.server.lean_spans import SpanQueue, lean_tracer
from a2a_gateway.server.otlp_encoding import encode

log = logging.getLogger(__name__)
T = TypeVar("T")

#: The standard variables the OTLP exporter reads when no endpoint is given.
OTLP_ENV: Final = ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
#: How long closing waits for the last spans to be exported.
FLUSH_BOUND_S: Final = 5.0
#: What a gateway's spans are named by, unless ``OTEL_SERVICE_NAME`` says otherwise.
DEFAULT_SERVICE_NAME: Final = "a2a-gateway"
#: Past this many (rpc, binding, caller) triples, the call spans' names made are dropped.
_NAMED_BOUND: Final = 1024


def tracing_wanted(endpoint: str) -> bool:
    """Whether tracing is on: an endpoint given, or one in the standard environment."""
    return bool(endpoint) or any(os.environ.get(name) for name in OTLP_ENV)


def traces_url(endpoint: str) -> str:
    """The OTLP/HTTP traces URL for a base endpoint (the spec appends ``/v1/traces``)."""
    if endpoint.rstrip("/").endswith("/v1/traces"):
        return endpoint
    return endpoint.rstrip("/") + "/v1/traces"


class LeanOtlpExporter(OTLPSpanExporter):
    """The SDK's OTLP/HTTP span exporter (its endpoint, headers, TLS, compression,
    timeout and retries, from its arguments and the standard environment), encoding
    with :func:`~a2a_gateway.server.otlp_encoding.encode`: the same request, at about a
    quarter of the SDK encoder's cost per span (docs/performance.md). Left out of the
    SDK's ``export``: its opt-in self-metrics and its 64 MiB request-size check (a
    batch of 512 of our spans is ~100 KB)."""

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        if self._shutdown:
            return SpanExportResult.FAILURE
        try:
            data = encode(spans)
        except Exception:  # never let the exporter's thread die on one batch
            log.exception("tracing: a batch of %d spans could not be encoded", len(spans))
            return SpanExportResult.FAILURE
        sent = self._client.export(data)
        return SpanExportResult.SUCCESS if sent.success else SpanExportResult.FAILURE


@dataclasses.dataclass(frozen=True, slots=True)
class _Answer(BaseHTTPResult):
    """What the receiver answered (or the error), as the SDK's client reads it."""

    body: bytes = b""
    #: The answer's ``http.client`` message (its ``get`` ignores a name's case).
    fields: Any = None

    def content(self) -> bytes:
        return self.body

    def headers(self) -> Mapping[str, str]:
        found: Mapping[str, str] = self.fields if self.fields is not None else {}
        return found


class PlainHttpTransport(BaseHTTPTransport):
    """The exporter's posts over one kept-alive ``http.client`` connection, for a plain
    ``http://`` endpoint reached without a proxy: the SDK's client around it is
    unchanged (headers, compression, timeout, retries and their backoff), only the
    post is cheaper than through ``requests`` (its session, environment, cookie and
    hook work per post: docs/performance.md). A connection error drops the
    connection; the SDK's client retries once at once, on a new one."""

    def __init__(self) -> None:
        self._connection: http.client.HTTPConnection | None = None
        self._targets: dict[str, tuple[str, int, str]] = {}
        self._lock = threading.Lock()

    def request(
        self,
        method: str,
        url: str,
        *,
        headers: dict[str, str] | None = None,
        timeout: float | None = None,
        data: bytes | None = None,
    ) -> BaseHTTPResult:
        target = self._targets.get(url)
        if target is None:
            parts = urllib.parse.urlsplit(url)
            path = parts.path or "/"
            target = (
                parts.hostname or "",
                parts.port or 80,  # given: a bare IPv6 address is not read as host:port
                path + ("?" + parts.query if parts.query else ""),
            )
            self._targets = {url: target}  # one endpoint per exporter
        host, port, path = target
        with self._lock:
            try:
                connection = self._connection
                if connection is None or (connection.host, connection.port) != (host, port):
                    self._close()
                    connection = self._connection = http.client.HTTPConnection(
                        host, port, timeout=timeout
                    )
                elif connection.sock is not None:
                    connection.sock.settimeout(timeout)
                else:
                    connection.timeout = timeout
                connection.request(method, path, body=data, headers=headers or {})
                response = connection.getresponse()
                body = response.read()
                if response.will_close:
                    self._close()
            except Exception as error:  # the SDK's client decides: retry or report
                self._close()
                return _Answer(error=error)
        return _Answer(
            status_code=response.status, reason=response.reason, body=body, fields=response.msg
        )

    def is_connection_error(self, exception: Exception | None) -> bool:
        return isinstance(exception, (OSError, http.client.HTTPException))

    def _close(self) -> None:
        connection, self._connection = self._connection, None
        if connection is not None:
            connection.close()

    def close(self) -> None:
        with self._lock:
            self._close()


#: The variables naming a ``requests`` session for the exporter (the SDK's credential
#: provider): with one set, the SDK's own transport is kept.
_CREDENTIAL_ENV: Final = (
    "OTEL_PYTHON_EXPORTER_OTLP_HTTP_CREDENTIAL_PROVIDER",
    "OTEL_PYTHON_EXPORTER_OTLP_HTTP_TRACES_CREDENTIAL_PROVIDER",
)


def exporter_for(endpoint: str) -> LeanOtlpExporter:
    """The OTLP/HTTP exporter for ``endpoint`` (``""``: the standard environment's): with
    :class:`PlainHttpTransport` when its URL is plain ``http`` with no proxy and no
    credential provider in the environment, else with the SDK's own (``requests``)."""
    url = traces_url(endpoint) if endpoint else None
    exporter = LeanOtlpExporter(endpoint=url)
    resolved = str(getattr(exporter, "_endpoint", ""))
    if (
        resolved.startswith("http://")
        and not urllib.request.getproxies()
        and not any(os.environ.get(name) for name in _CREDENTIAL_ENV)
    ):
        try:
            plain = LeanOtlpExporter(endpoint=url, _transport=PlainHttpTransport())
        except TypeError:  # an exporter release without the transport argument
            return exporter
        exporter.shutdown()  # type: ignore[no-untyped-call]
        return plain
    return exporter


class Tracing(Startable):
    """One gateway's tracer provider and exporter (its own, never the global one). Its
    worker thread runs from :meth:`start` to :meth:`aclose`; spans before are dropped."""

    def __init__(self, endpoint: str = "", *, service_name: str = "") -> None:
        name = service_name or os.environ.get("OTEL_SERVICE_NAME") or DEFAULT_SERVICE_NAME
        self.endpoint = endpoint
        self.provider = TracerProvider(resource=Resource.create({SERVICE_NAME: name}))
        # No endpoint given: the exporter reads the standard environment itself.
        exporter = exporter_for(endpoint)
        self.queue = SpanQueue(exporter)
        self.tracer: Tracer = lean_tracer(self.provider, self.queue, "a2a_gateway")
        self._started = False

    async def start(self) -> None:
        """Start exporting (the span queue's worker thread)."""
        if self._started:
            return
        self._started = True
        self.queue.start()

    async def aclose(self) -> None:
        """Export what is still batched (bounded), then stop the worker thread."""
        if not self._started:
            self.queue.exporter.shutdown()  # made with the tracer; never started
            return
        self._started = False
        flushed = await asyncio.to_thread(self.provider.force_flush, int(FLUSH_BOUND_S * 1000))
        if not flushed:
            log.warning("tracing: spans not exported within %.0f s were dropped", FLUSH_BOUND_S)
        await asyncio.to_thread(self.provider.shutdown)


def _task_id(value: Any) -> str:
    """The task a request or an answer is about, if it names one."""
    if type(value) is pb.SendMessageResponse:  # the most frequent first
        return value.task.id if value.HasField("task") else value.message.task_id
    if isinstance(value, pb.Task):
        return value.id
    if isinstance(value, pb.SendMessageResponse):
        return value.task.id if value.HasField("task") else value.message.task_id
    if isinstance(value, pb.SendMessageRequest):
        return value.message.task_id
    if isinstance(value, pb.StreamResponse):
        kind = value.WhichOneof("payload")
        inner = getattr(value, kind) if kind else None
        if isinstance(inner, pb.Task):
            return inner.id
        return str(getattr(inner, "task_id", ""))
    return str(getattr(value, "id", "") or getattr(value, "task_id", ""))


def _name_task(current: Span, value: Any) -> bool:
    """Give ``current`` the ``a2a.task_id`` ``value`` names, if it names one."""
    task_id = _task_id(value)
    if task_id:
        current.set_attribute("a2a.task_id", task_id)
    return bool(task_id)


class Traced(WrappedService):
    """``service`` with a ``SERVER`` span around every call (the module docstring)."""

    def __init__(self, service: A2AService, tracer: Tracer) -> None:
        super().__init__(service)
        self.tracer = tracer
        # A call span's name and attributes by rpc, binding and caller's name: made once
        # (the tracer copies them into each span).
        self._named: dict[tuple[str, str, str], tuple[str, dict[str, str]]] = {}

    def _start(self, rpc: str, context: CallContext) -> Span:
        parent = None
        if context.traceparent:
            parent = extract({TRACEPARENT: context.traceparent, TRACESTATE: context.tracestate}.get)
        key = (rpc, context.binding, context.caller.name)
        named = self._named.get(key)
        if named is None:
            if len(self._named) >= _NAMED_BOUND:
                self._named.clear()
            named = self._named[key] = (
                f"A2A {rpc}",
                {
                    "rpc.system": "a2a",
                    "rpc.method": rpc,
                    "a2a.binding": context.binding,
                    "a2a.caller": context.caller.name,
                },
            )
        return self.tracer.start_span(
            named[0],
            context=parent,
            kind=SpanKind.SERVER,
            attributes=named[1],
            record_exception=False,
            set_status_on_exception=False,
        )

    async def unary(
        self, rpc: str, request: message.Message, call: Awaitable[T], context: CallContext
    ) -> T:
        current = self._start(rpc, context)
        try:
            with Current(current, self.tracer):
                result = await call
        except BaseException as exc:
            if current.is_recording():  # not sampled: no attribute work
                _name_task(current, request)
            mark_failed(current, exc)
            raise
        else:
            if current.is_recording():
                # The answer names the task (a new one too); else the request may.
                _name_task(current, result) or _name_task(current, request)
            return result
        finally:
            current.end()

    async def stream(
        self,
        rpc: str,
        request: message.Message,
        events: AsyncIterator[pb.StreamResponse],
        context: CallContext,
    ) -> AsyncIterator[pb.StreamResponse]:
        current = self._start(rpc, context)
        named = not current.is_recording() or _name_task(current, request)
        active = with_span(current)
        tracer = self.tracer
        try:
            while True:
                # The span is current only while the service makes the next event (its
                # run task, started then, inherits it); never across our own yield,
                # which resumes in whatever context the consumer has. (Current's work,
                # written out: this runs once per event.)
                entered = enter_context(active, tracer)
                try:
                    event = await anext(events)
                except StopAsyncIteration:
                    return
                finally:
                    leave_context(entered)
                if not named:
                    task_id = _task_id(event)
                    if task_id:
                        current.set_attribute("a2a.task_id", task_id)
                        named = True
                yield event
        except BaseException as exc:
            if not isinstance(exc, GeneratorExit):
                mark_failed(current, exc)
            raise
        finally:
            closing = getattr(events, "aclose", None)
            if closing is not None:
                await closing()
            current.end()


__all__ = [
    "LeanOtlpExporter",
    "PlainHttpTransport",
    "Traced",
    "Tracing",
    "exporter_for",
    "traces_url",
    "tracing_wanted",
]
