"""The PostgreSQL store's operations: a start-up that fails part-way leaves no
connection behind and is StoreUnavailable (never a crash); a LISTEN connection killed
on the server (``pg_terminate_backend``) is opened again, and what it missed meanwhile
(events to follow, a cancel request) is caught up."""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import asyncpg
import pytest

from a2a_gateway.agent.base import Completed, InputRequired, Output, TextChunk, Turn
from a2a_gateway.agent.faux import FauxAgent
from a2a_gateway.protocol.errors import UnavailableError
from a2a_gateway.server.engine import TaskEngine
from a2a_gateway.server.events import HIGH_WATER, MAX_BACKLOG, TaskStream
from a2a_gateway.server.pg_local import LocalPostgres
from a2a_gateway.server.pg_store import MIGRATION_LOCK, PostgresTaskStore, StoreUnavailable
from a2a_gateway.server.secret_box import SecretBox
from a2a_gateway.server.task_store import TaskRecord
from lf.a2a.v1 import a2a_pb2 as pb
from tests.support.postgres import fresh_database
from tests.support.secrets import use_secret

from .engine.engine_helpers import (
    ALICE,
    WAIT_S,
    Scripted,
    collect,
    ctx,
    pg_engine,
    send,
    state_name,
    streamed_text,
)

GONE_WAIT_S = 10.0  # bound on a closed connection's backend leaving pg_stat_activity


async def backends(
    admin: asyncpg.Connection, database: str, *, user: str | None = None, besides: int = 0
) -> int:
    """Connections to ``database`` (of ``user`` when given) other than ``admin`` and the
    backend ``besides``, once those of connections just closed have left (bounded)."""
    deadline = asyncio.get_running_loop().time() + GONE_WAIT_S
    while True:
        count = int(
            await admin.fetchval(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = $1"
                " AND pid <> pg_backend_pid() AND ($2::text IS NULL OR usename = $2)"
                " AND pid <> $3",
                database,
                user,
                besides,
            )
        )
        if count == 0 or asyncio.get_running_loop().time() > deadline:
            return count
        await asyncio.sleep(0.05)


async def test_a_migration_that_times_out_is_unavailable_and_leaves_no_connection(
    postgres: LocalPostgres, tmp_path: Path
) -> None:
    url = await fresh_database(postgres)
    database = url.rsplit("/", 1)[1]
    holder = await asyncpg.connect(url)
    admin = await asyncpg.connect(postgres.url)
    try:
        # Another process migrating (forever): this start waits for the lock, then its
        # statement times out.
        await holder.execute("SELECT pg_advisory_lock($1)", MIGRATION_LOCK)
        store = PostgresTaskStore(url, box=SecretBox(tmp_path), command_timeout_s=0.5)
        with pytest.raises(StoreUnavailable, match="not usable: TimeoutError"):
            await store.start()
        assert await backends(admin, database, besides=holder.get_server_pid()) == 0
        await holder.execute("SELECT pg_advisory_unlock($1)", MIGRATION_LOCK)
        # The lock is free now: a later start works (with a bound that every
        # migration meets on a loaded machine).
        store = PostgresTaskStore(url, box=SecretBox(tmp_path), command_timeout_s=30.0)
        await store.start()
        await store.aclose()
    finally:
        await holder.close()
        await admin.close()


async def test_a_database_refusing_the_schema_is_unavailable_and_leaves_no_connection(
    postgres: LocalPostgres, tmp_path: Path
) -> None:
    url = await fresh_database(postgres)
    database = url.rsplit("/", 1)[1]
    password = secrets.token_urlsafe(12)
    use_secret(password)
    admin = await asyncpg.connect(postgres.url)
    try:
        # A role that may connect but not create tables (PostgreSQL 15 no longer lets
        # everyone create in the public schema).
        await admin.execute("DROP ROLE IF EXISTS a2a_reader")
        await admin.execute(f"CREATE ROLE a2a_reader LOGIN PASSWORD '{password}'")
        host = url.split("@", 1)[1]
        store = PostgresTaskStore(
            f"postgresql://a2a_reader:{password}@{host}", box=SecretBox(tmp_path)
        )
        with pytest.raises(StoreUnavailable, match="InsufficientPrivilege") as caught:
            await store.start()
        assert password not in str(caught.value)
        assert await backends(admin, database, user="a2a_reader") == 0
    finally:
        await admin.execute("DROP ROLE IF EXISTS a2a_reader")
        await admin.close()


