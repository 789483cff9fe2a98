"""Watches on the injected clock against a real faux gateway: schedules, fallbacks,
timeouts, removal, malformed agents.json, at most one watch per task, pending.json and
at-least-once delivery."""

from __future__ import annotations

import asyncio
import io
import json
import logging
import sys
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import aiohttp
import pytest

import lf.a2a.v1.a2a_pb2 as pb
from a2a_gateway.agent.tools import ToolRegistry
from a2a_gateway.chat import ChatHost
from a2a_gateway.client import connect
from a2a_gateway.client.pending import (
    PendingFiles,
    PendingRecord,
    pending_path,
    read_pending,
    write_pending,
)
from a2a_gateway.client.watches import WatchRegistry, poll_delays
from a2a_gateway.local.layout import WorkspaceLayout
from a2a_gateway.serve import Gateway
from a2a_gateway.server.push_receiver import build_push_app
from tests.support.ports import free_port

from ..agent.fake_llm import FakeLLM, Say, Status, user_texts
from ..agent.llm_support import llm, make_runtime
from .client_support import serving
from .delegation_support import (
    REMOTE_KEY,
    Inbox,
    ManualClock,
    base_url,
    cancel_remote_task,
    eventually,
    faux_gateway,
    start_remote_task,
    write_agents,
)

__all__ = ["llm"]  # the scripted model, a fixture

SCOPE = "local-owner"
POLL_CARD = pb.AgentCard()  # neither streaming nor push: poll
STREAM_CARD = pb.AgentCard(capabilities=pb.AgentCapabilities(streaming=True))


@pytest.fixture
def home(tmp_path: Path) -> Path:
    return tmp_path.resolve()


def test_poll_schedule() -> None:
    delays = poll_delays()
    assert [next(delays) for _ in range(7)] == [15, 30, 60, 120, 300, 300, 300]


@pytest.mark.usefixtures("calls_remote")
async def test_poll_mode_follows_the_schedule_and_delivers(
    workspace: Path, remote: Gateway
) -> None:
    clock, inbox = ManualClock(), Inbox()
    registry = WatchRegistry(clock=clock)
    try:
        task = await start_remote_task(base_url(remote), "hold:100")
        watch = await registry.watch(
            workspace, SCOPE, "assistant-a", task.id, task.context_id, card=POLL_CARD
        )
        assert watch.record.source == "poll"
        # At most one watch per (conversation, task).
        again = await registry.watch(workspace, SCOPE, "assistant-a", task.id, task.context_id)
        assert again is watch
        (record,) = read_pending(workspace)
        assert record.taskId == task.id and record.undelivered is None and record.target == SCOPE
        for step in range(5):
            slept = await clock.slept_count(step + 1)
            clock.advance(slept[-1])
            await eventually(lambda n=step + 1: watch.checks == n)
        assert await clock.slept_count(6) == [15, 30, 60, 120, 300, 300]
        registry.register_target(workspace, SCOPE, inbox)
        await cancel_remote_task(base_url(remote), task.id)
        clock.advance(300)
        await eventually(lambda: bool(inbox.texts))
        ((scope, text),) = inbox.texts
        assert scope == SCOPE
        assert text.splitlines()[:2] == [
            f'[A2A result from "assistant-a", task {task.id} (canceled)]',
            f"Context: {task.context_id}",
        ]
        await eventually(lambda: not read_pending(workspace))
        assert registry.watches() == []
    finally:
        await registry.aclose()


@pytest.mark.usefixtures("calls_remote")
async def test_subscribe_delivers_on_the_stream_and_reopens_after_a_day(
    workspace: Path, remote: Gateway
) -> None:
    clock, inbox = ManualClock(), Inbox()
    registry = WatchRegistry(clock=clock, watch_timeout_s=3 * 86400)
    registry.register_target(workspace, SCOPE, inbox)
    try:
        task = await start_remote_task(base_url(remote), "hold:100")
        watch = await registry.watch(
            workspace, SCOPE, "assistant-a", task.id, task.context_id, card=STREAM_CARD
        )
        assert watch.record.source == "subscribe"
        await eventually(lambda: watch.checks == 1 and 86400.0 in clock.slept)
        clock.advance(86400)  # a healthy stream is reopened after a day, at once
        await eventually(lambda: watch.checks == 2 and clock.slept.count(86400.0) == 2)
        await cancel_remote_task(base_url(remote), task.id)
        await eventually(lambda: bool(inbox.texts))
        assert f"task {task.id} (canceled)]" in inbox.texts[0][1]
        assert [s for s in clock.slept if s != 1.0] == [86400.0, 86400.0]
    finally:
        await registry.aclose()


