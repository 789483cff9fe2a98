"""The SSE writer of the HTTP bindings: the pump that pulls one service stream for one
request, the one timer of an application's open streams, and serving a stream shaped
by a binding's codec."""

from __future__ import annotations

import asyncio
import contextvars
import logging
from collections import deque
from collections.abc import AsyncIterator, Callable, Coroutine
from typing import Any, Protocol

from aiohttp import hdrs, web
from aiohttp.streams import StreamReader

from a2a_gateway.protocol import sse
from a2a_gateway.protocol.context import CallContext
from a2a_gateway.protocol.errors import A2AError
from lf.a2a.v1 import a2a_pb2 as pb

from .events import Batch, ChunkEvent, event_proto
from .http_request import CONFIG
from .http_response import echo_extensions, unexpected
from .metrics import CLIENT_GONE, INTERNAL, NULL_METER, OK, Meter, outcome_of

log = logging.getLogger(__name__)

#: The timer of the application's open SSE streams (:class:`StreamWatch`).
STREAM_WATCH: web.AppKey[StreamWatch] = web.AppKey("a2a_stream_watch")

# --- Server-Sent Events ---------------------------------------------------------------
#
# Per stream, one task: aiohttp's handler task writes, and between writes steps the
# producer, a coroutine of the stream's EventPump that pulls the service's iterator and
# encodes each event into a list of chunks (stepped as a task would step it: a held
# stream costs no task of its own; another service's iterator than the engine's, a
# proxy's, is pulled by a producer task of its own). Events the service has ready
# together (a burst of artifact chunks) are pulled without suspending and leave in one
# write. Nothing here keeps a timer per stream: one
# StreamWatch per application ticks every DISCONNECT_POLL_S for all open streams and
# wakes a stream only when its client has gone, its keep-alive is due or a write has been
# stuck for WRITE_TIMEOUT_S (then the connection is aborted).


class StreamCodec(Protocol):
    """How a binding shapes a stream: its events, its mid-stream error event, and the
    plain error response for an error found before the first event."""

    def event(self, event: pb.StreamResponse) -> bytes: ...

    def error(self, error: A2AError) -> bytes: ...

    def error_response(self, error: A2AError) -> web.StreamResponse: ...


#: A codec's ``json_frame``: what goes before and after a StreamResponse's ProtoJSON in
#: its event, when that is the event (None: not, as in A2A 0.3's shapes).
JsonFrame = tuple[bytes, bytes] | None


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
#: :meth:`EventPump.ready`'s answer when nothing is ready (an encoded event is never empty).
NOTHING_YET = b""


#: The context of :meth:`EventPump._on_pending` (it only wakes the writer): one for all,
#: not a copy of the current one per wait (what ``add_done_callback`` makes by default).
_WAKE_CONTEXT = contextvars.Context()


