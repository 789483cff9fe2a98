"""The request side of the HTTP bindings: app state keys, the schema's rpcs, the call
context (authentication, version, extensions), the signature of a signing caller, and
reading and bounding the body; then running the rpc once its request is decoded.

Order per request (every binding): admit from the headers (per-address rate limit,
authentication, per-caller rate limit, the signature header of a signing caller),
negotiate the version, then (and only then) read the body; a signing caller's body is
checked against its signature as soon as it has been read, before it is parsed.
Nothing here knows JSON-RPC or REST shapes; the bindings pass their own encoders.
Answers and errors are in :mod:`.http_response`, the SSE writer in :mod:`.http_sse`.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable

from aiohttp import hdrs, web
from aiohttp.http_exceptions import HttpProcessingError
from aiohttp.web_protocol import RequestPayloadError
from google.protobuf import descriptor, message, message_factory

from a2a_gateway.local import signing
from a2a_gateway.protocol import codec, tracing, versioning
from a2a_gateway.protocol.context import CallContext
from a2a_gateway.protocol.errors import InvalidRequestError, JSONParseError
from a2a_gateway.protocol.resume import LAST_EVENT_ID_HEADER
from a2a_gateway.protocol.service import SERVICE_DESCRIPTOR, A2AService, method_name
from lf.a2a.v1 import a2a_pb2 as pb

from . import card, content_coding
from .auth import Authenticator, Identity, single_values
from .config import ServerConfig
from .http_response import A2A_JSON_CONTENT_TYPE, JSON_CONTENT_TYPE
from .metrics import MetricsLike
from .tls import http_peer_certificate

# --- application state --------------------------------------------------------------

CONFIG = web.AppKey("a2a_config", ServerConfig)
# A2AService is abstract, so the key is typed by annotation rather than by class.
SERVICE: web.AppKey[A2AService] = web.AppKey("a2a_service")
AUTHENTICATOR = web.AppKey("a2a_authenticator", Authenticator)
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

#: Request bodies we accept on both bindings (parameters such as charset=utf-8 allowed).
ACCEPTED_CONTENT_TYPES = frozenset({JSON_CONTENT_TYPE, A2A_JSON_CONTENT_TYPE})


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
    :func:`.http_sse.serve_stream`.
    """
    await ensure_signature(request)
    service = request.app[SERVICE]
    if rpc.streaming:
        return rpc.stream(service)(params, context)
    return await rpc.unary(service)(params, context)


__all__ = [
    "ACCEPTED_CONTENT_TYPES",
    "AUTHENTICATOR",
    "CONFIG",
    "METRICS",
    "PENDING_SIGNATURE",
    "RPCS",
    "SERVICE",
    "Rpc",
    "Streaming",
    "Unary",
    "call_context",
    "call_service",
    "ensure_signature",
    "expect_signature",
    "read_body",
    "require_json",
]
