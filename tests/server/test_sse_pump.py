"""The SSE pump: events that are ready together leave in one write, a slow writer holds
the producer back, the shared watch finds departed clients, due keep-alives and stuck
writes, and closing a stream always closes the service's iterator."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator

import pytest

from a2a_gateway.protocol import codec, errors, sse
from a2a_gateway.server.config import ServerConfig
from a2a_gateway.server.http_sse import (
    KEEPALIVE,
    MAX_BUFFERED_EVENTS,
    STREAM_WATCH,
    WRITE_TIMEOUT_S,
    ClientGone,
    EventPump,
)
from lf.a2a.v1 import a2a_pb2 as pb

from .conftest import TIMEOUT_S, Starter, text_message


def _event(index: int) -> pb.StreamResponse:
    artifact = pb.Artifact(artifact_id="a-1", parts=[pb.Part(text=f"chunk {index}")])
    return pb.StreamResponse(artifact_update=pb.TaskArtifactUpdateEvent(artifact=artifact))


def _encode(event: pb.StreamResponse) -> bytes:
    return sse.encode(codec.to_json(event))


class Source:
    """A service stream: ``count`` ready events, then an optional error or a hang."""

    def __init__(self, count: int, *, error: Exception | None = None, hang: bool = False) -> None:
        self.count = count
        self.error = error
        self.hang = hang
        self.closed = asyncio.Event()

    async def events(self) -> AsyncIterator[pb.StreamResponse]:
        try:
            for index in range(self.count):
                yield _event(index)
            if self.hang:
                await asyncio.Event().wait()
            if self.error is not None:
                raise self.error
        finally:
            self.closed.set()


def _pump(source: Source, transport: asyncio.Transport | None = None) -> EventPump:
    loop = asyncio.get_running_loop()
    return EventPump(transport, source.events(), _encode, 15.0, loop.time())


async def _drain(pump: EventPump) -> list[bytes]:
    pieces: list[bytes] = []
    async with asyncio.timeout(TIMEOUT_S):
        while (data := await pump.take()) is not None:
            pieces.append(data)
    return pieces


async def test_events_ready_together_come_out_in_one_piece() -> None:
    source = Source(5)
    pump = _pump(source)
    pump.start()
    try:
        pieces = await _drain(pump)
    finally:
        await pump.aclose()
    assert pieces == [b"".join(_encode(_event(i)) for i in range(5))]
    assert pump.ended and pump.error is None
    assert source.closed.is_set()


async def test_a_slow_writer_holds_the_producer_back() -> None:
    total = MAX_BUFFERED_EVENTS * 3 + 5
    pump = _pump(Source(total))
    pump.start()
    try:
        pieces = await _drain(pump)
    finally:
        await pump.aclose()
    sizes = [piece.count(b"data: ") for piece in pieces]
    assert max(sizes) <= MAX_BUFFERED_EVENTS
    assert sum(sizes) == total
    assert b"".join(pieces) == b"".join(_encode(_event(i)) for i in range(total))


async def test_an_error_ends_the_stream_after_the_events_before_it() -> None:
    failure = errors.TaskNotFoundError("gone")
    pump = _pump(Source(2, error=failure))
    pump.start()
    try:
        pieces = await _drain(pump)
    finally:
        await pump.aclose()
    assert b"".join(pieces).count(b"data: ") == 2
    assert pump.error is failure


async def test_closing_cancels_a_waiting_service_and_closes_its_iterator() -> None:
    source = Source(1, hang=True)
    pump = _pump(source)
    pump.start()
    async with asyncio.timeout(TIMEOUT_S):
        assert await pump.take() == _encode(_event(0))
        await pump.aclose()
    assert source.closed.is_set()


async def test_closing_a_pump_that_never_started_closes_the_iterator() -> None:
    events = Source(1).events()
    pump = EventPump(None, events, _encode, 15.0, 0.0)
    await pump.aclose()
    with pytest.raises(StopAsyncIteration):
        await anext(events)  # a closed generator yields nothing more


@pytest.fixture
async def transport() -> AsyncIterator[asyncio.Transport]:
    """A real connected transport (one end of a socket pair)."""
    ours, theirs = socket.socketpair()
    loop = asyncio.get_running_loop()
    made, _ = await loop.create_connection(asyncio.Protocol, sock=ours)
    try:
        yield made
    finally:
        made.close()
        theirs.close()
        await asyncio.sleep(0)  # let the transport finish closing


async def test_a_stuck_write_aborts_the_connection(transport: asyncio.Transport) -> None:
    pump = _pump(Source(0, hang=True), transport)
    now = asyncio.get_running_loop().time()
    pump.writing_since = now - WRITE_TIMEOUT_S / 2
    pump.check(now)
    assert not pump.gone and not transport.is_closing()
    pump.writing_since = now - WRITE_TIMEOUT_S
    pump.check(now)
    assert pump.gone and transport.is_closing()
    with pytest.raises(ClientGone):
        await pump.take()
    await pump.aclose()


async def test_a_closed_connection_wakes_the_writer(transport: asyncio.Transport) -> None:
    pump = _pump(Source(0, hang=True), transport)
    pump.start()
    waiting = asyncio.ensure_future(pump.take())
    await asyncio.sleep(0.01)
    assert not waiting.done()
    transport.close()
    pump.check(asyncio.get_running_loop().time())
    async with asyncio.timeout(TIMEOUT_S):
        with pytest.raises(ClientGone):
            await waiting
    await pump.aclose()


async def test_keepalive_only_after_the_headers_and_when_idle(
    transport: asyncio.Transport,
) -> None:
    pump = _pump(Source(0, hang=True), transport)
    pump.start()
    later = asyncio.get_running_loop().time() + pump.keepalive_s
    pump.check(later)
    assert not pump.ping_due  # nothing may be written before the headers
    pump.prepared = True
    pump.check(later - 1.0)
    assert not pump.ping_due
    pump.check(later)
    assert pump.ping_due
    async with asyncio.timeout(TIMEOUT_S):
        assert await pump.take() == KEEPALIVE
    assert not pump.ping_due
    await pump.aclose()


async def test_the_watch_runs_only_while_streams_are_open(start_http: Starter) -> None:
    http = await start_http(config=ServerConfig(keepalive_interval_s=0.05))
    watch = http.client.app[STREAM_WATCH]
    async with asyncio.timeout(TIMEOUT_S):
        response = await http.client.post(
            "/a2a/v1/message:stream", json=text_message("x", chunks=40)
        )
        async with response:
            raw = await response.read()
        assert raw.count(b"data: ") == 42  # task, 40 chunks, completion
        assert len(watch) == 0
        for _ in range(500):  # the next tick finds no stream and stops the timer
            if not watch.ticking:
                break
            await asyncio.sleep(0.01)
    assert not watch.ticking