async def test_subscribe_failures_back_off_then_poll(home: Path) -> None:
    workspace = home
    url = f"http://127.0.0.1:{free_port()}"
    write_agents(workspace, [{"name": "gone", "url": url, "allow_private": True}])
    clock = ManualClock()
    registry = WatchRegistry(clock=clock)
    try:
        watch = await registry.watch(workspace, SCOPE, "gone", "t-1", "c-1", card=STREAM_CARD)
        # The third failure switches to polling, whose first delay is also 15 s.
        for count, delay in enumerate([1.0, 5.0, 15.0, 30.0, 60.0], start=1):
            slept = await clock.slept_count(count)
            assert slept[-1] == delay, slept
            clock.advance(delay)
        assert watch.record.source == "poll"
        await eventually(lambda: read_pending(workspace)[0].source == "poll")
    finally:
        await registry.aclose()


async def test_push_wakes_the_watch_and_the_config_is_deleted(tmp_path: Path) -> None:
    async with faux_gateway(tmp_path / "a", allow_private_urls=True) as remote:
        workspace = (tmp_path / "b").resolve()
        write_agents(
            workspace,
            [{"name": "a", "url": base_url(remote), "key": REMOTE_KEY, "allow_private": True}],
        )
        clock, inbox = ManualClock(), Inbox()
        registry = WatchRegistry(clock=clock)
        async with serving(build_push_app(registry)) as public:
            registry.public_url = public
            registry.register_target(workspace, SCOPE, inbox)
            try:
                push_card = pb.AgentCard(
                    capabilities=pb.AgentCapabilities(streaming=True, push_notifications=True)
                )
                task = await start_remote_task(base_url(remote), "hold:100")
                watch = await registry.watch(
                    workspace, SCOPE, "a", task.id, task.context_id, card=push_card
                )
                record = watch.record
                assert record.source == "push" and record.pushToken
                assert len(record.pushToken) >= 43  # 32 random bytes
                await eventually(lambda: 600.0 in clock.slept)  # the safety GetTask
                checks = watch.checks
                # The receiver: unknown watch or wrong token → 404, the body is ignored.
                async with aiohttp.ClientSession() as http:
                    for path, token in (
                        (f"/a2a/push/{record.watchId}", "wrong"),
                        ("/a2a/push/unknown", record.pushToken),
                        (f"/a2a/push/{record.watchId}", ""),
                    ):
                        headers = {"X-A2A-Notification-Token": token} if token else {}
                        async with http.post(public + path, data=b"{", headers=headers) as r:
                            assert r.status == 404
                assert watch.checks == checks
                # The remote pushes the cancel: the watch wakes without the clock.
                await cancel_remote_task(base_url(remote), task.id)
                await eventually(lambda: bool(inbox.texts))
                assert f"task {task.id} (canceled)]" in inbox.texts[0][1]
                assert clock.slept.count(600.0) == 1
                async with await connect(base_url(remote), key=REMOTE_KEY) as service:
                    configs = await service.list_task_push_notification_configs(
                        pb.ListTaskPushNotificationConfigsRequest(task_id=task.id)
                    )
                assert list(configs.configs) == []
            finally:
                await registry.aclose()


@pytest.mark.usefixtures("calls_remote")
async def test_refused_push_config_falls_back(workspace: Path, remote: Gateway) -> None:
    # The remote refuses a loopback webhook (its guard is on): subscribe instead.
    clock, inbox = ManualClock(), Inbox()
    registry = WatchRegistry(clock=clock, public_url="http://127.0.0.1:9")
    registry.register_target(workspace, SCOPE, inbox)
    try:
        task = await start_remote_task(base_url(remote), "hold:100")
        card = pb.AgentCard(
            capabilities=pb.AgentCapabilities(streaming=True, push_notifications=True)
        )
        watch = await registry.watch(workspace, SCOPE, "assistant-a", task.id, "c", card=card)
        await eventually(lambda: read_pending(workspace)[0].source == "subscribe")
        assert watch.record.source == "subscribe"
        assert read_pending(workspace)[0].pushToken is None
        await cancel_remote_task(base_url(remote), task.id)
        await eventually(lambda: bool(inbox.texts))
    finally:
        await registry.aclose()


