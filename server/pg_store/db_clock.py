"""The database's clock, as a store process knows it: leases, push configs' ``added_ns``
and the events' pruning cutoff are on it, not on this host's."""

from __future__ import annotations

import time
from collections.abc import Callable

import asyncpg
from asyncpg.pool import PoolConnectionProxy

INT64_MAX = (1 << 63) - 1
#: The database's time now, in ns (its own clock, whatever the clocks of the processes).
DB_NOW_SQL = "(extract(epoch FROM clock_timestamp()) * 1000000000)::bigint"
#: Status times are stamped to the millisecond (rounded down).
_STAMP_NS = 1_000_000


def clamp(value: int) -> int:
    return max(min(value, INT64_MAX), -INT64_MAX)


class DatabaseClock:
    """The database's time from this process's ticks and the offset read when the pool
    opens (:meth:`_read_db_offset`)."""

    lease_s: float
    _ticks: Callable[[], int]
    _db_offset: int  # the database's time minus _ticks()
    _db_error: int  # how far off that may be: half the round trip it was read in

    def _db_now(self) -> int:
        """The database's time now, in ns (leases are on its clock, not this host's)."""
        return self._ticks() + self._db_offset

    def _db_time(self, wall_ns: int) -> int:
        """``wall_ns``, a status time this host's wall clock stamped, on the database's
        clock, where push configs' ``added_ns`` are (so a config added on a replica whose
        clock is off still gets the runner's next status change, and none before it)."""
        return clamp(wall_ns + self._status_to_db())

    def _status_to_db(self) -> int:
        """What moves a status time of this host onto the database's clock: the latest
        it may stand for there (stamped to the millisecond, rounded down, and the offset
        known to half a round trip), so a config added before a status change always
        counts as added by it (one added within that margin after it does too: the
        webhook gets the status current when it was registered, never misses one)."""
        return self._db_now() - time.time_ns() + _STAMP_NS + self._db_error

    def _lease_until(self) -> int:
        return self._db_now() + int(self.lease_s * 1e9)

    async def _read_db_offset(self, conn: asyncpg.Connection | PoolConnectionProxy) -> None:
        """Keep the database's time minus this process's ticks (the middle of the round
        trip; its error is half of it, nothing next to a lease)."""
        before = self._ticks()
        db_ns = await conn.fetchval(f"SELECT {DB_NOW_SQL}")
        after = self._ticks()
        self._db_offset = int(db_ns) - (before + after) // 2
        self._db_error = (after - before) // 2 + 1


__all__ = ["DB_NOW_SQL", "INT64_MAX", "DatabaseClock", "clamp"]
