"""Group commit: the calls of one kind waiting at once become one statement.

A call waits for a statement of its kind to take it, and gets its row of the answer once
that statement committed (so what a call stores is committed before its caller goes
on, as with a statement of its own). At most ``in_flight`` statements of a kind run at a
time; the calls made meanwhile wait for one of them to end, then go together (up to
``most`` in one). No timer: a lone call goes at once, and under load a statement
carries many (docs/performance.md, "PostgreSQL blocking sends: group commit").
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Hashable, Sequence
from typing import Generic, TypeVar

import asyncpg

from ..store_outage import StoreOutageError

T = TypeVar("T")

#: One statement for a batch: its rows, one per call, in the batch's order.
Run = Callable[[list[T]], Awaitable[Sequence[asyncpg.Record]]]
#: The statement of one call alone: its row.
RunOne = Callable[[T], Awaitable[asyncpg.Record]]


class GroupCommit(Generic[T]):
    """Calls of one kind (see the module docstring). ``key`` says which calls may not
    share a statement (say, two saves of one task: ``ON CONFLICT DO UPDATE`` cannot
    change a row twice in one statement); the later one waits for the next. A call that
    goes alone takes ``run_one``, its own statement (a statement over arrays costs more
    for one row: docs/performance.md)."""

    def __init__(
        self,
        name: str,
        run: Run[T],
        run_one: RunOne[T],
        key: Callable[[T], Hashable],
        in_flight: int,
        most: int,
    ) -> None:
        self.name = name
        self._run = run
        self._run_one = run_one
        self._key = key
        self.in_flight = in_flight
        self.most = most
        self._queue: list[tuple[T, asyncio.Future[asyncpg.Record]]] = []
        self._flushers: set[asyncio.Task[None]] = set()
        self._direct = 0  # calls running their own statement in their caller's task
        self._closing = False
        #: Statements run and calls they carried (how much the grouping saved).
        self.statements = 0
        self.calls = 0

    async def call(self, item: T) -> asyncpg.Record:
        """``item``'s row of the statement that carried it (committed), or its error."""
        if not self._queue and not self._direct and not self._flushers:
            # Nothing waits or runs: this call's statement, in the caller's task (no
            # future, no task: what a call alone costs stays as before grouping). Not
            # when another runs: the calls of the same moment then queue for one
            # statement together (measured: a second direct statement halved grouping).
            self._direct += 1
            self.statements += 1
            self.calls += 1
            try:
                return await self._run_one(item)
            finally:
                self._direct -= 1
                self._start_flusher()  # the calls that came meanwhile, if any
        waiter: asyncio.Future[asyncpg.Record] = asyncio.get_running_loop().create_future()
        self._queue.append((item, waiter))
        self._start_flusher()
        return await waiter

    def _start_flusher(self) -> None:
        """A task storing the waiting calls, when some wait and a statement may start
        (else a statement on its way takes them when it ends)."""
        busy = self._direct + len(self._flushers)
        if self._queue and busy < self.in_flight and not self._closing:
            flusher = asyncio.get_running_loop().create_task(
                self._flush(), name=f"a2a-pg-{self.name}"
            )
            self._flushers.add(flusher)
            flusher.add_done_callback(self._flusher_done)

    def _flusher_done(self, flusher: asyncio.Task[None]) -> None:
        # A call may have queued between the flusher's last look and its end (it
        # counted the flusher as running): start one for it.
        self._flushers.discard(flusher)
        if not flusher.cancelled():
            self._start_flusher()

    async def _flush(self) -> None:
        """Statements until no call waits (every waiter gets an answer or an error)."""
        while self._queue:
            batch: list[tuple[T, asyncio.Future[asyncpg.Record]]] = []
            later: list[tuple[T, asyncio.Future[asyncpg.Record]]] = []
            taken: set[Hashable] = set()
            for item, waiter in self._queue:
                if waiter.done():  # its caller is gone
                    continue
                key = self._key(item)
                if len(batch) < self.most and key not in taken:
                    batch.append((item, waiter))
                    taken.add(key)
                else:
                    later.append((item, waiter))
            self._queue = later
            try:
                await self._store(batch)
            except BaseException:  # cancelled (aclose): none of the batch is left waiting
                for _, waiter in batch:
                    waiter.cancel()
                raise

    async def _store(self, batch: list[tuple[T, asyncio.Future[asyncpg.Record]]]) -> None:
        self.statements += 1
        self.calls += len(batch)
        try:
            if len(batch) == 1:
                rows: Sequence[asyncpg.Record] = [await self._run_one(batch[0][0])]
            else:
                rows = await self._run([item for item, _ in batch])
        except Exception as exc:
            if len(batch) > 1 and not isinstance(exc, StoreOutageError):
                # Refused, not an outage: each call alone, so only the one refused fails.
                for one in batch:
                    await self._store([one])
                return
            for _, waiter in batch:
                if not waiter.done():
                    waiter.set_exception(exc)
            return
        for (_, waiter), row in zip(batch, rows, strict=True):
            if not waiter.done():
                waiter.set_result(row)

    async def aclose(self, within_s: float) -> None:
        """Let the statements on their way end (within ``within_s``), then end their
        tasks (the calls still waiting then get CancelledError). Usable again after."""
        self._closing = True
        try:
            if self._flushers:
                await asyncio.wait(set(self._flushers), timeout=within_s)
            for flusher in list(self._flushers):
                flusher.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await flusher
            for _, waiter in self._queue:
                waiter.cancel()
            self._queue.clear()
        finally:
            self._closing = False