@pytest.mark.usefixtures("calls_remote")
async def test_timeout_gives_up_with_no_result(workspace: Path, remote: Gateway) -> None:
    clock, inbox = ManualClock(), Inbox()
    registry = WatchRegistry(clock=clock, watch_timeout_s=100)
    registry.register_target(workspace, SCOPE, inbox)
    await clock.slept_count(1)  # its delayed delivery sleeps first: 1 s
    try:
        task = await start_remote_task(base_url(remote), "hold:100")
        await registry.watch(workspace, SCOPE, "assistant-a", task.id, "c", card=POLL_CARD)
        for count in (2, 3, 4):
            clock.advance((await clock.slept_count(count))[-1])
        await eventually(lambda: bool(inbox.texts))
        assert [s for s in clock.slept if s != 1.0] == [15, 30, 55]
        text = inbox.texts[0][1]
        assert text.startswith(f'[A2A result from "assistant-a", task {task.id} (no result)]')
        assert "action=status" in text
        await cancel_remote_task(base_url(remote), task.id)
    finally:
        await registry.aclose()


def write_in_place(workspace: Path, text: str | None) -> None:
    """agents.json as an editor that truncates, then writes, leaves it half-way (None:
    the file is gone for a moment, as between an unlink and a create)."""
    path = WorkspaceLayout(workspace).agents
    if text is None:
        path.unlink()
    else:
        path.write_text(text)


@pytest.mark.usefixtures("calls_remote")
@pytest.mark.parametrize(
    "half_written",
    ["", "  \n", '[{"name": "assistant-a", "url": "htt', "{being edited", "null", None],
    ids=["empty", "blank", "cut-short", "not-json", "not-an-array", "missing"],
)
async def test_a_half_written_file_keeps_the_watch_and_only_a_valid_file_stops_it(
    workspace: Path, remote: Gateway, caplog: pytest.LogCaptureFixture, half_written: str | None
) -> None:
    clock, inbox = ManualClock(), Inbox()
    registry = WatchRegistry(clock=clock)
    registry.register_target(workspace, SCOPE, inbox)
    await clock.slept_count(1)  # its delayed delivery sleeps first: 1 s
    try:
        task = await start_remote_task(base_url(remote), "hold:100")
        watch = await registry.watch(workspace, SCOPE, "assistant-a", task.id, "c", card=POLL_CARD)
        clock.advance((await clock.slept_count(2))[-1])
        await eventually(lambda: watch.checks == 1)
        write_in_place(workspace, half_written)
        for n in (2, 3, 4):  # checks go on with the last good reading, on schedule
            clock.advance((await clock.slept_count(n + 1))[-1])
            await eventually(lambda n=n: watch.checks == n)
        assert clock.slept[1:5] == [15, 30, 60, 120] and not inbox.texts
        warned = [
            r.getMessage()
            for r in caplog.records
            if r.name == "a2a_gateway.client.watches" and r.levelno >= logging.WARNING
        ]
        assert len(warned) == 1, warned  # once for the whole spell
        assert "the last good reading is used" in warned[0]
        # A good reading again, then a valid file without the agent: that ends the watch.
        write_agents(workspace, [{"name": "assistant-a", "url": base_url(remote),
                                  "key": REMOTE_KEY, "allow_private": True}])  # fmt: skip
        clock.advance((await clock.slept_count(6))[-1])
        await eventually(lambda: watch.checks == 5)
        assert not watch.unsure
        write_agents(workspace, [])
        clock.advance((await clock.slept_count(7))[-1])
        await eventually(lambda: bool(inbox.texts))
        assert "(stopped)]" in inbox.texts[0][1]
        await cancel_remote_task(base_url(remote), task.id)
    finally:
        await registry.aclose()