def _complete(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


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
        "_frame",
        "_pending",
        "_producer",
        "_room",
        "_task",
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
        frame: JsonFrame = None,
    ) -> None:
        self.transport = transport
        self._events = events
        self._encode = encode
        self._frame = frame  # a text chunk's ProtoJSON in this, not encode()
        self._context = context  # names each event (``event_id``): its SSE ``id:``
        self.keepalive_s = keepalive_s
        self._chunks: list[bytes] = []
        # The producer: a coroutine the writer's task steps itself (see wait()), not a
        # task of its own (a held stream's task, its context and its registry entry);
        # ``_pending`` is the future it waits for (None: it is due to be stepped).
        self._producer: Coroutine[Any, Any, None] | None = None
        self._pending: asyncio.Future[Any] | None = None
        self._task: asyncio.Task[None] | None = None  # the producer's, when not stepped
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
        if hasattr(self._events, "next_batch"):  # the engine's: stepped by wait()
            self._producer = self._produce()
        else:
            # Another service's iterator (a proxy's upstream stream: httpx over anyio,
            # whose cancel scopes look at the task's own waits) pulls in a task of its
            # own, as before.
            self._task = asyncio.get_running_loop().create_task(self._produce())

    def _step(self, thrown: BaseException | None) -> None:
        """One step of the producer, as a task steps its coroutine: it runs until it
        waits for a future (``_pending``), yields bare (``_pending`` None) or ends
        (``_producer`` None). A cancellation it does not take back is raised here."""
        producer = self._producer
        assert producer is not None
        self._pending = None
        try:
            waits_for = producer.send(None) if thrown is None else producer.throw(thrown)
        except StopIteration:
            self._producer = None
            return
        except BaseException:
            self._producer = None
            raise
        if waits_for is None:  # a bare yield (``sleep(0)``): its turn comes again soon
            waits_for = asyncio.get_running_loop().create_future()
            asyncio.get_running_loop().call_soon(_complete, waits_for)
        else:
            waits_for._asyncio_future_blocking = False  # taken, as a task takes it
        waits_for.add_done_callback(self._on_pending, context=_WAKE_CONTEXT)
        self._pending = waits_for

    async def _unwind(self) -> None:
        """Cancel the producer where it waits and step it until it has ended."""
        pending = self._pending
        if pending is not None:
            pending.cancel()
        thrown: BaseException | None = asyncio.CancelledError()
        while self._producer is not None:
            pending = self._pending
            if thrown is None and pending is not None and not pending.done():
                waiter = self._waiter = asyncio.get_running_loop().create_future()
                await waiter  # its future's completion wakes it
                continue
            try:
                self._step(thrown)
            except asyncio.CancelledError:
                return  # its expected end
            thrown = None

    def _on_pending(self, _: asyncio.Future[Any]) -> None:
        """The producer's future is done: wake the writer, which steps the producer."""
        self.wake()

    async def _produce(self) -> None:
        chunks = self._chunks
        encode = self._encode
        context = self._context
        try:
            events: Any = self._events
            if hasattr(events, "next_batch"):
                # The engine's streams (events.TaskStream) give their events a batch at
                # a time (StopAsyncIteration at the end), ids along: no hop per event, a
                # text chunk's ProtoJSON straight from its pieces. (Inline: a held
                # stream keeps no frame of a method of its own, nor a bound method.)
                loop = asyncio.get_running_loop()
                while True:
                    try:
                        batch = await events.next_batch()
                    except StopAsyncIteration:
                        return
                    at = 0
                    while (at := self._encode_batch(batch, at)) >= 0:
                        self._room = loop.create_future()  # full: the rest once written
                        await self._room
                    del batch  # not held while the stream waits
            async for event in self._events:
                if context is not None and context.event_id:
                    chunks.append(
                        b"".join((b"id: ", context.event_id.encode(), b"\n", encode(event)))
                    )
                else:
                    chunks.append(encode(event))
                del event  # not held while the stream waits for the next one
                self.wake()
                if len(chunks) >= MAX_BUFFERED_EVENTS:
                    self._room = asyncio.get_running_loop().create_future()
                    await self._room
        except Exception as exc:  # ends the stream; the writer reports it
            self.error = exc
        finally:
            self.ended = True
            self.wake()

    def _encode_batch(self, batch: Batch, at: int) -> int:
        """Encode ``batch``'s events from ``at`` to its end (then -1), or until
        :data:`MAX_BUFFERED_EVENTS` are buffered (then the index to go on from, once
        the writer made room)."""
        chunks = self._chunks
        events, seqs, prefix = batch
        frame = self._frame
        encode = self._encode
        named = b"id: " + prefix.encode()
        end = len(events)
        while at < end:
            if len(chunks) >= MAX_BUFFERED_EVENTS:
                self.wake()
                return at
            event = events[at]
            seq = seqs[at]
            at += 1
            line = b"%b%d\n" % (named, seq) if seq >= 0 else b""
            if frame is not None and type(event) is ChunkEvent:
                chunks.append(b"".join((line, frame[0], event.json(), frame[1])))
            else:
                chunks.append(line + encode(event_proto(event)))
        self.wake()
        return -1

    def wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def take(self) -> bytes | None:
        """Everything encoded so far, in one piece; a keep-alive comment when one is
        due; None once the service's stream has ended (``error`` says how).

        Raises ClientGone when the client left.
        """
        data = self.ready()
        while data == NOTHING_YET:
            try:
                await self.wait()
            except asyncio.CancelledError:
                if not self.taken_back():
                    raise
            data = self.ready()
        return data

    def ready(self) -> bytes | None:
        """What :meth:`take` answers now, or ``NOTHING_YET``: then await :meth:`wait`
        and ask again. (A held stream's writer waits this way without a coroutine
        frame of its own; see :func:`stream_events`.)"""
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
        return NOTHING_YET

    def wait(self) -> asyncio.Future[None]:
        """A future completed when there is something to take (the wake-up of
        :meth:`ready`'s ``NOTHING_YET``), once the producer has been stepped as its task
        would step it: here, in the writer's task, until it has encoded what the service
        had ready and waits for more, or has ended; its future's completion, or the
        watch, wakes the writer, which asks again. A cancellation of the writer's task
        while it awaits this is the producer's too: see :meth:`taken_back`."""
        waiter = self._waiter = asyncio.get_running_loop().create_future()
        while self._producer is not None and not waiter.done():
            pending = self._pending
            if pending is not None and not pending.done():
                break
            self._step(None)
        return waiter

    def taken_back(self) -> bool:
        """Throw the cancellation of the writer's task (caught where it awaited
        :meth:`wait` or a write) into the producer, where it waits, as its task would
        have: True when the producer took it back (the drain's gate ends a stream so:
        the producer then ends, with the gate's error), False when it stands."""
        if self._producer is None:
            return False
        pending = self._pending
        if pending is not None:
            pending.cancel()
        try:
            self._step(asyncio.CancelledError())
        except asyncio.CancelledError:
            return False
        task = asyncio.current_task()
        return task is not None and not task.cancelling()

    async def write(self, response: web.StreamResponse, data: bytes, now: float) -> None:
        self.writing_since = now
        try:
            await response.write(data)
        except ConnectionError:
            raise ClientGone from None
        except asyncio.CancelledError:
            # Perhaps meant for the producer, where it waits (the drain's gate ends a
            # stream so: the writer's task is the stream's consumer); the data is out.
            if not self.taken_back():
                raise
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
        task, self._task = self._task, None
        if task is not None and not task.done():
            task.cancel()
            await asyncio.wait({task}, timeout=CLOSE_GRACE_S)
            if not task.done():
                log.warning("stream iterator ignored cancellation for %.0f s", CLOSE_GRACE_S)
                return
        if self._producer is not None:
            try:
                async with asyncio.timeout(CLOSE_GRACE_S):
                    await self._unwind()
            except TimeoutError:
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
    pump = _pump(request, events, context, keepalive_s, codec)
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
            _drop_idle_timer(request)
            _drop_body_buffer(request)
            _drop_message_queue(request)
            _drop_request_cache(request)
            _drop_response_headers(response)
            while data is not None:
                await pump.write(response, data, watch.now)
                data = None  # not held while the stream waits (a held stream's last event)
                data = pump.ready()
                while data == NOTHING_YET:  # take(), inline: one frame fewer while held
                    try:
                        await pump.wait()
                    except asyncio.CancelledError:
                        if not pump.taken_back():
                            raise
                    data = pump.ready()
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


