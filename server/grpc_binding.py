"""The gRPC binding: ``lf.a2a.v1.A2AService`` on grpc.aio, adapted to :class:`A2AService`.

Thin by design: admit from metadata (rate limits, authentication, a signing caller's
``x-a2a-signature``), build the :class:`CallContext`, decode and validate, call the
service, write the response(s), map errors. The rpc list comes from the schema's
service descriptor; nothing here names the 11 operations.

Every rpc is registered with grpc as taking a request *stream* (unary rpcs as
stream-unary, streaming ones as stream-stream: the wire is the same), so that the
binding reads the one request message itself, within a bound (:class:`GrpcBounds`):
grpc's own unary path waits for the message forever, so a client that sends a length
prefix larger than its data, a DATA frame shorter than the 5-byte prefix, or no message
at all, and sets no deadline, would hold a handler for good. The message is taken as
raw bytes and decoded only after the caller is admitted (as on HTTP, where the key is
checked before the body is parsed); a signing caller's signature covers exactly those
bytes. A stream handler drops the decoded request once the service has it: a request
carrying large inline files is not held for a stream's life.

The request bound and the unary deadline are kept by one :class:`CallWatch` per server,
one timer over all its calls, not an ``asyncio.timeout`` per call: its two timers per
unary call (armed, rescheduled, cancelled) cost 7-9 us a call in a tight loop, and
removing them took ~5% off a gRPC send's CPU, where grpc's stream path itself cost
nothing measurable over its unary path (docs/performance.md). grpc's unary path
cannot be bounded at all: it reads the message before any application code runs, and
grpc-python offers no way to end that call.

Bounds (:class:`GrpcBounds`, from ``serve`` settings): the request message must arrive
within ``request_s``; a unary call whose client set no deadline gets ``unary_s`` as
its deadline (the service sees it in :class:`CallContext`; a blocking SendMessage
answers with the task as it is then), and is ended with DEADLINE_EXCEEDED shortly after
it if the service ignores it; a client's own deadline reaches the service a margin
earlier (:func:`_deadline`), so an answer made at it arrives in time; a stream that
sends no event for ``stream_idle_s`` is ended with DEADLINE_EXCEEDED (subscribe again
to go on). An answer or stream event over ``max_answer_bytes`` (twice the request
cap, as our client reads) is not sent: the call ends with InternalError naming both
sizes (a stream, after the events before it).

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
import contextlib
import dataclasses
import logging
import math
import sys
from collections.abc import (
    AsyncIterator,
    Awaitable,
    Callable,
    Coroutine,
    Generator,
    Iterable,
)
from dataclasses import dataclass
from typing import Any, NoReturn

import grpc
from google.protobuf import descriptor, message, message_factory

from a2a_gateway.local import signing
from a2a_gateway.protocol import codec, versioning
from a2a_gateway.protocol.codec import MAX_ANSWER_BYTES, MAX_BODY_BYTES
from a2a_gateway.protocol.context import PROTOCOL_VERSION, CallContext, Caller
from a2a_gateway.protocol.errors import (
    A2AError,
    DeadlineExceededError,
    InternalError,
    InvalidParamsError,
    InvalidRequestError,
    UnauthenticatedError,
    UnavailableError,
    status_proto,
)
from a2a_gateway.protocol.resume import EVENT_ID_KEY, GRPC_RESUME_KEY, RESUME_EXTENSION
from a2a_gateway.protocol.service import SERVICE_DESCRIPTOR, A2AService, method_name
from a2a_gateway.protocol.tracing import TRACEPARENT, TRACESTATE
from lf.a2a.v1 import a2a_pb2 as pb

from .auth import NOT_READ, Authenticator, Identity, NotRead, Presented, presented_credentials
from .http_sse import WRITE_TIMEOUT_S
from .metrics import CLIENT_GONE, NULL_METER, OK, Meter, outcome_of
from .retry_memo import RetryMemo
from .tls import grpc_peer_certificate

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


@dataclass(frozen=True, slots=True)
class GrpcBounds:
    """How long a gRPC call may take where the client does not say (see the module doc)."""

    request_s: float = 30.0  # the request message must have arrived by then
    unary_s: float = 300.0  # the deadline of a unary call whose client set none
    stream_idle_s: float = 300.0  # a stream silent for this long is ended
    write_s: float = WRITE_TIMEOUT_S  # one stream write may wait this long for the client
    grace_s: float = 1.0  # a unary call outliving its deadline by this much is ended
    max_request_bytes: int = MAX_BODY_BYTES  # as an HTTP body (InvalidRequest beyond)
    max_answer_bytes: int = MAX_ANSWER_BYTES  # one answer or stream event (Internal beyond)


class StreamStalled(Exception):
    """A stream write did not complete in time: the client stopped reading."""


class StreamIdle(Exception):
    """A stream sent no event for its idle bound."""


class _StreamReport:
    """What a stream tells its meter when it ends: when it started, whether its first
    event went out (latency observed, counted open) and how it ended (a cancel, the
    client leaving, keeps CLIENT_GONE)."""

    __slots__ = ("opened", "outcome", "started")

    def __init__(self, started: float) -> None:
        self.started = started
        self.opened = False
        self.outcome = CLIENT_GONE


class MetadataView:
    """Case-insensitive read access to text invocation metadata (``-bin`` keys skipped).
    ``values`` maps each lower-case key to its values, in order; ``presented`` is what
    :func:`~.auth.presented_credentials` gives for them, once known (a view kept with
    a memo's answer is the same for each of its calls: parsed once)."""

    __slots__ = ("presented", "values")

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
        self.values = values
        self.presented: Presented | NotRead = NOT_READ

    def get(self, name: str) -> str | None:
        """First value of ``name``; the :data:`~.auth.HeaderGetter` shape."""
        values = self.values.get(name.lower())
        return values[0] if values else None

    def get_all(self, name: str) -> list[str]:
        return list(self.values.get(name.lower(), ()))

    def single(self, name: str) -> str | None:
        """The value of ``name``, refusing one sent more than once (as
        :func:`~.auth.single_values`, without building a list per lookup)."""
        values = self.values.get(name.lower())
        if values is None:
            return None
        if len(values) > 1:
            raise UnauthenticatedError(f"{name} must be sent once")
        return values[0]

    def has(self, name: str) -> bool:
        return name.lower() in self.values


def with_event_id(event: pb.StreamResponse, event_id: str) -> pb.StreamResponse:
    """A copy of ``event`` (shared with other streams) whose payload's ``metadata``
    names its id (:data:`~a2a_gateway.protocol.resume.EVENT_ID_KEY`)."""
    numbered = pb.StreamResponse()
    numbered.CopyFrom(event)
    kind = numbered.WhichOneof("payload")
    if kind is not None:
        getattr(numbered, kind).metadata[EVENT_ID_KEY] = event_id
    return numbered


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
    """Bounds the sends of one stream, and its silences, with one timer, not one per
    write (a timer per write costs a tenth of a stream's throughput).

    The stream sets ``since`` (loop time) before each send and clears it after; the
    timer wakes when a bound may be due and, when a send has been pending for
    ``timeout_s``, marks the stream ``stalled`` and cancels its task: :meth:`send` turns
    that cancellation into :class:`StreamStalled`. When no send has started for
    ``idle_s`` (the service had nothing to say), it marks the stream ``idle`` and cancels
    its task: :meth:`idle_error` tells the stream handler so.
    """

    __slots__ = (
        "_handle",
        "_loop",
        "_task",
        "idle",
        "idle_s",
        "last",
        "since",
        "stalled",
        "timeout_s",
    )

    def __init__(self, timeout_s: float, idle_s: float = math.inf) -> None:
        self._loop = asyncio.get_running_loop()
        self._task = asyncio.current_task()
        self.timeout_s = timeout_s
        self.idle_s = idle_s
        self.since: float | None = None
        self.last = self._loop.time()
        self.stalled = False
        self.idle = False
        self._handle: asyncio.TimerHandle | None = self._loop.call_at(
            self.last + min(timeout_s, idle_s), self._check
        )

    def _check(self) -> None:
        now = self._loop.time()
        since = self.since
        if since is not None:
            if now - since >= self.timeout_s:
                self.stalled = True
                self._stop()
                return
            due = since + self.timeout_s
        else:
            if now - self.last >= self.idle_s:
                self.idle = True
                self._stop()
                return
            due = min(self.last + self.idle_s, now + self.timeout_s)
        self._handle = self._loop.call_at(due, self._check)

    def _stop(self) -> None:
        self._handle = None
        if self._task is not None:
            self._task.cancel()

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
            self.last = self._loop.time()

    def idle_error(self) -> StreamIdle | None:
        """After a CancelledError: StreamIdle when the watch caused it (uncancelled)."""
        if self.idle and self._task is not None:
            self._task.uncancel()
            return StreamIdle()
        return None

    def close(self) -> None:
        handle, self._handle = self._handle, None
        if handle is not None:
            handle.cancel()


def _current_task_of() -> Callable[[asyncio.AbstractEventLoop], asyncio.Task[Any] | None]:
    """``asyncio.current_task``; on Python 3.11, where it is a Python function around
    a lookup in the running tasks' map (a frame on every call watched), that lookup."""
    running = getattr(asyncio.tasks, "_current_tasks", None)
    if sys.version_info < (3, 12) and isinstance(running, dict):
        return running.get
    return asyncio.current_task


_current_task = _current_task_of()


class WatchedCall:
    """One call under a :class:`CallWatch`: its task, when it is due, and whether the
    watch has ended it."""

    __slots__ = ("cancelling", "due", "expired", "task")

    def __init__(self, task: asyncio.Task[Any] | None, due: float) -> None:
        self.task = task
        self.due = due
        self.expired = False
        #: Cancellations already pending when the call was watched (as asyncio.timeout).
        self.cancelling = task.cancelling() if task is not None else 0

    def claim(self) -> bool:
        """After a CancelledError: True when the watch caused it and nothing else asked
        for the task's cancellation since; False when the error is someone else's to
        see. Either way the watch's own cancellation is taken back (as
        ``asyncio.timeout`` does)."""
        task = self.task
        if not self.expired or task is None:
            return False
        self.expired = False  # taken back once: CallWatch.done must not do it again
        return task.uncancel() <= self.cancelling


class CallWatch:
    """Bounds the calls of one server with one timer instead of a timer per call.

    :meth:`watch` registers the running task with the time it is due; :meth:`reschedule`
    moves that time (the request has arrived: now the call's deadline bounds it);
    :meth:`done` forgets it. The timer is armed at the earliest due time it knows of:
    a new call is due no earlier than the ones before it (the request bound is the same
    for all), so under load the timer is re-armed about once per bound, not per call; a
    due time earlier than the armed one (a short client deadline) re-arms it. When it
    fires, every call past its time is marked expired and its task cancelled, which the
    handler turns into the bound's error (:meth:`WatchedCall.claim`), exactly where an
    ``asyncio.timeout`` would have raised. The calls are scanned only when the timer
    fires, which is at most once per due time.
    """

    __slots__ = ("_armed_at", "_calls", "_handle", "_loop")

    #: A call this close to its due time when the timer fires is expired (timers may
    #: fire a little early on the loop's clock; waiting again would spin).
    EARLY_S = 0.001

    def __init__(self) -> None:
        self._calls: set[WatchedCall] = set()
        self._handle: asyncio.TimerHandle | None = None
        self._armed_at = math.inf
        self._loop: asyncio.AbstractEventLoop | None = None

    def watch(self, timeout_s: float) -> WatchedCall:
        """Bound the running task: it is due in ``timeout_s``."""
        loop = asyncio.get_running_loop()
        call = WatchedCall(_current_task(loop), loop.time() + timeout_s)
        self._calls.add(call)
        if call.due < self._armed_at or self._loop is not loop:
            self._arm(loop, call.due)
        return call

    def reschedule(self, call: WatchedCall, due: float) -> None:
        """Make ``call`` due at loop time ``due`` instead."""
        call.due = due
        if due < self._armed_at and self._loop is not None:
            self._arm(self._loop, due)

    def done(self, call: WatchedCall) -> None:
        """Stop watching ``call`` (it finished, or failed, or was expired)."""
        self._calls.discard(call)
        if call.expired and call.task is not None:
            # Expired, but the service swallowed the cancellation and the call went on:
            # take the watch's cancellation back, as asyncio.timeout does on exit.
            call.expired = False
            call.task.uncancel()

    def __len__(self) -> int:
        return len(self._calls)

    def _arm(self, loop: asyncio.AbstractEventLoop, due: float) -> None:
        if self._handle is not None:
            self._handle.cancel()
        self._loop = loop
        self._armed_at = due
        self._handle = loop.call_at(due, self._check)

    def _check(self) -> None:
        self._handle = None
        self._armed_at = math.inf
        loop = self._loop
        if loop is None:  # pragma: no cover - armed implies a loop
            return
        limit = loop.time() + self.EARLY_S
        expired: list[WatchedCall] = []
        next_due = math.inf
        for call in self._calls:
            if call.due <= limit:
                expired.append(call)
            elif call.due < next_due:
                next_due = call.due
        for call in expired:
            self._calls.discard(call)
            call.expired = True
            if call.task is not None:
                call.task.cancel()
        if next_due < math.inf:
            self._arm(loop, next_due)


#: A client's deadline is when its answer must have arrived, so the service is given
#: this share of the time left less, at most :data:`ANSWER_MARGIN_MAX_S`, to send it in
#: (a blocking SendMessage answered at the deadline itself lost the race with the
#: client's timer: DEADLINE_EXCEEDED, and the client never learnt its task's id).
ANSWER_MARGIN_SHARE = 0.2
ANSWER_MARGIN_MAX_S = 1.0


def _check_signature(identity: Identity, metadata: MetadataView, raw: bytes) -> None:
    """A signing caller's signature over the request's bytes, right after admission
    (as on HTTP); raise A2AError."""
    secret = identity.policy.signing_secret
    if secret is not None:
        signing.check(secret, metadata.single(signing.SIGNATURE_METADATA_KEY), raw)


def _deadline(context: grpc.aio.ServicerContext[Any, Any], default_s: float | None) -> float | None:
    """When the service must answer, as loop time: ahead of the client's deadline by
    the answer's margin, else ``default_s`` from now (no client timer to beat)."""
    # Stubs say float; with no deadline grpc returns None or a huge value.
    remaining: float | None = context.time_remaining()
    now = asyncio.get_running_loop().time()
    if remaining is None or not math.isfinite(remaining) or remaining > 10 * 365 * 86400:
        return None if default_s is None else now + default_s
    remaining = max(0.0, remaining)
    return now + remaining - min(ANSWER_MARGIN_MAX_S, remaining * ANSWER_MARGIN_SHARE)


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
        bounds: GrpcBounds | None = None,
        write_timeout_s: float | None = None,
        wire: descriptor.MethodDescriptor | None = None,
        watch: CallWatch | None = None,
        meter: Meter = NULL_METER,
        memo: RetryMemo | None = None,
    ) -> None:
        wire = wire or method
        #: Kept answers of retried calls (:mod:`.retry_memo`): SendMessage's, when the
        #: gateway keeps them.
        self.memo = memo
        #: Bounds the request read and the unary deadline; one per server, shared by
        #: all its adapters (a2a_rpc_handler and legacy_rpc_handler pass it).
        self.watch = watch or CallWatch()
        self.name = wire.name
        self.meter = meter
        #: The ``method`` label: the 1.0 rpc (a 0.3 rpc counts under it, as on HTTP).
        self.metric_name = method.name
        bounds = bounds or GrpcBounds()
        if write_timeout_s is not None:  # tests shorten the write bound alone
            bounds = dataclasses.replace(bounds, write_s=write_timeout_s)
        self.bounds = bounds
        self.write_timeout_s = bounds.write_s
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

    async def receive(self, context: grpc.aio.ServicerContext[Any, Any]) -> bytes:
        """The request message's bytes, once they have all arrived (InvalidRequest when
        the client ended the call without one). The caller bounds the wait."""
        return self.received(await context.read())

    def received(self, data: object) -> bytes:
        """What ``context.read()`` gave, as the request's bytes (InvalidRequest when the
        client ended the call without one, or it is over ``max_request_bytes``)."""
        if not isinstance(data, bytes):  # grpc.aio.EOF (no deserializer: bytes otherwise)
            raise InvalidRequestError("the call ended without a request message")
        if len(data) > self.bounds.max_request_bytes:
            raise InvalidRequestError(
                f"request message is larger than {self.bounds.max_request_bytes} bytes"
            )
        return data

    def _late(self, arrived: bool) -> A2AError:
        """The error for a bound that expired: the request's, or the unary deadline."""
        if not arrived:
            return InvalidRequestError(
                f"the request message did not arrive within {self.bounds.request_s:g} s"
            )
        return DeadlineExceededError(
            "the call did not finish before its deadline"
            f" (the server's default is {self.bounds.unary_s:g} s)"
        )

    def serialize(self, response: object) -> bytes:
        """The wire bytes of one service response or stream event; InternalError when
        they are over ``max_answer_bytes`` (grpc itself would fail the call with a bare
        RESOURCE_EXHAUSTED and log the failed write as a crash)."""
        data = self.outgoing(response).SerializeToString()
        limit = self.bounds.max_answer_bytes
        if len(data) > limit:
            log.warning(
                "gRPC %s: an answer of %d bytes is over the %d-byte limit; refused",
                self.name,
                len(data),
                limit,
            )
            raise InternalError(
                f"the answer is {len(data)} bytes, larger than the {limit} bytes this server"
                " sends over gRPC; ask for less (historyLength, pageSize) or use HTTP"
            )
        return data

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

    async def _prepare(
        self,
        raw: bytes,
        context: grpc.aio.ServicerContext[Any, Any],
        default_deadline_s: float | None = None,
    ) -> tuple[message.Message, CallContext]:
        """Admit, negotiate, check the signature, decode and validate; raise A2AError."""
        metadata = MetadataView(context.invocation_metadata())
        admitted = self._admit(context, metadata)
        identity = admitted if isinstance(admitted, Identity) else await admitted
        _check_signature(identity, metadata, raw)
        return self._decoded(raw, context, metadata, identity.caller, default_deadline_s)

    def _admit(
        self, context: grpc.aio.ServicerContext[Any, Any], metadata: MetadataView
    ) -> Identity | Coroutine[Any, Any, Identity]:
        """Admit the call (authentication, rate limits); raise A2AError. The identity
        when known without waiting (a key, the anonymous caller), else the coroutine
        to await for it; then the signature is checked (:func:`_check_signature`)."""
        authenticator = self._authenticator
        certificate = grpc_peer_certificate(context) if authenticator.certificates else None
        # The peer string is built by grpc on each ask: only when per-address limits count it.
        address = peer_address(context.peer()) if authenticator.limiter.limits_addresses else None
        return authenticator.admit_now(metadata.single, address, certificate, metadata.presented)

    def _decoded(
        self,
        raw: bytes,
        context: grpc.aio.ServicerContext[Any, Any],
        metadata: MetadataView,
        caller: Caller,
        default_deadline_s: float | None,
    ) -> tuple[message.Message, CallContext]:
        """Negotiate, decode and validate an admitted call; raise A2AError."""
        get = metadata.single
        # The rest by their lower-case names straight from the view's dict: most calls
        # send none of them (no method call, no lower() per name).
        values = metadata.values
        found = values.get(VERSION_KEY)
        version = self.negotiate(found[0] if found else None)
        request = self.incoming(self.decode(raw))
        extensions: frozenset[str] = frozenset()
        if EXTENSIONS_KEY in values or LEGACY_EXTENSIONS_KEY in values:
            extensions = versioning.parse_extensions(
                metadata.get_all(EXTENSIONS_KEY) + metadata.get_all(LEGACY_EXTENSIONS_KEY)
            )
        call_context = CallContext(
            caller=caller,
            tenant=str(getattr(request, "tenant", "")),  # every A2A request has one
            version=version,
            extensions=extensions,
            deadline=_deadline(context, default_deadline_s),
            binding="GRPC",
            traceparent=(get(TRACEPARENT) or "") if TRACEPARENT in values else "",
            tracestate=(get(TRACESTATE) or "") if TRACESTATE in values else "",
            resume_from=(get(GRPC_RESUME_KEY) or "").strip() if GRPC_RESUME_KEY in values else "",
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

    async def unary(
        self, requests: AsyncIterator[bytes], context: grpc.aio.ServicerContext[Any, Any]
    ) -> bytes:
        # Bytes in and out (no deserializer or serializer for grpc to call back). Bounded
        # by the server's watch (no timer of its own): the request bound until the
        # message is in, then the call's deadline and its grace.
        meter = self.meter
        started = meter.start()
        watch = self.watch
        watched = watch.watch(self.bounds.request_s)
        arrived = False
        memo = self.memo
        try:
            try:
                raw = await context.read()  # (no coroutine of ours; a frame for refusals)
                if type(raw) is not bytes or len(raw) > self.bounds.max_request_bytes:
                    raw = self.received(raw)
                arrived = True
                # (a tuple of pairs from grpc.aio's server, whatever its stubs say)
                invocation: Any = context.invocation_metadata()
                kept = None
                if memo is not None:  # the same call again? (its metadata's view is kept)
                    key = (raw, invocation if type(invocation) is tuple else tuple(invocation))
                    kept = memo.get(key)
                metadata = MetadataView(invocation) if kept is None else kept.metadata
                admitted = self._admit(context, metadata)
                identity = admitted if isinstance(admitted, Identity) else await admitted
                if identity.policy.signing_secret is not None:  # (no frame for most)
                    _check_signature(identity, metadata, raw)
                caller = identity.caller
                if kept is not None and memo is not None:  # as kept, if it holds for caller
                    answer = memo.answer(kept, caller)
                    if answer is not None:
                        meter.done(self.metric_name, OK, started)
                        return answer
                decoded, call_context = self._decoded(
                    raw, context, metadata, caller, self.bounds.unary_s
                )
                del raw
                assert call_context.deadline is not None  # the client's, or the default
                watch.reschedule(watched, call_context.deadline + self.bounds.grace_s)
                call: Unary = self._call
                result = await call(decoded, call_context)
            except asyncio.CancelledError:
                if not watched.claim():
                    raise
                raise self._late(arrived) from None
            finally:
                watch.done(watched)
            response = self.serialize(result)
            if call_context.activated_extensions:
                await self._send_extensions(context, call_context)
            elif memo is not None and call_context.replay is not None:
                with contextlib.suppress(A2AError):  # (an authenticator that reads none)
                    metadata.presented = presented_credentials(metadata.single)
                memo.keep(key, caller, response, call_context.replay, metadata)
            meter.done(self.metric_name, OK, started)
            return response
        except asyncio.CancelledError:  # the client cancelled or went away
            meter.done(self.metric_name, CLIENT_GONE, started)
            raise
        except A2AError as exc:
            error: A2AError = exc
        except Exception:
            log.exception("gRPC %s failed", self.name)
            error = InternalError()
        meter.done(self.metric_name, outcome_of(error), started)
        await self.abort(context, error)

    # grpc's unary handler is the adapter: Awaitable, it passes grpc.aio's async test fast
    __call__ = unary  # (docs/performance.md)

    def __await__(self) -> Generator[Any, None, NoReturn]:
        raise TypeError("an RpcAdapter is called (it is grpc's handler), not awaited")

    async def stream(
        self, requests: AsyncIterator[bytes], context: grpc.aio.ServicerContext[Any, Any]
    ) -> None:
        meter = self.meter
        report = _StreamReport(meter.start())
        try:
            await self._stream(context, report)
        finally:
            if report.opened:
                meter.closed()
            else:  # refused (or ended) before any event: its latency is the whole call
                meter.observe(self.metric_name, report.started)
            meter.count(self.metric_name, report.outcome)

    async def _stream(
        self, context: grpc.aio.ServicerContext[Any, Any], report: _StreamReport
    ) -> None:
        # A coroutine writing with context.write (not an async generator) so a client
        # cancel lands here, and the finally below closes the service stream at once.
        bounds = self.bounds
        try:
            watched = self.watch.watch(bounds.request_s)
            try:
                raw = await self.receive(context)
            except asyncio.CancelledError:
                if not watched.claim():
                    raise
                raise self._late(arrived=False) from None
            finally:
                self.watch.done(watched)
            decoded, call_context = await self._prepare(raw, context)
            del raw
            call: Streaming = self._call
            events = call(decoded, call_context)
            del decoded  # the service has it; it may carry large inline file bytes
            watch = WriteWatch(bounds.write_s, bounds.stream_idle_s)
            # Each event's id rides in its own metadata, for a client that asked.
            numbered = bool(call_context.resume_from) or RESUME_EXTENSION in call_context.extensions
            try:
                first = True
                async for event in events:
                    if numbered and call_context.event_id and isinstance(event, pb.StreamResponse):
                        event = with_event_id(event, call_context.event_id)
                    if first:
                        await watch.send(self._send_stream_headers(context, call_context))
                        first = False
                        self.meter.observe(self.metric_name, report.started)  # to 1st event
                        self.meter.opened()
                        report.opened = True
                    await watch.send(context.write(self.serialize(event)))
            except asyncio.CancelledError:
                idle = watch.idle_error()
                if idle is None:
                    raise
                raise idle from None
            finally:
                watch.close()
                # Leaves the task's subscribers (the run goes on) before any abort below.
                await _close(events, self.name)
            report.outcome = OK
            return
        except A2AError as exc:
            error: A2AError = exc
        except StreamStalled:
            log.warning(
                "gRPC %s: the client read nothing for %gs; ending the stream",
                self.name,
                bounds.write_s,
            )
            error = UnavailableError(
                f"the stream was ended: the client read nothing for {bounds.write_s:g} s"
            )
        except StreamIdle:
            log.info(
                "gRPC %s: no event for %gs; ending the stream", self.name, bounds.stream_idle_s
            )
            error = DeadlineExceededError(
                f"the stream was ended: no event for {bounds.stream_idle_s:g} s"
                " (subscribe again to go on)"
            )
        except Exception:
            if context.cancelled() or context.done():
                return  # the client went away while we were writing: nothing to tell
            log.exception("gRPC %s failed", self.name)
            error = InternalError()
        report.outcome = outcome_of(error)
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
        # Request streams on purpose: the binding reads the message itself, bounded
        # (the module doc); bytes in and out (the binding serializes, within its size
        # bound), the client's unary or server-streaming call as is. grpc's unary
        # path would read the message before our code runs, unbounded; its stream
        # path costs no more per call (measured, docs/performance.md).
        if not self.streaming:
            return grpc.stream_unary_rpc_method_handler(self)  # (see __call__)
        return grpc.stream_stream_rpc_method_handler(self.stream)


def a2a_rpc_handler(
    service: A2AService,
    authenticator: Authenticator,
    *,
    bounds: GrpcBounds | None = None,
    write_timeout_s: float | None = None,
    watch: CallWatch | None = None,
    meter: Meter = NULL_METER,
    memo: RetryMemo | None = None,
) -> grpc.GenericRpcHandler[Any, Any]:
    """The generic handler serving every rpc of ``lf.a2a.v1.A2AService`` from ``service``,
    within ``bounds``; ``write_timeout_s`` overrides their write bound (tests shorten it);
    ``watch`` keeps the bounds (the server's, shared with the 0.3 service; a new one
    when not given); every call is reported to ``meter``; ``memo`` keeps SendMessage's
    answers of retries from the stored task (:mod:`.retry_memo`; None: none kept)."""
    watch = watch or CallWatch()
    handlers = {
        method.name: RpcAdapter(
            method,
            service,
            authenticator,
            bounds=bounds,
            write_timeout_s=write_timeout_s,
            watch=watch,
            meter=meter,
            memo=memo if method.name == "SendMessage" else None,
        ).method_handler()
        for method in SERVICE_DESCRIPTOR.methods
    }
    return grpc.method_handlers_generic_handler(SERVICE_DESCRIPTOR.full_name, handlers)


__all__ = [
    "EXTENSIONS_KEY",
    "STATUS_DETAILS_KEY",
    "VERSION_KEY",
    "WRITE_TIMEOUT_S",
    "CallWatch",
    "GrpcBounds",
    "MetadataView",
    "RpcAdapter",
    "StreamIdle",
    "StreamStalled",
    "WatchedCall",
    "WriteWatch",
    "a2a_rpc_handler",
    "abort",
    "peer_address",
    "status_trailer",
]
