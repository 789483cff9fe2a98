"""The drain's gate (server/drain.py) over a stand-in service, and Readiness.hold.

The subprocess scenarios (SIGTERM on every binding) are tests/e2e/test_shutdown.py;
these pin the gate's own edges: which cancellation it takes back and which it leaves,
a consumer busy elsewhere, a refused call that never reaches the service.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from a2a_gateway.protocol.context import CallContext
from a2a_gateway.protocol.errors import UnavailableError
from a2a_gateway.server.drain import Drain, shutting_down
from a2a_gateway.server.health import Readiness
from lf.a2a.v1 import a2a_pb2 as pb
from tests.support.echo import EchoService

BOUND = 10.0
CONTEXT = CallContext()


class HeldService(EchoService):
    """SendMessage waits for ``release``; streams yield one event per ``feed`` item
    (``waiting`` is set when one waits for the next) and count their closes."""

    def __init__(self) -> None:
        super().__init__()
        self.release = asyncio.Event()
        self.feed: asyncio.Queue[pb.StreamResponse] = asyncio.Queue()
        self.waiting = asyncio.Event()
        self.streams_opened = 0
        self.streams_closed = 0

    async def send_message(
        self, request: pb.SendMessageRequest, context: CallContext
    ) -> pb.SendMessageResponse:
        await self.release.wait()
        return pb.SendMessageResponse(task=pb.Task(id="t-1"))

    async def subscribe_to_task(
        self, request: pb.SubscribeToTaskRequest, context: CallContext
    ) -> AsyncIterator[pb.StreamResponse]:
        self.streams_opened += 1
        try:
            while True:
                if self.feed.empty():
                    self.waiting.set()
                yield await self.feed.get()
        finally:
            self.streams_closed += 1


def _assert_refusal(error: UnavailableError) -> None:
    assert error.message == shutting_down().message
    assert error.metadata == {"retryAfterSeconds": "1"}


async def test_calls_in_flight_finish_and_new_ones_are_refused() -> None:
    drain = Drain()
    service = HeldService()
    gate = drain.gate(service)
    async with asyncio.timeout(BOUND):
        call = asyncio.create_task(gate.send_message(pb.SendMessageRequest(), CONTEXT))
        await asyncio.sleep(0)
        assert drain.calls == 1
        draining = asyncio.create_task(drain.run(grace_s=BOUND))
        await asyncio.sleep(0)
        with pytest.raises(UnavailableError) as refused:
            await gate.get_task(pb.GetTaskRequest(id="t-1"), CONTEXT)
        _assert_refusal(refused.value)
        assert not draining.done()  # waits for the call in flight
        service.release.set()
        assert (await call).task.id == "t-1"
        assert await draining is True
    assert drain.calls == 0


async def test_grace_out_or_interrupted_ends_the_wait() -> None:
    for interrupt in (False, True):
        drain = Drain()
        gate = drain.gate(HeldService())
        call = asyncio.create_task(gate.send_message(pb.SendMessageRequest(), CONTEXT))
        await asyncio.sleep(0)
        interrupted = asyncio.Event()
        if interrupt:
            interrupted.set()
        grace_s = BOUND * 10 if interrupt else 0.01
        async with asyncio.timeout(BOUND):
            assert await drain.run(grace_s, interrupted=interrupted) is False
        assert not call.done()  # the gateway's stop ends it, not the drain
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call


async def test_a_waiting_stream_ends_unavailable_and_its_consumer_is_not_left_cancelled() -> None:
    drain = Drain()
    service = HeldService()
    events = drain.gate(service).subscribe_to_task(pb.SubscribeToTaskRequest(id="t"), CONTEXT)
    service.feed.put_nowait(pb.StreamResponse(task=pb.Task(id="t")))

    async def consume() -> tuple[list[pb.StreamResponse], UnavailableError, int]:
        seen: list[pb.StreamResponse] = []
        try:
            async for event in events:
                seen.append(event)
        except UnavailableError as exc:
            task = asyncio.current_task()
            assert task is not None
            return seen, exc, task.cancelling()
        raise AssertionError("the stream ended without an error")

    async with asyncio.timeout(BOUND):
        consumer = asyncio.create_task(consume())
        await service.waiting.wait()  # the consumer waits for the next event
        drain.begin()
        seen, error, cancelling = await consumer
        await events.aclose()  # type: ignore[attr-defined]
    assert [e.task.id for e in seen] == ["t"]
    _assert_refusal(error)
    assert cancelling == 0  # the drain's cancellation was taken back
    assert service.streams_closed == 1
    assert drain.open_streams == 0


async def test_a_busy_consumer_gets_the_error_on_its_next_event() -> None:
    drain = Drain()
    service = HeldService()
    events = drain.gate(service).subscribe_to_task(pb.SubscribeToTaskRequest(id="t"), CONTEXT)
    service.feed.put_nowait(pb.StreamResponse(task=pb.Task(id="t")))
    async with asyncio.timeout(BOUND):
        first = await anext(events)  # now "writing" it: not inside the gate
        drain.begin()
        await asyncio.sleep(0)  # nothing to cancel: the consumer is this test
        with pytest.raises(UnavailableError):
            await anext(events)
        await events.aclose()  # type: ignore[attr-defined]
    assert first.task.id == "t"
    assert service.streams_closed == 1


async def test_an_outside_cancel_during_the_drain_is_not_swallowed() -> None:
    drain = Drain()
    service = HeldService()
    events = drain.gate(service).subscribe_to_task(pb.SubscribeToTaskRequest(), CONTEXT)
    consumer = asyncio.create_task(anext(events))
    async with asyncio.timeout(BOUND):
        await service.waiting.wait()
        consumer.cancel()  # the client left, in the same step as the drain
        drain.begin()
        with pytest.raises(asyncio.CancelledError):
            await consumer
        await events.aclose()  # type: ignore[attr-defined]


async def test_a_stream_asked_for_while_draining_never_reaches_the_service() -> None:
    drain = Drain()
    service = HeldService()
    drain.begin()
    events = drain.gate(service).subscribe_to_task(pb.SubscribeToTaskRequest(), CONTEXT)
    with pytest.raises(UnavailableError) as refused:
        await anext(events)
    _assert_refusal(refused.value)
    with pytest.raises(UnavailableError):
        await anext(events)
    await events.aclose()  # type: ignore[attr-defined]
    assert service.streams_opened == 0


async def test_readiness_hold_wins_over_a_check_begun_before_it() -> None:
    started, answer = asyncio.Event(), asyncio.Event()

    async def store() -> str | None:
        started.set()
        await answer.wait()
        return None

    told: list[bool] = []

    async def follower(ready: bool) -> None:
        told.append(ready)

    readiness = Readiness({"store": store}, cache_s=0)
    readiness.follow(follower)
    async with asyncio.timeout(BOUND):
        probe = asyncio.create_task(readiness.problems())
        await started.wait()
        started.clear()
        holding = asyncio.create_task(readiness.hold("drain", "shutting down"))
        await started.wait()
        answer.set()  # both checks answer "ready" for the store
        assert await probe == {"drain": "shutting down"}
        await holding
        assert await readiness.problems() == {"drain": "shutting down"}
    assert told == [False]
