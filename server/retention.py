"""Task retention: settled tasks older than a maximum age are removed, in small batches,
off the request path (``serve --task-retention 30d``; off by default).

A task is settled when its state is terminal (completed, failed, canceled, rejected);
its age is that of its status timestamp. Input-required and auth-required tasks wait
for their caller and never expire by age, nor do submitted or working ones. Removing a
task removes its file and its index row (with its messageId retry keys); with
``files=True`` (``--task-retention-files``) also the inbox files its messages brought
(the parts whose ``a2a-gateway.savedAs`` names a file under ``inbox/``).

Each pass asks every store for at most ``batch`` expired tasks at a time (an indexed
range query) and goes on while whole batches come back, yielding between batches; it
runs again every ``interval_s``. The workspace store removes them on its index's
maintenance thread; the PostgreSQL store in one statement per batch, with their push
configs, retry keys and events, one replica at a time (a transaction-level advisory
lock: a replica that finds it taken removes nothing this pass).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import time
from collections.abc import Callable, Sequence
from typing import Protocol

from a2a_gateway.protocol.closing import Startable

log = logging.getLogger(__name__)

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_DURATION = re.compile(r"(\d+(?:\.\d+)?)\s*([smhdw]?)")


def parse_duration(text: str) -> float:
    """Seconds in ``30d``, ``12h``, ``90m``, ``45s``, ``2w`` or a plain number of
    seconds; ValueError for anything else, zero or negative."""
    match = _DURATION.fullmatch(text.strip().lower())
    if match is None:
        raise ValueError(f"{text!r} is not a duration such as 30d, 12h, 90m or 45s")
    seconds = float(match.group(1)) * _UNITS[match.group(2) or "s"]
    if seconds <= 0:
        raise ValueError("a duration must be more than zero")
    return seconds


class Expiring(Protocol):
    """A store that removes its expired settled tasks a batch at a time (the workspace
    store, the PostgreSQL store)."""

    async def expire(self, cutoff_ns: int, limit: int, *, files: bool = False) -> int: ...


class Retention(Startable):
    """Removes expired settled tasks from every store (see the module)."""

    def __init__(
        self,
        stores: Callable[[], Sequence[Expiring]],
        max_age_s: float,
        *,
        files: bool = False,
        interval_s: float = 60.0,
        batch: int = 200,
        pause_s: float = 0.05,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.stores = stores
        self.max_age_s = max_age_s
        self.files = files
        self.interval_s = interval_s
        self.batch = batch
        self.pause_s = pause_s
        self.clock = clock
        self.removed = 0  # tasks removed since start
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        """Run a pass now and every ``interval_s`` after, in a task of its own."""
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(
                self._every_interval(), name="a2a-task-retention"
            )

    async def _every_interval(self) -> None:
        while True:
            try:
                await self.run_once()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("task retention pass failed")
            await asyncio.sleep(self.interval_s)

    async def run_once(self) -> int:
        """One pass over every store; how many tasks it removed."""
        cutoff_ns = int((self.clock() - self.max_age_s) * 1e9)
        removed = 0
        for store in self.stores():
            while True:
                count = await store.expire(cutoff_ns, self.batch, files=self.files)
                removed += count
                if count < self.batch:
                    break
                await asyncio.sleep(self.pause_s)  # leave room for requests
        if removed:
            log.info("task retention removed %d settled tasks", removed)
        self.removed += removed
        return removed

    async def aclose(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
