"""The one clock of delegation: every wait and schedule of the a2a tool and the watches
goes through a :class:`Clock`, so tests drive time by hand (``tests/client``'s
``ManualClock``) instead of sleeping."""

from __future__ import annotations

import asyncio
import contextlib
import time
from datetime import UTC, datetime
from typing import Protocol

#: The bound of a foreground send and of the a2a tool's wait action (``--a2a-max-wait``).
DEFAULT_MAX_WAIT_S = 600.0
#: How long the a2a tool's send waits for a result (no mode given) before a watch takes
#: over (``--a2a-wait``).
DEFAULT_WAIT_S = 60.0
#: How long after its start a watch gives up with a (no result) notice
#: (``--watch-timeout``).
DEFAULT_WATCH_TIMEOUT_S = 86400.0


class Clock(Protocol):
    def now(self) -> datetime:
        """The current UTC time (watch start and timeout are wall-clock)."""
        ...

    async def sleep(self, seconds: float, wake: asyncio.Event | None = None) -> bool:
        """Wait ``seconds``, or less when ``wake`` is set; True when woken."""
        ...


class SystemClock:
    """Real time."""

    def now(self) -> datetime:
        return datetime.fromtimestamp(time.time(), UTC)

    async def sleep(self, seconds: float, wake: asyncio.Event | None = None) -> bool:
        if wake is None:
            await asyncio.sleep(max(0.0, seconds))
            return False
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(max(0.0, seconds)):
                await wake.wait()
                return True
        return False


SYSTEM_CLOCK = SystemClock()