@pytest.mark.parametrize("source", ["subscribe", "poll", "push"])
async def test_a_restored_watch_with_an_unreadable_file_waits_without_checking(
    home: Path, source: str
) -> None:
    # Every mode reads the file again a second later: a poll watch waited out its
    # schedule (15 s, 30 s, ...) and a push watch 10 minutes, with nothing checked.
    workspace = home
    write_agents(workspace, "{being edited")
    clock = ManualClock()
    push = source == "push"
    registry = WatchRegistry(clock=clock, public_url="http://127.0.0.1:9" if push else None)
    try:
        record = PendingRecord(
            watchId="w" * 32,
            target=SCOPE,
            agent="assistant-a",
            taskId="t-1",
            contextId="c-1",
            pushToken="p" * 43 if push else None,
            startedAt=clock.now().isoformat(),
            source=source,
        )
        watch = await registry.rearm(workspace, record)
        # No entry to check with: no check, and no busy loop (a subscribe watch would
        # otherwise reopen "at once"): it waits a second between readings.
        for count in (1, 2, 3):
            assert (await clock.slept_count(count))[-1] == 1.0
            clock.advance(1.0)
        assert watch.checks == 0 and registry.watches() == [watch]
    finally:
        await registry.aclose()


@pytest.mark.usefixtures("calls_remote")
@pytest.mark.server_fault  # the target fails on purpose: its traceback is logged
async def test_undelivered_results_are_kept_and_delivered_when_the_target_registers(
    workspace: Path, remote: Gateway
) -> None:
    clock = ManualClock()
    registry = WatchRegistry(clock=clock)
    failing = Inbox(fail=True)
    registry.register_target(workspace, SCOPE, failing)
    try:
        task = await start_remote_task(base_url(remote), "ask:Which city?")
        await registry.watch(workspace, SCOPE, "assistant-a", task.id, "c", card=STREAM_CARD)
        await eventually(lambda: failing.attempts == 1)
        kept = read_pending(workspace)[0].undelivered or ""
        assert kept.startswith(
            f'[A2A question from "assistant-a", task {task.id} (input-required)]'
        )
        assert "Which city?" in kept and f"taskId={task.id}" in kept
        assert (await clock.slept_count(3))[-1] == 60.0  # the failed delivery's retry
        inbox = Inbox()
        registry.register_target(workspace, SCOPE, inbox)  # the conversation starts again
        await clock.slept_count(4)
        assert not inbox.texts
        clock.advance(1)  # a second after
        await eventually(lambda: bool(inbox.texts))
        assert inbox.texts[0][1] == kept
        await eventually(lambda: not read_pending(workspace))
        clock.advance(59)  # the retry finds the result delivered: not sent twice
        await eventually(lambda: clock.sleeping == 0)
        assert inbox.texts == [(SCOPE, kept)] and failing.attempts == 1
    finally:
        await registry.aclose()


async def test_a_result_whose_follow_up_turn_failed_is_delivered_again_while_running(
    llm: FakeLLM, home: Path
) -> None:
    # A failed follow-up turn (provider down, turn bound) kept the result, but only the
    # next start delivered it: a chat or bot running for days held it all that time.
    workspace = home
    text = '[A2A result from "assistant-a", task t-1 (completed)]\nContext: c-1\nall done'
    record = PendingRecord(
        "w-1", SCOPE, "assistant-a", "t-1", "c-1", None, "2026-10-08T12:00:00+00:00", "poll", text
    )
    write_pending(workspace, [record])
    llm.script(Status(400), Status(400), Say("noted"))
    runtime = make_runtime(llm.base_url)
    out = io.StringIO()
    host = ChatHost(runtime, workspace, ToolRegistry(), out)
    clock = ManualClock()
    registry = WatchRegistry(clock=clock)
    await runtime.start()
    worker = asyncio.get_running_loop().create_task(host.serve())
    try:
        registry.register_target(workspace, SCOPE, host.deliver)
        clock.advance((await clock.slept_count(1))[-1])  # the kept result goes out
        # The turn fails: kept, and tried again after 1 minute, then 2.
        for count, delay in ((2, 60.0), (3, 120.0)):
            assert (await clock.slept_count(count))[-1] == delay
            assert len(llm.requests) == count - 1 and read_pending(workspace) == [record]
            clock.advance(delay)
        await eventually(lambda: not read_pending(workspace))
        assert out.getvalue().endswith("noted\n")
        assert len(llm.requests) == 3
        assert all("all done" in user_texts(r)[-1] for r in llm.requests)
        assert clock.sleeping == 0  # nothing more to deliver
    finally:
        await registry.aclose()
        worker.cancel()
        with pytest.raises(asyncio.CancelledError):
            await worker
        await runtime.aclose()


