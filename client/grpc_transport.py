"""The gRPC binding: ``grpc.aio`` with the generated ``A2AServiceStub``; service parameters
travel as lower-case metadata, errors as ``google.rpc.Status`` in the trailers."""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections.abc import AsyncGenerator
from typing import Any, ClassVar

import grpc
from google.protobuf import message

import lf.a2a.v1.a2a_pb2 as pb
import lf.a2a.v1.a2a_pb2_grpc as a2a_pb2_grpc
from a2a_gateway.local.redaction import Redactor
from a2a_gateway.protocol.codec import GRPC_LIMIT_SLACK_BYTES, MAX_ANSWER_BYTES, MAX_BODY_BYTES
from a2a_gateway.protocol.context import PROTOCOL_VERSION
from a2a_gateway.protocol.errors import A2AError, InvalidAgentResponseError, InvalidRequestError
from a2a_gateway.protocol.resume import EVENT_ID_KEY, GRPC_RESUME_KEY, LAST_EVENT_ID_HEADER
from a2a_gateway.protocol.versioning import EXTENSIONS_HEADER, parse_extensions

from .credentials import Credentials
from .errors import Timeout, Unreachable, explain_auth, from_grpc_status, quote
from .messages import SETTLED_STATES
from .transport import GRPC, CallOptions, M, Transport, service_headers

#: Largest answer read (as on HTTP: twice a server's body cap) and largest request sent
#: (a server's body cap, plus the slack its gRPC limit has).
MAX_RECEIVE_BYTES = MAX_ANSWER_BYTES
MAX_SEND_BYTES = MAX_BODY_BYTES + GRPC_LIMIT_SLACK_BYTES
_CHANNEL_OPTIONS = (
    ("grpc.max_receive_message_length", MAX_RECEIVE_BYTES),
    ("grpc.max_send_message_length", MAX_SEND_BYTES),
)
#: How grpc reports a message over a size limit (RESOURCE_EXHAUSTED, no details).
#: How long a stream whose caller stopped at the final event may take to end by itself.
END_GRACE_S = 1.0
_TOO_LARGE = re.compile(r"(Received|Sent) message larger than max \((\d+) vs\. (\d+)\)")
_SECURE_SCHEMES = ("grpcs://", "https://")
_PLAIN_SCHEMES = ("grpc://", "http://")


def grpc_target(url: str) -> tuple[str, bool]:
    """``(host:port, use_tls)`` for an interface url.

    Cards give gRPC urls as ``host:port``; ``grpc://``/``http://`` mean plaintext and
    ``grpcs://``/``https://`` TLS. A bare ``host:port`` uses TLS on port 443 only.
    """
    text = url.strip()
    lowered = text.lower()
    for prefix in _SECURE_SCHEMES:
        if lowered.startswith(prefix):
            return _authority(text[len(prefix) :], 443), True
    for prefix in _PLAIN_SCHEMES:
        if lowered.startswith(prefix):
            return _authority(text[len(prefix) :], 80), False
    target = _authority(text, 443)
    return target, target.rsplit(":", 1)[-1] == "443"


def _authority(rest: str, default_port: int) -> str:
    authority = rest.split("/", 1)[0]
    if authority.startswith("["):  # an IPv6 literal, [::1]:50051
        return authority if "]:" in authority else f"{authority}:{default_port}"
    host, sep, port = authority.rpartition(":")
    if sep and host and port.isascii() and port.isdigit():
        return authority
    return f"{authority}:{default_port}"


def size_error(details: str) -> A2AError | None:
    """A size limit grpc enforced itself (RESOURCE_EXHAUSTED without status details), as
    what it is rather than a rate limit: an answer over our receive limit is an invalid
    answer; a request over ours or the server's is the binding's size error."""
    found = _TOO_LARGE.search(details)
    if found is None:
        return None
    direction, size, limit = found.group(1), int(found.group(2)), int(found.group(3))
    if direction == "Received" and limit == MAX_RECEIVE_BYTES:
        return InvalidAgentResponseError(
            f"the answer ({size} bytes) is larger than the {limit} bytes this client reads"
        )
    return InvalidRequestError(
        f"the request ({size} bytes) is larger than the {limit} bytes accepted"
    )


