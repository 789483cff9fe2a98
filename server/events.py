"""Per-task fan-out of stream events to any number of streams and subscribers.

A :class:`Hub` belongs to one task; each open stream (SendStreamingMessage or
SubscribeToTask) holds a :class:`Subscriber`. Publishing never waits: events go into
each subscriber's own queue, shared (not copied) between subscribers, so every stream
gets the same events in the same order and the run never stalls on a consumer.

Memory is bounded per subscriber: above :data:`HIGH_WATER` queued events the hub raises
its ``pressure`` flag and the engine yields to the event loop once (a consumer that is
merely behind catches up); a consumer that still lets :data:`MAX_BACKLOG` events pile
up is slow or dead and is dropped: its queue is freed and its stream ends with
UnavailableError, so its client knows to resubscribe (a clean close would mean "done").

Closing rules are per subscriber: every stream ends after a terminal state's event;
SendStreamingMessage streams (``until_interrupted``) also end after an
input-required/auth-required one, SubscribeToTask streams do not.

With a store shared by several processes, the events of a run in another process come
from the task's event log, numbered; a subscriber of such a task keeps ``seq``, the
number of the last event it holds (its snapshot's to start with), so an event it
already holds is dropped, not repeated. A subscriber that joins later than the
process's follow of the log has events to catch up on: those are not queued but read
from the log a page (:data:`LOG_PAGE`) at a time as its stream drains them
(:meth:`Subscriber.catch_up`), and the follow's later events extend that range while
it lasts; so a joining subscriber costs a page of memory however far behind it starts,
and is never taken for a slow reader. Only events queued in memory count against
:data:`MAX_BACKLOG`.
"""

from __future__ import annotations

import asyncio
from collections.abc import (
    AsyncGenerator,
    AsyncIterator,
    Awaitable,
    Callable,
    Coroutine,
    Generator,
    Sequence,
)
from types import TracebackType
from typing import Any, NoReturn

import orjson

from a2a_gateway.protocol.context import CallContext
from a2a_gateway.protocol.errors import A2AError, UnavailableError
from lf.a2a.v1 import a2a_pb2 as pb

from .task_states import INTERRUPTED, TERMINAL

HIGH_WATER = 64
MAX_BACKLOG = 1024
SLOW_CONSUMER = "The stream fell behind and was closed; resubscribe with SubscribeToTask."
LOG_PAGE = 256  # events a catching-up subscriber reads from the log at a time

#: Reads the logged events numbered after the first number, up to the second, in order.
LogReader = Callable[[int, int], Awaitable[list[pb.StreamResponse]]]


#: The varints of 0 to 127 (one byte each).
_SMALL = tuple(bytes((n,)) for n in range(0x80))


def _varint(n: int) -> bytes:
    """A protobuf varint (of a size: not negative)."""
    if n < 0x80:
        return _SMALL[n]
    if n < 0x4000:  # two bytes (one: _SMALL): the usual size of an event
        return bytes(((n & 0x7F) | 0x80, n >> 7))
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _field(tag: bytes, data: bytes) -> bytes:
    """A length-delimited protobuf field: its tag, its length, its bytes."""
    size = len(data)
    return b"".join((tag, _SMALL[size] if size < 0x80 else _varint(size), data))