def _pump(
    request: web.Request,
    events: AsyncIterator[pb.StreamResponse],
    context: CallContext,
    keepalive_s: float,
    codec: StreamCodec,
) -> EventPump:
    """:func:`stream_events`' pump (made here: a held stream's frame is the smaller
    for the fewer arguments of its calls)."""
    frame = getattr(codec, "json_frame", None)
    return EventPump(request.transport, events, codec.event, keepalive_s, 0.0, context, frame)


def _drop_idle_timer(request: web.BaseRequest) -> None:
    """Cancel aiohttp's keep-alive timer of the stream's connection while the stream is
    held. aiohttp arms it when a connection opens (against a client that never sends a
    request) and leaves it scheduled while a handler runs, where it does nothing (it only
    closes a connection waiting idle for its next request); after the handler returns,
    aiohttp arms it again as for any response (its ``_keepalive_handle`` is None). A held
    stream would otherwise keep the handle, its callback and its context for up to the
    keep-alive timeout."""
    protocol = request.protocol
    handle = getattr(protocol, "_keepalive_handle", None)
    if handle is not None:
        handle.cancel()
        protocol._keepalive_handle = None


#: What a finished request body's reader holds instead of its own empty deque (760 bytes
#: for the stream's life); immutable, so that nothing can ever be added to it.
_NO_BUFFER: tuple[bytes, ...] = ()