async def until(check: Callable[[], Awaitable[bool]]) -> None:
    """Wait (bounded) until ``check`` holds."""
    async with asyncio.timeout(WAIT_S):
        while not await check():  # noqa: ASYNC110 - database state: no hook to wait on
            await asyncio.sleep(0.02)


@contextlib.asynccontextmanager
async def listener_killed(
    admin: asyncpg.Connection, store: PostgresTaskStore
) -> AsyncIterator[None]:
    """Kill the store's LISTEN connection on the server and keep it from coming back
    for the ``with`` body (its database refuses new connections meanwhile)."""
    database = await admin.fetchval(
        "SELECT datname FROM pg_stat_activity WHERE pid = $1",
        store._listener.get_server_pid() if store._listener is not None else 0,
    )
    await admin.execute(f"ALTER DATABASE {database} ALLOW_CONNECTIONS false")
    try:
        assert store._listener is not None
        await admin.execute("SELECT pg_terminate_backend($1)", store._listener.get_server_pid())

        async def lost() -> bool:
            return not store.listening

        await until(lost)
        yield
    finally:
        await admin.execute(f"ALTER DATABASE {database} ALLOW_CONNECTIONS true")


def chunk(text: str) -> pb.StreamResponse:
    update = pb.TaskArtifactUpdateEvent(task_id="t-1", context_id="ctx-1")
    update.artifact.parts.add(text=text)
    return pb.StreamResponse(artifact_update=update)


async def test_a_follower_reads_the_events_its_lost_listener_missed_once_it_listens_again(
    postgres: LocalPostgres, tmp_path: Path
) -> None:
    url = await fresh_database(postgres)
    runner = PostgresTaskStore(url, box=SecretBox(tmp_path), lease_s=60)
    watcher = PostgresTaskStore(url, box=SecretBox(tmp_path), lease_s=60)
    admin = await asyncpg.connect(postgres.url)
    db = await asyncpg.connect(url)  # opened before the database refuses connections
    got: list[str] = []

    def deliver(events: list[pb.StreamResponse] | None, _first_seq: int) -> bool:
        assert events is not None, "the follow ended"
        got.extend(e.artifact_update.artifact.parts[0].text for e in events)
        return True

    def delivered(count: int) -> Callable[[], Awaitable[bool]]:
        async def check() -> bool:
            return len(got) >= count

        return check

    async def logged() -> bool:
        return bool(await db.fetchval("SELECT count(*) FROM a2a_events") == 5)

    try:
        await runner.start()
        await watcher.start()
        assert await runner.claim_context(ALICE, "ctx-1", "t-1")
        working = pb.Task(id="t-1", context_id="ctx-1")
        working.status.state = pb.TASK_STATE_WORKING
        await runner.save(TaskRecord(working, ALICE))  # (a run unseen logs no event)
        watcher.follow("t-1", 0, deliver)
        runner.log_event("t-1", chunk("c0"), pb.TASK_STATE_WORKING)
        await until(delivered(1))
        async with listener_killed(admin, watcher):
            for i in range(1, 5):
                runner.log_event("t-1", chunk(f"c{i}"), pb.TASK_STATE_WORKING)
            await until(logged)  # written and announced while nobody listened there
            assert got == ["c0"]
        # Listening again: the missed events, then a new one as it comes; each once.
        runner.log_event("t-1", chunk("c5"), pb.TASK_STATE_WORKING)
        await until(delivered(6))
        assert got == [f"c{i}" for i in range(6)]
        assert watcher.relistens == 1 and watcher.listening
    finally:
        await runner.aclose()
        await watcher.aclose()
        await db.close()
        await admin.close()


