"""The throwaway PostgreSQL of tests and ``make pg`` (server/pg_local.py)."""

from __future__ import annotations

import os

import asyncpg
import pytest

from a2a_gateway.server.pg_local import LocalPostgres


async def test_the_session_cluster_takes_its_password_on_tcp(postgres: LocalPostgres) -> None:
    conn = await asyncpg.connect(postgres.url)
    try:
        assert await conn.fetchval("SELECT current_user") == "a2a"
        assert await conn.fetchval("SHOW listen_addresses") == "127.0.0.1"
    finally:
        await conn.close()
    wrong = postgres.url.replace(postgres.password, "wrong-password-1")
    with pytest.raises(asyncpg.InvalidPasswordError):
        await asyncpg.connect(wrong)


def test_stop_ends_the_server_by_its_pid_and_removes_its_folder() -> None:
    pg = LocalPostgres()
    pg.start()
    pid, folder = pg.pid, pg.folder
    assert pid is not None and folder is not None
    assert (folder / "data" / "postmaster.pid").read_text().splitlines()[0] == str(pid)
    if os.geteuid() == 0:  # initdb refuses root: the cluster is an unprivileged user's
        assert (folder / "data").stat().st_uid != 0
    pg.stop()
    assert not folder.exists()
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    pg.stop()  # idempotent