@pytest.mark.usefixtures("calls_remote")
async def test_a_key_the_agent_echoes_never_reaches_the_delivered_text(
    workspace: Path, remote: Gateway
) -> None:
    # The delivery is a prompt to the owner's model (and printed by chat): the agent's
    # text passes the entry's redactor, as the a2a tool's results do.
    registry = WatchRegistry(clock=ManualClock())
    inbox = Inbox()
    registry.register_target(workspace, SCOPE, inbox)
    try:
        task = await start_remote_task(base_url(remote), f"ask:Is {REMOTE_KEY} yours?")
        await registry.watch(workspace, SCOPE, "assistant-a", task.id, "c", card=STREAM_CARD)
        await eventually(lambda: bool(inbox.texts))
        text = inbox.texts[0][1]
        assert "Is [redacted] yours?" in text and REMOTE_KEY not in text
    finally:
        await registry.aclose()


@pytest.mark.usefixtures("calls_remote")
async def test_a_timeout_past_the_calendar_never_ends_the_watch(
    workspace: Path, remote: Gateway
) -> None:
    # --watch-timeout 1e12 (a way to say "never") put the deadline past year 9999: every
    # watch failed on its first check with an OverflowError and was dropped.
    registry = WatchRegistry(clock=ManualClock(), watch_timeout_s=1e12)
    inbox = Inbox()
    registry.register_target(workspace, SCOPE, inbox)
    try:
        task = await start_remote_task(base_url(remote), "ask:Which city?")
        await registry.watch(workspace, SCOPE, "assistant-a", task.id, "c", card=STREAM_CARD)
        await eventually(lambda: bool(inbox.texts))
        assert f"task {task.id} (input-required)]" in inbox.texts[0][1]
    finally:
        await registry.aclose()


@pytest.mark.usefixtures("calls_remote")
async def test_restore_rearms_and_delivers_and_shutdown_keeps_records(
    workspace: Path, remote: Gateway
) -> None:
    task = await start_remote_task(base_url(remote), "hold:100")
    waiting = PendingRecord(
        "w-1",
        SCOPE,
        "assistant-a",
        task.id,
        task.context_id,
        None,
        "2026-10-08T11:59:00+00:00",
        "poll",
    )
    kept = PendingRecord(
        "w-2",
        SCOPE,
        "assistant-a",
        "t-old",
        "c-old",
        None,
        "2026-10-08T10:00:00+00:00",
        "poll",
        "[A2A result from ...] kept",
    )
    write_pending(workspace, [waiting, kept])
    clock, inbox = ManualClock(), Inbox()
    registry = WatchRegistry(clock=clock)
    registry.register_target(workspace, SCOPE, inbox)
    await registry.restore(workspace)
    assert inbox.texts == [(SCOPE, "[A2A result from ...] kept")]
    (watch,) = registry.watches()
    assert watch.record.watchId == "w-1"  # same id, same start
    await eventually(lambda: watch.checks == 1)  # a re-armed watch checks at once
    await registry.aclose()
    assert [r.watchId for r in read_pending(workspace)] == ["w-1"]
    await cancel_remote_task(base_url(remote), task.id)


@pytest.mark.usefixtures("calls_remote")
async def test_shutdown_stops_a_delivery_that_waits_on_its_turn(
    workspace: Path, remote: Gateway
) -> None:
    # A finished watch leaves the registry's list before it delivers, and a delivery
    # waits until its follow-up turn has run: aclose did not stop it, so it outlived
    # the registry (to the end of the event loop) waiting for a turn that never comes.
    taken = asyncio.Event()

    async def never_runs(scope: str, text: str) -> None:
        taken.set()
        await asyncio.Event().wait()  # the turn, queued behind one that never ends

    registry = WatchRegistry(clock=ManualClock())
    registry.register_target(workspace, SCOPE, never_runs)
    task = await start_remote_task(base_url(remote), "ask:Which city?")
    watch = await registry.watch(
        workspace, SCOPE, "assistant-a", task.id, task.context_id, card=STREAM_CARD
    )
    await asyncio.wait_for(taken.wait(), 20)
    await registry.aclose()
    assert watch.runner is not None and watch.runner.done()
    (record,) = read_pending(workspace)  # kept for the next start
    assert record.watchId == watch.record.watchId and "Which city?" in (record.undelivered or "")