def _drop_body_buffer(request: web.BaseRequest) -> None:
    """Release the request body reader's empty deque once the body has been read to its
    end. aiohttp's ``StreamReader`` keeps its deque for the request's life; at its end
    (``is_eof``: EOF fed and nothing left) only reads touch it, and they see an empty
    sequence (aiohttp feeds no data after EOF: it asserts so). A body that was not read
    to its end (or no reader of aiohttp's own) keeps its deque."""
    payload = request.content
    if type(payload) is StreamReader and payload.is_eof():
        payload._buffer = _NO_BUFFER  # type: ignore[assignment]


class _Pipelined(list[Any]):
    """What a held stream's connection queues the requests a client pipelines behind
    the stream in, instead of aiohttp's own deque (760 bytes for the stream's life; an
    empty list holds no item storage): the queue's operations aiohttp uses (``append``,
    ``popleft``, ``len``, truth), a few items at most (aiohttp pauses reading past its
    bound)."""

    __slots__ = ()

    def popleft(self) -> Any:
        return self.pop(0)


def _drop_message_queue(request: web.BaseRequest) -> None:
    """Release the connection's empty request queue (aiohttp's ``deque``) while the
    stream is held, for a :class:`_Pipelined`: a request pipelined behind the stream is
    queued there and served once the stream ends, as before."""
    protocol = request.protocol
    queue = getattr(protocol, "_messages", None)
    if type(queue) is deque and not queue:
        protocol._messages = _Pipelined()  # type: ignore[assignment]


def _drop_response_headers(response: web.StreamResponse) -> None:
    """Empty the response's header map once it is prepared (~0.5 KB for the stream's
    life): aiohttp serialized the headers when it prepared them (they leave with the
    first write), and a prepared ``StreamResponse`` never reads its map again (its
    writes, its end, the access log's status and length do not)."""
    response.headers.clear()


def _drop_request_cache(request: web.BaseRequest) -> None:
    """Empty the request's cache of computed properties (its URL, method, headers view,
    remote address: a dict of 9 entries, ~200 bytes for the stream's life) once the
    stream's headers are sent: nothing here reads them again, and what aiohttp reads
    after the handler (its access log) is computed again from the request's message."""
    request._cache.clear()


def serve_stream(
    request: web.Request,
    events: AsyncIterator[pb.StreamResponse],
    context: CallContext,
    codec: StreamCodec,
    meter: Meter = NULL_METER,
    method: str = "",
    started: float = 0.0,
) -> Coroutine[Any, Any, web.StreamResponse]:
    """Serve a stream from :func:`call_service` as SSE shaped by ``codec``; ``meter``
    reports it as ``method`` (see :func:`stream_events`). Await it: it is
    :func:`stream_events`' coroutine itself, so a held stream keeps no frame of this
    function."""
    return stream_events(
        request,
        events,
        context,
        keepalive_s=request.app[CONFIG].keepalive_interval_s,
        codec=codec,
        meter=meter,
        method=method,
        started=started,
    )


__all__ = [
    "CLOSE_GRACE_S",
    "DISCONNECT_POLL_S",
    "KEEPALIVE",
    "MAX_BUFFERED_EVENTS",
    "NOTHING_YET",
    "SSE_HEADERS",
    "STREAM_WATCH",
    "WRITE_TIMEOUT_S",
    "ClientGone",
    "EventPump",
    "StreamCodec",
    "StreamWatch",
    "serve_stream",
    "stream_events",
]