async def test_a_cancel_requested_while_the_runner_did_not_listen_still_stops_the_run(
    postgres: LocalPostgres, tmp_path: Path
) -> None:
    url = await fresh_database(postgres)
    store_a = PostgresTaskStore(url, box=SecretBox(tmp_path), lease_s=60)
    store_b = PostgresTaskStore(url, box=SecretBox(tmp_path), lease_s=60)
    a, b = TaskEngine(FauxAgent(), store_a), TaskEngine(FauxAgent(), store_b)
    admin = await asyncpg.connect(postgres.url)
    db = await asyncpg.connect(url)
    try:
        await store_a.start()
        await store_b.start()
        task = await send(a, "hold:60", return_immediately=True)

        async def requested() -> bool:
            return bool(
                await db.fetchval(
                    "SELECT cancel_requested FROM a2a_contexts WHERE task_id = $1", task.id
                )
            )

        async with listener_killed(admin, store_a):
            cancelling = asyncio.create_task(b.cancel_task(pb.CancelTaskRequest(id=task.id), ctx()))
            await until(requested)  # asked (and announced) while A did not listen
        canceled = await asyncio.wait_for(cancelling, WAIT_S * 4)
        assert state_name(canceled) == "CANCELED"
        assert store_a.relistens == 1
        assert state_name(await a.get_task(pb.GetTaskRequest(id=task.id), ctx())) == "CANCELED"
    finally:
        await a.aclose()
        await b.aclose()
        await db.close()
        await admin.close()


async def test_a_later_subscriber_of_a_followed_run_goes_on_from_its_own_snapshot(
    postgres: LocalPostgres, tmp_path: Path
) -> None:
    url = await fresh_database(postgres)
    gates = [asyncio.Event() for _ in range(3)]

    async def script(turn: Turn) -> AsyncIterator[Output]:
        yield TextChunk("c0-")
        for n, gate in enumerate(gates, 1):
            await gate.wait()
            yield TextChunk(f"c{n}-")
        yield Completed("done")

    a = pg_engine(url, tmp_path, Scripted(script))
    b = pg_engine(url, tmp_path, FauxAgent())
    try:
        task = await send(a, "go", return_immediately=True)
        first = b.subscribe_to_task(pb.SubscribeToTaskRequest(id=task.id), ctx())
        async with asyncio.timeout(WAIT_S):
            seen_first = [await anext(first)]
            gates[0].set()
            while "c1-" not in streamed_text(seen_first):  # B's follow is past c1-
                seen_first.append(await anext(first))
            # A second subscriber on B: its snapshot is the stored task, which need not
            # be where B's follow is.
            second = b.subscribe_to_task(pb.SubscribeToTaskRequest(id=task.id), ctx())
            seen_second = [await anext(second)]
        gates[1].set()
        gates[2].set()
        seen_first += await collect(first)
        seen_second += await collect(second)
    finally:
        await a.aclose()
        await b.aclose()
    for events in (seen_first, seen_second):
        assert streamed_text(events) == "c0-c1-c2-c3-"
        assert events[-1].status_update.status.state == pb.TASK_STATE_COMPLETED


async def run_by_hand(runner: PostgresTaskStore, store_b: PostgresTaskStore, task: pb.Task) -> None:
    """Start both stores; ``runner`` runs ``task`` (t-1 of alice): claimed and saved."""
    await runner.start()
    await store_b.start()
    assert await runner.claim_context(ALICE, "ctx-1", "t-1")
    await runner.save(TaskRecord(task, ALICE))


async def complete_by_hand(runner: PostgresTaskStore, task: pb.Task) -> None:
    """The run of :func:`run_by_hand` completes: stored, then its status event logged."""
    task.status.state = pb.TASK_STATE_COMPLETED
    await runner.save(TaskRecord(task, ALICE))
    done = pb.StreamResponse()
    done.status_update.task_id = "t-1"
    done.status_update.status.state = pb.TASK_STATE_COMPLETED
    runner.log_event("t-1", done, pb.TASK_STATE_COMPLETED)


