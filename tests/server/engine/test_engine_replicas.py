"""Two engines (two gateway processes' worth) on one PostgreSQL database: a run on
one is not taken for a lost run by the other while its lease is held, and is failed
"server restarted" by the other once the lease has expired (its process died); a
cancel on the other stops it; one run per context across both."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import asyncpg
import pytest

from a2a_gateway.agent.base import Completed, Output, Progress, TextChunk, Turn
from a2a_gateway.agent.faux import FauxAgent
from a2a_gateway.protocol.errors import UnsupportedOperationError
from a2a_gateway.server.engine import TaskEngine
from a2a_gateway.server.pg_local import LocalPostgres
from a2a_gateway.server.pg_store import PostgresTaskStore
from a2a_gateway.server.secret_box import SecretBox
from a2a_gateway.server.task_store import TaskRecord
from lf.a2a.v1 import a2a_pb2 as pb
from tests.support.postgres import Clock, fresh_database

from .engine_helpers import (
    ALICE,
    WAIT_S,
    Scripted,
    collect,
    ctx,
    pg_engine,
    request,
    send,
    state_name,
    streamed_text,
)
from .test_engine_replica_push import CancelledBeforeClaim

LEASE_S = 10.0


@pytest.fixture
async def replicas(
    postgres: LocalPostgres, tmp_path: Path
) -> AsyncIterator[tuple[TaskEngine, TaskEngine, Clock]]:
    url = await fresh_database(postgres)
    clock_b = Clock()
    async with two_engines(url, tmp_path, Clock(), clock_b) as (a, b):
        yield a, b, clock_b


@contextlib.asynccontextmanager
async def two_engines(
    url: str, tmp_path: Path, clock_a: Callable[[], int], clock_b: Callable[[], int]
) -> AsyncIterator[tuple[TaskEngine, TaskEngine]]:
    """Engines A and B on one database, each store on its own clock."""
    a, b = (
        TaskEngine(
            FauxAgent(), PostgresTaskStore(url, box=SecretBox(tmp_path), lease_s=LEASE_S, clock=c)
        )
        for c in (clock_a, clock_b)
    )
    try:
        yield a, b
    finally:
        await a.aclose()
        await b.aclose()


async def failed_by_b_once_its_lease_runs_out(b: TaskEngine, clock_b: Clock, task_id: str) -> None:
    """A's run of ``task_id`` stops renewing its lease (as if A were killed): B, two
    leases later on its clock, fails it 'server restarted'."""
    clock_b.now += int(2 * LEASE_S * 1e9)
    failed = await b.get_task(pb.GetTaskRequest(id=task_id), ctx())
    assert state_name(failed) == "FAILED"
    assert failed.status.message.parts[0].text == "server restarted"


async def test_a_run_held_by_one_engine_is_failed_by_the_other_only_after_its_lease(
    replicas: tuple[TaskEngine, TaskEngine, Clock],
) -> None:
    a, b, clock_b = replicas
    task = await send(a, "hold:60", return_immediately=True)
    seen = await b.get_task(pb.GetTaskRequest(id=task.id), ctx())
    assert state_name(seen) in ("SUBMITTED", "WORKING")
    listed = await b.list_tasks(pb.ListTasksRequest(), ctx())  # recovers lost runs first
    assert [t.id for t in listed.tasks] == [task.id]
    assert state_name(listed.tasks[0]) in ("SUBMITTED", "WORKING")  # not recovered
    await failed_by_b_once_its_lease_runs_out(b, clock_b, task.id)


class ChangedBeforeReplace(PostgresTaskStore):
    """The real store; ``before_replace`` (once) runs just before its next replace: the
    moment between a recovery's read of the task and its conditional write."""

    before_replace: Callable[[], Awaitable[object]] | None = None

    async def replace(self, record: TaskRecord) -> bool:
        hook, self.before_replace = self.before_replace, None
        if hook is not None:
            await hook()
        return await super().replace(record)


