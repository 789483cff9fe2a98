"""``async with`` for anything that has ``aclose()``: one definition for every client."""

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
