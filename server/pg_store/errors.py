"""What a call to the task database raises when the database is unreachable, slow or
refuses."""

from __future__ import annotations

import asyncpg

from ..store_outage import StoreOutageError

#: What a database call raises when the database is unreachable, slow or refuses
#: (a call that meets an outage raises StoreOutageError).
DB_ERRORS = (
    OSError,
    asyncpg.PostgresError,
    asyncpg.InterfaceError,
    TimeoutError,
    StoreOutageError,
)

__all__ = ["DB_ERRORS"]
