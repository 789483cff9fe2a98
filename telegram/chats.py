"""One queue per owner chat: turns run one at a time, follow-ups wait their turn.

Every allowed chat gets a :class:`ChatQueue`. The owner's messages and follow-ups
(results of delegated tasks, notices) are jobs in that queue; one worker task runs them
in order, so a follow-up never interrupts or steers a running turn. ``/stop`` aborts
the job that is running; what is queued stays.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any

from telegram.error import NetworkError, TelegramError

from .outage import one_line

log = logging.getLogger("a2a_gateway.telegram")

#: How many jobs may wait in one chat before new ones are refused.
MAX_QUEUED_JOBS = 100


@dataclass(frozen=True, slots=True)
class Job:
    """Work for one chat: ``run`` does it; ``label`` names it in the log."""

    run: Callable[[], Coroutine[Any, Any, None]]
    label: str


class ChatQueue:
    """The jobs of one chat, run in order by one worker task (started on first use)."""

    def __init__(self, chat_id: int) -> None:
        self.chat_id = chat_id
        self._jobs: asyncio.Queue[Job] = asyncio.Queue(MAX_QUEUED_JOBS)
        self._worker: asyncio.Task[None] | None = None
        self._current: asyncio.Task[None] | None = None

    @property
    def busy(self) -> bool:
        return self._current is not None and not self._current.done()

    def put(self, job: Job) -> bool:
        """Queue ``job``; False when the queue is full (the job is dropped)."""
        try:
            self._jobs.put_nowait(job)
        except asyncio.QueueFull:
            log.warning(
                "chat %s: %s dropped, %d jobs waiting", self.chat_id, job.label, MAX_QUEUED_JOBS
            )
            return False
        if self._worker is None or self._worker.done():
            self._worker = asyncio.create_task(self._work(), name=f"telegram-chat-{self.chat_id}")
        return True

    def stop_current(self) -> bool:
        """Abort the running job (``/stop``); True when one was running."""
        if self.busy:
            assert self._current is not None
            self._current.cancel()
            return True
        return False

    async def join(self) -> None:
        """Wait until every queued job has run (tests, shutdown of a host that drains)."""
        await self._jobs.join()

    async def aclose(self) -> None:
        """Cancel the running job and the worker; queued jobs are dropped."""
        for task in (self._current, self._worker):
            if task is not None and not task.done():
                task.cancel()
        for task in (self._current, self._worker):
            if task is not None:
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        self._worker = self._current = None

    async def _work(self) -> None:
        while True:
            job = await self._jobs.get()
            try:
                self._current = asyncio.create_task(job.run(), name=job.label)
                try:
                    await asyncio.shield(self._current)
                except asyncio.CancelledError:
                    if self._current.cancelled():
                        # /stop aborted the job; the worker goes on with the next one.
                        log.info("chat %s: %s stopped", self.chat_id, job.label)
                        continue
                    raise  # the worker itself is being cancelled
                except NetworkError as exc:  # the outage itself is logged once (outage.py)
                    log.info(
                        "chat %s: %s not delivered: %s", self.chat_id, job.label, one_line(exc)
                    )
                except TelegramError as exc:
                    log.warning("chat %s: %s failed: %s", self.chat_id, job.label, one_line(exc))
                except Exception:
                    log.exception("chat %s: %s failed", self.chat_id, job.label)
            finally:
                self._current = None
                self._jobs.task_done()