async def test_a_lost_run_whose_late_save_lands_during_its_recovery_is_still_failed(
    postgres: LocalPostgres, tmp_path: Path
) -> None:
    """A's save of a new status lands between B's read of the task (lease run out) and
    B's conditional recovery write, with a lease that has run out too by B's clock: B's
    write is refused (the task changed), and B reads it again and fails it, rather than
    answer a lost run as working (the order the background save and the recovery meet
    in is not fixed: ~2 in 25 runs of the test above met this way under load)."""
    url = await fresh_database(postgres)
    step = asyncio.Event()

    async def script(turn: Turn) -> AsyncIterator[Output]:
        await step.wait()
        yield Progress("later")
        await asyncio.Event().wait()  # held until cancelled
        yield Completed("never")

    store_a = PostgresTaskStore(url, box=SecretBox(tmp_path), lease_s=LEASE_S, clock=Clock())
    clock_b = Clock()
    store_b = ChangedBeforeReplace(url, box=SecretBox(tmp_path), lease_s=LEASE_S, clock=clock_b)
    a, b = TaskEngine(Scripted(script), store_a), TaskEngine(FauxAgent(), store_b)

    async def stored_text() -> str:
        record = await store_a.load(ALICE, task.id)
        assert record is not None
        return "".join(p.text for p in record.task.status.message.parts)

    async def late_save() -> None:  # A's next status, saved while B recovers
        step.set()
        async with asyncio.timeout(WAIT_S):
            while await stored_text() != "later":  # noqa: ASYNC110 (the database: polled)
                await asyncio.sleep(0.01)

    try:
        task = await send(a, "go", return_immediately=True)
        request_b = pb.GetTaskRequest(id=task.id)
        async with asyncio.timeout(WAIT_S):  # A's lazy save is in (the database: polled)
            while state_name(await b.get_task(request_b, ctx())) != "WORKING":  # noqa: ASYNC110
                await asyncio.sleep(0.01)
        store_b.before_replace = late_save
        clock_b.now += int(2 * LEASE_S * 1e9)  # A's leases, the late one too, ran out
        failed = await b.get_task(request_b, ctx())
        assert await stored_text() == "server restarted"
    finally:
        await a.aclose()
        await b.aclose()
    assert state_name(failed) == "FAILED"
    assert failed.status.message.parts[0].text == "server restarted"


async def test_cancel_on_the_other_engine_stops_the_run_where_it_runs(
    replicas: tuple[TaskEngine, TaskEngine, Clock],
) -> None:
    a, b, _ = replicas
    task = await send(a, "hold:60", return_immediately=True)
    assert task.id in a.live_task_ids()
    cancelled = await b.cancel_task(pb.CancelTaskRequest(id=task.id), ctx())
    assert state_name(cancelled) == "CANCELED"
    assert a.live_task_ids() == []
    mine = await a.get_task(pb.GetTaskRequest(id=task.id), ctx())
    assert state_name(mine) == "CANCELED"


async def test_one_run_per_context_across_engines(
    replicas: tuple[TaskEngine, TaskEngine, Clock],
) -> None:
    a, b, _ = replicas
    first = await send(a, "hold:60", context_id="ctx-shared", return_immediately=True)
    with pytest.raises(UnsupportedOperationError, match="context busy"):
        await b.send_message(request("hi", context_id="ctx-shared"), ctx())
    await a.cancel_task(pb.CancelTaskRequest(id=first.id), ctx())
    done = await send(b, "hi", context_id="ctx-shared")  # the claim went with the run
    assert state_name(done) == "COMPLETED"
    # Two sends to one new context at once, one on each engine: exactly one runs.
    outcomes = await asyncio.gather(
        a.send_message(request("hold:60", context_id="ctx-race", return_immediately=True), ctx()),
        b.send_message(request("hold:60", context_id="ctx-race", return_immediately=True), ctx()),
        return_exceptions=True,
    )
    busy = [o for o in outcomes if isinstance(o, UnsupportedOperationError)]
    started = [o for o in outcomes if isinstance(o, pb.SendMessageResponse)]
    assert (len(busy), len(started)) == (1, 1), outcomes
    assert len(a.live_task_ids()) + len(b.live_task_ids()) == 1


async def test_a_subscriber_on_the_other_engine_gets_every_event_in_order(
    postgres: LocalPostgres, tmp_path: Path
) -> None:
    url = await fresh_database(postgres)
    go = asyncio.Event()

    async def script(turn: Turn) -> AsyncIterator[Output]:
        yield TextChunk("c0-")
        await go.wait()
        for n in range(1, 40):
            yield TextChunk(f"c{n}-")
        yield Completed("done")

    a = pg_engine(url, tmp_path, Scripted(script))
    b = pg_engine(url, tmp_path, FauxAgent())
    try:
        task = await send(a, "go", return_immediately=True)
        stream = b.subscribe_to_task(pb.SubscribeToTaskRequest(id=task.id), ctx())
        async with asyncio.timeout(WAIT_S):
            first = await anext(stream)
        go.set()
        events = [first, *await collect(stream)]
    finally:
        await a.aclose()
        await b.aclose()
    assert events[0].HasField("task")
    assert streamed_text(events) == "".join(f"c{n}-" for n in range(40))
    assert events[-1].status_update.status.state == pb.TASK_STATE_COMPLETED


