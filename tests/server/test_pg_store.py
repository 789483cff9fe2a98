"""The PostgreSQL task store itself: schema migration, sealed push secrets, retry keys
shared by two stores on one database, errors without the URL (the engine's behaviour
on it is tests/server/engine, parametrised over every store)."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import asyncpg
import pytest

from a2a_gateway.protocol.context import Caller
from a2a_gateway.server.pg_local import LocalPostgres
from a2a_gateway.server.pg_store import (
    MIGRATIONS,
    SCHEMA_VERSION,
    PostgresTaskStore,
    StoreUnavailable,
)
from a2a_gateway.server.secret_box import SEALED_PREFIX, SecretBox
from a2a_gateway.server.task_store import TaskRecord
from lf.a2a.v1 import a2a_pb2 as pb
from tests.support.ports import free_port
from tests.support.postgres import Clock, fresh_database

ALICE = Caller(name="alice", workspace="/ws/one")
TOKEN = "push-token-5e2a9c1f7b"


def record(task_id: str, *, token: str = "") -> TaskRecord:
    task = pb.Task(id=task_id, context_id="ctx-1")
    task.status.state = pb.TASK_STATE_COMPLETED
    task.status.timestamp.FromNanoseconds(1_700_000_000_000_000_000)
    configs = []
    if token:
        config = pb.TaskPushNotificationConfig(
            id="cfg-1", task_id=task_id, url="https://example.test/hook", token=token
        )
        configs.append(config)
    return TaskRecord(task, ALICE, configs, {"cfg-1": "0.3"} if token else {})


async def test_stores_starting_at_once_create_the_schema_once(
    postgres: LocalPostgres, tmp_path: Path
) -> None:
    url = await fresh_database(postgres)
    stores = [PostgresTaskStore(url, box=SecretBox(tmp_path), pool_size=1) for _ in range(6)]
    try:
        await asyncio.gather(*(s.start() for s in stores))
        conn = await asyncpg.connect(url)
        try:
            rows = await conn.fetch("SELECT version FROM a2a_schema")
        finally:
            await conn.close()
        assert [r[0] for r in rows] == list(range(1, SCHEMA_VERSION + 1))
        await stores[0].save(record("t-1"))
        loaded = await stores[5].load(ALICE, "t-1")
        assert loaded is not None and loaded.task.status.state == pb.TASK_STATE_COMPLETED
    finally:
        for store in stores:
            await store.aclose()


async def test_a_newer_schema_is_refused(postgres: LocalPostgres, tmp_path: Path) -> None:
    url = await fresh_database(postgres)
    conn = await asyncpg.connect(url)
    try:
        await conn.execute("CREATE TABLE a2a_schema(version integer PRIMARY KEY)")
        await conn.execute("INSERT INTO a2a_schema VALUES (99)")
    finally:
        await conn.close()
    store = PostgresTaskStore(url, box=SecretBox(tmp_path))
    with pytest.raises(StoreUnavailable, match="version 99, newer"):
        await store.start()


async def test_push_secrets_are_sealed_in_the_rows(postgres: LocalPostgres, tmp_path: Path) -> None:
    url = await fresh_database(postgres)
    store = PostgresTaskStore(url, box=SecretBox(tmp_path))
    try:
        await store.save(record("t-2", token=TOKEN))
        conn = await asyncpg.connect(url)
        try:
            raw = await conn.fetchval("SELECT config FROM a2a_push_configs WHERE task_id = 't-2'")
            version = await conn.fetchval("SELECT version FROM a2a_push_configs")
        finally:
            await conn.close()
        assert TOKEN.encode() not in raw
        assert pb.TaskPushNotificationConfig.FromString(raw).token.startswith(SEALED_PREFIX)
        assert version == "0.3"
        loaded = await store.load(ALICE, "t-2")
        assert loaded is not None
        assert [c.token for c in loaded.push_configs] == [TOKEN]
        assert loaded.push_versions == {"cfg-1": "0.3"}
        # Another caller does not see it. Configs are rows of their own: a later save
        # leaves them (and answers them into the record); only a removal drops one.
        assert await store.load(Caller(name="bob", workspace="/ws/one"), "t-2") is None
        bare = record("t-2")
        await store.save(bare)
        assert [c.token for c in bare.push_configs] == [TOKEN]
        assert bare.push_versions == {"cfg-1": "0.3"}
        loaded = await store.load(ALICE, "t-2")
        assert loaded is not None and [c.id for c in loaded.push_configs] == ["cfg-1"]
        await store.remove_push_config(ALICE, "t-2", "cfg-1")
        loaded = await store.load(ALICE, "t-2")
        assert loaded is not None and loaded.push_configs == []
        # A key that no longer opens the value drops the config, naming no secret.
        await store.save(record("t-3", token=TOKEN))
        other = PostgresTaskStore(url, box=SecretBox(tmp_path / "elsewhere"))
        try:
            reloaded = await other.load(ALICE, "t-3")
        finally:
            await other.aclose()
        assert reloaded is not None and reloaded.push_configs == []
    finally:
        await store.aclose()


async def test_a_retry_key_written_by_one_store_is_found_by_another(
    postgres: LocalPostgres, tmp_path: Path
) -> None:
    url = await fresh_database(postgres)
    a = PostgresTaskStore(url, box=SecretBox(tmp_path))
    b = PostgresTaskStore(url, box=SecretBox(tmp_path))
    try:
        a.remember_message(ALICE, "m-1", "fp", "t-4")
        assert a.find_message(ALICE, "m-1", "fp") == "t-4"
        assert await b.lookup_message(ALICE, "m-1", "fp") is None  # written with the task
        await a.save(record("t-4"))
        assert await b.lookup_message(ALICE, "m-1", "fp") == "t-4"
        assert await b.lookup_message(ALICE, "m-1", "other") is None
        # The first task a key named keeps it (unique across processes).
        b.remember_message(ALICE, "m-1", "fp", "t-5")
        await b.save(record("t-5"))
        fresh = PostgresTaskStore(url, box=SecretBox(tmp_path))
        try:
            assert await fresh.lookup_message(ALICE, "m-1", "fp") == "t-4"
        finally:
            await fresh.aclose()
    finally:
        await a.aclose()
        await b.aclose()


async def test_an_unreachable_database_is_an_error_without_the_url(tmp_path: Path) -> None:
    url = f"postgresql://a2a:pw-9d8c7b6a5f@127.0.0.1:{free_port()}/postgres"
    store = PostgresTaskStore(url, box=SecretBox(tmp_path), acquire_timeout_s=5)
    with pytest.raises(StoreUnavailable) as caught:
        await store.start()
    assert "pw-9d8c7b6a5f" not in str(caught.value)
    assert "postgresql://" not in str(caught.value)
    assert "pw-9d8c7b6a5f" not in repr(store)


async def test_a_malformed_url_is_an_error_without_the_url(tmp_path: Path) -> None:
    """asyncpg raises a plain ValueError for a port that is not a number."""
    url = "postgresql://a2a:pw-4e3d2c1b0a@127.0.0.1:notaport/postgres"
    store = PostgresTaskStore(url, box=SecretBox(tmp_path), acquire_timeout_s=5)
    with pytest.raises(StoreUnavailable) as caught:
        await store.start()
    assert "pw-4e3d2c1b0a" not in str(caught.value)
    assert "postgresql://" not in str(caught.value)


@pytest.mark.parametrize(
    ("password", "parts"),
    [("pw-3a2b/c1d0e9", ["pw-3a2b", "c1d0e9"]), ("pw-8f7e?d6c5b4", ["pw-8f7e", "d6c5b4"])],
)
async def test_a_password_the_url_cannot_hold_is_not_echoed(
    tmp_path: Path, password: str, parts: list[str]
) -> None:
    """A ``/`` or ``?`` left unencoded in the password ends the URL's host part there:
    asyncpg's error then quotes a piece of the password as the port or a query field,
    which the log redaction (of the whole password) does not catch."""
    url = f"postgresql://a2a:{password}@127.0.0.1:{free_port()}/postgres"
    store = PostgresTaskStore(url, box=SecretBox(tmp_path), acquire_timeout_s=5)
    with pytest.raises(StoreUnavailable) as caught:
        await store.start()
    for part in parts:
        assert part not in str(caught.value)
    assert "percent-encoded" in str(caught.value)


async def test_a_run_lease_held_elsewhere_until_it_expires(
    postgres: LocalPostgres, tmp_path: Path
) -> None:
    url = await fresh_database(postgres)
    clock_a, clock_b = Clock(), Clock()
    a = PostgresTaskStore(url, box=SecretBox(tmp_path), lease_s=10, clock=clock_a)
    b = PostgresTaskStore(url, box=SecretBox(tmp_path), lease_s=10, clock=clock_b)
    try:
        working = record("t-6")
        working.task.status.state = pb.TASK_STATE_WORKING
        await a.save(working)
        mine = await a.load(ALICE, "t-6")
        assert mine is not None and not mine.held_elsewhere
        theirs = await b.load(ALICE, "t-6")
        assert theirs is not None and theirs.held_elsewhere
        # A renews before the lease ends: still held after the first lease's end.
        clock_a.now += 9 * 10**9
        await a.renew_leases()
        clock_b.now += 15 * 10**9
        theirs = await b.load(ALICE, "t-6")
        assert theirs is not None and theirs.held_elsewhere
        # B saving the held task keeps A's lease.
        await b.save(theirs)
        clock_b.now += 3 * 10**9
        theirs = await b.load(ALICE, "t-6")
        assert theirs is not None and theirs.held_elsewhere
        # No renewal: expired.
        clock_b.now += 10 * 10**9
        theirs = await b.load(ALICE, "t-6")
        assert theirs is not None and not theirs.held_elsewhere
        # A settled task holds no lease.
        clock_b.now -= 20 * 10**9
        await a.save(record("t-6"))
        settled = await b.load(ALICE, "t-6")
        assert settled is not None and not settled.held_elsewhere
    finally:
        await a.aclose()
        await b.aclose()


async def test_saves_of_one_task_land_in_call_order(
    postgres: LocalPostgres, tmp_path: Path
) -> None:
    """A save started while an earlier save of the task is still on its way (the
    flusher's background save of WORKING, then the run's FAILED) lands after it, even
    when the earlier one waits for a new pooled connection and the later one finds an
    open one (here: freed by a read meanwhile)."""
    url = await fresh_database(postgres)
    store = PostgresTaskStore(url, box=SecretBox(tmp_path), pool_size=4)
    try:
        for round_ in range(8):
            await store.start()  # one open connection
            task_id = f"t-order-{round_}"
            live = record(task_id)
            live.task.status.state = pb.TASK_STATE_WORKING
            await store.save(live)
            reading = asyncio.ensure_future(store.load(ALICE, task_id))  # holds it
            working = asyncio.ensure_future(store.save(live))  # opens a new one
            await reading
            live.task.status.state = pb.TASK_STATE_FAILED
            await store.save(live)  # finds the read's connection free
            await working
            loaded = await store.load(ALICE, task_id)
            assert loaded is not None
            assert pb.TaskState.Name(loaded.task.status.state) == "TASK_STATE_FAILED", round_
            await store.aclose()  # the next round starts with one connection again
    finally:
        await store.aclose()


async def test_a_stored_final_state_is_not_replaced(
    postgres: LocalPostgres, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """B failed A's run after its lease ran out (A stalled); A's run then settles:
    the first final state stays, on both, and its retry keys still land."""
    url = await fresh_database(postgres)
    a = PostgresTaskStore(url, box=SecretBox(tmp_path))
    b = PostgresTaskStore(url, box=SecretBox(tmp_path))
    try:
        live = record("t-final")
        live.task.status.state = pb.TASK_STATE_WORKING
        await a.save(live)
        recovered = await b.load(ALICE, "t-final")
        assert recovered is not None
        recovered.task.status.state = pb.TASK_STATE_FAILED
        await b.save(recovered)
        a.remember_message(ALICE, "m-late", "fp", "t-final")
        live.task.status.state = pb.TASK_STATE_COMPLETED
        await a.save(live)
        for store in (a, b):
            loaded = await store.load(ALICE, "t-final")
            assert loaded is not None and loaded.task.status.state == pb.TASK_STATE_FAILED
        assert await b.lookup_message(ALICE, "m-late", "fp") == "t-final"
        assert "t-final is stored TASK_STATE_FAILED, which is final" in caplog.text
        # The same final state saved again (a repeated write) is no news.
        caplog.clear()
        await b.save(recovered)
        assert "which is final" not in caplog.text
    finally:
        await a.aclose()
        await b.aclose()


class Skewed:
    """A process's clock ``ahead_ns`` ahead of the real one (negative: behind)."""

    def __init__(self, ahead_s: float) -> None:
        self.ahead_ns = int(ahead_s * 1e9)

    def __call__(self) -> int:
        return time.time_ns() + self.ahead_ns