async def test_a_later_subscriber_whose_snapshot_is_ahead_of_the_follow_skips_what_it_holds(
    postgres: LocalPostgres, tmp_path: Path
) -> None:
    """The run's process is driven by hand (a store, no engine); the following engine's
    LISTEN connection is down while the run goes on, so the stored task gets ahead of
    what its follow delivered."""
    url = await fresh_database(postgres)
    runner = PostgresTaskStore(url, box=SecretBox(tmp_path))
    store_b = PostgresTaskStore(url, box=SecretBox(tmp_path))
    b = TaskEngine(FauxAgent(), store_b)
    admin = await asyncpg.connect(postgres.url)
    db = await asyncpg.connect(url)  # opened before the database refuses connections
    task = pb.Task(id="t-1", context_id="ctx-1")
    task.status.state = pb.TASK_STATE_WORKING

    async def add_chunk(n: int) -> None:
        artifact = task.artifacts[0] if task.artifacts else task.artifacts.add(artifact_id="a")
        artifact.parts.add(text=f"c{n}-")
        runner.log_event("t-1", chunk(f"c{n}-"), None)

    async def logged() -> bool:
        return bool(await db.fetchval("SELECT count(*) FROM a2a_events") == 3)

    try:
        await run_by_hand(runner, store_b, task)
        first = b.subscribe_to_task(pb.SubscribeToTaskRequest(id="t-1"), ctx())
        async with asyncio.timeout(WAIT_S):
            seen_first = [await anext(first)]
            await add_chunk(0)
            seen_first.append(await anext(first))  # the follow delivered event 1
            # Two pooled connections, so the runner's event writes and its save need
            # no new one while the database refuses them.
            await asyncio.gather(*(runner._fetch("SELECT pg_sleep(0.05)") for _ in range(2)))
            async with listener_killed(admin, store_b):
                await add_chunk(1)
                await add_chunk(2)
                await until(logged)
                await runner.save(TaskRecord(task, ALICE))  # the row reflects 3 events
                second = b.subscribe_to_task(pb.SubscribeToTaskRequest(id="t-1"), ctx())
                seen_second = [await anext(second)]
            assert streamed_text(seen_second) == "c0-c1-c2-"
            await add_chunk(3)
            await complete_by_hand(runner, task)
        seen_first += await collect(first)
        seen_second += await collect(second)
    finally:
        await b.aclose()
        await runner.aclose()
        await db.close()
        await admin.close()
    for events in (seen_first, seen_second):
        assert streamed_text(events) == "c0-c1-c2-c3-"
        assert events[-1].status_update.status.state == pb.TASK_STATE_COMPLETED


class SilencingProxy:
    """A TCP proxy in front of the database that forwards both ways, except that once a
    client sends bytes holding ``silence`` on a connection, nothing more it sends there
    reaches the database: that connection's statement is never answered, as over a
    connection that went silent (a peer gone without a word)."""

    def __init__(self, host: str, port: int, silence: bytes) -> None:
        self.host, self.port, self.silence = host, port, silence
        self.silenced = asyncio.Event()
        self._pipes: set[asyncio.Task[None]] = set()
        self._server: asyncio.Server | None = None

    async def start(self) -> int:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        return int(self._server.sockets[0].getsockname()[1])

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection(self.host, self.port)
        for pipe in (self._pipe(reader, up_writer, True), self._pipe(up_reader, writer, False)):
            task = asyncio.get_running_loop().create_task(pipe)
            self._pipes.add(task)
            task.add_done_callback(self._pipes.discard)

    async def _pipe(
        self, source: asyncio.StreamReader, sink: asyncio.StreamWriter, upward: bool
    ) -> None:
        silent = False
        try:
            while data := await source.read(1 << 16):
                if upward and self.silence in data:
                    silent = True
                    self.silenced.set()
                if not silent:
                    sink.write(data)
                    await sink.drain()
        except OSError:
            pass
        finally:
            sink.close()

    async def aclose(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._pipes):
            task.cancel()
        await asyncio.gather(*self._pipes, return_exceptions=True)


async def test_a_listen_that_is_never_answered_is_bounded_and_unavailable(
    postgres: LocalPostgres, tmp_path: Path
) -> None:
    """The LISTEN connection's statements are bounded like the pool's: a start whose
    LISTEN gets no answer ends StoreUnavailable within the statement bound, not never."""
    url = await fresh_database(postgres)
    head, _, rest = url.rpartition("@")
    address, _, database = rest.partition("/")
    host, _, port = address.rpartition(":")
    proxy = SilencingProxy(host, int(port), b"LISTEN")
    proxied = f"{head}@127.0.0.1:{await proxy.start()}/{database}"
    store = PostgresTaskStore(proxied, box=SecretBox(tmp_path), command_timeout_s=1.0)
    try:
        async with asyncio.timeout(WAIT_S):
            with pytest.raises(StoreUnavailable, match="not usable: TimeoutError"):
                await store.start()
        assert proxy.silenced.is_set()
    finally:
        await store.aclose()
        await proxy.aclose()