async def test_a_subscriber_on_the_other_engine_gets_what_was_streamed_before_the_first_save(
    postgres: LocalPostgres, tmp_path: Path
) -> None:
    """A streaming send's task is stored when its id leaves the engine, after the run's
    first step: that save holds the text streamed in that step (the row's event number
    counts those chunks, and a subscriber elsewhere starts after it)."""
    url = await fresh_database(postgres)
    go = asyncio.Event()

    async def script(turn: Turn) -> AsyncIterator[Output]:
        for n in range(5):  # in the run's first step, before the first save
            yield TextChunk(f"c{n}-")
        await go.wait()
        for n in range(5, 8):
            yield TextChunk(f"c{n}-")
        yield Completed("done")

    a = pg_engine(url, tmp_path, Scripted(script))
    b = pg_engine(url, tmp_path, FauxAgent())
    try:
        streamed = a.send_streaming_message(request("go"), ctx())
        async with asyncio.timeout(WAIT_S):
            task_id = (await anext(streamed)).task.id  # sent once the task is stored
            stream = b.subscribe_to_task(pb.SubscribeToTaskRequest(id=task_id), ctx())
            first = await anext(stream)
        go.set()
        events = [first, *await collect(stream)]
        await collect(streamed)
    finally:
        await a.aclose()
        await b.aclose()
    assert streamed_text(events) == "".join(f"c{n}-" for n in range(8))
    assert events[-1].status_update.status.state == pb.TASK_STATE_COMPLETED


@pytest.mark.parametrize("skew_s", [-600, 600])
async def test_leases_hold_across_replicas_whose_clocks_disagree(
    postgres: LocalPostgres, tmp_path: Path, skew_s: int
) -> None:
    """A's clock 10 minutes behind or ahead of B's: leases are on the database's clock,
    so B neither fails A's live run (A behind: its lease looked long gone to B) nor
    keeps it alive past the lease once A stops renewing (A ahead: its lease looked
    10 minutes long to B)."""
    url = await fresh_database(postgres)
    clock_b = Clock()
    clock_b.now = time.time_ns()

    def clock_a() -> int:
        return time.time_ns() + skew_s * 10**9

    async with two_engines(url, tmp_path, clock_a, clock_b) as (a, b):
        task = await send(a, "hold:60", return_immediately=True)
        seen = await b.get_task(pb.GetTaskRequest(id=task.id), ctx())
        assert state_name(seen) in ("SUBMITTED", "WORKING")
        await failed_by_b_once_its_lease_runs_out(b, clock_b, task.id)


async def test_a_waiting_task_continued_on_both_engines_at_once_runs_once(
    postgres: LocalPostgres, tmp_path: Path
) -> None:
    """B read the task waiting for input; before B claims its context, A continues it
    (A's claim, A's run saved working). B's claim names the same task, but A's run
    holds it: B answers context busy and runs nothing, rather than run the task a
    second time beside A's run (with the other message)."""
    url = await fresh_database(postgres)
    a = pg_engine(url, tmp_path, FauxAgent())
    store_b = CancelledBeforeClaim(url, box=SecretBox(tmp_path), lease_s=LEASE_S)
    b = TaskEngine(FauxAgent(), store_b)
    try:
        task = await send(a, "ask:Which city?")
        assert state_name(task) == "INPUT_REQUIRED"
        store_b.before_claim = lambda: send(a, "hold:60", task_id=task.id, return_immediately=True)
        with pytest.raises(UnsupportedOperationError, match="context busy"):
            await b.send_message(request("Lisbon", task_id=task.id), ctx())
        assert b.live_task_ids() == []
        assert a.live_task_ids() == [task.id]
        stored = await store_b.load(ALICE, task.id)
        assert stored is not None
        assert [m.parts[0].text for m in stored.task.history][-1] == "hold:60"
    finally:
        await a.aclose()
        await b.aclose()


class HeldInHandOver(PostgresTaskStore):
    """The real store; its next hand-over (a continuation's, after its claim) waits
    until the test cancels the call that made it."""

    handing_over: asyncio.Event | None = None

    async def hand_over(self, task_id: str) -> int | None:
        entered, self.handing_over = self.handing_over, None
        if entered is not None:
            entered.set()
            await asyncio.Event().wait()
        return await super().hand_over(task_id)


