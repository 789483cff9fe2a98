"""What the HTTP bindings share: app state keys, the call context, body reading, JSON
responses, error headers and the SSE pump.

Order per request (every binding): admit from the headers (per-address rate limit,
authentication, per-caller rate limit, the signature header of a signing caller),
negotiate the version, then (and only then) read the body; a signing caller's body is
checked against its signature as soon as it has been read, before it is parsed.
Nothing here knows JSON-RPC or REST shapes; the bindings pass their own encoders.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, Protocol

import orjson
from aiohttp import hdrs, web
from aiohttp.http_exceptions import HttpProcessingError
from aiohttp.web_protocol import RequestPayloadError
from google.protobuf import descriptor, message, message_factory

from a2a_gateway.protocol import codec, sse, tracing, versioning
from a2a_gateway.protocol.context import CallContext
from a2a_gateway.protocol.errors import (
    A2AError,
    InternalError,
    InvalidRequestError,
    JSONParseError,
    MethodNotAllowedError,
    RateLimitedError,
    UnauthenticatedError,
)
from a2a_gateway.protocol.resume import LAST_EVENT_ID_HEADER
from a2a_gateway.protocol.service import SERVICE_DESCRIPTOR, A2AService, method_name
from lf.a2a.v1 import a2a_pb2 as pb

from . import card, content_coding, signing
from .auth import Authenticator, Identity, single_values
from .config import ServerConfig
from .metrics import CLIENT_GONE, INTERNAL, NULL_METER, OK, Meter, MetricsLike, outcome_of
from .tls import http_peer_certificate

log = logging.getLogger(__name__)

# --- application state --------------------------------------------------------------

CONFIG = web.AppKey("a2a_config", ServerConfig)
# A2AService is abstract, so the key is typed by annotation rather than by class.
SERVICE: web.AppKey[A2AService] = web.AppKey("a2a_service")
AUTHENTICATOR = web.AppKey("a2a_authenticator", Authenticator)
#: The timer of the application's open SSE streams (http_context.StreamWatch).
STREAM_WATCH: web.AppKey[StreamWatch] = web.AppKey("a2a_stream_watch")
#: The gateway's metrics (metrics.NULL_METRICS when off): each binding takes its meter.
METRICS: web.AppKey[MetricsLike] = web.AppKey("a2a_metrics")
#: A signing caller's parsed signature, waiting for the body it must cover.
PENDING_SIGNATURE = web.RequestKey("a2a_pending_signature", signing.PendingSignature)

# --- the schema's rpcs ------------------------------------------------------------------

Unary = Callable[[message.Message, CallContext], Awaitable[message.Message]]
Streaming = Callable[[message.Message, CallContext], AsyncIterator[pb.StreamResponse]]


class Rpc:
    """One rpc of the schema as the HTTP bindings call it, resolved once at import."""

    __slots__ = ("attribute", "method", "name", "request_class", "streaming")

    def __init__(self, method: descriptor.MethodDescriptor) -> None:
        self.method = method
        self.name = method.name
        self.request_class: type[message.Message] = message_factory.GetMessageClass(
            method.input_type
        )
        self.attribute = method_name(method.name)  # the A2AService method implementing it
        self.streaming = bool(method.server_streaming)

    def unary(self, service: A2AService) -> Unary:
        call: Unary = getattr(service, self.attribute)
        return call

    def stream(self, service: A2AService) -> Streaming:
        call: Streaming = getattr(service, self.attribute)
        return call


#: Every rpc of the schema by name (the JSON-RPC method name).
RPCS: dict[str, Rpc] = {method.name: Rpc(method) for method in SERVICE_DESCRIPTOR.methods}


# --- media types --------------------------------------------------------------------

JSON_CONTENT_TYPE = "application/json"
A2A_JSON_CONTENT_TYPE = "application/a2a+json"
#: Request bodies we accept on both bindings (parameters such as charset=utf-8 allowed).
ACCEPTED_CONTENT_TYPES = frozenset({JSON_CONTENT_TYPE, A2A_JSON_CONTENT_TYPE})

#: Challenge sent with every 401. Keys travel as ``X-API-Key`` or ``Authorization:
#: Bearer``; only Bearer is a registered HTTP scheme, so it is the one we name.
WWW_AUTHENTICATE = 'Bearer realm="a2a"'


async def call_context(request: web.Request, *, binding: str = "") -> CallContext:
    """Authenticate, negotiate ``A2A-Version`` and collect extensions; reads no body.

    The version comes from the header, else the ``A2A-Version`` query parameter
    (digest §9 allows both). Extensions come from ``A2A-Extensions`` and the 0.3 name
    ``X-A2A-Extensions``. Also records the request's base URL for the card helpers.
    """
    get = single_values(lambda name: request.headers.getall(name, ()))
    card.bind_request(request)  # before the caller: PACT's delegation tokens name the URL
    authenticator = request.app[AUTHENTICATOR]
    certificate = http_peer_certificate(request) if authenticator.certificates else None
    identity = await authenticator.admit(get, request.remote, certificate)
    expect_signature(request, identity, get)
    caller = identity.caller
    header = request.headers.get(versioning.VERSION_HEADER)
    if header is None or not header.strip():
        header = request.query.get(versioning.VERSION_HEADER) or request.query.get(
            versioning.VERSION_HEADER.lower()
        )
    version = versioning.negotiate_version(header)
    values = [
        *request.headers.getall(versioning.EXTENSIONS_HEADER, ()),
        *request.headers.getall(versioning.LEGACY_EXTENSIONS_HEADER, ()),
    ]
    headers = request.headers
    return CallContext(
        caller=caller,
        version=version,
        extensions=versioning.parse_extensions(values),
        binding=binding,
        traceparent=headers.get(tracing.TRACEPARENT, ""),
        tracestate=headers.get(tracing.TRACESTATE, ""),
        resume_from=request.headers.get(LAST_EVENT_ID_HEADER, "").strip(),
    )


def expect_signature(
    request: web.Request, identity: Identity, get: Callable[[str], str | None]
) -> None:
    """For a signing caller: check the signature header now (missing, malformed, stale)
    and its digest once the body is known. A request without a body is checked at once;
    otherwise :func:`read_body` (or :func:`ensure_signature`) checks it."""
    secret = identity.policy.signing_secret
    if secret is None:
        return
    pending = signing.PendingSignature(secret, signing.parse(get(signing.SIGNATURE_HEADER)))
    if not request.body_exists:
        pending.verify(b"")
        return
    if request.method in (hdrs.METH_GET, hdrs.METH_HEAD, hdrs.METH_DELETE):
        # These routes never read a body, so a signature over one could not be checked.
        raise InvalidRequestError(f"a signed {request.method} request must not have a body")
    request[PENDING_SIGNATURE] = pending


async def ensure_signature(request: web.Request) -> None:
    """Check a pending signature against the body if nothing has read it yet.

    :func:`call_service` calls this before the service runs, so a route that skips the
    body (REST's body-less POST aliases) is covered as well.
    """
    pending = request.get(PENDING_SIGNATURE)
    if pending is not None and not pending.verified:
        await read_body(request, request.app[CONFIG].max_body_bytes)


def require_json(request: web.Request) -> None:
    """Refuse a body whose Content-Type is present and not JSON.

    A missing Content-Type is accepted and read as JSON: only deliberate clients omit
    it, while ``curl -d`` without ``-H`` sends a form type and gets this message.
    """
    raw = request.headers.get(hdrs.CONTENT_TYPE)
    if raw is None:
        return
    media, _, params = raw.partition(";")
    media = media.strip().lower()
    shown = media[:64]
    if media not in ACCEPTED_CONTENT_TYPES:
        raise InvalidRequestError(
            f"Content-Type {shown!r} is not supported; send application/json "
            "or application/a2a+json",
            metadata={"contentType": shown},
        )
    for param in params.split(";"):
        name, _, value = param.partition("=")
        charset = value.strip().strip('"').lower()
        if name.strip().lower() == "charset" and charset not in ("utf-8", "utf8"):
            raise InvalidRequestError(
                f"Content-Type charset {charset[:32]!r} is not supported; send UTF-8",
                metadata={"contentType": shown},
            )


async def read_body(request: web.Request, limit: int) -> bytes:
    """The request body, decoded (``Content-Encoding``) and refused (without reading
    the rest) once it exceeds ``limit``. A body that cannot be read or decoded (cut
    short, a broken chunked encoding, a coding we do not know or data that is not in it)
    is the caller's mistake: :class:`JSONParseError`."""
    applied = content_coding.codings(request.headers.get(hdrs.CONTENT_ENCODING))
    declared = request.content_length
    if declared is not None and declared > limit:
        raise _too_large(limit)
    content = request.content
    if content.is_eof():
        # The whole body has already arrived (a small request comes in one packet with
        # its headers): take it without a timer or a wait.
        try:
            body = content.read_nowait()
        except _UNREADABLE:
            raise _unreadable() from None
        if len(body) > limit:
            raise _too_large(limit)
    else:
        body = await _read_streamed_body(request, limit)
    if applied:
        body = await content_coding.decode(body, applied, limit, lambda: _too_large(limit))
    pending = request.get(PENDING_SIGNATURE)
    if pending is not None:
        pending.verify(body)
    return body


#: What reading a request body raises when the client's bytes are at fault: it left
#: (or half-closed) before the end, or its chunked framing is broken.
_UNREADABLE = (ConnectionError, HttpProcessingError, RequestPayloadError)


def _unreadable() -> JSONParseError:
    return JSONParseError("the request body could not be read: it ended before its length")


def _too_large(limit: int) -> InvalidRequestError:
    return codec.body_too_large(limit)


async def _read_streamed_body(request: web.Request, limit: int) -> bytes:
    """The body as it arrives, bounded in size and in time."""
    too_large = _too_large(limit)
    timeout_s = request.app[CONFIG].body_read_timeout_s
    chunks: list[bytes] = []
    size = 0
    try:
        async with asyncio.timeout(timeout_s):
            while True:
                chunk = await request.content.readany()
                if not chunk:
                    break
                size += len(chunk)
                if size > limit:
                    raise too_large
                chunks.append(chunk)
    except TimeoutError:
        raise JSONParseError(
            f"the request body did not arrive within {timeout_s:g} s (shorter than its length?)"
        ) from None
    except _UNREADABLE:
        raise _unreadable() from None
    return b"".join(chunks)


class Answer(web.Response):
    """A unary answer whose body is let go as soon as its client is gone.

    When a client disconnects while aiohttp writes a body, the ConnectionError raised
    in its drain helper sits in a reference cycle (the exception's traceback holds the
    helper's frame, whose drain future holds the exception) that also reaches the
    frames holding this response, so a body of many megabytes stayed alive until a
    full garbage collection (minutes, with the start-up ``gc.freeze()`` and a large
    young threshold). Dropping the traceback breaks the cycle: the body is freed when
    the write fails (tests/server/test_dropped_answers.py runs with ``gc.disable()``).
    """

    async def write_eof(self, data: bytes = b"") -> None:
        try:
            await super().write_eof(data)
        except ConnectionError as exc:
            self._body = None
            exc.__traceback__ = None
            raise


def json_response(
    payload: Any,
    *,
    status: int = 200,
    content_type: str = JSON_CONTENT_TYPE,
    headers: dict[str, str] | None = None,
) -> web.Response:
    return Answer(
        body=orjson.dumps(payload), status=status, content_type=content_type, headers=headers
    )


def error_headers(error: A2AError) -> dict[str, str]:
    """Transport headers an error asks for: a 401 challenge, a 405's ``Allow``,
    ``Retry-After``."""
    headers: dict[str, str] = {}
    if isinstance(error, UnauthenticatedError):
        headers[hdrs.WWW_AUTHENTICATE] = error.challenge or WWW_AUTHENTICATE
    elif isinstance(error, MethodNotAllowedError):
        headers[hdrs.ALLOW] = error.metadata.get("allow", "")
    retry = error.metadata.get("retryAfterSeconds", "")
    if isinstance(error, RateLimitedError):
        headers[hdrs.RETRY_AFTER] = str(error.retry_after_s)
    elif error.spec.http_status == 503 and retry.isascii() and retry.isdigit():
        headers[hdrs.RETRY_AFTER] = retry
    return headers


def echo_extensions(response: web.StreamResponse, context: CallContext) -> None:
    """Tell the caller which requested extensions the service activated."""
    if context.activated_extensions:
        response.headers[versioning.EXTENSIONS_HEADER] = versioning.format_extensions(
            context.activated_extensions
        )


def unexpected(exc: BaseException, what: str) -> InternalError:
    """Log an unexpected exception with its traceback; the client gets a generic error."""
    log.error("unexpected error in %s", what, exc_info=exc)
    return InternalError()


# --- Server-Sent Events ---------------------------------------------------------------
#
# Per stream, two tasks: aiohttp's handler task writes, and a producer task owned by the
# stream's EventPump pulls the service's iterator and encodes each event into a list of
# chunks. Events the service has ready together (a burst of artifact chunks) are pulled
# without suspending and leave in one write. Nothing here keeps a timer per stream: one
# StreamWatch per application ticks every DISCONNECT_POLL_S for all open streams and
# wakes a stream only when its client has gone, its keep-alive is due or a write has been
# stuck for WRITE_TIMEOUT_S (then the connection is aborted).


class StreamCodec(Protocol):
    """How a binding shapes a stream: its events, its mid-stream error event, and the
    plain error response for an error found before the first event."""

    def event(self, event: pb.StreamResponse) -> bytes: ...

    def error(self, error: A2AError) -> bytes: ...

    def error_response(self, error: A2AError) -> web.StreamResponse: ...


SSE_HEADERS = {
    hdrs.CONTENT_TYPE: sse.CONTENT_TYPE,
    hdrs.CACHE_CONTROL: "no-cache",
    "X-Accel-Buffering": "no",  # nginx: do not buffer the stream
}

#: How often open streams are checked for a departed client. aiohttp does not cancel
#: handlers on disconnect by default, so the watch looks at each transport.
DISCONNECT_POLL_S = 0.2
#: How long closing a stream may wait for the service's iterator to finish.
CLOSE_GRACE_S = 5.0
#: A single write may wait this long for a slow reader before the stream is dropped.
WRITE_TIMEOUT_S = 60.0
#: Encoded events a stream buffers before its producer waits for the writer; the rest
#: wait in the service's own bounded queue (which drops a consumer that stays behind).
MAX_BUFFERED_EVENTS = 64

KEEPALIVE = sse.comment("keep-alive")


class ClientGone(Exception):
    """The HTTP client disconnected; stop streaming."""


class EventPump:
    """Pulls one service stream for one HTTP request (see the section comment).

    :meth:`aclose` cancels the producer and closes the service's iterator; it always
    runs, whatever ended the stream.
    """

    __slots__ = (
        "_chunks",
        "_context",
        "_encode",
        "_events",
        "_producer",
        "_room",
        "_waiter",
        "ended",
        "error",
        "gone",
        "keepalive_s",
        "last_write",
        "ping_due",
        "prepared",
        "transport",
        "writing_since",
    )

    def __init__(
        self,
        transport: asyncio.Transport | None,
        events: AsyncIterator[pb.StreamResponse],
        encode: Callable[[pb.StreamResponse], bytes],
        keepalive_s: float,
        now: float,
        context: CallContext | None = None,
    ) -> None:
        self.transport = transport
        self._events = events
        self._encode = encode
        self._context = context  # names each event (``event_id``): its SSE ``id:``
        self.keepalive_s = keepalive_s
        self._chunks: list[bytes] = []
        self._producer: asyncio.Task[None] | None = None
        self._waiter: asyncio.Future[None] | None = None  # the writer, waiting for work
        self._room: asyncio.Future[None] | None = None  # the producer, waiting for room
        self.ended = False  # the service's iterator is finished (``error`` says how)
        self.error: Exception | None = None
        self.gone = False  # the client left (set by the watch)
        self.ping_due = False  # a keep-alive comment is due (set by the watch)
        self.prepared = False  # headers sent: keep-alives may be written
        self.last_write = now
        self.writing_since: float | None = None

    def start(self) -> None:
        self._producer = asyncio.get_running_loop().create_task(self._produce())

    async def _produce(self) -> None:
        chunks = self._chunks
        encode = self._encode
        context = self._context
        try:
            async for event in self._events:
                if context is not None and context.event_id:
                    chunks.append(
                        b"".join((b"id: ", context.event_id.encode(), b"\n", encode(event)))
                    )
                else:
                    chunks.append(encode(event))
                self.wake()
                if len(chunks) >= MAX_BUFFERED_EVENTS:
                    self._room = asyncio.get_running_loop().create_future()
                    await self._room
        except Exception as exc:  # ends the stream; the writer reports it
            self.error = exc
        finally:
            self.ended = True
            self.wake()

    def wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def take(self) -> bytes | None:
        """Everything encoded so far, in one piece; a keep-alive comment when one is
        due; None once the service's stream has ended (``error`` says how).

        Raises ClientGone when the client left.
        """
        while True:
            if self.gone:
                raise ClientGone
            chunks = self._chunks
            if chunks:
                data = chunks[0] if len(chunks) == 1 else b"".join(chunks)
                chunks.clear()
                room = self._room
                if room is not None:
                    self._room = None
                    if not room.done():
                        room.set_result(None)
                return data
            if self.ended:
                return None
            if self.ping_due:
                self.ping_due = False
                return KEEPALIVE
            waiter = self._waiter = asyncio.get_running_loop().create_future()
            try:
                await waiter
            finally:
                self._waiter = None

    async def write(self, response: web.StreamResponse, data: bytes, now: float) -> None:
        self.writing_since = now
        try:
            await response.write(data)
        except ConnectionError:
            raise ClientGone from None
        finally:
            self.writing_since = None
        self.last_write = now

    def check(self, now: float) -> None:
        """The watch's look at this stream."""
        transport = self.transport
        if transport is None or transport.is_closing():
            self.gone = True
        elif self.writing_since is not None:
            if now - self.writing_since >= WRITE_TIMEOUT_S:
                transport.abort()  # the pending write returns; the next one fails
                self.gone = True
            return  # a write is in progress: nothing to wake
        elif self.prepared and now - self.last_write >= self.keepalive_s:
            self.ping_due = True
            self.last_write = now
        else:
            return
        self.wake()

    async def aclose(self) -> None:
        producer, self._producer = self._producer, None
        if producer is not None and not producer.done():
            producer.cancel()
            await asyncio.wait({producer}, timeout=CLOSE_GRACE_S)
            if not producer.done():
                log.warning("stream iterator ignored cancellation for %.0f s", CLOSE_GRACE_S)
                return
        close = getattr(self._events, "aclose", None)
        if close is None:
            return
        try:
            async with asyncio.timeout(CLOSE_GRACE_S):
                await close()
        except Exception as exc:  # a misbehaving iterator must not break the handler
            log.warning("closing a stream iterator failed: %r", exc)


class StreamWatch:
    """The one timer of an application's open streams (see the section comment).

    It runs only while streams are open; :meth:`close` (application cleanup) stops it.
    ``now`` is the loop time of the last tick: a clock for the streams that costs no
    call (they need it only to the tick's precision).
    """

    __slots__ = ("_handle", "_loop", "_pumps", "interval", "now")

    def __init__(self) -> None:
        self._pumps: set[EventPump] = set()
        self._handle: asyncio.TimerHandle | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self.interval = DISCONNECT_POLL_S
        self.now = 0.0

    def add(self, pump: EventPump) -> None:
        loop = self._loop = asyncio.get_running_loop()
        self.now = pump.last_write = loop.time()
        self._pumps.add(pump)
        if pump.keepalive_s < self.interval:
            self.interval = max(pump.keepalive_s, 0.01)
        if self._handle is None:
            self._handle = loop.call_at(self.now + self.interval, self._tick)

    def discard(self, pump: EventPump) -> None:
        self._pumps.discard(pump)

    def _tick(self) -> None:
        loop = self._loop
        assert loop is not None  # set by the add() that scheduled this tick
        now = self.now = loop.time()
        for pump in self._pumps:
            pump.check(now)
        self._handle = loop.call_at(now + self.interval, self._tick) if self._pumps else None

    def close(self) -> None:
        handle, self._handle = self._handle, None
        if handle is not None:
            handle.cancel()

    @property
    def ticking(self) -> bool:
        """Whether the timer is scheduled (only while streams are open)."""
        return self._handle is not None

    def __len__(self) -> int:
        return len(self._pumps)


async def stream_events(
    request: web.Request,
    events: AsyncIterator[pb.StreamResponse],
    context: CallContext,
    *,
    keepalive_s: float,
    codec: StreamCodec,
    meter: Meter = NULL_METER,
    method: str = "",
    started: float = 0.0,
) -> web.StreamResponse:
    """Serve ``events`` as SSE.

    The first event is awaited before any header is sent, so an error found before the
    stream starts becomes a plain ``codec.error_response`` (digest §16.17). Later errors
    are written with ``codec.error`` and end the stream. A disconnect closes ``events``.

    ``meter`` gets the stream's latency (``started`` to its first event or its refusal),
    its outcome when it ends and its open time (between the headers and the end).
    """
    watch = request.app[STREAM_WATCH]
    pump = EventPump(request.transport, events, codec.event, keepalive_s, 0.0, context)
    watch.add(pump)  # sets its clock
    # Until the stream ends one way or another: a cancelled handler (aiohttp cancels
    # it when its client disconnects) keeps it.
    outcome = CLIENT_GONE
    try:
        try:
            pump.start()
            data = await pump.take()
        except A2AError as exc:
            outcome = outcome_of(exc)
            return codec.error_response(exc)
        except ClientGone:
            outcome = CLIENT_GONE
            return web.Response(status=204)  # nobody is listening
        except Exception as exc:
            outcome = INTERNAL
            return codec.error_response(unexpected(exc, "stream start"))
        finally:
            meter.observe(method, started)
        if data is None and pump.error is not None:
            error = pump.error
            if not isinstance(error, A2AError):
                error = unexpected(error, "stream start")
            outcome = outcome_of(error)
            return codec.error_response(error)
        response = web.StreamResponse(status=200, headers=SSE_HEADERS)
        echo_extensions(response, context)
        meter.opened()
        try:
            await response.prepare(request)
            pump.prepared = True
            while data is not None:
                await pump.write(response, data, watch.now)
                data = await pump.take()
            outcome = OK
            if pump.error is not None:
                failure = pump.error
                if not isinstance(failure, A2AError):
                    failure = unexpected(failure, "stream")
                outcome = outcome_of(failure)
                await pump.write(response, codec.error(failure), watch.now)
            await response.write_eof()
        except (ClientGone, ConnectionError):
            pass  # CLIENT_GONE, or the outcome found before the failed write
        finally:
            meter.closed()
        return response
    finally:
        meter.count(method, outcome)
        watch.discard(pump)
        await pump.aclose()


async def call_service(
    request: web.Request, rpc: Rpc, params: message.Message, context: CallContext
) -> message.Message | AsyncIterator[pb.StreamResponse]:
    """Run ``rpc`` for an HTTP binding once its request is decoded: the service's result
    (a unary rpc), or the service's event stream, not started (a streaming rpc).

    A signing caller's pending signature is checked first, so the service never runs
    for a body the signature does not cover, whatever the route. A stream is returned
    rather than served here so that the caller can drop ``params`` first (``del``):
    a stream may last long, its request (inline file bytes and all) must not, and a
    frame waiting for the stream would hold it. The caller then serves the stream with
    :func:`serve_stream`.
    """
    await ensure_signature(request)
    service = request.app[SERVICE]
    if rpc.streaming:
        return rpc.stream(service)(params, context)
    return await rpc.unary(service)(params, context)


async def serve_stream(
    request: web.Request,
    events: AsyncIterator[pb.StreamResponse],
    context: CallContext,
    codec: StreamCodec,
    meter: Meter = NULL_METER,
    method: str = "",
    started: float = 0.0,
) -> web.StreamResponse:
    """Serve a stream from :func:`call_service` as SSE shaped by ``codec``; ``meter``
    reports it as ``method`` (see :func:`stream_events`)."""
    return await stream_events(
        request,
        events,
        context,
        keepalive_s=request.app[CONFIG].keepalive_interval_s,
        codec=codec,
        meter=meter,
        method=method,
        started=started,
    )