@pytest.mark.usefixtures("calls_remote")
async def test_stop_removes_the_record_and_rearm_restores_it(
    workspace: Path, remote: Gateway
) -> None:
    clock = ManualClock()
    registry = WatchRegistry(clock=clock)
    try:
        task = await start_remote_task(base_url(remote), "hold:100")
        watch = await registry.watch(workspace, SCOPE, "assistant-a", task.id, "c", card=POLL_CARD)
        record = await registry.stop(workspace, SCOPE, task.id)
        assert record == watch.record and read_pending(workspace) == []
        assert await registry.stop(workspace, SCOPE, task.id) is None
        again = await registry.rearm(workspace, record)
        assert again.record.watchId == record.watchId
        assert [r.watchId for r in read_pending(workspace)] == [record.watchId]
        await cancel_remote_task(base_url(remote), task.id)
    finally:
        await registry.aclose()


class FirstJobHeld(ThreadPoolExecutor):
    """The loop's worker threads, the first job held at its start until ``release``
    (the job then runs whole, in its thread); every job counts when it ends."""

    def __init__(self) -> None:
        super().__init__(max_workers=4)
        self.started, self.release = threading.Event(), threading.Event()
        self.ended = 0
        self._held = False
        self._count = threading.Lock()

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        hold, self._held = not self._held, True

        def job() -> Any:
            if hold:
                self.started.set()
                self.release.wait()
            try:
                return fn(*args, **kwargs)
            finally:
                with self._count:
                    self.ended += 1

        return super().submit(job)


async def test_a_cancelled_write_keeps_the_lock_until_its_thread_has_written(
    home: Path,
) -> None:
    # A put cancelled while its thread was rewriting pending.json released the lock at
    # once: a remove right after (WatchRegistry.stop after cancelling the runner) read
    # the file first, then the put's thread wrote the record back: a stopped watch
    # came back at the next start.
    workspace = home
    threads = FirstJobHeld()
    asyncio.get_running_loop().set_default_executor(threads)
    files = PendingFiles()
    record = PendingRecord(
        "w-1", SCOPE, "assistant-a", "t-1", "c-1", None, "2026-10-08T12:00:00+00:00", "poll"
    )
    putting = asyncio.create_task(files.put(workspace, record))
    await eventually(threads.started.is_set)  # the put's thread is running
    putting.cancel()
    for _ in range(5):  # a few turns of the loop: the cancellation reaches the put
        await asyncio.sleep(0)
    removing = asyncio.create_task(files.remove(workspace, record.watchId))
    # Either the cancelled put still holds the file, or the remove has run its thread.
    await eventually(lambda: not putting.done() or threads.ended >= 1)
    threads.release.set()
    with pytest.raises(asyncio.CancelledError):
        await putting
    await removing
    await eventually(lambda: threads.ended == 2)  # both threads have written
    assert read_pending(workspace) == []
    assert not pending_path(workspace).exists()


def test_malformed_pending_file_reads_as_no_records(tmp_path: Path) -> None:
    path = WorkspaceLayout(tmp_path).pending
    path.parent.mkdir()
    path.write_text("{nope")
    assert read_pending(tmp_path) == []
    path.write_text(json.dumps([{"watchId": "x"}, 3]))
    assert read_pending(tmp_path) == []


CRASHING_HOST = """
import asyncio, os, sys
from pathlib import Path
from a2a_gateway.client.watches import WatchRegistry

async def main() -> None:
    workspace = Path(sys.argv[1])
    registry = WatchRegistry()

    async def deliver(scope: str, text: str) -> None:
        print(text, flush=True)
        if sys.argv[2] == "crash":
            os._exit(3)  # the process dies between delivering and removing the record

    registry.register_target(workspace, "local-owner", deliver)
    await registry.restore(workspace)
    await registry.aclose()

asyncio.run(main())
"""