def trace(events: list[pb.StreamResponse]) -> list[str]:
    """A subscriber's stream as text: its snapshot's state and artifact text, then each
    artifact update's text and each status update's state."""
    snapshot = events[0].task
    out = [f"[{state_name(snapshot)}]"] + [p.text for a in snapshot.artifacts for p in a.parts]
    for event in events[1:]:
        if event.HasField("artifact_update"):
            out += [p.text for p in event.artifact_update.artifact.parts]
        elif event.HasField("status_update"):
            state = pb.TaskState.Name(event.status_update.status.state)
            out.append(f"[{state.removeprefix('TASK_STATE_')}]")
    return out


async def test_subscribers_see_every_event_once_when_the_run_moves_to_their_gateway(
    postgres: LocalPostgres, tmp_path: Path
) -> None:
    """A run on A asks for input while B's follow of its events is held back (B's
    LISTEN connection is down); the continuation is sent to B. B's subscribers, one that
    followed from the start and one that joined with a snapshot ahead of the follow,
    each get every event once, in order: A's last ones, then B's run's."""
    url = await fresh_database(postgres)
    gates = [asyncio.Event() for _ in range(2)]

    async def script(turn: Turn) -> AsyncIterator[Output]:
        if turn.text() == "go":
            yield TextChunk("c0-")
            await gates[0].wait()
            yield TextChunk("c1-")
            await gates[1].wait()
            yield TextChunk("c2-")
            yield InputRequired("more?")
        else:
            yield TextChunk("d0-")
            yield TextChunk("d1-")
            yield Completed("done")

    store_a = PostgresTaskStore(url, box=SecretBox(tmp_path))
    store_b = PostgresTaskStore(url, box=SecretBox(tmp_path))
    a, b = TaskEngine(Scripted(script), store_a), TaskEngine(Scripted(script), store_b)
    admin = await asyncpg.connect(postgres.url)
    db = await asyncpg.connect(url)  # opened before the database refuses connections
    try:
        task = await send(a, "go", return_immediately=True)

        async def asked() -> bool:  # A stored INPUT_REQUIRED and logged all its events
            row = await db.fetchrow(
                "SELECT state, event_seq, (SELECT count(*) FROM a2a_events e"
                " WHERE e.task_id = t.task_id) AS logged FROM a2a_tasks t WHERE task_id = $1",
                task.id,
            )
            return bool(
                row is not None
                and row["state"] == pb.TASK_STATE_INPUT_REQUIRED
                and row["logged"] == row["event_seq"]
            )

        first = b.subscribe_to_task(pb.SubscribeToTaskRequest(id=task.id), ctx())
        async with asyncio.timeout(WAIT_S):
            seen_first = [await anext(first)]
            while "c0-" not in trace(seen_first):
                seen_first.append(await anext(first))
            gates[0].set()
            while "c1-" not in trace(seen_first):  # B's follow delivered c1-
                seen_first.append(await anext(first))
        # Pooled connections open on both sides: the database refuses new ones below.
        for store in (store_a, store_b):
            await asyncio.gather(*(store._fetch("SELECT pg_sleep(0.05)") for _ in range(4)))
        async with listener_killed(admin, store_b):
            gates[1].set()
            await until(asked)  # logged and announced while B did not listen
            # A later subscriber on B: its snapshot (INPUT_REQUIRED) is ahead of B's follow.
            second = b.subscribe_to_task(pb.SubscribeToTaskRequest(id=task.id), ctx())
            async with asyncio.timeout(WAIT_S):
                seen_second = [await anext(second)]
            done = await send(b, "more", task_id=task.id)
            assert state_name(done) == "COMPLETED"
        seen_first += await collect(first)
        seen_second += await collect(second)
    finally:
        await a.aclose()
        await b.aclose()
        await db.close()
        await admin.close()
    after_c0 = trace(seen_first)
    after_c0 = after_c0[after_c0.index("c0-") :]
    assert after_c0 == [
        "c0-", "c1-", "c2-", "[INPUT_REQUIRED]", "[WORKING]", "d0-", "d1-", "[COMPLETED]"
    ]  # fmt: skip
    # The snapshot holds the streamed text as one part (whole answers, issue 26).
    assert trace(seen_second) == [
        "[INPUT_REQUIRED]", "c0-c1-c2-", "[WORKING]", "d0-", "d1-", "[COMPLETED]"
    ]  # fmt: skip


