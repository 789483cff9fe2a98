"""Subscriptions, cancellation, fan-out with slow consumers, and shutdown."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable

import pytest

from a2a_gateway.agent.base import Output, TextChunk, Turn
from a2a_gateway.protocol import errors
from a2a_gateway.protocol.context import Caller
from a2a_gateway.server.engine import SHUTDOWN, TaskEngine
from a2a_gateway.server.events import MAX_BACKLOG, TaskStream
from a2a_gateway.server.task_store import TaskStore
from lf.a2a.v1 import a2a_pb2 as pb

from .engine_helpers import (
    ALICE,
    BOB,
    WAIT_S,
    Scripted,
    collect,
    ctx,
    kinds,
    request,
    response_text,
    send,
    state_name,
    status_text,
)


def subscribe(engine: TaskEngine, task_id: str, caller: Caller = ALICE) -> TaskStream:
    stream = engine.subscribe_to_task(pb.SubscribeToTaskRequest(id=task_id), ctx(caller))
    assert isinstance(stream, TaskStream)
    return stream


async def test_subscribe_errors(engine: TaskEngine) -> None:
    done = await send(engine, "hi")
    with pytest.raises(errors.UnsupportedOperationError):
        await subscribe(engine, done.id).__anext__()
    with pytest.raises(errors.TaskNotFoundError):
        await subscribe(engine, "missing").__anext__()
    with pytest.raises(errors.TaskNotFoundError):
        await subscribe(engine, "../escape").__anext__()
    held = await send(engine, "hold:30", return_immediately=True)
    with pytest.raises(errors.TaskNotFoundError):
        await subscribe(engine, held.id, BOB).__anext__()
    await engine.cancel_task(pb.CancelTaskRequest(id=held.id), ctx())


async def test_subscribe_to_a_running_task_then_cancel_it(engine: TaskEngine) -> None:
    held = await send(engine, "hold:30", return_immediately=True)
    stream = subscribe(engine, held.id)
    first = await stream.__anext__()
    assert first.task.id == held.id
    canceled = await engine.cancel_task(pb.CancelTaskRequest(id=held.id), ctx())
    assert state_name(canceled) == "CANCELED"
    rest = await collect(stream)
    assert kinds(rest)[-1] == "status:CANCELED"


async def test_subscribe_to_input_required_stays_open_until_terminal(engine: TaskEngine) -> None:
    asked = await send(engine, "ask:first?")
    stream = subscribe(engine, asked.id)
    snapshot = await stream.__anext__()
    assert state_name(snapshot.task) == "INPUT_REQUIRED"
    again = await send(engine, "ask:second?", task_id=asked.id)  # interrupted again
    assert state_name(again) == "INPUT_REQUIRED"
    done = await send(engine, "the answer", task_id=asked.id)
    assert state_name(done) == "COMPLETED"
    events = await collect(stream)
    assert kinds(events) == [
        "status:WORKING",
        "status:INPUT_REQUIRED",
        "status:WORKING",
        "artifact_update",
        "status:COMPLETED",
    ]


async def test_cancel_really_stops_the_agent(new_engine: Callable[..., TaskEngine]) -> None:
    started = asyncio.Event()
    observed: list[str] = []

    async def script(turn: Turn) -> AsyncIterator[Output]:
        started.set()
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            observed.append(f"cancelled, signal set: {turn.cancelled.is_set()}")
            raise
        yield TextChunk("never")

    engine = new_engine(Scripted(script))
    task = await send(engine, "work", return_immediately=True)
    async with asyncio.timeout(WAIT_S):
        await started.wait()
    canceled = await engine.cancel_task(pb.CancelTaskRequest(id=task.id), ctx())
    assert state_name(canceled) == "CANCELED"
    assert observed == ["cancelled, signal set: True"]
    assert engine.live_task_ids() == []
    stored = await engine.get_task(pb.GetTaskRequest(id=task.id), ctx())
    assert state_name(stored) == "CANCELED"


async def test_cancel_wins_over_an_agent_that_ignores_it(
    new_engine: Callable[..., TaskEngine],
) -> None:
    async def script(turn: Turn) -> AsyncIterator[Output]:
        while True:
            try:
                await asyncio.sleep(60)
            except asyncio.CancelledError:
                yield TextChunk("still going")  # a misbehaving agent

    engine = new_engine(Scripted(script), cancel_grace_s=0.2)
    task = await send(engine, "work", return_immediately=True)
    canceled = await engine.cancel_task(pb.CancelTaskRequest(id=task.id), ctx())
    assert state_name(canceled) == "CANCELED"
    assert not canceled.artifacts
    stored = await engine.get_task(pb.GetTaskRequest(id=task.id), ctx())
    assert state_name(stored) == "CANCELED" and not stored.artifacts


async def test_cancel_rules(engine: TaskEngine) -> None:
    done = await send(engine, "hi")
    with pytest.raises(errors.TaskNotCancelableError):
        await engine.cancel_task(pb.CancelTaskRequest(id=done.id), ctx())
    with pytest.raises(errors.TaskNotFoundError):
        await engine.cancel_task(pb.CancelTaskRequest(id="missing"), ctx())
    asked = await send(engine, "ask:Q?")
    with pytest.raises(errors.TaskNotFoundError):
        await engine.cancel_task(pb.CancelTaskRequest(id=asked.id), ctx(BOB))
    stream = subscribe(engine, asked.id)
    await stream.__anext__()
    canceled = await engine.cancel_task(pb.CancelTaskRequest(id=asked.id), ctx())
    assert state_name(canceled) == "CANCELED"
    assert kinds(await collect(stream)) == ["status:CANCELED"]
    with pytest.raises(errors.TaskNotCancelableError):
        await engine.cancel_task(pb.CancelTaskRequest(id=asked.id), ctx())
    with pytest.raises(errors.UnsupportedOperationError):
        await send(engine, "late answer", task_id=asked.id)


async def test_fan_out_same_events_to_every_stream(new_engine: Callable[..., TaskEngine]) -> None:
    go = asyncio.Event()

    async def script(turn: Turn) -> AsyncIterator[Output]:
        await go.wait()
        for i in range(20):
            yield TextChunk(f"c{i}", last=i == 19)

    engine = new_engine(Scripted(script))
    own = engine.send_streaming_message(request("go"), ctx())
    task = (await own.__anext__()).task
    others = [subscribe(engine, task.id) for _ in range(3)]
    for other in others:
        assert (await other.__anext__()).task.id == task.id
    go.set()
    mine, *theirs = await asyncio.gather(collect(own), *(collect(o) for o in others))
    assert all(events == theirs[0] for events in theirs)
    assert kinds(theirs[0]).count("artifact_update") == 20
    assert kinds(theirs[0])[-1] == "status:COMPLETED"
    # The first stream may also see WORKING, if that happened before the others joined.
    shared = len(theirs[0])
    assert mine[-shared:] == theirs[0]
    assert kinds(mine[:-shared]) in ([], ["status:WORKING"])


async def test_closing_one_stream_leaves_the_others_and_the_task(engine: TaskEngine) -> None:
    held = await send(engine, "hold:30", return_immediately=True)
    first, second = subscribe(engine, held.id), subscribe(engine, held.id)
    await first.__anext__()
    await second.__anext__()
    await first.aclose()
    assert held.id in engine.live_task_ids()
    await engine.cancel_task(pb.CancelTaskRequest(id=held.id), ctx())
    assert kinds(await collect(second)) == ["status:CANCELED"]


async def test_a_slow_consumer_is_dropped_and_never_stalls_the_run(
    new_engine: Callable[..., TaskEngine],
) -> None:
    go = asyncio.Event()
    count = MAX_BACKLOG * 3

    async def script(turn: Turn) -> AsyncIterator[Output]:
        await go.wait()
        for i in range(count):
            yield TextChunk(str(i), last=i == count - 1)

    engine = new_engine(Scripted(script))
    task = await send(engine, "go", return_immediately=True)
    slow = subscribe(engine, task.id)
    await slow.__anext__()  # joined, then never reads again
    fast = subscribe(engine, task.id)
    await fast.__anext__()
    go.set()
    fast_events = await collect(fast)
    assert kinds(fast_events)[-1] == "status:COMPLETED"
    assert len([e for e in fast_events if e.WhichOneof("payload") == "artifact_update"]) == count
    done = await engine.get_task(pb.GetTaskRequest(id=task.id), ctx())
    assert state_name(done) == "COMPLETED"
    assert response_text(done) == ["".join(str(i) for i in range(count))]
    with pytest.raises(errors.UnavailableError, match="resubscribe"):
        await collect(slow)


async def test_shutdown_fails_live_runs_and_ends_streams(
    new_engine: Callable[..., TaskEngine], store: TaskStore
) -> None:
    engine = new_engine()
    held = await send(engine, "hold:30", return_immediately=True)
    streaming = engine.send_streaming_message(request("hold:30"), ctx())
    streamed_task = (await streaming.__anext__()).task
    asked = await send(engine, "ask:Q?")
    waiting = subscribe(engine, asked.id)
    await waiting.__anext__()

    await engine.aclose()

    assert engine.live_task_ids() == []
    stream_events = await collect(streaming)
    assert kinds(stream_events)[-1] == "status:FAILED"
    with pytest.raises(errors.UnavailableError):
        await collect(waiting)
    with pytest.raises(errors.UnavailableError):
        await engine.send_message(request("hi"), ctx())
    for task_id in (held.id, streamed_task.id):
        record = await store.load(ctx().caller, task_id)
        assert record is not None
        assert state_name(record.task) == "FAILED"
        assert status_text(record.task) == SHUTDOWN
    record = await store.load(ctx().caller, asked.id)
    assert record is not None and state_name(record.task) == "INPUT_REQUIRED"


@pytest.mark.parametrize("ends", ["aclose", "cancelled", "after-next-batch"])
async def test_a_held_stream_leaves_the_hub_however_it_ends(engine: TaskEngine, ends: str) -> None:
    """A held stream reads its subscriber itself once its snapshot is out (its setup's
    generator has ended): closing it, or closing it after its consumer was cancelled
    while it waited, takes its subscriber out of the task's hub, and a new subscriber
    still gets the task's events."""
    held = await send(engine, "hold:30", return_immediately=True)
    stream = subscribe(engine, held.id)
    assert (await stream.__anext__()).task.id == held.id  # the snapshot
    hub = engine._state.hubs[held.id]
    assert len(hub.subscribers) == 1
    if ends != "aclose":
        for _ in range(5):  # the events queued after the snapshot (WORKING), then a wait
            pull = stream.__anext__ if ends == "cancelled" else stream.next_batch
            waiting = asyncio.ensure_future(pull())
            await asyncio.sleep(0.01)
            if not waiting.done():
                break
            assert not isinstance(waiting.result(), tuple) or waiting.result()[0]
        assert not waiting.done()  # waits on its subscriber
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
    assert len(hub.subscribers) == 1  # a cancellation leaves it to the consumer's close
    await stream.aclose()
    assert hub.subscribers == []
    other = subscribe(engine, held.id)
    assert (await other.__anext__()).task.id == held.id
    canceled = await engine.cancel_task(pb.CancelTaskRequest(id=held.id), ctx())
    assert state_name(canceled) == "CANCELED"
    assert kinds(await collect(other))[-1] == "status:CANCELED"
    assert held.id not in engine._state.hubs  # the stream that ended on its own left too