async def test_a_crash_between_deliver_and_remove_delivers_again(home: Path) -> None:
    workspace = home
    text = '[A2A result from "assistant-a", task t-9 (completed)]\nContext: c-9\nDone.'
    record = PendingRecord(
        "w-9", SCOPE, "assistant-a", "t-9", "c-9", None, "2026-10-08T12:00:00+00:00", "poll", text
    )
    write_pending(workspace, [record])

    async def host(mode: str) -> tuple[int, str]:
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-P",
            "-c",
            CRASHING_HOST,
            str(workspace),
            mode,
            stdout=asyncio.subprocess.PIPE,
        )
        out, _ = await asyncio.wait_for(process.communicate(), 30)
        return process.returncode or 0, out.decode()

    code, out = await host("crash")
    assert code == 3 and out.strip() == text
    assert read_pending(workspace) == [record]  # delivered, but the record is still there
    code, out = await host("ok")
    assert code == 0 and out.strip() == text  # delivered again: at least once
    assert read_pending(workspace) == []


async def test_serve_without_a_waker_answers_404(remote: Gateway) -> None:
    async with aiohttp.ClientSession() as http:
        url = base_url(remote) + "/a2a/push/some-watch"
        async with http.post(url, headers={"X-A2A-Notification-Token": "x"}) as response:
            assert response.status == 404


@pytest.mark.usefixtures("calls_remote")
async def test_watches_are_metered_by_mode_and_outcome(workspace: Path, remote: Gateway) -> None:
    """``telegram --a2a --metrics`` gives its registry the gateway's meter: watches by
    mode and how they ended, each delivery attempt, and those pending now."""
    from a2a_gateway.protocol.watch_metering import WATCH_MODES
    from a2a_gateway.server.metrics import Metrics

    from ..server.test_metrics import parse, value

    metrics = Metrics(process=False)
    clock, inbox = ManualClock(), Inbox(fail=True)
    registry = WatchRegistry(clock=clock, watch_timeout_s=100, meter=metrics.watches)
    metrics.watches.count_pending(registry)
    registry.register_target(workspace, SCOPE, inbox)
    await clock.slept_count(1)  # its delayed delivery sleeps first: 1 s

    def scraped() -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
        return parse(metrics.exposition().decode())

    def ended(mode: str, outcome: str) -> float:
        return value(scraped(), "a2a_watches_total", mode=mode, outcome=outcome)

    def deliveries(outcome: str) -> float:
        return value(scraped(), "a2a_watch_deliveries_total", outcome=outcome)

    try:
        streamed = await start_remote_task(base_url(remote), "hold:100")
        polled = await start_remote_task(base_url(remote), "hold:100")
        await registry.watch(workspace, SCOPE, "assistant-a", streamed.id, "c", card=STREAM_CARD)
        await registry.watch(workspace, SCOPE, "assistant-a", polled.id, "c", card=POLL_CARD)
        pending = {m: value(scraped(), "a2a_watches_pending", mode=m) for m in WATCH_MODES}
        assert pending == {"push": 0, "subscribe": 1, "poll": 1}
        # The streamed task settles; its delivery fails (the turn failed) and is kept.
        await cancel_remote_task(base_url(remote), streamed.id)
        await eventually(lambda: deliveries("failed") == 1)
        assert ended("subscribe", "settled") == 1
        assert value(scraped(), "a2a_watches_pending", mode="subscribe") == 0
        # A minute later it is delivered; the polled task never settles: no result.
        inbox.fail = False
        clock.advance(60)
        await eventually(lambda: deliveries("delivered") == 1)
        clock.advance(50)  # past the watch's 100 s
        await eventually(lambda: ended("poll", "expired") == 1)
        await eventually(lambda: deliveries("delivered") == 2)
        samples = scraped()
        assert value(samples, "a2a_watches_pending", mode="poll") == 0
        assert value(samples, "a2a_watch_deliveries_total", outcome="failed") == 1
        # Every label from its fixed set: no task or watch id.
        for name, labels in samples:
            if name.startswith(("a2a_watch", "a2a_watches")):
                assert all(
                    v in {*WATCH_MODES, "settled", "expired", "delivered", "failed"}
                    for _, v in labels
                ), (name, labels)
        await cancel_remote_task(base_url(remote), polled.id)
    finally:
        await registry.aclose()
