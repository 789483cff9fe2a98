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
from collections.abc import AsyncIterator, Callable
from typing import Any

import orjson
from aiohttp import hdrs, web
from aiohttp.http_exceptions import HttpProcessingError

from a2a_gateway.protocol import sse, versioning
from a2a_gateway.protocol.context import CallContext
from a2a_gateway.protocol.errors import (
    A2AError,
    InternalError,
    InvalidRequestError,
    RateLimitedError,
    UnauthenticatedError,
)
from a2a_gateway.protocol.service import A2AService
from lf.a2a.v1 import a2a_pb2 as pb

from . import card, signing
from .auth import Authenticator, Identity, single_values
from .config import ServerConfig

log = logging.getLogger(__name__)

# --- application state --------------------------------------------------------------

CONFIG = web.AppKey("a2a_config", ServerConfig)
# A2AService is abstract, so the key is typed by annotation rather than by class.
SERVICE: web.AppKey[A2AService] = web.AppKey("a2a_service")
AUTHENTICATOR = web.AppKey("a2a_authenticator", Authenticator)
#: A signing caller's parsed signature, waiting for the body it must cover.
PENDING_SIGNATURE = web.RequestKey("a2a_pending_signature", signing.PendingSignature)

# --- media types --------------------------------------------------------------------

JSON_CONTENT_TYPE = "application/json"
A2A_JSON_CONTENT_TYPE = "application/a2a+json"
#: Request bodies we accept on both bindings (parameters such as charset=utf-8 allowed).
ACCEPTED_CONTENT_TYPES = frozenset({JSON_CONTENT_TYPE, A2A_JSON_CONTENT_TYPE})

#: Challenge sent with every 401. Keys travel as ``X-API-Key`` or ``Authorization:
#: Bearer``; only Bearer is a registered HTTP scheme, so it is the one we name.
WWW_AUTHENTICATE = 'Bearer realm="a2a"'

#: A body that has not fully arrived after this long is refused (slow-loris guard).
BODY_READ_TIMEOUT_S = 30.0