@pytest.mark.parametrize("runner_behind_s", [0, 120])
async def test_events_of_a_task_settled_a_moment_ago_stay_whatever_the_clocks_say(
    postgres: LocalPostgres, tmp_path: Path, runner_behind_s: int
) -> None:
    """Events of a task settled a moment ago stay for ``event_keep_s`` by the database's
    clock, whatever the clocks of the processes say: the pruning process B's is 10
    minutes ahead, and the runner A's stamps its status times 2 minutes behind (more
    than ``event_keep_s``: its settled task looked settled long ago); once
    ``event_keep_s`` has passed, they go."""
    url = await fresh_database(postgres)
    a = PostgresTaskStore(url, box=SecretBox(tmp_path))
    clock_b = Skewed(600)
    b = PostgresTaskStore(url, box=SecretBox(tmp_path), clock=clock_b)
    conn = await asyncpg.connect(url)
    try:
        await a.start()
        await b.start()
        settled, waiting = record("t-settled"), record("t-waiting")
        waiting.task.status.state = pb.TASK_STATE_INPUT_REQUIRED
        for saved in (settled, waiting):  # as A's clock stamps them
            saved.task.status.timestamp.FromNanoseconds(time.time_ns() - runner_behind_s * 10**9)
            await a.save(saved)
        await conn.execute(
            "INSERT INTO a2a_events(task_id, seq, event) VALUES ('t-settled', 1, ''),"
            " ('t-waiting', 1, '')"
        )
        await b.prune_events()
        kept = await conn.fetch("SELECT task_id FROM a2a_events ORDER BY task_id")
        clock_b.ahead_ns += int((b.event_keep_s + 1) * 1e9)  # by B's clock, it is later
        await b.prune_events()
        left = await conn.fetch("SELECT task_id FROM a2a_events ORDER BY task_id")
    finally:
        await conn.close()
        await a.aclose()
        await b.aclose()
    assert [r[0] for r in kept] == ["t-settled", "t-waiting"]
    assert [r[0] for r in left] == ["t-waiting"]


