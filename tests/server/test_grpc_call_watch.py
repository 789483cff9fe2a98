"""The gRPC server's one timer over all calls (:class:`CallWatch`), in process.

What the raw-frame tests show end to end (a request that never arrives, a unary call
past its deadline), here on the watch itself: a call past its time is cancelled and the
handler can tell that cancellation from anyone else's; a call rescheduled earlier than
the armed time is still ended on time; a finished call is never touched; and many calls
share one timer (the reason the watch exists: a timer per call cost ~5% of a send).
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import pytest

from a2a_gateway.server.grpc_binding import CallWatch

BOUND = 10.0  # an upper bound on anything that could hang, never asserted


async def _bounded(watch: CallWatch, timeout_s: float, body: Any) -> str:
    """What a handler does: watch, await, and tell the watch's cancellation apart."""
    watched = watch.watch(timeout_s)
    try:
        await body(watched)
    except asyncio.CancelledError:
        if not watched.claim():
            raise
        return "expired"
    finally:
        watch.done(watched)
    return "finished"


async def test_a_call_past_its_time_is_ended_and_knows_it() -> None:
    watch = CallWatch()
    loop = asyncio.get_running_loop()
    started = loop.time()
    async with asyncio.timeout(BOUND):
        outcome = await _bounded(watch, 0.05, lambda _: asyncio.Event().wait())
    assert outcome == "expired"
    assert loop.time() - started >= 0.05 - CallWatch.EARLY_S
    task = asyncio.current_task()
    assert task is not None and task.cancelling() == 0  # the watch took its cancel back
    assert len(watch) == 0


async def test_a_reschedule_earlier_than_the_armed_timer_still_ends_the_call_on_time() -> None:
    watch = CallWatch()
    loop = asyncio.get_running_loop()
    slow = asyncio.ensure_future(_bounded(watch, 30.0, lambda _: asyncio.Event().wait()))
    await asyncio.sleep(0)  # the timer is armed 30 s out

    async def short_deadline(watched: Any) -> None:
        watch.reschedule(watched, loop.time() + 0.05)  # a client's short deadline
        await asyncio.Event().wait()

    async with asyncio.timeout(BOUND):
        assert await _bounded(watch, 30.0, short_deadline) == "expired"
    assert not slow.done()  # the other call is not due yet
    slow.cancel()
    with pytest.raises(asyncio.CancelledError):
        await slow  # not the watch's cancellation: the handler lets it through
    assert len(watch) == 0


async def test_finished_calls_are_left_alone_and_share_one_timer(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    watch = CallWatch()
    loop = asyncio.get_running_loop()
    armed: list[float] = []
    call_at = loop.call_at

    def counting_call_at(when: float, callback: Any, *args: Any, **kw: Any) -> asyncio.TimerHandle:
        if getattr(callback, "__self__", None) is watch:
            armed.append(when)
        return call_at(when, callback, *args, **kw)

    monkeypatch.setattr(loop, "call_at", counting_call_at)
    outcomes = await asyncio.gather(
        *(_bounded(watch, 0.05, lambda _: asyncio.sleep(0)) for _ in range(100))
    )
    assert outcomes == ["finished"] * 100
    assert len(armed) == 1  # one timer for the hundred calls (asyncio.timeout: 100)
    await asyncio.sleep(0.1)  # past their due time: nothing left to cancel
    assert len(watch) == 0
    task = asyncio.current_task()
    assert task is not None and task.cancelling() == 0


async def test_someone_elses_cancellation_is_not_taken_for_the_watchs() -> None:
    watch = CallWatch()
    release = asyncio.Event()

    async def body(_: Any) -> None:
        release.set()
        await asyncio.Event().wait()

    handler = asyncio.ensure_future(_bounded(watch, 0.05, body))
    await release.wait()
    handler.cancel()  # the client went away first: a plain cancellation
    with pytest.raises(asyncio.CancelledError):
        async with asyncio.timeout(BOUND):
            await handler
    assert len(watch) == 0


async def test_a_swallowed_cancellation_is_taken_back_when_the_call_is_done() -> None:
    watch = CallWatch()

    async def swallowing(_: Any) -> None:
        # A service that ignores its cancellation and answers anyway.
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.Event().wait()

    async with asyncio.timeout(BOUND):
        assert await _bounded(watch, 0.05, swallowing) == "finished"
    task = asyncio.current_task()
    assert task is not None and task.cancelling() == 0
    assert len(watch) == 0
