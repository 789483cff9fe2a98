"""The gRPC binding: ``lf.a2a.v1.A2AService`` on grpc.aio, adapted to :class:`A2AService`.

Thin by design: admit from metadata (rate limits, authentication, a signing caller's
``x-a2a-signature``), build the :class:`CallContext`, decode and validate, call the
service, write the response(s), map errors. The rpc list comes from the schema's
service descriptor; nothing here names the 11 operations.

The request deserializer passes the raw message bytes through, in a :class:`RawRequest`
holder: they are decoded only after the caller is admitted (as on HTTP, where the key is
checked before the body is parsed), and a signing caller's signature covers exactly
those bytes. grpc keeps its argument for the whole call, so the holder is emptied once
the bytes are decoded, and a stream handler drops the decoded request once the service
has it: a request carrying large inline files is not held for a stream's life.

A stream write waits for the client (HTTP/2 flow control); one that stays stuck for
:data:`WRITE_TIMEOUT_S` (a client that stopped reading) ends the handler: the service's
stream is closed (the task's run goes on), the stall is logged once, and UNAVAILABLE is
queued behind the stuck data: a client that reads again gets the events already
written, then UNAVAILABLE naming the reason. grpc-python cannot cancel a call from the
server, so what is left meanwhile is grpc's own call (with the pending message and the
status) until the client reads, cancels, disconnects or reaches its deadline.

Errors leave as the spec's gRPC status with a ``google.rpc.Status`` (ErrorInfo, and
BadRequest for field violations) in the ``grpc-status-details-bin`` trailer, which is
what ``grpcio-status``'s ``rpc_status.to_status`` reads on the client side.
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from typing import Any, NoReturn

import grpc
from google.protobuf import descriptor, message, message_factory

from a2a_gateway.protocol import codec, versioning
from a2a_gateway.protocol.context import PROTOCOL_VERSION, CallContext
from a2a_gateway.protocol.errors import (
    A2AError,
    InternalError,
    InvalidParamsError,
    InvalidRequestError,
    UnauthenticatedError,
    UnavailableError,
    status_proto,
)
from a2a_gateway.protocol.service import SERVICE_DESCRIPTOR, A2AService, method_name

from . import signing
from .auth import Authenticator
from .http_context import WRITE_TIMEOUT_S

log = logging.getLogger(__name__)

#: Trailing metadata key carrying the serialized ``google.rpc.Status``.
STATUS_DETAILS_KEY = "grpc-status-details-bin"
#: Service parameters as gRPC metadata keys (gRPC metadata keys are lower-case).
VERSION_KEY = versioning.VERSION_HEADER.lower()
EXTENSIONS_KEY = versioning.EXTENSIONS_HEADER.lower()
#: The 0.3 name of the extensions parameter, accepted as on HTTP.
LEGACY_EXTENSIONS_KEY = versioning.LEGACY_EXTENSIONS_HEADER.lower()

#: Bound on closing a service stream after the client went away or the rpc failed.
STREAM_CLOSE_TIMEOUT_S = 5.0
#: Bound on sending a stream's error status: it waits behind events the client has not
#: read (a client that stopped reading), then leaves once the client reads on.
ABORT_TIMEOUT_S = 1.0

Unary = Callable[[Any, CallContext], Awaitable[message.Message]]
Streaming = Callable[[Any, CallContext], AsyncIterator[message.Message]]


class RawRequest:
    """The request bytes as grpc hands them over; :meth:`take` empties the holder
    (grpc holds it for the whole call, the bytes are needed only until decoded)."""

    __slots__ = ("_data",)

    def __init__(self, data: bytes) -> None:
        self._data = data

    def take(self) -> bytes:
        data, self._data = self._data, b""
        return data


class StreamStalled(Exception):
    """A stream write did not complete in time: the client stopped reading."""


class MetadataView:
    """Case-insensitive read access to text invocation metadata (``-bin`` keys skipped)."""

    __slots__ = ("_values",)

    def __init__(self, metadata: Iterable[tuple[str, str | bytes]] | None) -> None:
        values: dict[str, list[str]] = {}
        for key, value in metadata or ():
            if isinstance(value, str):
                key = key.lower()
                found = values.get(key)
                if found is None:
                    values[key] = [value]
                else:
                    found.append(value)
        self._values = values

    def get(self, name: str) -> str | None:
        """First value of ``name``; the :data:`~.auth.HeaderGetter` shape."""
        values = self._values.get(name.lower())
        return values[0] if values else None

    def get_all(self, name: str) -> list[str]:
        return list(self._values.get(name.lower(), ()))

    def single(self, name: str) -> str | None:
        """The value of ``name``, refusing one sent more than once (as
        :func:`~.auth.single_values`, without building a list per lookup)."""
        values = self._values.get(name.lower())
        if values is None:
            return None
        if len(values) > 1:
            raise UnauthenticatedError(f"{name} must be sent once")
        return values[0]

    def has(self, name: str) -> bool:
        return name.lower() in self._values


def status_trailer(error: A2AError) -> tuple[tuple[str, bytes]]:
    """The trailing metadata that carries ``error`` as a ``google.rpc.Status``."""
    return ((STATUS_DETAILS_KEY, status_proto(error).SerializeToString()),)


async def abort(context: grpc.aio.ServicerContext[Any, Any], error: A2AError) -> NoReturn:
    """End the rpc with the spec's status for ``error`` (raises grpc's AbortError)."""
    await context.abort(error.spec.grpc_status, error.message, status_trailer(error))


def peer_address(peer: str | None) -> str | None:
    """The client IP from grpc's ``context.peer()`` (``ipv4:1.2.3.4:5``,
    ``ipv6:[::1]:5``, ``ipv6:%5B::1%5D:5``); None for other transports (``unix:``)."""
    if not peer:
        return None
    kind, _, rest = peer.partition(":")
    if kind == "ipv4":
        return rest.rpartition(":")[0] or None
    if kind == "ipv6":
        host = rest.replace("%5B", "[").replace("%5D", "]").rpartition(":")[0]
        return host.strip("[]") or None
    return None


class WriteWatch:
    """Bounds the sends of one stream with one timer, not one per write (a timer per
    write costs a tenth of a stream's throughput).

    The stream sets ``since`` (loop time) before each send and clears it after; the
    timer wakes every ``timeout_s`` and, when a send has been pending that long, marks
    the stream ``stalled`` and cancels its task: :meth:`send` turns that cancellation
    into :class:`StreamStalled`.
    """

    __slots__ = ("_handle", "_loop", "_task", "since", "stalled", "timeout_s")

    def __init__(self, timeout_s: float) -> None:
        self._loop = asyncio.get_running_loop()
        self._task = asyncio.current_task()
        self.timeout_s = timeout_s
        self.since: float | None = None
        self.stalled = False
        self._handle: asyncio.TimerHandle | None = self._loop.call_at(
            self._loop.time() + timeout_s, self._check
        )

    def _check(self) -> None:
        now = self._loop.time()
        since = self.since
        if since is not None and now - since >= self.timeout_s:
            self._handle = None
            self.stalled = True
            if self._task is not None:
                self._task.cancel()
            return
        start = now if since is None else since
        self._handle = self._loop.call_at(start + self.timeout_s, self._check)

    async def send(self, step: Awaitable[None]) -> None:
        """Await a send to the client (``context.write``, initial metadata);
        StreamStalled if HTTP/2 flow control holds it past ``timeout_s``."""
        self.since = self._loop.time()
        try:
            await step
        except asyncio.CancelledError:
            if self.stalled and self._task is not None:
                self._task.uncancel()
                raise StreamStalled from None
            raise
        finally:
            self.since = None

    def close(self) -> None:
        handle, self._handle = self._handle, None
        if handle is not None:
            handle.cancel()


def _deadline(context: grpc.aio.ServicerContext[Any, Any]) -> float | None:
    # Stubs say float; with no deadline grpc returns None or a huge value.
    remaining: float | None = context.time_remaining()
    if remaining is None or not math.isfinite(remaining) or remaining > 10 * 365 * 86400:
        return None
    return asyncio.get_running_loop().time() + max(0.0, remaining)


async def _close(events: AsyncIterator[message.Message], rpc: str) -> None:
    """Close the service's iterator (bounded) so the engine drops its subscription."""
    aclose = getattr(events, "aclose", None)
    if aclose is None:
        return
    try:
        async with asyncio.timeout(STREAM_CLOSE_TIMEOUT_S):
            await aclose()
    except TimeoutError:
        log.warning("gRPC %s: service stream did not close within %ss", rpc, STREAM_CLOSE_TIMEOUT_S)
    except Exception:
        log.exception("gRPC %s: service stream failed while closing", rpc)


class RpcAdapter:
    """One rpc of the schema bound to the service: deserializer and handler.

    ``wire`` is the rpc as peers call it when that is not ``method`` itself (another
    schema version's rpc, :mod:`.grpc03`): its request class is what arrives, and a
    subclass translates between its messages and ``method``'s by overriding
    :meth:`incoming`, :meth:`outgoing`, :meth:`negotiate` and :meth:`abort`.
    """

    def __init__(
        self,
        method: descriptor.MethodDescriptor,
        service: A2AService,
        authenticator: Authenticator,
        *,
        write_timeout_s: float = WRITE_TIMEOUT_S,
        wire: descriptor.MethodDescriptor | None = None,
    ) -> None:
        wire = wire or method
        self.name = wire.name
        self.write_timeout_s = write_timeout_s
        self.streaming = bool(wire.server_streaming)
        #: What arrives: the wire rpc's request.
        self.request_class: type[message.Message] = message_factory.GetMessageClass(wire.input_type)
        #: What the service returns (or streams): ``method``'s response.
        self.response_class: type[message.Message] = message_factory.GetMessageClass(
            method.output_type
        )
        self._call: Any = getattr(service, method_name(method.name))
        self._authenticator = authenticator

    # -- (de)serialization: must never raise into grpc's machinery ---------------------

    @staticmethod
    def deserialize(data: bytes) -> RawRequest:
        """Pass the raw bytes through; :meth:`decode` runs after admission."""
        return RawRequest(data)

    @staticmethod
    def serialize(response: message.Message) -> bytes:
        return response.SerializeToString()

    def decode(self, data: bytes) -> message.Message:
        """The request message, or InvalidRequest / InvalidParams for bad bytes."""
        kind = self.request_class.DESCRIPTOR.name
        try:
            return self.request_class.FromString(data)
        except message.DecodeError as exc:
            text = str(exc).lower()  # upb: "Exceeded upb_DecodeOptions_MaxDepth"
            if "depth" in text or "recursion" in text:
                raise InvalidParamsError(f"Invalid {kind}: message nesting is too deep") from None
            raise InvalidRequestError(f"Invalid {kind}: not a valid protobuf message") from None
        except Exception:  # defensive: never let a decoder bug become UNKNOWN
            log.exception("gRPC %s: request deserialization failed", self.name)
            raise InvalidRequestError(f"Invalid {kind}: not a valid protobuf message") from None

    # -- handlers ---------------------------------------------------------------------

    def _prepare(
        self, raw: bytes, context: grpc.aio.ServicerContext[Any, Any]
    ) -> tuple[message.Message, CallContext]:
        """Admit, negotiate, check the signature, decode and validate; raise A2AError."""
        metadata = MetadataView(context.invocation_metadata())
        get = metadata.single
        identity = self._authenticator.admit(get, peer_address(context.peer()))
        secret = identity.policy.signing_secret
        if secret is not None:  # right after admission, as on HTTP
            signing.check(secret, get(signing.SIGNATURE_METADATA_KEY), raw)
        version = self.negotiate(metadata.get(VERSION_KEY))
        request = self.incoming(self.decode(raw))
        extensions: frozenset[str] = frozenset()
        if metadata.has(EXTENSIONS_KEY) or metadata.has(LEGACY_EXTENSIONS_KEY):
            extensions = versioning.parse_extensions(
                metadata.get_all(EXTENSIONS_KEY) + metadata.get_all(LEGACY_EXTENSIONS_KEY)
            )
        call_context = CallContext(
            caller=identity.caller,
            tenant=str(getattr(request, "tenant", "")),  # every A2A request has one
            version=version,
            extensions=extensions,
            deadline=_deadline(context),
            binding="GRPC",
        )
        return request, call_context

    # -- what differs between schema versions (overridden by a translating subclass) --

    def negotiate(self, value: str | None) -> str:
        """The version served for the ``a2a-version`` metadata value (or raise)."""
        if value == PROTOCOL_VERSION:  # the common case needs no parsing
            return value
        return versioning.negotiate_version(value)

    def incoming(self, request: message.Message) -> message.Message:
        """The service's request for the decoded wire request, validated."""
        codec.validate(request)
        return request

    def outgoing(self, response: object) -> message.Message:
        """What goes on the wire for one service response or stream event."""
        if not isinstance(response, self.response_class):
            raise TypeError(
                f"service returned {type(response).__name__} for {self.name}, "
                f"expected {self.response_class.DESCRIPTOR.full_name}"
            )
        return response

    async def abort(self, context: grpc.aio.ServicerContext[Any, Any], error: A2AError) -> NoReturn:
        """End the rpc with ``error``'s status."""
        await abort(context, error)

    async def _send_extensions(
        self, context: grpc.aio.ServicerContext[Any, Any], call_context: CallContext
    ) -> None:
        # The gRPC form of the A2A-Extensions response header: initial metadata.
        value = versioning.format_extensions(call_context.activated_extensions)
        await context.send_initial_metadata(((EXTENSIONS_KEY, value),))

    async def _send_stream_headers(
        self, context: grpc.aio.ServicerContext[Any, Any], call_context: CallContext
    ) -> None:
        """Initial metadata of a stream, on its own before the first event: grpc marks
        it sent only once the write carrying it completes, and the status of a stalled
        stream is refused while grpc would send it again (measured: no cost)."""
        if call_context.activated_extensions:
            await self._send_extensions(context, call_context)
        else:
            await context.send_initial_metadata(())

    async def unary(self, request: bytes, context: grpc.aio.ServicerContext[Any, Any]) -> bytes:
        # Bytes in and out (no deserializer or serializer for grpc to call back): a
        # unary request lives only as long as the call anyway.
        try:
            decoded, call_context = self._prepare(request, context)
            call: Unary = self._call
            response = self.outgoing(await call(decoded, call_context)).SerializeToString()
            if call_context.activated_extensions:
                await self._send_extensions(context, call_context)
            return response
        except A2AError as exc:
            error: A2AError = exc
        except Exception:
            log.exception("gRPC %s failed", self.name)
            error = InternalError()
        await self.abort(context, error)

    async def stream(
        self, request: RawRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> None:
        # A coroutine writing with context.write (not an async generator) so a client
        # cancel lands here, and the finally below closes the service stream at once.
        timeout_s = self.write_timeout_s
        try:
            decoded, call_context = self._prepare(request.take(), context)
            call: Streaming = self._call
            events = call(decoded, call_context)
            del decoded  # the service has it; it may carry large inline file bytes
            watch = WriteWatch(timeout_s)
            try:
                first = True
                async for event in events:
                    if first:
                        await watch.send(self._send_stream_headers(context, call_context))
                        first = False
                    await watch.send(context.write(self.outgoing(event)))
            finally:
                watch.close()
                # Leaves the task's subscribers (the run goes on) before any abort below.
                await _close(events, self.name)
            return
        except A2AError as exc:
            error: A2AError = exc
        except StreamStalled:
            log.warning(
                "gRPC %s: the client read nothing for %gs; ending the stream",
                self.name,
                timeout_s,
            )
            error = UnavailableError(
                f"the stream was ended: the client read nothing for {timeout_s:g} s"
            )
        except Exception:
            if context.cancelled() or context.done():
                return  # the client went away while we were writing: nothing to tell
            log.exception("gRPC %s failed", self.name)
            error = InternalError()
        await self._abort_stream(context, error)

    async def _abort_stream(
        self, context: grpc.aio.ServicerContext[Any, Any], error: A2AError
    ) -> None:
        """End a stream with ``error``. The status waits behind data the client has
        not read yet, so sending it is bounded; once queued, returning is enough."""
        try:
            async with asyncio.timeout(ABORT_TIMEOUT_S):
                await self.abort(context, error)
        except grpc.aio.AbortError:
            raise
        except Exception as exc:  # TimeoutError, or grpc's refusal of a second batch
            log.debug("gRPC %s: stream status queued, not yet sent: %r", self.name, exc)

    def method_handler(self) -> grpc.RpcMethodHandler[Any, Any]:
        if not self.streaming:
            return grpc.unary_unary_rpc_method_handler(self.unary)  # bytes in, bytes out
        return grpc.unary_stream_rpc_method_handler(
            self.stream, request_deserializer=self.deserialize, response_serializer=self.serialize
        )


def a2a_rpc_handler(
    service: A2AService,
    authenticator: Authenticator,
    *,
    write_timeout_s: float = WRITE_TIMEOUT_S,
) -> grpc.GenericRpcHandler[Any, Any]:
    """The generic handler serving every rpc of ``lf.a2a.v1.A2AService`` from ``service``.
    ``write_timeout_s`` bounds each stream write (tests shorten it)."""
    handlers = {
        method.name: RpcAdapter(
            method, service, authenticator, write_timeout_s=write_timeout_s
        ).method_handler()
        for method in SERVICE_DESCRIPTOR.methods
    }
    return grpc.method_handlers_generic_handler(SERVICE_DESCRIPTOR.full_name, handlers)


__all__ = [
    "EXTENSIONS_KEY",
    "STATUS_DETAILS_KEY",
    "VERSION_KEY",
    "WRITE_TIMEOUT_S",
    "MetadataView",
    "RawRequest",
    "RpcAdapter",
    "StreamStalled",
    "WriteWatch",
    "a2a_rpc_handler",
    "abort",
    "peer_address",
    "status_trailer",
]