async def test_events_of_a_task_settled_before_the_settle_times_are_still_pruned(
    postgres: LocalPostgres, tmp_path: Path
) -> None:
    """A task settled in a database of schema 8 (no settle time on the database's
    clock: its status time stands in) has its events pruned once the gateway migrated
    the schema, not kept for ever."""
    url = await fresh_database(postgres)
    conn = await asyncpg.connect(url)
    store = PostgresTaskStore(url, box=SecretBox(tmp_path))
    try:
        async with conn.transaction():  # what a gateway of schema 8 left
            await conn.execute("CREATE TABLE a2a_schema(version integer PRIMARY KEY)")
            for version in range(1, 9):
                await conn.execute(MIGRATIONS[version - 1])
                await conn.execute("INSERT INTO a2a_schema VALUES ($1)", version)
        old = record("t-old").task
        await conn.execute(
            "INSERT INTO a2a_tasks(task_id, workspace, caller, context_id, state, ts, task)"
            " VALUES ('t-old', $1, $2, 'ctx-1', $3, $4, $5)",
            ALICE.workspace,
            ALICE.name,
            pb.TASK_STATE_COMPLETED,
            time.time_ns() - 120 * 10**9,
            old.SerializeToString(),
        )
        await conn.execute("INSERT INTO a2a_events(task_id, seq, event) VALUES ('t-old', 1, '')")
        await store.start()
        await store.prune_events()
        left = await conn.fetch("SELECT task_id FROM a2a_events")
        versions = await conn.fetch("SELECT version FROM a2a_schema ORDER BY version")
    finally:
        await conn.close()
        await store.aclose()
    assert [r[0] for r in versions] == list(range(1, SCHEMA_VERSION + 1))
    assert left == []


