"""An answer that is written while the model streams it: one Telegram message, edited.

The first text sends a message; later text edits it, at most once per ``interval``
(Telegram throttles a bot that edits a chat much faster than once a second). Text past
4,096 characters continues in a new message. :meth:`LiveReply.finish` writes the final
text at once, split as :func:`split_message` splits it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Protocol

from .text import MAX_MESSAGE_CHARS, split_message

log = logging.getLogger("a2a_gateway.telegram")

#: Seconds between two edits of the live message.
EDIT_INTERVAL = 1.0


class ChatSink(Protocol):
    """Where a reply goes: one Telegram chat."""

    async def send(self, text: str) -> int:
        """Send a new message; return its message id."""

    async def edit(self, message_id: int, text: str) -> None:
        """Replace the text of a message sent before."""


class LiveReply:
    def __init__(
        self,
        sink: ChatSink,
        *,
        interval: float = EDIT_INTERVAL,
        limit: int = MAX_MESSAGE_CHARS,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self._sink = sink
        self._interval = interval
        self._limit = limit
        self._clock = clock
        self._sleep = sleep
        self._text = ""  # the text of the current (last) message
        self._streamed = ""  # everything added so far, across messages
        self._shown = ""  # what that message shows now
        self._message_id: int | None = None
        self._last_write = float("-inf")
        self._flush_task: asyncio.Task[None] | None = None
        self._lock = asyncio.Lock()

    @property
    def started(self) -> bool:
        return self._message_id is not None or bool(self._text)

    async def add(self, delta: str) -> None:
        """Append streamed text; writes now or schedules one delayed write."""
        if not delta:
            return
        self._text += delta
        self._streamed += delta
        wait = self._last_write + self._interval - self._clock()
        if wait <= 0:
            await self._write()
        elif self._flush_task is None or self._flush_task.done():
            self._flush_task = asyncio.create_task(self._delayed_write(wait))

    async def finish(self, final_text: str | None = None) -> None:
        """Write the whole answer now. ``final_text`` (the turn's final answer) adds what
        the stream did not carry: all of it when nothing was streamed, the rest when the
        stream carried its beginning; streamed text is never taken back."""
        await self._cancel_flush()
        if final_text is not None:
            if final_text.startswith(self._streamed):
                self._text += final_text[len(self._streamed) :]
            elif not self._streamed:
                self._text = final_text
        self._streamed = ""
        async with self._lock:
            pieces = split_message(self._text, self._limit) if self._text.strip() else []
            for index, piece in enumerate(pieces):
                if index == 0 and self._message_id is not None:
                    if piece != self._shown:
                        await self._sink.edit(self._message_id, piece)
                else:
                    self._message_id = await self._sink.send(piece)
                self._shown = piece
            self._text = self._shown = ""
            self._message_id = None

    async def close(self) -> None:
        """Stop any scheduled write (the turn was aborted); what is shown stays."""
        await self._cancel_flush()

    async def _cancel_flush(self) -> None:
        task, self._flush_task = self._flush_task, None
        if task is not None and not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _delayed_write(self, wait: float) -> None:
        await self._sleep(wait)
        try:
            await self._write()
        except Exception as exc:  # nobody awaits this task: say why, then let finish retry
            log.warning("a streamed edit failed: %s", type(exc).__name__)

    async def _write(self) -> None:
        async with self._lock:
            self._last_write = self._clock()
            # Full messages are sent as they are; the current one keeps the rest.
            while len(self._text) > self._limit:
                pieces = split_message(self._text, self._limit)
                head, self._text = pieces[0], self._text[len(pieces[0]) :].lstrip()
                await self._show(head)
                self._message_id, self._shown = None, ""
            if self._text.strip():
                await self._show(self._text)

    async def _show(self, text: str) -> None:
        if self._message_id is None:
            self._message_id = await self._sink.send(text)
        elif text != self._shown:
            await self._sink.edit(self._message_id, text)
        self._shown = text