async def test_a_continuation_cancelled_after_its_claim_leaves_the_context_free(
    postgres: LocalPostgres, tmp_path: Path
) -> None:
    """A continuation on B whose call is cancelled (its client left) after B claimed the
    context, before the run started: the claim goes, so the context is not busy for
    every other gateway for as long as B lives (B would renew it)."""
    url = await fresh_database(postgres)
    a = pg_engine(url, tmp_path, FauxAgent())
    store_b = HeldInHandOver(url, box=SecretBox(tmp_path), lease_s=LEASE_S)
    b = TaskEngine(FauxAgent(), store_b)
    try:
        task = await send(a, "ask:Which city?", context_id="ctx-left")
        entered = store_b.handing_over = asyncio.Event()
        call = asyncio.create_task(b.send_message(request("Lisbon", task_id=task.id), ctx()))
        async with asyncio.timeout(WAIT_S):
            await entered.wait()
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call
        assert b.live_task_ids() == []
        done = await send(a, "hi", context_id="ctx-left")
        assert state_name(done) == "COMPLETED"
    finally:
        await a.aclose()
        await b.aclose()


class ChangedBeforeWrite(PostgresTaskStore):
    """The real store; ``before_write`` (once) runs just before its next save or
    replace: the moment between a change's read of the task and its write."""

    before_write: Callable[[], Awaitable[object]] | None = None

    async def _hook(self) -> None:
        hook, self.before_write = self.before_write, None
        if hook is not None:
            await hook()

    async def save(self, record: TaskRecord) -> None:
        await self._hook()
        await super().save(record)

    async def replace(self, record: TaskRecord) -> bool:
        await self._hook()
        return await super().replace(record)


async def test_a_hop_limited_answer_does_not_fail_a_run_started_elsewhere_meanwhile(
    postgres: LocalPostgres, tmp_path: Path
) -> None:
    """B read the task waiting for input to answer a message over the hop limit (which
    fails it, with no run); meanwhile A continued the task and runs it. B's failure is
    not stored over A's run (whose end would then be refused and lost): B answers
    context busy, as a continuation finding the task's context claimed does."""
    url = await fresh_database(postgres)
    a = pg_engine(url, tmp_path, FauxAgent())
    store_b = ChangedBeforeWrite(url, box=SecretBox(tmp_path), lease_s=LEASE_S)
    b = TaskEngine(FauxAgent(), store_b)
    try:
        task = await send(a, "ask:Which city?")
        store_b.before_write = lambda: send(a, "hold:60", task_id=task.id, return_immediately=True)
        looping = request("Lisbon", task_id=task.id, metadata={"a2a-gateway.hops": 9})
        with pytest.raises(UnsupportedOperationError, match="context busy"):
            await b.send_message(looping, ctx())
        assert a.live_task_ids() == [task.id]
        seen = await b.get_task(pb.GetTaskRequest(id=task.id), ctx())
        assert state_name(seen) == "WORKING"
    finally:
        await a.aclose()
        await b.aclose()


async def test_a_hop_limited_answer_retried_on_the_other_engine_gets_the_same_task(
    replicas: tuple[TaskEngine, TaskEngine, Clock],
) -> None:
    a, b, _ = replicas
    task = await send(a, "ask:Which city?")
    looping = request("Lisbon", task_id=task.id, metadata={"a2a-gateway.hops": 9})
    failed = (await b.send_message(looping, ctx())).task
    assert state_name(failed) == "FAILED"
    retried = (await a.send_message(looping, ctx())).task  # its retry key is stored
    assert (retried.id, state_name(retried)) == (task.id, "FAILED")


async def test_a_final_state_whose_first_write_fails_is_stored_all_the_same(
    postgres: LocalPostgres, tmp_path: Path
) -> None:
    """The database refuses the first write of the run's final state (a trigger fails
    it once, as a dropped pooled connection would): nothing would write that state
    later, so the run tries again, rather than leave the task working until it is
    taken for a lost run and failed "server restarted"."""
    url = await fresh_database(postgres)
    gate = asyncio.Event()

    async def script(turn: Turn) -> AsyncIterator[Output]:
        await gate.wait()
        yield Completed("done")

    a = pg_engine(url, tmp_path, Scripted(script))
    try:
        task = await send(a, "go", return_immediately=True)  # stored working
        admin = await asyncpg.connect(url)
        try:
            await admin.execute(
                "CREATE SEQUENCE fail_once;"
                " CREATE FUNCTION fail_once() RETURNS trigger LANGUAGE plpgsql AS $$"
                " BEGIN IF nextval('fail_once') = 1 THEN RAISE EXCEPTION 'injected'; END IF;"
                " RETURN NEW; END $$;"
                " CREATE TRIGGER fail_once BEFORE UPDATE ON a2a_tasks FOR EACH ROW"
                f" WHEN (NEW.state = {pb.TASK_STATE_COMPLETED}) EXECUTE FUNCTION fail_once()"
            )
            gate.set()
            async with asyncio.timeout(WAIT_S):
                while a.live_task_ids():  # noqa: ASYNC110
                    await asyncio.sleep(0.01)
            assert await admin.fetchval("SELECT is_called FROM fail_once")  # it failed once
        finally:
            await admin.close()
        stored = await a.get_task(pb.GetTaskRequest(id=task.id), ctx())
    finally:
        await a.aclose()
    assert state_name(stored) == "COMPLETED"


