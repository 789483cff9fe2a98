"""The PostgreSQL store's operations: a start-up that fails part-way leaves no
connection behind and is StoreUnavailable (never a crash)."""

from __future__ import annotations

import asyncio
import secrets
from pathlib import Path

import asyncpg
import pytest

from a2a_gateway.server.pg_local import LocalPostgres
from a2a_gateway.server.pg_store import MIGRATION_LOCK, PostgresTaskStore, StoreUnavailable
from a2a_gateway.server.secret_box import SecretBox

from ..conftest import use_secret
from ..pg_support import fresh_database

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
        await store.start()  # the lock is free now: a later start works
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
