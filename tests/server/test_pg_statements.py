"""What a blocking send costs PostgreSQL, counted in the server's own log
(``log_statement = all`` for a database of the test's own): the hot path's statements
(docs/performance.md, "PostgreSQL blocking sends"), and what a send leaves behind."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import asyncpg

from a2a_gateway.agent.faux import FauxAgent
from a2a_gateway.protocol.context import Caller
from a2a_gateway.server.engine import TaskEngine
from a2a_gateway.server.pg_local import LocalPostgres
from a2a_gateway.server.pg_store import PostgresTaskStore
from a2a_gateway.server.pg_store.group_commit import GroupCommit
from a2a_gateway.server.secret_box import SecretBox
from a2a_gateway.server.task_store import TaskRecord
from lf.a2a.v1 import a2a_pb2 as pb
from tests.support.postgres import fresh_database

from .engine.engine_helpers import send, state_name

SENDS = 5
ALICE = Caller(name="alice", workspace="/ws/one")
#: A statement as PostgreSQL logs it: ``<time> [<backend pid>] LOG:  execute <name>: SQL``
#: (the extended protocol: a prepared statement) or ``... LOG:  statement: SQL``.
_LOGGED = re.compile(r"\[(\d+)\] LOG:  (execute [^:]*|statement): (.*)")


def _log_end(postgres: LocalPostgres) -> tuple[Path, int]:
    assert postgres.folder is not None
    log = postgres.folder / "server.log"
    return log, log.stat().st_size


async def _backends(admin: asyncpg.Connection, database: str) -> set[str]:
    rows = await admin.fetch("SELECT pid FROM pg_stat_activity WHERE datname = $1", database)
    return {str(row[0]) for row in rows}


def _logged(log: Path, offset: int, pids: set[str]) -> list[tuple[str, str]]:
    """The store's statements logged since ``offset`` by those backends, (how, SQL)
    (asyncpg's own, say the type introspection of a new connection, name no a2a_
    table)."""
    with log.open("rb") as text:
        text.seek(offset)
        lines: list[str] = []
        for line in text.read().decode(errors="replace").splitlines():
            if lines and line.startswith("\t"):  # a statement's next line
                lines[-1] += " " + line
            else:
                lines.append(line)
    return [
        (m[2], m[3])
        for line in lines
        if (m := _LOGGED.search(line)) and m[1] in pids and "a2a_" in m[3]
    ]


async def test_a_blocking_send_is_two_statements_and_logs_no_event(
    postgres: LocalPostgres, tmp_path: Path
) -> None:
    """The retry lookup with the context's claim, then the one save of the finished task
    (row, retry key, the claim's release): two statements, prepared once per connection.
    A run nobody could see (no stream, not stored while it ran) logs no stream event."""
    url = await fresh_database(postgres)
    database = url.rsplit("/", 1)[1]
    admin = await asyncpg.connect(postgres.url)
    # Lease renewals (a third of the lease) and event pruning stay out of the count.
    engine = TaskEngine(FauxAgent(), PostgresTaskStore(url, box=SecretBox(tmp_path), lease_s=600))
    try:
        await admin.execute(f"ALTER DATABASE {database} SET log_statement = 'all'")
        await send(engine, "hi")  # the pool's connection opened, its statements prepared
        log, offset = _log_end(postgres)
        tasks = [await send(engine, "hi") for _ in range(SENDS)]
        assert [state_name(t) for t in tasks] == ["COMPLETED"] * SENDS
        pids = await _backends(admin, database)
        statements = _logged(log, offset, pids)
        assert len(statements) == 2 * SENDS, statements
        # Prepared once and executed by name each time (asyncpg's statement cache).
        names = {how for how, _ in statements}
        assert len(names) == 2 and all(n.startswith("execute __asyncpg_stmt") for n in names)
        db = await asyncpg.connect(url)
        try:
            assert await db.fetchval("SELECT count(*) FROM a2a_events") == 0
            assert await db.fetchval("SELECT count(*) FROM a2a_contexts") == 0  # released
            stored = await db.fetch("SELECT state FROM a2a_tasks")
            assert [r[0] for r in stored] == [pb.TASK_STATE_COMPLETED] * (SENDS + 1)
            assert await db.fetchval("SELECT count(*) FROM a2a_retry_keys") == SENDS + 1
        finally:
            await db.close()
    finally:
        await engine.aclose()
        await admin.close()


def _completed(task_id: str, context_id: str, ts_ns: int = 1_700_000_000_000_000_000) -> TaskRecord:
    task = pb.Task(id=task_id, context_id=context_id)
    task.status.state = pb.TASK_STATE_COMPLETED
    task.status.timestamp.FromNanoseconds(ts_ns)
    return TaskRecord(task, ALICE, [], {})


async def test_saves_waiting_at_once_are_one_statement_each_answered_its_own_row(
    postgres: LocalPostgres, tmp_path: Path
) -> None:
    """Group commit: saves of different tasks made at once go in one statement, each
    with its own push configs, retry keys and claim release, and each gets its own
    answer (here a save of a task stored settled meanwhile is not stored, and only its
    record says so)."""
    url = await fresh_database(postgres)
    database = url.rsplit("/", 1)[1]
    admin = await asyncpg.connect(postgres.url)
    store = PostgresTaskStore(url, box=SecretBox(tmp_path), lease_s=600)
    try:
        await store.start()
        await store.save(_completed("t-done", "ctx-done"))  # settled before the batch
        late = _completed("t-done", "ctx-done", ts_ns=1_700_000_000_000_000_001)
        late.task.status.state = pb.TASK_STATE_FAILED
        records = [_completed(f"t-{n}", f"ctx-{n}") for n in range(6)]
        for n in (1, 4):  # a task created with a push config
            records[n].push_configs.append(
                pb.TaskPushNotificationConfig(
                    id=f"cfg-{n}", task_id=f"t-{n}", url="https://example.test/hook"
                )
            )
            records[n].push_versions[f"cfg-{n}"] = "0.3"
        for n in range(6):  # each run claimed its context; the settling save releases it
            assert await store.claim_context(ALICE, f"ctx-{n}", f"t-{n}")
        for n in (0, 2, 3):
            store.remember_message(ALICE, f"m-{n}", "fp", f"t-{n}")
        await admin.execute(f"ALTER DATABASE {database} SET log_statement = 'all'")
        await store.aclose()  # the pool again: its backends log the statements
        await store.start()
        log, offset = _log_end(postgres)
        await asyncio.gather(*(store.save(r) for r in [*records, late]))
        saves = [sql for _, sql in _logged(log, offset, await _backends(admin, database))]
        # The first goes at once, its own statement; the six that came meanwhile go
        # together in one.
        assert len(saves) == 2 and all("INSERT INTO a2a_tasks" in sql for sql in saves), saves
        assert sum("WITH s AS" in sql for sql in saves) == 1, saves  # the grouped one
        assert late.settled_elsewhere
        assert not any(r.settled_elsewhere for r in records)
        assert late.loaded_as == (pb.TASK_STATE_FAILED, 1_700_000_000_000_000_001)
        db = await asyncpg.connect(url)
        try:
            states = {r[0]: r[1] for r in await db.fetch("SELECT task_id, state FROM a2a_tasks")}
            assert states == {
                **{f"t-{n}": pb.TASK_STATE_COMPLETED for n in range(6)},
                "t-done": pb.TASK_STATE_COMPLETED,  # not replaced: a settled state is final
            }
            configs = await db.fetch(
                "SELECT task_id, config_id, version, position FROM a2a_push_configs"
                " ORDER BY task_id"
            )
            assert [tuple(r) for r in configs] == [
                ("t-1", "cfg-1", "0.3", 0),
                ("t-4", "cfg-4", "0.3", 0),
            ]
            keys = await db.fetch("SELECT message_id, task_id FROM a2a_retry_keys ORDER BY 1")
            assert [tuple(r) for r in keys] == [("m-0", "t-0"), ("m-2", "t-2"), ("m-3", "t-3")]
            assert await db.fetchval("SELECT count(*) FROM a2a_contexts") == 0  # released
        finally:
            await db.close()
        loaded = await store.load(ALICE, "t-4")
        assert loaded is not None and [c.id for c in loaded.push_configs] == ["cfg-4"]
    finally:
        await store.aclose()
        await admin.close()


async def test_lookups_waiting_at_once_are_one_statement_and_one_context_is_claimed_once(
    postgres: LocalPostgres, tmp_path: Path
) -> None:
    """New messages' retry lookups with their claims, made at once, go in one statement;
    a second message for a context already in it waits for the next statement, where
    its claim is refused (one run per context); a key stored elsewhere answers its
    task and claims nothing."""
    url = await fresh_database(postgres)
    database = url.rsplit("/", 1)[1]
    admin = await asyncpg.connect(postgres.url)
    other = PostgresTaskStore(url, box=SecretBox(tmp_path), lease_s=600)
    store = PostgresTaskStore(url, box=SecretBox(tmp_path), lease_s=600)
    try:
        other.remember_message(ALICE, "m-old", "fp", "t-old")
        await other.save(_completed("t-old", "ctx-old"))
        await admin.execute(f"ALTER DATABASE {database} SET log_statement = 'all'")
        await store.start()
        log, offset = _log_end(postgres)
        asked = [("m-old", "ctx-a", "t-a"), *((f"m-{n}", f"ctx-{n}", f"t-{n}") for n in range(5))]
        asked.append(("m-again", "ctx-2", "t-again"))  # ctx-2 twice
        answers = await asyncio.gather(
            *(store.lookup_or_claim(ALICE, m, "fp", c, t) for m, c, t in asked)
        )
        lookups = [sql for _, sql in _logged(log, offset, await _backends(admin, database))]
        # The first at once, its own statement; then the five that came meanwhile in
        # one; "m-again" (ctx-2 again) in the next, alone.
        assert len(lookups) == 3 and all("a2a_retry_keys" in sql for sql in lookups), lookups
        assert sum("WITH s AS" in sql for sql in lookups) == 1, lookups  # the grouped one
        assert answers[:2] == [("t-old", False), (None, True)]
        assert answers[2:6:2] == [(None, True)] * 2 and answers[5] == (None, True)
        # One of the two messages for ctx-2 claims it, the other is refused.
        assert sorted([answers[3], answers[6]]) == [(None, False), (None, True)]
        db = await asyncpg.connect(url)
        try:
            rows = await db.fetch("SELECT context_id, task_id FROM a2a_contexts")
            claims = {r[0]: r[1] for r in rows}
            ctx2 = "t-2" if answers[3] == (None, True) else "t-again"
            assert claims == {**{f"ctx-{n}": f"t-{n}" for n in range(5)}, "ctx-2": ctx2}
        finally:
            await db.close()
    finally:
        await store.aclose()
        await other.aclose()
        await admin.close()


async def test_a_grouped_statement_refused_is_tried_call_by_call(postgres: LocalPostgres) -> None:
    """A statement of a group refused for one call's sake (not an outage) is tried again
    for each call alone: only that call fails; the others get their rows."""
    conn = await asyncpg.connect(postgres.url)

    async def divide(divisors: list[int]) -> list[asyncpg.Record]:
        return await conn.fetch(
            "SELECT 60 / d AS q FROM unnest($1::int[]) WITH ORDINALITY AS s(d, n) ORDER BY n",
            divisors,
        )

    async def divide_one(divisor: int) -> asyncpg.Record:
        return (await divide([divisor]))[0]

    group: GroupCommit[int] = GroupCommit("divisions", divide, divide_one, lambda d: d, 1, 100)
    try:
        answers = await asyncio.gather(*(group.call(d) for d in (1, 0, 5)), return_exceptions=True)
        assert answers[0][0] == 60 and answers[2][0] == 12  # type: ignore[index]
        assert isinstance(answers[1], asyncpg.DivisionByZeroError)
        # The first alone at once; the two that came meanwhile together (refused),
        # then each alone.
        assert (group.statements, group.calls) == (4, 5)
    finally:
        await group.aclose(5.0)
        await conn.close()