class ChunkStream:
    """What every text chunk event of one run's response artifact shares: the task's
    and the artifact's ids, and the heads of the event's ProtoJSON and protobuf bytes
    built from them once per run (see :class:`ChunkEvent`)."""

    __slots__ = (
        "artifact_id",
        "context_id",
        "json_head",
        "name",
        "pb_artifact",
        "pb_artifact_size",
        "pb_heads",
        "pb_ids",
        "pb_ids_size",
        "task_id",
    )

    def __init__(self, task_id: str, context_id: str, artifact_id: str, name: str) -> None:
        self.task_id = task_id
        self.context_id = context_id
        self.artifact_id = artifact_id
        self.name = name
        # ProtoJSON prints no empty string field: neither do these heads.
        ids = (b'"taskId":' + orjson.dumps(task_id) + b"," if task_id else b"") + (
            b'"contextId":' + orjson.dumps(context_id) + b"," if context_id else b""
        )
        artifact = (b'"artifactId":' + orjson.dumps(artifact_id) + b"," if artifact_id else b"") + (
            b'"name":' + orjson.dumps(name) + b"," if name else b""
        )
        self.json_head = (
            b'{"artifactUpdate":{' + ids + b'"artifact":{' + artifact + b'"parts":[{"text":'
        )
        # Protobuf: TaskArtifactUpdateEvent fields 1 and 2, Artifact fields 1 and 2.
        self.pb_ids = (_field(b"\x0a", task_id.encode()) if task_id else b"") + (
            _field(b"\x12", context_id.encode()) if context_id else b""
        )
        self.pb_artifact = (_field(b"\x0a", artifact_id.encode()) if artifact_id else b"") + (
            _field(b"\x12", name.encode()) if name else b""
        )
        self.pb_ids_size = len(self.pb_ids)
        self.pb_artifact_size = len(self.pb_artifact)
        #: ChunkEvent.serialized's heads, by text length and flags (at most _PB_HEADS).
        self.pb_heads: dict[int, bytes] = {}


#: The most heads of chunk events' protobuf bytes a run keeps (:class:`ChunkStream`).
_PB_HEADS = 16

#: The ProtoJSON after a chunk's text, by (append, last_chunk).
_JSON_TAILS = {
    (False, False): b"}]}}}",
    (True, False): b'}]},"append":true}}',
    (False, True): b'}]},"lastChunk":true}}',
    (True, True): b'}]},"append":true,"lastChunk":true}}',
}
#: The protobuf after the artifact, by (append, last_chunk): fields 4 and 5, true.
_PB_FLAGS = {
    (False, False): b"",
    (True, False): b"\x20\x01",
    (False, True): b"\x28\x01",
    (True, True): b"\x20\x01\x28\x01",
}


class ChunkEvent:
    """A stream event of one text chunk of a run's response artifact (an
    ``artifact_update`` with one text part), held as its pieces rather than as a
    protobuf: most of its consumers need only bytes, its ProtoJSON (:meth:`json`: the
    SSE bindings) or its serialized protobuf (:meth:`serialized`: the event log), and
    both come straight from the pieces, with no protobuf built and no field read
    back. :meth:`proto` builds the protobuf for those that need it (gRPC, a wrapper
    of the service's stream). Tests compare all three with the protobuf path's
    bytes."""

    __slots__ = ("append", "last", "stream", "text")

    def __init__(self, stream: ChunkStream, text: str, append: bool, last: bool) -> None:
        self.stream = stream
        self.text = text
        self.append = append
        self.last = last

    def proto(self) -> pb.StreamResponse:
        stream = self.stream
        event = pb.StreamResponse()  # built in place: no copies
        update = event.artifact_update
        update.task_id = stream.task_id
        update.context_id = stream.context_id
        update.append = self.append
        update.last_chunk = self.last
        built = update.artifact  # (each read of a field costs a name lookup)
        built.artifact_id = stream.artifact_id
        built.name = stream.name
        built.parts.add(text=self.text)
        return event

    def json(self) -> bytes:
        """``codec.stream_event_json(self.proto())``."""
        return b"".join(
            (self.stream.json_head, orjson.dumps(self.text), _JSON_TAILS[self.append, self.last])
        )

    def serialized(self) -> bytes:
        """``self.proto().SerializeToString()``: everything before the text depends
        only on the text's length and the flags, so it is made once per length and
        flags in a run (a few, kept in the run's :class:`ChunkStream`)."""
        text = self.text.encode()
        flags = _PB_FLAGS[self.append, self.last]
        key = len(text) * 8 + len(flags)
        head = self.stream.pb_heads.get(key)
        if head is None:
            head = self._head(len(text), len(flags))
            heads = self.stream.pb_heads
            if len(heads) < _PB_HEADS:
                heads[key] = head
        return b"".join((head, text, flags))

    def _head(self, size: int, flags: int) -> bytes:
        """The bytes before a text of ``size`` bytes, with ``flags`` bytes of flags
        after it: the fields' lengths counted, the pieces joined once
        (StreamResponse.artifact_update, its ids, its artifact (the run's ids, one part
        of one text))."""
        stream = self.stream
        text_size = _SMALL[size] if size < 0x80 else _varint(size)
        part = 1 + len(text_size) + size  # Part: field 1, the text
        part_size = _SMALL[part] if part < 0x80 else _varint(part)
        artifact = stream.pb_artifact_size + 1 + len(part_size) + part  # its parts: field 4
        artifact_size = _SMALL[artifact] if artifact < 0x80 else _varint(artifact)
        update = stream.pb_ids_size + 1 + len(artifact_size) + artifact + flags
        return b"".join(
            (
                b"\x22",  # StreamResponse.artifact_update
                _SMALL[update] if update < 0x80 else _varint(update),
                stream.pb_ids,
                b"\x1a",  # TaskArtifactUpdateEvent.artifact
                artifact_size,
                stream.pb_artifact,
                b"\x22",  # Artifact.parts
                part_size,
                b"\x0a",  # Part.text
                text_size,
            )
        )