async def test_a_final_state_written_again_is_not_taken_for_another_process(
    postgres: LocalPostgres, tmp_path: Path
) -> None:
    """A save of the final state this process already stored (a write tried again after
    an error that came after its commit) is not refused as settled elsewhere, which
    would keep its webhooks from hearing of it; a different final state stored
    meanwhile is."""
    url = await fresh_database(postgres)
    a = PostgresTaskStore(url, box=SecretBox(tmp_path))
    b = PostgresTaskStore(url, box=SecretBox(tmp_path))
    try:
        live = record("t-again")
        live.task.status.state = pb.TASK_STATE_WORKING
        await a.save(live)
        live.task.status.state = pb.TASK_STATE_COMPLETED
        await a.save(live)
        await a.save(live)
        assert not live.settled_elsewhere
        recovered = await b.load(ALICE, "t-again")
        assert recovered is not None
        recovered.task.status.timestamp.FromNanoseconds(1_700_000_001_000_000_000)
        await b.save(recovered)  # the same state, another status
        assert recovered.settled_elsewhere
    finally:
        await a.aclose()
        await b.aclose()


@pytest.mark.parametrize(("pool_size", "kept_most"), [(1, 0), (4, 1), (10, 4)])
async def test_the_group_commits_keep_a_share_of_the_pool(
    postgres: LocalPostgres, tmp_path: Path, pool_size: int, kept_most: int
) -> None:
    """The saves' and lookups' statements keep pooled connections between them (no
    acquire and release each), never more than their share of the pool: the other
    calls (a load here, with one more statement on its way) still get a connection."""
    url = await fresh_database(postgres)
    store = PostgresTaskStore(url, box=SecretBox(tmp_path), pool_size=pool_size)
    try:

        async def send(n: int) -> None:
            found, claimed = await store.lookup_or_claim(ALICE, f"m-{n}", "fp", f"c-{n}", f"t-{n}")
            assert (found, claimed) == (None, True)
            store.remember_message(ALICE, f"m-{n}", "fp", f"t-{n}")
            await store.save(record(f"t-{n}"))

        await asyncio.gather(*(send(n) for n in range(40)))
        assert store._pool is not None
        taken = store._pool.get_size() - store._pool.get_idle_size()
        assert taken == len(store._kept) <= kept_most
        assert store.store_gauges()["pool_in_use"] == 0  # kept, waiting: not in use
        reading = asyncio.ensure_future(store.load(ALICE, "t-0"))
        await send(40)
        loaded = await reading
        assert loaded is not None and loaded.task.id == "t-0"
        assert await store.lookup_message(ALICE, "m-40", "fp") == "t-40"
    finally:
        await store.aclose()