async def test_a_late_subscriber_missing_more_than_the_backlog_is_not_dropped(
    postgres: LocalPostgres, tmp_path: Path
) -> None:
    """A subscriber joining B's follow with a snapshot MAX_BACKLOG + 100 events behind
    it, whose client has not read a thing yet while the run goes on: it is not taken for
    a slow reader; it reads the events it missed from the log, then the later ones.
    The run's process is driven by hand (a store, no engine)."""
    url = await fresh_database(postgres)
    runner = PostgresTaskStore(url, box=SecretBox(tmp_path))
    store_b = PostgresTaskStore(url, box=SecretBox(tmp_path))
    b = TaskEngine(FauxAgent(), store_b)
    task = pb.Task(id="t-1", context_id="ctx-1")
    task.status.state = pb.TASK_STATE_WORKING
    missed = MAX_BACKLOG + 100
    seen_first: list[pb.StreamResponse] = []

    async def read_first(stream: AsyncIterator[pb.StreamResponse]) -> None:
        async for event in stream:  # a reader that keeps up
            seen_first.append(event)

    def first_saw(count: int) -> Callable[[], Awaitable[bool]]:
        async def check() -> bool:
            return len(seen_first) >= count

        return check

    reading: asyncio.Task[None] | None = None
    try:
        await run_by_hand(runner, store_b, task)  # the row reflects no event
        first = b.subscribe_to_task(pb.SubscribeToTaskRequest(id="t-1"), ctx())
        async with asyncio.timeout(WAIT_S):
            seen_first.append(await anext(first))
        reading = asyncio.create_task(read_first(first))
        for n in range(missed):
            runner.log_event("t-1", chunk(f"c{n}-"), None)
        await until(first_saw(1 + missed))  # B's follow delivered them all
        second = b.subscribe_to_task(pb.SubscribeToTaskRequest(id="t-1"), ctx())
        async with asyncio.timeout(WAIT_S):
            seen_second = [await anext(second)]  # its snapshot; nothing more read yet
        for n in range(missed, missed + 10):
            runner.log_event("t-1", chunk(f"c{n}-"), None)
        await until(first_saw(1 + missed + 10))
        # Nothing the late subscriber missed is queued in memory: it reads from the log.
        assert all(len(s.events) <= HIGH_WATER for s in b._state.hubs["t-1"].subscribers)
        await complete_by_hand(runner, task)
        await asyncio.wait_for(reading, WAIT_S)
        seen_second += await collect(second)
    finally:
        if reading is not None:
            reading.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await reading
        await b.aclose()
        await runner.aclose()
    expected = "".join(f"c{n}-" for n in range(missed + 10))
    for events in (seen_first, seen_second):
        assert streamed_text(events) == expected
        assert events[-1].status_update.status.state == pb.TASK_STATE_COMPLETED


async def test_a_subscriber_the_hand_over_cannot_line_up_is_told_to_resubscribe(
    postgres: LocalPostgres, tmp_path: Path
) -> None:
    """The process that asked for input stored the task but its last event never
    reached the log (its write failed): B's continuation waits for it a statement bound,
    then runs; B's subscriber, short of that event, ends UnavailableError."""
    url = await fresh_database(postgres)

    async def script(turn: Turn) -> AsyncIterator[Output]:
        yield TextChunk("d0-")
        yield Completed("done")

    runner = PostgresTaskStore(url, box=SecretBox(tmp_path))
    store_b = PostgresTaskStore(url, box=SecretBox(tmp_path), command_timeout_s=2.0)
    b = TaskEngine(Scripted(script), store_b)
    task = pb.Task(id="t-1", context_id="ctx-1")
    task.history.add(message_id="m-0", role=pb.ROLE_USER, parts=[pb.Part(text="go")])
    task.status.state = pb.TASK_STATE_WORKING
    try:
        await run_by_hand(runner, store_b, task)
        first = b.subscribe_to_task(pb.SubscribeToTaskRequest(id="t-1"), ctx())
        async with asyncio.timeout(WAIT_S):
            seen = [await anext(first)]
            runner.log_event("t-1", chunk("c0-"), None)
            seen.append(await anext(first))
        task.status.state = pb.TASK_STATE_INPUT_REQUIRED
        await runner.save(TaskRecord(task, ALICE))  # reflects its status event, not logged
        done = await send(b, "more", task_id="t-1")
        assert state_name(done) == "COMPLETED"
        with pytest.raises(UnavailableError, match="resubscribe"):
            await collect(first)
    finally:
        await b.aclose()
        await runner.aclose()
    assert streamed_text(seen) == "c0-"