#: An event as the hub carries it: a protobuf, or a text chunk's pieces.
Event = pb.StreamResponse | ChunkEvent


def event_proto(event: Event) -> pb.StreamResponse:
    """The event as a protobuf."""
    return event if type(event) is pb.StreamResponse else event.proto()


def serialized(event: Event) -> bytes:
    """The event's protobuf bytes (what an event log stores)."""
    if type(event) is pb.StreamResponse:
        return event.SerializeToString()
    return event.serialized()


class Subscriber:
    """One stream's queue. The stream takes the whole ``events`` list at a time
    (:meth:`next_batch`, which waits while it is empty)."""

    __slots__ = (
        "done",
        "error",
        "events",
        "log_at",
        "log_end",
        "read_log",
        "seq",
        "seqs",
        "taken_seqs",
        "until_interrupted",
        "waiter",
    )

    def __init__(self, *, until_interrupted: bool) -> None:
        # A list, swapped out whole by take(): cheaper than a deque (800 bytes empty)
        # for the thousand mostly idle streams a server may hold.
        self.events: list[Event] = []
        #: The queued events' numbers in the task's event log (-1: not logged).
        self.seqs: list[int] = []
        #: The numbers of the batch :meth:`next_batch` returned last.
        self.taken_seqs: list[int] = []
        self.until_interrupted = until_interrupted
        self.done = False
        self.error: A2AError | None = None
        self.waiter: asyncio.Future[None] | None = None
        #: The number of the last event this stream holds in the task's event log: its
        #: snapshot's (or its resume point's), then the last one it queued or has to read.
        self.seq = 0
        #: Events numbered ``log_at + 1`` to ``log_end`` are still to be read from the
        #: log (with ``read_log``), before the queued ones.
        self.log_at = 0
        self.log_end = 0
        self.read_log: LogReader | None = None

    def catch_up(self, upto_seq: int, read_log: LogReader) -> None:
        """The events after ``seq`` up to ``upto_seq`` (logged, and already delivered
        to the others) are read from the log as the stream drains, not queued."""
        if upto_seq > self.seq:
            self.log_at, self.log_end, self.seq = self.seq, upto_seq, upto_seq
            self.read_log = read_log

    def resume_at(self, after: int, snapshot_seq: int, read_log: LogReader) -> None:
        """Start after event ``after`` instead of after the snapshot (numbered
        ``snapshot_seq``): the events between are read from the log (or those queued
        up to ``after`` dropped)."""
        if self.log_at >= self.log_end:
            self.log_at = self.log_end = snapshot_seq
        self.read_log = self.read_log or read_log
        if after < self.log_end:
            self.log_at = after
            return
        self.log_at = self.log_end
        self.seq = max(self.seq, after)
        kept = [i for i, seq in enumerate(self.seqs) if not seq or seq > after]
        self.events = [self.events[i] for i in kept]
        self.seqs = [self.seqs[i] for i in kept]

    def push(self, event: Event, seq: int = 0) -> None:
        """Queue ``event``; ``seq`` is its number in the task's event log (0: not
        logged)."""
        if seq:
            if seq <= self.seq:
                return  # its snapshot (or resume point) reflects it
            self.seq = seq
            if self.log_at < self.log_end and not self.events:
                self.log_end = seq  # catching up: it is read from the log in turn
                return
        self.events.append(event)
        self.seqs.append(seq or -1)
        self._wake()

    def take(self) -> list[Event]:
        """Every queued event, oldest first; the queue is empty afterwards (their
        numbers: :attr:`taken_seqs`)."""
        events, self.events = self.events, []
        self.taken_seqs, self.seqs = self.seqs, []
        return events

    def finish(self, error: A2AError | None = None) -> None:
        """No more events; the stream ends after the queued ones and those it still
        reads from the log (or with ``error``, which drops them)."""
        self.done = True
        if error is not None:
            self.error = error
            self.events = []
            self.seqs = []
            self.log_end = self.log_at
        self._wake()

    def _wake(self) -> None:
        waiter = self.waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def next_batch(self) -> Sequence[Event]:
        """The queued events, waiting for some if there are none; ``[]`` once the
        stream is done (raising its error, if it ended with one); their numbers in
        :attr:`taken_seqs`. Streams loop on this directly: no extra generator hop per
        event."""
        while True:
            if self.log_at < self.log_end and self.read_log is not None:
                after = self.log_at
                upto = min(after + LOG_PAGE, self.log_end)
                page = await self.read_log(after, upto)
                if self.error is not None:  # ended meanwhile (dropped, the run lost)
                    raise self.error
                self.log_at = upto
                self.taken_seqs = list(range(after + 1, after + 1 + len(page)))
                return page
            if self.events:
                return self.take()
            if self.done:
                if self.error is not None:
                    raise self.error
                return []
            # wait(), inline: a held stream keeps one coroutine frame fewer
            self.waiter = asyncio.get_running_loop().create_future()
            try:
                await self.waiter
            finally:
                self.waiter = None

    def idle(self) -> asyncio.Future[None] | None:
        """None when :meth:`next_batch` answers without waiting for the hub (events
        queued, the log to read, the end); else a future done when it will. A held
        stream's loop awaits this itself, then asks :meth:`next_batch`: no coroutine
        frame of :meth:`next_batch` is held while the stream waits."""
        if self.events or self.done or (self.log_at < self.log_end and self.read_log is not None):
            return None
        waiter = self.waiter = asyncio.get_running_loop().create_future()
        return waiter

    async def wait(self) -> None:
        """Return when an event is queued or the stream is done."""
        if self.events or self.done:
            return
        self.waiter = asyncio.get_running_loop().create_future()
        try:
            await self.waiter
        finally:
            self.waiter = None