async def test_a_kept_connection_the_server_closed_is_not_an_outage(
    postgres: LocalPostgres, tmp_path: Path
) -> None:
    """A connection kept between saves that the server ended meanwhile (a restart, an
    administrator) is given back and another taken: the next save is stored, not
    answered UNAVAILABLE."""
    url = await fresh_database(postgres)
    store = PostgresTaskStore(url, box=SecretBox(tmp_path))
    admin = await asyncpg.connect(url)
    try:
        await store.save(record("t-kept-1"))
        (kept,) = store._kept.waiting
        pool = store._pool
        assert pool is not None and pool.get_size() - pool.get_idle_size() == 1
        listener = store._listener
        assert listener is not None
        await admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
            " WHERE datname = current_database() AND pid <> pg_backend_pid() AND pid <> $1",
            listener.get_server_pid(),
        )
        async with asyncio.timeout(10):  # the client sees the connection end
            while pool.get_size() - pool.get_idle_size():  # noqa: ASYNC110 - given back by asyncpg
                await asyncio.sleep(0.01)
        assert store._kept.waiting == [kept]
        await store.save(record("t-kept-2"))
        assert store.outage.down is False
        loaded = await store.load(ALICE, "t-kept-2")
        assert loaded is not None and loaded.task.status.state == pb.TASK_STATE_COMPLETED
    finally:
        await admin.close()
        await store.aclose()


async def test_a_kept_connection_unused_for_a_minute_is_closed_not_used(
    postgres: LocalPostgres, tmp_path: Path
) -> None:
    """A connection the saves kept but nobody used for KEPT_IDLE_S (one a firewall may
    have dropped without a word) is closed, and the next save takes another."""
    url = await fresh_database(postgres)
    clock = Clock()
    store = PostgresTaskStore(url, box=SecretBox(tmp_path), clock=clock)
    try:
        await store.save(record("t-idle-1"))
        ((_, first, _),) = store._kept.waiting
        first_pid = first.get_server_pid()
        clock.now += 30 * 1_000_000_000  # used again within the minute: the same one
        await store.save(record("t-idle-2"))
        ((_, again, _),) = store._kept.waiting
        assert again.get_server_pid() == first_pid
        clock.now += 61 * 1_000_000_000
        await store.save(record("t-idle-3"))
        ((_, fresh, _),) = store._kept.waiting
        assert fresh.get_server_pid() != first_pid
        loaded = await store.load(ALICE, "t-idle-3")
        assert loaded is not None and loaded.task.status.state == pb.TASK_STATE_COMPLETED
    finally:
        await store.aclose()