async def test_a_subscriber_gets_the_next_run_when_it_moves_away_from_its_gateway(
    postgres: LocalPostgres, tmp_path: Path
) -> None:
    """B runs a task until it asks for input, with a subscriber of B's (which does not
    end there); the continuation is sent to A: B's subscriber gets A's run too."""
    url = await fresh_database(postgres)
    gate = asyncio.Event()

    async def script(turn: Turn) -> AsyncIterator[Output]:
        if turn.text() == "go":
            yield TextChunk("c0-")
            await gate.wait()
            yield InputRequired("more?")
        else:
            yield TextChunk("d0-")
            yield Completed("done")

    a = pg_engine(url, tmp_path, Scripted(script))
    b = pg_engine(url, tmp_path, Scripted(script))
    try:
        task = await send(b, "go", return_immediately=True)
        first = b.subscribe_to_task(pb.SubscribeToTaskRequest(id=task.id), ctx())
        async with asyncio.timeout(WAIT_S):
            seen = [await anext(first)]
            gate.set()
            while "[INPUT_REQUIRED]" not in trace(seen):
                seen.append(await anext(first))
        done = await send(a, "more", task_id=task.id)
        assert state_name(done) == "COMPLETED"
        seen += await collect(first)
    finally:
        await a.aclose()
        await b.aclose()
    after_c0 = trace(seen)
    assert after_c0[after_c0.index("c0-") :] == [
        "c0-", "[INPUT_REQUIRED]", "[WORKING]", "d0-", "[COMPLETED]"
    ]  # fmt: skip


async def test_a_follow_nobody_listens_to_any_more_ends_though_the_run_goes_on(
    postgres: LocalPostgres, tmp_path: Path
) -> None:
    """B's only subscriber of A's silent run leaves: B's follow of the run ends at its
    next check (a lease without news), not at the run's end, which for a task waiting
    for input may be never (a task and a query every lease, for as long as B lives)."""
    url = await fresh_database(postgres)
    a = pg_engine(url, tmp_path, FauxAgent())
    store_b = PostgresTaskStore(url, box=SecretBox(tmp_path), lease_s=0.3)
    b = TaskEngine(FauxAgent(), store_b)
    try:
        task = await send(a, "hold:60", return_immediately=True)
        stream = b.subscribe_to_task(pb.SubscribeToTaskRequest(id=task.id), ctx())
        assert isinstance(stream, TaskStream)
        async with asyncio.timeout(WAIT_S):
            assert (await anext(stream)).HasField("task")
        assert store_b.followed_seq(task.id) is not None
        await stream.aclose()
        async with asyncio.timeout(WAIT_S):
            while store_b.followed_seq(task.id) is not None:  # noqa: ASYNC110
                await asyncio.sleep(0.05)
        assert task.id in a.live_task_ids()
    finally:
        await a.aclose()
        await b.aclose()


async def test_events_whose_first_write_fails_still_reach_the_other_gateway(
    postgres: LocalPostgres, tmp_path: Path
) -> None:
    """The database refuses one write of A's stream events (a trigger fails it once,
    as a dropped pooled connection would): the events are written again, so B's
    subscriber gets them all and the run's end, rather than stall at the gap until the
    run is over and a lease has passed, then be told the run was lost."""
    url = await fresh_database(postgres)
    gate = asyncio.Event()

    async def script(turn: Turn) -> AsyncIterator[Output]:
        yield TextChunk("c0-")
        await gate.wait()
        yield TextChunk("c1-")
        yield Completed("done")

    a = pg_engine(url, tmp_path, Scripted(script))
    b = pg_engine(url, tmp_path, FauxAgent())
    admin = await asyncpg.connect(url)
    try:
        task = await send(a, "go", return_immediately=True)
        async with asyncio.timeout(WAIT_S):  # WORKING and c0- are logged (polled)
            while await admin.fetchval("SELECT count(*) FROM a2a_events") < 2:  # noqa: ASYNC110
                await asyncio.sleep(0.01)
        stream = b.subscribe_to_task(pb.SubscribeToTaskRequest(id=task.id), ctx())
        async with asyncio.timeout(WAIT_S):
            first = await anext(stream)
        await admin.execute(
            "CREATE SEQUENCE fail_once;"
            " CREATE FUNCTION fail_once() RETURNS trigger LANGUAGE plpgsql AS $$"
            " BEGIN IF nextval('fail_once') = 1 THEN RAISE EXCEPTION 'injected'; END IF;"
            " RETURN NEW; END $$;"
            " CREATE TRIGGER fail_once BEFORE INSERT ON a2a_events FOR EACH ROW"
            " EXECUTE FUNCTION fail_once()"
        )
        gate.set()
        events = [first, *await collect(stream)]
        assert await admin.fetchval("SELECT is_called FROM fail_once")  # it failed once
    finally:
        await admin.close()
        await a.aclose()
        await b.aclose()
    assert streamed_text(events) == "c0-c1-"
    assert events[-1].status_update.status.state == pb.TASK_STATE_COMPLETED