class Hub:
    """The subscribers of one task."""

    __slots__ = ("pressure", "subscribers")

    def __init__(self) -> None:
        self.subscribers: list[Subscriber] = []
        self.pressure = False

    def add(self, subscriber: Subscriber) -> None:
        self.subscribers.append(subscriber)

    def remove(self, subscriber: Subscriber) -> None:
        if subscriber in self.subscribers:
            self.subscribers.remove(subscriber)

    def publish(self, event: Event, state: int | None = None, seq: int = 0) -> None:
        """Queue ``event`` for every subscriber; ``state`` is set for status events and
        decides who is closed after it; ``seq`` is the event's number in a shared event
        log (see :meth:`Subscriber.push`)."""
        dropped: list[Subscriber] | None = None  # (made only when one is: rare)
        for subscriber in self.subscribers:
            subscriber.push(event, seq)
            backlog = len(subscriber.events)
            if backlog > HIGH_WATER:
                if backlog >= MAX_BACKLOG:
                    subscriber.finish(UnavailableError(SLOW_CONSUMER))
                    if dropped is None:
                        dropped = []
                    dropped.append(subscriber)
                else:
                    self.pressure = True
        if state is not None and (state in TERMINAL or state in INTERRUPTED):
            terminal = state in TERMINAL
            for subscriber in self.subscribers:
                if terminal or subscriber.until_interrupted:
                    subscriber.finish()
                    if dropped is None:
                        dropped = []
                    dropped.append(subscriber)
        if dropped is not None:
            self.subscribers = [s for s in self.subscribers if s not in dropped]

    def close(self, error: A2AError | None = None) -> None:
        """End every stream (after its queued events, or with ``error``)."""
        for subscriber in self.subscribers:
            subscriber.finish(error)
        self.subscribers = []