def call_context(request: web.Request) -> CallContext:
    """Authenticate, negotiate ``A2A-Version`` and collect extensions; reads no body.

    The version comes from the header, else the ``A2A-Version`` query parameter
    (digest §9 allows both). Extensions come from ``A2A-Extensions`` and the 0.3 name
    ``X-A2A-Extensions``. Also records the request's base URL for the card helpers.
    """
    get = single_values(lambda name: request.headers.getall(name, ()))
    identity = request.app[AUTHENTICATOR].admit(get, request.remote)
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
    card.bind_request(request)
    return CallContext(
        caller=caller, version=version, extensions=versioning.parse_extensions(values)
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

    Bindings that skip the body on some routes call this before the service runs.
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
    """The request body, refused (without reading the rest) once it exceeds ``limit``."""
    too_large = InvalidRequestError(f"request body is larger than {limit} bytes")
    declared = request.content_length
    if declared is not None and declared > limit:
        raise too_large
    chunks: list[bytes] = []
    size = 0
    try:
        async with asyncio.timeout(BODY_READ_TIMEOUT_S):
            while True:
                chunk = await request.content.readany()
                if not chunk:
                    break
                size += len(chunk)
                if size > limit:
                    raise too_large
                chunks.append(chunk)
    except TimeoutError:
        raise InvalidRequestError(
            f"request body did not arrive within {BODY_READ_TIMEOUT_S:g} s"
        ) from None
    except (ConnectionError, HttpProcessingError):
        # The client went away or sent a broken chunked body: not a server fault.
        raise InvalidRequestError("request body could not be read") from None
    body = b"".join(chunks)
    pending = request.get(PENDING_SIGNATURE)
    if pending is not None:
        pending.verify(body)
    return body


def json_response(
    payload: Any,
    *,
    status: int = 200,
    content_type: str = JSON_CONTENT_TYPE,
    headers: dict[str, str] | None = None,
) -> web.Response:
    return web.Response(
        body=orjson.dumps(payload), status=status, content_type=content_type, headers=headers
    )


def error_headers(error: A2AError) -> dict[str, str]:
    """Transport headers an error asks for: a 401 challenge, ``Retry-After``."""
    headers: dict[str, str] = {}
    if isinstance(error, UnauthenticatedError):
        headers[hdrs.WWW_AUTHENTICATE] = WWW_AUTHENTICATE
    retry = error.metadata.get("retryAfterSeconds", "")
    if isinstance(error, RateLimitedError):
        headers[hdrs.RETRY_AFTER] = str(error.retry_after_s)
    elif error.spec.http_status == 503 and retry.isdigit():
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

EventEncoder = Callable[[pb.StreamResponse], bytes]
ErrorEncoder = Callable[[A2AError], bytes]
ErrorResponder = Callable[[A2AError], web.StreamResponse]

SSE_HEADERS = {
    hdrs.CONTENT_TYPE: sse.CONTENT_TYPE,
    hdrs.CACHE_CONTROL: "no-cache",
    "X-Accel-Buffering": "no",  # nginx: do not buffer the stream
}

#: How often an idle stream checks whether its client is still connected. aiohttp
#: does not cancel handlers on disconnect by default, so we look at the transport.
DISCONNECT_POLL_S = 0.2
#: How long closing a stream may wait for the service's iterator to finish.
CLOSE_GRACE_S = 5.0
#: A single write may wait this long for a slow reader before the stream is dropped.
WRITE_TIMEOUT_S = 60.0


class ClientGone(Exception):
    """The HTTP client disconnected; stop streaming."""


async def _next_event(events: AsyncIterator[pb.StreamResponse]) -> pb.StreamResponse | None:
    try:
        return await anext(events)
    except StopAsyncIteration:
        return None


class EventPump:
    """Pulls one service stream for one HTTP request.

    Each ``__anext__`` runs in a task this pump owns, so waiting for the next event can
    be interleaved with keep-alive comments and disconnect checks without cancelling
    the service's iterator mid-step. :meth:`aclose` cancels that task and closes the
    iterator; it always runs, whatever ended the stream.
    """

    def __init__(
        self,
        request: web.Request,
        events: AsyncIterator[pb.StreamResponse],
        keepalive_s: float,
    ) -> None:
        self._request = request
        self._events = events
        self._keepalive_s = keepalive_s
        self._step: asyncio.Task[pb.StreamResponse | None] | None = None

    def client_gone(self) -> bool:
        transport = self._request.transport
        return transport is None or transport.is_closing()

    async def next(self, response: web.StreamResponse | None) -> pb.StreamResponse | None:
        """The next event (None at the end). Service errors propagate as raised.

        With a prepared ``response`` it writes a keep-alive comment whenever the
        stream has been idle for the keep-alive interval.
        """
        if self._step is None:
            self._step = asyncio.create_task(_next_event(self._events))
        step = self._step
        loop = asyncio.get_running_loop()
        next_ping = loop.time() + self._keepalive_s
        while True:
            timeout = DISCONNECT_POLL_S
            if response is not None:
                timeout = max(0.0, min(timeout, next_ping - loop.time()))
            done, _ = await asyncio.wait({step}, timeout=timeout)
            if done:
                self._step = None
                return step.result()
            if self.client_gone():
                raise ClientGone
            if response is not None and loop.time() >= next_ping:
                await self.write(response, sse.comment("keep-alive"))
                next_ping = loop.time() + self._keepalive_s

    async def write(self, response: web.StreamResponse, data: bytes) -> None:
        try:
            async with asyncio.timeout(WRITE_TIMEOUT_S):
                await response.write(data)
        except (ConnectionError, TimeoutError):
            raise ClientGone from None

    async def aclose(self) -> None:
        step, self._step = self._step, None
        if step is not None:
            step.cancel()
            await asyncio.wait({step}, timeout=CLOSE_GRACE_S)
            if not step.done():
                log.warning("stream iterator ignored cancellation for %.0f s", CLOSE_GRACE_S)
                return
            if not step.cancelled() and step.exception() is not None:
                log.debug("stream ended with an error after the client left")
        close = getattr(self._events, "aclose", None)
        if close is None:
            return
        try:
            async with asyncio.timeout(CLOSE_GRACE_S):
                await close()
        except Exception as exc:  # a misbehaving iterator must not break the handler
            log.warning("closing a stream iterator failed: %r", exc)


async def stream_events(
    request: web.Request,
    events: AsyncIterator[pb.StreamResponse],
    context: CallContext,
    *,
    keepalive_s: float,
    encode_event: EventEncoder,
    encode_error: ErrorEncoder,
    error_response: ErrorResponder,
) -> web.StreamResponse:
    """Serve ``events`` as SSE.

    The first event is awaited before any header is sent, so an error found before the
    stream starts becomes a plain ``error_response`` (digest §16.17). Later errors are
    written with ``encode_error`` and end the stream. A disconnect closes ``events``.
    """
    pump = EventPump(request, events, keepalive_s)
    try:
        try:
            await ensure_signature(request)  # before the service's stream starts
            event = await pump.next(None)
        except A2AError as exc:
            return error_response(exc)
        except ClientGone:
            return web.Response(status=204)  # nobody is listening
        except Exception as exc:
            return error_response(unexpected(exc, "stream start"))
        response = web.StreamResponse(status=200, headers=SSE_HEADERS)
        echo_extensions(response, context)
        try:
            await response.prepare(request)
            await _pump_events(pump, response, event, encode_event, encode_error)
            await response.write_eof()
        except (ClientGone, ConnectionError):
            pass
        return response
    finally:
        await pump.aclose()


async def _pump_events(
    pump: EventPump,
    response: web.StreamResponse,
    event: pb.StreamResponse | None,
    encode_event: EventEncoder,
    encode_error: ErrorEncoder,
) -> None:
    """Write events until the stream ends; a service error becomes the last event."""
    try:
        while event is not None:
            await pump.write(response, encode_event(event))
            event = await pump.next(response)
    except A2AError as exc:
        await pump.write(response, encode_error(exc))
    except ClientGone:
        raise
    except Exception as exc:
        await pump.write(response, encode_error(unexpected(exc, "stream")))