async def test_a_continuation_of_a_task_another_turn_changed_meanwhile_does_not_run(
    postgres: LocalPostgres, tmp_path: Path
) -> None:
    """B read the task waiting for input; before B claims its context, a whole turn of
    it runs on A (and waits for input again, its claim gone). B's run would start from
    the task as B read it, and its saves would drop A's turn: B answers context busy
    (a retry reads the task anew)."""
    url = await fresh_database(postgres)
    a = pg_engine(url, tmp_path, FauxAgent())
    store_b = CancelledBeforeClaim(url, box=SecretBox(tmp_path), lease_s=LEASE_S)
    b = TaskEngine(FauxAgent(), store_b)
    try:
        task = await send(a, "ask:Which city?")
        store_b.before_claim = lambda: send(a, "ask:Which street?", task_id=task.id)
        with pytest.raises(UnsupportedOperationError, match="context busy"):
            await b.send_message(request("Lisbon", task_id=task.id), ctx())
        assert b.live_task_ids() == []
        stored = await a.get_task(pb.GetTaskRequest(id=task.id), ctx())
        assert state_name(stored) == "INPUT_REQUIRED"
        assert [m.parts[0].text for m in stored.history if m.role == pb.ROLE_USER] == [
            "ask:Which city?",
            "ask:Which street?",
        ]
        done = await send(b, "Lisbon", task_id=task.id)  # read anew: it runs
        assert state_name(done) == "COMPLETED"
    finally:
        await a.aclose()
        await b.aclose()


@pytest.mark.server_fault  # the write given up is logged with its traceback
async def test_a_final_write_failing_while_the_engine_closes_is_not_tried_again(
    postgres: LocalPostgres, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A CancelTask's write of the final state fails while the engine is closing: it is
    not tried again, which would open the store's pool anew after its close (a pool,
    a LISTEN connection and their tasks that nothing closes)."""
    url = await fresh_database(postgres)
    database = url.rsplit("/", 1)[1]
    a = pg_engine(url, tmp_path, FauxAgent())
    admin = await asyncpg.connect(url)
    try:
        task = await send(a, "hold:60", return_immediately=True)  # stored working
        holder = await asyncpg.connect(url)
        blocked = "SELECT pid FROM pg_stat_activity WHERE datname = $1 AND wait_event_type = 'Lock'"
        try:
            async with holder.transaction():
                await holder.execute("SELECT 1 FROM a2a_tasks FOR UPDATE")  # the row, held
                cancel = asyncio.create_task(a.cancel_task(pb.CancelTaskRequest(id=task.id), ctx()))
                async with asyncio.timeout(WAIT_S):  # the final write waits for the row
                    while await admin.fetchval(blocked, database) is None:  # noqa: ASYNC110
                        await asyncio.sleep(0.01)
                closing = asyncio.create_task(a.aclose())
                await asyncio.sleep(0)  # the engine is closing now
                # Every statement stuck behind the held row fails: the final write, and any
                # other that queued there meanwhile (a lease renewal on a busy machine),
                # which would otherwise hold the close until the row is released.
                async with asyncio.timeout(WAIT_S):
                    while not closing.done():
                        await admin.execute(
                            f"SELECT pg_cancel_backend(pid) FROM ({blocked}) b", database
                        )
                        await asyncio.wait({closing}, timeout=0.05)
                    await closing
        finally:
            await holder.close()
        async with asyncio.timeout(WAIT_S):
            await cancel
        others = (
            "SELECT count(*) FROM pg_stat_activity WHERE datname = $1 AND pid <> pg_backend_pid()"
        )
        async with asyncio.timeout(WAIT_S):  # closed connections' backends leave (polled)
            while (left := await admin.fetchval(others, database)) != 0:  # noqa: ASYNC110
                await asyncio.sleep(0.05)
    finally:
        await admin.close()
        await a.aclose()
    assert left == 0
    assert "could not store task" in caplog.text