#: The numbers of a batch of one event that is not logged (a snapshot, a message).
NOT_LOGGED: Sequence[int] = (-1,)


async def _ready(batch: Batch) -> Batch:
    return batch


#: A batch of a task stream: its events, their numbers in the task's event log (-1:
#: not logged) and the prefix of their ids (``<taskId>:``).
Batch = tuple[Sequence[Event], Sequence[int], str]


class TaskStream(AsyncIterator[pb.StreamResponse]):
    """A task stream as the engine gives it: its events one at a time (the service's
    contract: ``async for``, each event's id in ``context.event_id``, ``""`` when not
    logged) or a batch at a time (:meth:`next_batch`: the SSE writer, with no hop per
    event and the events as the hub carries them, a text chunk's as its pieces).

    ``batches`` yields the stream's first batches (never an empty one: the snapshot)
    and is closed by :meth:`aclose`. A stream that goes on with a hub's events hands
    them over with :meth:`follow` (its subscriber, its id prefix, and how it leaves the
    hub) before its last batch: from then on the stream reads the subscriber itself
    and the generator ends, so a held stream keeps no frame of the engine's while it
    waits; it leaves the hub however it ends (its end, its error, :meth:`aclose`)."""

    __slots__ = ("_at", "_batches", "_context", "_events", "_follower", "_prefix", "_seqs")

    def __init__(self, batches: AsyncGenerator[Batch] | None, context: CallContext) -> None:
        self._batches = batches
        self._context = context
        self._events: Sequence[Event] = ()
        self._seqs: Sequence[int] = ()
        self._prefix = ""
        self._at = 0
        self._follower: _Follower | None = None

    def start(self, batches: AsyncGenerator[Batch]) -> TaskStream:
        """The batches of a stream made without them (they are given the stream, for
        :meth:`follow`)."""
        self._batches = batches
        return self

    def follow(
        self, subscriber: Subscriber, prefix: str, leave: Callable[[str, Subscriber], None]
    ) -> None:
        """After the batches' generator's last batch, the stream's events are
        ``subscriber``'s, their ids prefixed with ``prefix`` (``<taskId>:``); it leaves
        the hub with ``leave(task_id, subscriber)`` (once) however it ends."""
        self._follower = _Follower(subscriber, prefix, leave)

    def followed(self) -> Awaitable[Batch]:
        """The subscriber's next batch, for the batches' generator itself (a stream
        whose first batch is its subscriber's)."""
        follower = self._follower
        assert follower is not None
        return follower

    def __aiter__(self) -> TaskStream:
        return self

    async def __anext__(self) -> pb.StreamResponse:
        at = self._at
        events = self._events
        if at >= len(events):
            self._events = self._seqs = ()  # not held while the stream waits
            events, self._seqs, self._prefix = await self._next()
            self._events = events
            at = 0
        self._at = at + 1
        seq = self._seqs[at]
        self._context.event_id = self._prefix + str(seq) if seq >= 0 else ""
        event = events[at]
        return event if type(event) is pb.StreamResponse else event.proto()

    def next_batch(self) -> Awaitable[Batch]:
        """The next batch (what :meth:`__anext__` left of the current one first);
        StopAsyncIteration at the end. The generator's own awaitable, then the
        subscriber's (:class:`_Follower`): a stream waiting for its next batch holds
        no coroutine frame."""
        at, events = self._at, self._events
        if at < len(events):
            seqs = self._seqs
            self._events = self._seqs = ()
            self._at = 0
            return _ready((events[at:], seqs[at:], self._prefix))
        if events:
            self._events = self._seqs = ()
            self._at = 0
        follower = self._follower  # (_next, inline: one call fewer a batch)
        if follower is not None and self._batches is None:
            return follower
        return self._next()

    def _next(self) -> Awaitable[Batch]:
        follower = self._follower
        if follower is None:
            if self._batches is None:
                raise StopAsyncIteration  # closed
            return self._batches.__anext__()
        batches = self._batches
        if batches is not None:  # handed over, done with its last batch: it ends now
            self._batches = None
            _close_now(batches)
        return follower

    async def aclose(self) -> None:
        self._events = self._seqs = ()
        batches, self._batches = self._batches, None
        try:
            if batches is not None:
                await batches.aclose()
        finally:
            if self._follower is not None:
                self._follower.left()


