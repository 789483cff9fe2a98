"""Text chunk events as their pieces (``events.ChunkEvent``) and the engine's streams a
batch at a time (``events.TaskStream``): the bytes they give are the protobuf path's, in
the event log and on the wire; a stream read by batches and one read event by event
see the same events and ids; the SSE writer's batches keep its buffer bound; the
drain's gate ends a stream that waits for a batch as it ends one that waits for an
event."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncGenerator, AsyncIterator, Sequence

import pytest

from a2a_gateway.protocol import codec, errors
from a2a_gateway.protocol.context import CallContext
from a2a_gateway.protocol.errors import UnavailableError
from a2a_gateway.server.drain import Drain, shutting_down
from a2a_gateway.server.events import (
    Batch,
    ChunkEvent,
    ChunkStream,
    Event,
    TaskStream,
    _field,
    event_proto,
    serialized,
)
from a2a_gateway.server.http_sse import MAX_BUFFERED_EVENTS, EventPump
from a2a_gateway.server.jsonrpc import StreamCodec
from a2a_gateway.server.rest import STREAM_CODEC
from lf.a2a.v1 import a2a_pb2 as pb
from tests.support.echo import EchoService

BOUND = 10.0

TEXTS = ["chunk-7", "", 'quote " back \\ slash', "é ü 😀 \u2028 <tag> \x01", "x" * 127, "y" * 20000]
IDS = [
    ("t-1", "c-1", "a-1", "response"),
    ("", "c", "", ""),  # empty ids: ProtoJSON and protobuf leave them out
    ("t" * 150, "c" * 3, "a", "n" * 130),  # lengths of two varint bytes
]


@pytest.mark.parametrize("text", TEXTS)
@pytest.mark.parametrize("ids", IDS)
def test_a_chunk_events_bytes_are_its_protobufs(text: str, ids: tuple[str, ...]) -> None:
    stream = ChunkStream(*ids)
    for append in (False, True):
        for last in (False, True):
            event = ChunkEvent(stream, text, append, last)
            proto = event.proto()
            update = proto.artifact_update
            assert (update.task_id, update.context_id) == ids[:2]
            assert (update.artifact.artifact_id, update.artifact.name) == ids[2:]
            assert [p.text for p in update.artifact.parts] == [text]
            assert (update.append, update.last_chunk) == (append, last)
            assert event.json() == codec.to_json(proto) == codec.stream_event_json(proto)
            assert event.serialized() == proto.SerializeToString()
            assert serialized(event) == proto.SerializeToString()
            assert pb.StreamResponse.FromString(event.serialized()) == proto
            assert event_proto(event) == proto
            assert event_proto(proto) is proto


def test_a_runs_chunks_of_many_lengths_keep_their_bytes() -> None:
    """One run's chunk events share heads by text length and flags (a bounded few):
    every length, before and after the bound, gives the protobuf's bytes."""
    stream = ChunkStream("t-1", "c-1", "a-1", "response")
    for size in [*range(40), 126, 127, 128, 129, 300, 7, 3, 0]:
        for append, last in ((False, False), (True, False), (True, True), (False, True)):
            event = ChunkEvent(stream, "é" * (size // 2) + "x" * (size % 2), append, last)
            assert event.serialized() == event.proto().SerializeToString()
    assert 0 < len(stream.pb_heads) <= 16


@pytest.mark.parametrize("size", [0, 1, 127, 128, 300, 16383, 16384, 2**21 + 3])
def test_a_fields_length_is_protobufs_varint(size: int) -> None:
    data = b"x" * size
    assert _field(b"\x12", data) == pb.Part(raw=data).SerializeToString()


def _status(state: int) -> pb.StreamResponse:
    event = pb.StreamResponse()
    event.status_update.task_id = "t-1"
    event.status_update.status.state = state  # type: ignore[assignment]
    return event


def _events(count: int) -> list[Event]:
    """Chunk events and status events, mixed."""
    chunks = ChunkStream("t-1", "c-1", "a-1", "response")
    return [
        _status(pb.TASK_STATE_WORKING) if i % 7 == 3 else ChunkEvent(chunks, f"c{i}", i > 0, False)
        for i in range(count)
    ]


async def _batches(batches: Sequence[Batch], closed: asyncio.Event) -> AsyncGenerator[Batch]:
    try:
        for batch in batches:
            yield batch
    finally:
        closed.set()


async def test_a_task_stream_gives_events_or_batches_with_their_ids() -> None:
    events = _events(5)
    closed = asyncio.Event()
    context = CallContext()
    stream = TaskStream(
        _batches([(events[:3], [1, 2, 3], "t-1:"), (events[3:], [-1, 5], "t-1:")], closed),
        context,
    )
    first = await anext(stream)
    assert first == event_proto(events[0]) and context.event_id == "t-1:1"
    rest = await stream.next_batch()  # what the events left of the batch first
    assert rest is not None
    assert list(rest[0]) == events[1:3] and list(rest[1]) == [2, 3] and rest[2] == "t-1:"
    assert await anext(stream) == event_proto(events[3])
    assert context.event_id == ""  # not logged: no id
    assert await anext(stream) == event_proto(events[4]) and context.event_id == "t-1:5"
    with pytest.raises(StopAsyncIteration):
        await stream.next_batch()
    with pytest.raises(StopAsyncIteration):
        await anext(stream)
    await stream.aclose()
    assert closed.is_set()


async def _per_event(stream: TaskStream) -> AsyncIterator[pb.StreamResponse]:
    """The stream as a wrapper of the service's streams gives it: no batches."""
    async for event in stream:
        yield event


async def _served(pump: EventPump) -> list[bytes]:
    pump.start()
    pieces: list[bytes] = []
    try:
        async with asyncio.timeout(BOUND):
            while (data := await pump.take()) is not None:
                pieces.append(data)
    finally:
        await pump.aclose()
    assert pump.error is None
    return pieces


@pytest.mark.parametrize("binding", ["jsonrpc", "rest"])
async def test_the_sse_writer_gives_batches_the_bytes_of_events_and_keeps_its_bound(
    binding: str,
) -> None:
    total = MAX_BUFFERED_EVENTS * 3 + 5
    events = _events(total)
    seqs = [-1 if i % 5 == 0 else i + 1 for i in range(total)]
    # Three batches: the first and the last longer than the writer's buffer.
    cuts = [0, MAX_BUFFERED_EVENTS + 9, MAX_BUFFERED_EVENTS + 20, total]
    batches = [(events[a:b], seqs[a:b], "t-1:") for a, b in itertools.pairwise(cuts)]
    codec_ = StreamCodec("s-1") if binding == "jsonrpc" else STREAM_CODEC
    loop = asyncio.get_running_loop()

    def pump(per_event: bool) -> EventPump:
        context = CallContext()
        stream = TaskStream(_batches(batches, asyncio.Event()), context)
        source = _per_event(stream) if per_event else stream
        frame = getattr(codec_, "json_frame", None)
        return EventPump(None, source, codec_.event, 15.0, loop.time(), context, frame)

    by_batch = await _served(pump(per_event=False))
    by_event = await _served(pump(per_event=True))
    assert b"".join(by_batch) == b"".join(by_event)
    wire = b"".join(by_batch)
    assert wire.count(b"data: ") == total
    assert wire.count(b"\nid: ") + wire.startswith(b"id: ") == sum(s >= 0 for s in seqs)
    assert b"id: t-1:2\n" in wire and b"id: t-1:1\n" not in wire
    assert max(piece.count(b"data: ") for piece in by_batch) <= MAX_BUFFERED_EVENTS


async def test_a_legacy_codec_gets_protobufs_in_batches() -> None:
    """A 0.3 stream's events are not the 1.0 ProtoJSON: the writer encodes the protobuf."""
    from a2a_gateway.server.jsonrpc import LegacyStreamCodec

    legacy = LegacyStreamCodec("s-1")
    assert legacy.json_frame is None
    events = _events(4)
    context = CallContext()
    stream = TaskStream(_batches([(events, [1, 2, 3, 4], "t-1:")], asyncio.Event()), context)
    pump = EventPump(None, stream, legacy.event, 15.0, 0.0, context, legacy.json_frame)
    wire = b"".join(await _served(pump))
    expected = b"".join(
        b"id: t-1:%d\n" % (i + 1) + legacy.event(event_proto(e)) for i, e in enumerate(events)
    )
    assert wire == expected
    assert b'"kind":"artifact-update"' in wire


class BatchService(EchoService):
    """SubscribeToTask gives a TaskStream fed one batch per ``feed`` item (``waiting``
    set when it waits for the next; None ends it); its batch generator's closes are
    counted."""

    def __init__(self) -> None:
        super().__init__()
        self.feed: asyncio.Queue[Batch | None] = asyncio.Queue()
        self.waiting = asyncio.Event()
        self.opened = 0
        self.closed = 0

    async def _batches(self) -> AsyncGenerator[Batch]:
        self.opened += 1
        try:
            while True:
                if self.feed.empty():
                    self.waiting.set()
                batch = await self.feed.get()
                if batch is None:
                    return
                yield batch
        finally:
            self.closed += 1

    def subscribe_to_task(  # type: ignore[override]
        self, request: pb.SubscribeToTaskRequest, context: CallContext
    ) -> AsyncIterator[pb.StreamResponse]:
        return TaskStream(self._batches(), context)


async def test_the_drain_ends_a_stream_waiting_for_a_batch() -> None:
    drain = Drain()
    service = BatchService()
    events = drain.gate(service).subscribe_to_task(pb.SubscribeToTaskRequest(id="t"), CallContext())
    next_batch = events.next_batch  # type: ignore[attr-defined]
    service.feed.put_nowait(([pb.StreamResponse(task=pb.Task(id="t"))], [1], "t:"))

    async def consume() -> tuple[int, UnavailableError, int]:
        seen = 0
        try:
            while True:
                seen += len((await next_batch())[0])
        except UnavailableError as exc:
            task = asyncio.current_task()
            assert task is not None
            return seen, exc, task.cancelling()
        raise AssertionError("the stream ended without an error")

    async with asyncio.timeout(BOUND):
        consumer = asyncio.create_task(consume())
        await service.waiting.wait()
        assert drain.open_streams == 1
        drain.begin()
        seen, error, cancelling = await consumer
        await events.aclose()  # type: ignore[attr-defined]
    assert seen == 1
    assert error.message == shutting_down().message
    assert cancelling == 0  # the drain's cancellation was taken back
    assert service.closed == 1
    assert drain.open_streams == 0


async def test_a_batch_stream_asked_for_while_draining_never_starts() -> None:
    drain = Drain()
    service = BatchService()
    drain.begin()
    events = drain.gate(service).subscribe_to_task(pb.SubscribeToTaskRequest(), CallContext())
    with pytest.raises(errors.UnavailableError):
        await events.next_batch()  # type: ignore[attr-defined]
    with pytest.raises(errors.UnavailableError):
        await anext(events)
    await events.aclose()  # type: ignore[attr-defined]
    assert service.opened == 0


async def test_a_closed_batch_stream_leaves_the_gate() -> None:
    drain = Drain()
    service = BatchService()
    events = drain.gate(service).subscribe_to_task(pb.SubscribeToTaskRequest(), CallContext())
    service.feed.put_nowait(([_status(pb.TASK_STATE_WORKING)], [1], "t:"))
    async with asyncio.timeout(BOUND):
        batch = await events.next_batch()  # type: ignore[attr-defined]
        assert batch is not None and drain.open_streams == 1
        await events.aclose()  # type: ignore[attr-defined]
    assert drain.open_streams == 0 and service.closed == 1


async def test_a_batch_stream_that_ends_leaves_the_gate() -> None:
    drain = Drain()
    service = BatchService()
    events = drain.gate(service).subscribe_to_task(pb.SubscribeToTaskRequest(), CallContext())
    service.feed.put_nowait(([_status(pb.TASK_STATE_WORKING)], [1], "t:"))
    service.feed.put_nowait(None)
    async with asyncio.timeout(BOUND):
        batch = await events.next_batch()  # type: ignore[attr-defined]
        assert list(batch[1]) == [1] and drain.open_streams == 1
        with pytest.raises(StopAsyncIteration):
            await events.next_batch()  # type: ignore[attr-defined]
        assert drain.open_streams == 0
        await events.aclose()  # type: ignore[attr-defined]
    assert service.closed == 1


class SlowClient:
    """What the SSE writer writes to: a client that takes nothing until ``release``
    (its write waits, as aiohttp's does on a full socket buffer)."""

    def __init__(self) -> None:
        self.writing = asyncio.Event()
        self.released = asyncio.Event()
        self.written: list[bytes] = []

    async def write(self, data: bytes) -> None:
        self.written.append(data)
        self.writing.set()
        await self.released.wait()


async def test_the_drain_ends_a_stream_whose_writer_waits_on_a_slow_client() -> None:
    """The SSE writer's task steps its pump's producer (no task of its own): the drain
    cancels it while its write waits, with the producer waiting in the gate; the write
    hands the cancellation to the producer, the gate takes it back, and the stream ends
    with the drain's error after the data written."""
    drain = Drain()
    service = BatchService()
    context = CallContext()
    events = drain.gate(service).subscribe_to_task(pb.SubscribeToTaskRequest(id="t"), context)
    service.feed.put_nowait(([_events(1)[0]], [1], "t:"))
    codec_ = StreamCodec("s-1")
    pump = EventPump(None, events, codec_.event, 15.0, 0.0, context, codec_.json_frame)
    client = SlowClient()

    async def serve() -> tuple[bytes | None, int]:
        pump.start()
        data = await pump.take()
        assert data is not None and b"id: t:1\n" in data
        await pump.write(client, data, 0.0)  # type: ignore[arg-type]
        task = asyncio.current_task()
        assert task is not None
        return await pump.take(), task.cancelling()

    async with asyncio.timeout(BOUND):
        writer = asyncio.create_task(serve())
        await client.writing.wait()
        await service.waiting.wait()  # the producer waits in the gate for the next batch
        assert drain.open_streams == 1
        drain.begin()
        end, cancelling = await writer
        await pump.aclose()
    assert end is None  # the stream ended
    assert isinstance(pump.error, UnavailableError)
    assert pump.error.message == shutting_down().message
    assert cancelling == 0  # the drain's cancellation was taken back
    assert len(client.written) == 1
    assert service.closed == 1 and drain.open_streams == 0
