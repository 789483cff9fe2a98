"""The faux agent's directives, turn by turn."""

from __future__ import annotations

import asyncio

import pytest

from a2a_gateway.agent.base import (
    _FIRST_SWEEP,
    AuthRequired,
    Completed,
    Failed,
    InputRequired,
    Rejected,
    Signal,
    TextChunk,
    _Deadlines,
)
from a2a_gateway.agent.faux import FauxAgent, _chunk_gap_s, _chunks, _hold_seconds
from lf.a2a.v1 import a2a_pb2 as pb

from .agent_helpers import outputs, turn


async def test_plain_text_is_echoed_exactly() -> None:
    for text in ("hi", "  spaced  ", "with: colon", "message without prefix", ""):
        assert await outputs(FauxAgent(), turn(text)) == [TextChunk(text, last=True)]


async def test_chunks() -> None:
    got = await outputs(FauxAgent(), turn("chunks:3"))
    assert got == [TextChunk("chunk-0"), TextChunk("chunk-1"), TextChunk("chunk-2", last=True)]
    assert await outputs(FauxAgent(), turn("chunks:zero")) == [TextChunk("chunk-0", last=True)]
    assert len(await outputs(FauxAgent(), turn("chunks:99999"))) == 10_000


async def test_paced_chunks_are_the_same_chunks() -> None:
    got = await outputs(FauxAgent(), turn("chunks:3:1"))
    assert got == [TextChunk("chunk-0"), TextChunk("chunk-1"), TextChunk("chunk-2", last=True)]
    assert [_chunk_gap_s(a) for a in ("x", "nan", "-5", "250", "99999", "")] == [
        0.0,
        0.0,
        0.0,
        0.25,
        1.0,
        0.0,
    ]


async def test_paced_chunks_end_early_when_canceled() -> None:
    cancelled = Signal()
    got: list[object] = []

    async def collect() -> None:
        async for output in FauxAgent().run(turn("chunks:100:1000", cancelled=cancelled)):
            got.append(output)
            cancelled.set()  # after the first chunk, while the run waits for the next

    await asyncio.wait_for(collect(), 30)
    assert got == [TextChunk("chunk-0")]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("ask:Which city?", InputRequired("Which city?")),
        ("fail:disk full", Failed("disk full")),
        ("reject:no", Rejected("no")),
        ("auth:token please", AuthRequired("token please")),
        ("hold:0", Completed()),
    ],
)
async def test_outcome_directives(text: str, expected: object) -> None:
    got = await outputs(FauxAgent(), turn(text))
    assert got == [expected]


def test_hold_and_chunk_arguments_are_clamped() -> None:
    assert [_hold_seconds(a) for a in ("nan", "x", "-5", "1e9", "2.5")] == [
        1.0,
        1.0,
        0.0,
        120.0,
        2.5,
    ]
    assert [_chunks(a) for a in ("x", "0", "7", "99999")] == [1, 1, 7, 10_000]


async def test_hold_ends_early_when_canceled() -> None:
    cancelled = Signal()
    running = asyncio.create_task(outputs(FauxAgent(), turn("hold:120", cancelled=cancelled)))
    await asyncio.sleep(0)
    cancelled.set()
    assert await running == [Completed()]


async def test_hold_sees_task_cancellation() -> None:
    running = asyncio.create_task(outputs(FauxAgent(), turn("hold:120")))
    await asyncio.sleep(0.01)
    running.cancel()
    with pytest.raises(asyncio.CancelledError):
        await running


async def test_message_directive_is_a_direct_reply() -> None:
    reply = await FauxAgent().reply(turn("message:hello"))
    assert reply is not None
    assert reply.role == pb.ROLE_AGENT and reply.context_id == "c-1"
    assert [p.text for p in reply.parts] == ["hello"]
    assert await FauxAgent().reply(turn("hi")) is None


async def test_crash_raises() -> None:
    with pytest.raises(RuntimeError):
        await outputs(FauxAgent(), turn("crash"))


async def test_waits_at_most_share_one_timer_and_end_in_deadline_order() -> None:
    """``Signal.wait_at_most`` (the hold's wait): each ends at its own deadline or when
    its signal is set, whichever is first, under one timer for all; a wait added with a
    nearer deadline than those pending ends first."""
    ended: list[str] = []
    signals = {name: Signal() for name in ("late", "early", "set", "cancelled")}

    async def wait(name: str, seconds: float) -> None:
        await signals[name].wait_at_most(seconds)
        ended.append(name)

    late = asyncio.create_task(wait("late", 0.2))
    await asyncio.sleep(0)
    early = asyncio.create_task(wait("early", 0.05))  # nearer than the pending one
    set_early = asyncio.create_task(wait("set", 60))
    cancelled = asyncio.create_task(wait("cancelled", 60))
    await asyncio.sleep(0)
    signals["set"].set()
    cancelled.cancel()
    async with asyncio.timeout(30):
        await asyncio.gather(late, early, set_early)
    assert ended == ["set", "early", "late"]
    assert cancelled.cancelled()
    assert signals["late"]._waiters == []  # its waiter is not left behind
    assert await asyncio.wait_for(signals["set"].wait_at_most(60), 30) is None  # set: at once


async def test_waits_ended_early_do_not_pile_up_under_the_shared_timer() -> None:
    """Waits whose signal is set long before their deadline (a thousand of a minute
    each) leave the shared timer's heap bounded by the waits still pending, not by
    every wait of the last minute."""
    pending = Signal()
    holding = asyncio.create_task(pending.wait_at_most(60))
    await asyncio.sleep(0)
    for _ in range(1000):
        signal = Signal()
        waiting = asyncio.create_task(signal.wait_at_most(60))
        await asyncio.sleep(0)
        signal.set()
        await asyncio.wait_for(waiting, 30)
    deadlines = _Deadlines.of(asyncio.get_running_loop())
    assert len(deadlines._heap) <= 2 * _FIRST_SWEEP
    assert not holding.done()  # the one still pending is kept
    pending.set()
    await asyncio.wait_for(holding, 30)


async def test_until_is_a_wait_at_most_to_await_as_a_future() -> None:
    """``Signal.until`` (the hold's wait, with no coroutine of its own): a future done at
    its deadline or when its signal is set; cancelled, it ends the wait; no waiter is
    left behind either way."""
    timed, early, dropped = Signal(), Signal(), Signal()
    async with asyncio.timeout(30):
        by_deadline = timed.until(0.05)
        by_signal = early.until(60)
        cancelled = dropped.until(60)
        assert isinstance(by_deadline, asyncio.Future) and not by_deadline.done()
        early.set()
        cancelled.cancel()
        assert await by_signal is None
        assert await by_deadline is None
        await asyncio.sleep(0)  # the cancelled one's callbacks
    assert cancelled.cancelled()
    assert timed._waiters == [] and dropped._waiters == []
    assert early.until(60).done()  # set: done at once
