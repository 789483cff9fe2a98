"""What a blocking send costs PostgreSQL, counted in the server's own log
(``log_statement = all`` for a database of the test's own): the hot path's statements
(docs/performance.md, "PostgreSQL blocking sends"), and what a send leaves behind."""

from __future__ import annotations

import re
from pathlib import Path

import asyncpg

from a2a_gateway.agent.faux import FauxAgent
from a2a_gateway.server.engine import TaskEngine
from a2a_gateway.server.pg_local import LocalPostgres
from a2a_gateway.server.pg_store import PostgresTaskStore
from a2a_gateway.server.secret_box import SecretBox
from lf.a2a.v1 import a2a_pb2 as pb
from tests.support.postgres import fresh_database

from .engine.engine_helpers import send, state_name

SENDS = 5
#: A statement as PostgreSQL logs it: ``<time> [<backend pid>] LOG:  execute <name>: SQL``
#: (the extended protocol: a prepared statement) or ``... LOG:  statement: SQL``.
_LOGGED = re.compile(r"\[(\d+)\] LOG:  (execute [^:]*|statement): (.*)")


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
        assert postgres.folder is not None
        log = postgres.folder / "server.log"
        offset = log.stat().st_size
        tasks = [await send(engine, "hi") for _ in range(SENDS)]
        assert [state_name(t) for t in tasks] == ["COMPLETED"] * SENDS
        pids = {
            str(row[0])
            for row in await admin.fetch(
                "SELECT pid FROM pg_stat_activity WHERE datname = $1", database
            )
        }
        with log.open("rb") as text:
            text.seek(offset)
            lines: list[str] = []
            for line in text.read().decode(errors="replace").splitlines():
                if lines and line.startswith("\t"):  # a statement's next line
                    lines[-1] += " " + line
                else:
                    lines.append(line)
        # The store's statements (asyncpg's own, say the type introspection of a new
        # connection, name no a2a_ table).
        statements = [
            (m[2], m[3])
            for line in lines
            if (m := _LOGGED.search(line)) and m[1] in pids and "a2a_" in m[3]
        ]
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