class GrpcTransport(Transport):
    """Calls one gRPC endpoint. Owns its channel unless one was passed in."""

    binding = GRPC
    #: The ``a2a-version`` metadata sent on every call.
    version: ClassVar[str] = PROTOCOL_VERSION

    def __init__(
        self,
        url: str,
        *,
        credentials: Credentials | None = None,
        redact: Redactor | None = None,
        channel: grpc.aio.Channel | None = None,
    ) -> None:
        super().__init__(url, credentials=credentials, redact=redact or Redactor())
        target, secure = grpc_target(url)
        self._owns_channel = channel is None
        if channel is None:
            if secure:
                tls = credentials.channel if credentials is not None else None
                channel = grpc.aio.secure_channel(
                    target, tls or grpc.ssl_channel_credentials(), options=_CHANNEL_OPTIONS
                )
            else:
                channel = grpc.aio.insecure_channel(target, options=_CHANNEL_OPTIONS)
        self._channel = channel
        self._stub: Any = self._new_stub(channel)
        self._closed = False

    def _new_stub(self, channel: grpc.aio.Channel) -> Any:
        """The generated stub the rpcs are called on (the 0.3 transport uses its own)."""
        return a2a_pb2_grpc.A2AServiceStub(channel)

    def sent_headers(self, options: CallOptions) -> dict[str, str]:
        return service_headers(options, self.credentials, self.version)

    def _metadata(
        self, options: CallOptions, request: message.Message
    ) -> tuple[tuple[str, str], ...]:
        headers = service_headers(options, None, self.version)
        if options.resume_from:  # its gRPC name
            headers[GRPC_RESUME_KEY] = headers.pop(LAST_EVENT_ID_HEADER)
        pairs = tuple((key.lower(), value) for key, value in headers.items())
        if self.credentials is not None:
            # A signature covers the serialized request, which grpc serializes the same way.
            signed = self.credentials.signing_secret is not None
            body = request.SerializeToString() if signed else b""
            pairs += self.credentials.grpc_metadata(body)
        return pairs

    def _error(self, exc: grpc.aio.AioRpcError, timeout: float) -> A2AError:
        code = exc.code()
        details = exc.details() or ""
        # grpc-stubs mistypes the trailers; at runtime they are (key, value) pairs.
        raw: Any = exc.trailing_metadata() or ()
        trailing: list[tuple[str, str | bytes]] = [(str(k), v) for k, v in raw]
        has_status = any(key == "grpc-status-details-bin" for key, _ in trailing)
        where = self.redact(self.target)
        if code == grpc.StatusCode.DEADLINE_EXCEEDED and not has_status:
            return Timeout(f"{where} did not answer within {timeout:g} s")
        if code == grpc.StatusCode.UNAVAILABLE and not has_status:
            return Unreachable(f"Could not reach {where}: {quote(details, self.redact)}")
        if code == grpc.StatusCode.RESOURCE_EXHAUSTED and not has_status:
            too_large = size_error(details)
            if too_large is not None:
                return too_large
        error = from_grpc_status(code, details, trailing, self.redact)
        return explain_auth(
            error, self.target, has_key=self.credentials is not None, redact=self.redact
        )

    async def _report_extensions(self, call: Any, options: CallOptions) -> None:
        metadata = await call.initial_metadata()
        if metadata:
            values = [str(v) for k, v in metadata if k == EXTENSIONS_HEADER.lower()]
            options.on_extensions(parse_extensions(values))

    async def unary(
        self, rpc: str, request: message.Message, response_type: type[M], options: CallOptions
    ) -> M:
        response = await self._call_unary(rpc, request, options)
        if not isinstance(response, response_type):
            raise InvalidAgentResponseError(f"unexpected gRPC response {type(response).__name__}")
        return response

    async def _call_unary(self, rpc: str, request: message.Message, options: CallOptions) -> Any:
        """Call the stub's ``rpc`` within ``options.timeout``; its response, unread."""
        call = getattr(self._stub, rpc)(
            request, timeout=options.timeout, metadata=self._metadata(options, request)
        )
        try:
            # grpc's own deadline ends the call; the asyncio bound also covers a channel
            # that never connects.
            async with asyncio.timeout(options.timeout):
                response = await call
                await self._report_extensions(call, options)
        except TimeoutError:
            call.cancel()
            raise Timeout(
                f"{self.redact(self.target)} did not answer within {options.timeout:g} s"
            ) from None
        except grpc.aio.AioRpcError as exc:
            raise self._error(exc, options.timeout) from None
        return response

    def _stream_event(self, item: object) -> pb.StreamResponse | None:
        """The 1.0 event for a message read off the stream; None when the stream ended."""
        return item if isinstance(item, pb.StreamResponse) else None

    async def stream(
        self, rpc: str, request: message.Message, options: CallOptions
    ) -> AsyncGenerator[pb.StreamResponse, None]:
        call = getattr(self._stub, rpc)(request, metadata=self._metadata(options, request))
        first = True
        settled = False  # the last event yielded ended the task's stream (the spec's rule)
        try:
            while True:
                bound = options.timeout if first else options.idle_timeout
                try:
                    async with asyncio.timeout(bound):
                        raw = await call.read()
                except TimeoutError:
                    what = "did not answer within" if first else "sent nothing for"
                    raise Timeout(f"{self.redact(self.target)} {what} {bound:g} s") from None
                except grpc.aio.AioRpcError as exc:
                    raise self._error(exc, bound) from None
                item = self._stream_event(raw)
                if item is None:
                    return  # grpc.aio.EOF: the server ended the stream
                if first:
                    first = False
                    await self._report_extensions(call, options)
                kind = item.WhichOneof("payload")
                if kind is not None:
                    if options.on_event_id is not None:
                        event_id = getattr(item, kind).metadata.fields.get(EVENT_ID_KEY)
                        if event_id is not None and event_id.string_value:
                            options.on_event_id(event_id.string_value)
                    settled = _settles(item)
                    yield item
        finally:
            try:
                if settled and not call.done():
                    # The caller stopped at the final event: read the server's end of the
                    # call (it follows at once) rather than cancel a call that succeeded.
                    with contextlib.suppress(TimeoutError, grpc.aio.AioRpcError):
                        async with asyncio.timeout(END_GRACE_S):
                            while self._stream_event(await call.read()) is not None:
                                pass
            finally:
                if not call.done():
                    call.cancel()

    async def aclose(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._owns_channel:
            await self._channel.close(grace=None)


def _settles(item: pb.StreamResponse) -> bool:
    """The event ends the task's stream: a task or status update in a terminal or
    interrupted state (the server ends the call right after it)."""
    kind = item.WhichOneof("payload")
    if kind == "task":
        return item.task.status.state in SETTLED_STATES
    if kind == "status_update":
        return item.status_update.status.state in SETTLED_STATES
    return False
