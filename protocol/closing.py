"""The lifecycle of every long-lived part: ``async with`` over ``start`` and ``aclose``.

:class:`AsyncCloseable` is a part that only holds something (a client's connections):
``async with`` closes it on the way out. :class:`Startable` is a part that also opens
something (a pool, a listening socket, a background task, a worker thread): ``async
with`` starts it and closes it, and a start that fails closes whatever it had opened
before the error goes on (as python-telegram-bot's ``Application`` does), so the caller
never has to. The hosts compose parts with one :class:`contextlib.AsyncExitStack`: what
was entered is closed in reverse, also when a later part fails to start
(CONTRIBUTING.md, "Where a new concern goes").
"""

from __future__ import annotations

import abc
from types import TracebackType
from typing import Self


class AsyncCloseable(abc.ABC):
    """Gives ``async with obj:`` that calls ``await obj.aclose()`` on the way out."""

    @abc.abstractmethod
    async def aclose(self) -> None:
        """Release everything the object holds (idempotent)."""

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()


class Startable(AsyncCloseable):
    """A part with a :meth:`start`: ``async with`` starts it (closing what a failed start
    opened) and closes it on the way out."""

    async def start(self) -> None:
        """Open what the part holds (idempotent); a failure leaves what it opened to
        :meth:`aclose`, which ``async with`` calls."""

    async def __aenter__(self) -> Self:
        try:
            await self.start()
        except BaseException:
            await self.aclose()
            raise
        return self
