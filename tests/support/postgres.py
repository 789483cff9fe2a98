"""The suite's PostgreSQL: one throwaway cluster per test session (``server.pg_local``).

Tests that need a database take the ``postgres`` fixture (a started
:class:`~a2a_gateway.server.pg_local.LocalPostgres`) and make their own database in it
with :func:`fresh_database`, so they never see each other's rows. The cluster's
password is registered with the suite's secret scan. Never skipped: ``make test``
installs the server binaries where they are missing, and a cluster that cannot start
fails the tests that need it.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import asyncpg
import pytest

from a2a_gateway.server.pg_local import LocalPostgres

from .secrets import use_secret

_databases = itertools.count()


@pytest.fixture(scope="session")
def postgres() -> Iterator[LocalPostgres]:
    with LocalPostgres() as pg:
        use_secret(pg.password)
        yield pg


class Clock:
    """An injectable ``time.time_ns`` for run leases: tests move ``now`` by hand."""

    def __init__(self) -> None:
        self.now = 1_800_000_000_000_000_000

    def __call__(self) -> int:
        return self.now


async def fresh_database(pg: LocalPostgres) -> str:
    """The URL of a new, empty database of ``pg``."""
    name = f"t{next(_databases)}"
    conn = await asyncpg.connect(pg.url)
    try:
        await conn.execute(f"DROP DATABASE IF EXISTS {name}")
        await conn.execute(f"CREATE DATABASE {name}")
    finally:
        await conn.close()
    return pg.url.rsplit("/", 1)[0] + "/" + name