def _close_now(batches: AsyncGenerator[Batch]) -> None:
    """End a batch generator suspended at its last ``yield`` (nothing after it to
    wait for): at once, not in a task of the loop's finalizer."""
    closing = batches.aclose()
    try:
        closing.send(None)
    except StopIteration:
        return
    closing.close()  # (it waited: not a handed-over generator's end)


class _Follower:
    """A :class:`TaskStream` that follows its subscriber, and the awaitable of each of
    its next batches: a coroutine written out (``__next__``/``send``/``throw``), one
    for the stream's life, so a held stream waits on the subscriber's future with no
    frame. It answers the queued events at once; waits for the subscriber's future
    (``Subscriber.idle``) and looks again; lets ``Subscriber.next_batch`` read the
    event log, when there is some to read; leaves the hub (once) at the end or error."""

    __slots__ = ("_inner", "_leave", "_prefix", "_subscriber")

    def __init__(
        self, subscriber: Subscriber, prefix: str, leave: Callable[[str, Subscriber], None]
    ) -> None:
        self._subscriber = subscriber
        self._prefix = prefix
        self._leave: Callable[[str, Subscriber], None] | None = leave
        self._inner: Coroutine[object, None, Sequence[Event]] | None = None

    def left(self) -> None:
        """The stream leaves its hub (once)."""
        leave, self._leave = self._leave, None
        if leave is not None:
            leave(self._prefix[:-1], self._subscriber)

    def __await__(self) -> Generator[object, None, Batch]:
        return self  # type: ignore[return-value]

    def __iter__(self) -> _Follower:
        return self

    def __next__(self) -> object:
        inner = self._inner
        if inner is None:
            subscriber = self._subscriber
            if subscriber.events and not (
                subscriber.log_at < subscriber.log_end and subscriber.read_log is not None
            ):
                events = subscriber.take()
                raise StopIteration((events, subscriber.taken_seqs, self._prefix))
            if not (
                subscriber.events
                or subscriber.done
                or (subscriber.log_at < subscriber.log_end and subscriber.read_log is not None)
            ):  # (Subscriber.idle, inline: one call fewer a wait)
                idle = subscriber.waiter = asyncio.get_running_loop().create_future()
                idle._asyncio_future_blocking = True  # (a future's own __await__)
                return idle
            inner = self._inner = subscriber.next_batch()
        try:
            return inner.send(None)
        except StopIteration as done:
            self._inner = None
            return self._answer(done.value)
        except Exception:
            self._inner = None
            self.left()
            raise

    def send(self, value: None) -> object:
        return self.__next__()

    def throw(
        self, typ: Any, val: BaseException | None = None, tb: TracebackType | None = None
    ) -> object:
        exc = val if val is not None else typ
        if isinstance(exc, type):
            exc = exc()
        inner = self._inner
        if inner is None:
            raise exc  # (a cancellation while it waits: the consumer closes the stream)
        try:
            return inner.throw(exc)
        except StopIteration as done:
            self._inner = None
            return self._answer(done.value)
        except BaseException as error:
            self._inner = None
            if not isinstance(error, asyncio.CancelledError):
                self.left()
            raise

    def close(self) -> None:
        inner, self._inner = self._inner, None
        if inner is not None:
            inner.close()

    def _answer(self, events: Sequence[Event]) -> NoReturn:
        if not events:
            self.left()
            raise StopAsyncIteration
        raise StopIteration((events, self._subscriber.taken_seqs, self._prefix))
