"""Pooled connections the group commits' statements keep between statements.

Taking a connection from asyncpg's pool and giving it back costs about as much of
this process as the statement's round trip (30 us against 37, measured: two timers,
a task and the pool's queue), so the saves' and lookups' statements keep theirs. At
most a share of the pool is kept (the other calls have the rest); at most
``SAVES_IN_FLIGHT`` statements of each group run at once, so no more are ever out.
One that fails in any way (the database away, a statement cancelled or refused) goes
back to the pool, which resets or drops it, as does one the server closed while it
was kept (a restart); one unused for :data:`KEPT_IDLE_S` is closed, not used: the
next is taken from the pool, within the acquire timeout.
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable
from typing import Any

import asyncpg
from asyncpg.pool import PoolConnectionProxy

from .errors import DB_ERRORS

#: Of the pool's connections, the group commits' statements keep up to this share
#: between statements, leaving the rest to the others.
KEPT_OF_POOL = 2
#: A kept connection unused this long is closed rather than used: an idle connection
#: that a firewall or NAT dropped silently would hold the next statement until its
#: timeout (the pool closes its own idle connections after 300 s).
KEPT_IDLE_S = 60.0


class KeptConnections:
    """The kept connections of one store: ``ready`` opens (or gives) the store's pool,
    ``current`` is the pool now (a connection of an earlier pool is given back, not
    kept), ``ticks`` the store's clock (nanoseconds)."""

    __slots__ = ("_acquire_timeout_s", "_current", "_kept", "_out", "_ready", "_ticks", "most")

    def __init__(
        self,
        pool_size: int,
        acquire_timeout_s: float,
        ready: Callable[[], Awaitable[asyncpg.Pool]],
        current: Callable[[], asyncpg.Pool | None],
        ticks: Callable[[], int],
    ) -> None:
        # (pool, connection, last used in ticks), most recently used last
        self._kept: list[tuple[asyncpg.Pool, PoolConnectionProxy, int]] = []
        self._out = 0  # kept or running a statement
        self.most = max(0, (pool_size - 2) // KEPT_OF_POOL)
        self._acquire_timeout_s = acquire_timeout_s
        self._ready = ready
        self._current = current
        self._ticks = ticks

    def __len__(self) -> int:
        """Connections kept, waiting for the next statement."""
        return len(self._kept)

    @property
    def waiting(self) -> list[tuple[asyncpg.Pool, PoolConnectionProxy, int]]:
        """The kept connections (tests look at them)."""
        return self._kept

    async def fetch(self, sql: str, *args: Any) -> list[asyncpg.Record]:
        """``sql``'s rows, run on a kept connection (one taken from the pool if none)."""
        taken: tuple[asyncpg.Pool, PoolConnectionProxy] | None = None
        stale = self._ticks() - int(KEPT_IDLE_S * 1e9)
        kept = self._kept
        while kept:
            from_pool, conn, used = kept.pop()
            if used > stale and _usable(conn):
                taken = (from_pool, conn)
                break
            self._out -= 1
            await _give_back(from_pool, conn, close=used <= stale)
        if kept and kept[0][2] <= stale:  # the least used one, idle too long
            from_pool, conn, _ = kept.pop(0)
            self._out -= 1
            await _give_back(from_pool, conn, close=True)
        if taken is None:
            pool = await self._ready()
            taken = (pool, await pool.acquire(timeout=self._acquire_timeout_s))
            self._out += 1
        try:
            rows = await taken[1].fetch(sql, *args)
        except BaseException:
            self._out -= 1
            await _give_back(*taken)
            raise
        if self._out > self.most or taken[0] is not self._current():
            self._out -= 1
            await _give_back(*taken)
        else:
            kept.append((*taken, self._ticks()))
        return rows

    async def aclose(self) -> None:
        """Every kept connection back to its pool (which waits for them to close)."""
        kept, self._kept = self._kept, []
        for from_pool, conn, _ in kept:
            self._out -= 1
            await _give_back(from_pool, conn)


async def _give_back(pool: asyncpg.Pool, conn: PoolConnectionProxy, *, close: bool = False) -> None:
    """A kept connection back to its pool (bounded: the pool's release waits at most
    the timeout of the acquire that took it; a closed one is dropped); with ``close``,
    closed first, without a word to the server (it may be gone)."""
    with contextlib.suppress(*DB_ERRORS):
        if close and _usable(conn):
            conn.terminate()
        await pool.release(conn)


def _usable(conn: PoolConnectionProxy) -> bool:
    """Whether a kept connection is still open (one the server closed was already given
    back to its pool by asyncpg, and its proxy says so by raising)."""
    try:
        return not conn.is_closed()
    except asyncpg.InterfaceError:
        return False


__all__ = ["KEPT_IDLE_S", "KEPT_OF_POOL", "KeptConnections"]