class FailingOnce:
    """A store clock that raises once when armed (an error the renewal does not expect)."""

    def __init__(self) -> None:
        self.armed = False

    def __call__(self) -> int:
        if self.armed:
            self.armed = False
            raise RuntimeError("injected")
        return time.monotonic_ns()


@pytest.mark.server_fault
async def test_lease_renewal_goes_on_after_an_unexpected_error(
    postgres: LocalPostgres, tmp_path: Path
) -> None:
    """One renewal fails with an error that is not the database's: the next renewals
    still run (the renewal task does not end, which would let every other gateway fail
    this one's runs "server restarted" a lease later)."""
    url = await fresh_database(postgres)
    clock = FailingOnce()
    store = PostgresTaskStore(url, box=SecretBox(tmp_path), lease_s=0.3, clock=clock)
    admin = await asyncpg.connect(url)
    try:
        await store.start()
        assert await store.claim_context(ALICE, "ctx-1", "t-1")
        working = pb.Task(id="t-1", context_id="ctx-1")
        working.status.state = pb.TASK_STATE_WORKING
        await store.save(TaskRecord(working, ALICE))

        async def lease() -> int:
            return int(await admin.fetchval("SELECT lease_until FROM a2a_tasks"))

        clock.armed = True
        async with asyncio.timeout(WAIT_S):
            while clock.armed:  # noqa: ASYNC110 (the renewal's next tick)
                await asyncio.sleep(0.01)
            after_error = await lease()
            while await lease() == after_error:  # noqa: ASYNC110 (renewed again: polled)
                await asyncio.sleep(0.05)
    finally:
        await admin.close()
        await store.aclose()


@pytest.mark.server_fault  # the failed catch-up is logged with its traceback
async def test_listening_goes_on_after_a_catch_up_fails_unexpectedly(
    postgres: LocalPostgres, tmp_path: Path
) -> None:
    """The catch-up after a lost LISTEN connection fails with an error that is not the
    database's (here the cancel handler's, once): the connection is still watched and
    opened again when lost, and the missed cancel request is handled on the next
    catch-up (the watching task does not end, which would leave the process deaf to
    other gateways' cancels and events for the rest of its life)."""
    url = await fresh_database(postgres)
    runner = PostgresTaskStore(url, box=SecretBox(tmp_path), lease_s=60)
    other = PostgresTaskStore(url, box=SecretBox(tmp_path), lease_s=60)
    handled: list[str] = []

    def handler(task_id: str) -> None:
        handled.append(task_id)
        if len(handled) == 1:
            raise RuntimeError("injected")

    runner.on_cancel_request(handler)
    admin = await asyncpg.connect(postgres.url)
    try:
        await runner.start()
        await other.start()
        assert await runner.claim_context(ALICE, "ctx-1", "t-1")
        async with listener_killed(admin, runner):
            await other.request_cancel("t-1")  # missed: caught up when it listens again

        async def handled_twice() -> bool:
            return len(handled) >= 2

        await until(handled_twice)
        async with listener_killed(admin, runner):
            pass

        async def listening() -> bool:
            return runner.listening

        await until(listening)
        assert set(handled) == {"t-1"}
    finally:
        await admin.close()
        await runner.aclose()
        await other.aclose()
