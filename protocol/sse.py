"""Server-Sent Events framing: an encoder and a tolerant incremental decoder.

The decoder accepts LF, CR and CRLF line endings, ``:`` comments (keep-alives),
multi-line ``data:`` fields, ``event:``, ``id:`` and ``retry:``, as the WHATWG
event-stream rules say; the official SDK's server sends CRLF and ``: ping`` comments.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

CONTENT_TYPE = "text/event-stream"


@dataclass(frozen=True, slots=True)
class Event:
    data: str
    event: str = "message"
    id: str | None = None
    retry: int | None = None


def encode(data: bytes, *, event: str | None = None, event_id: str | None = None) -> bytes:
    """One event. ``data`` must be a single line (compact JSON is)."""
    head = b""
    if event:
        head += b"event: " + event.encode() + b"\n"
    if event_id:
        head += b"id: " + event_id.encode() + b"\n"
    if b"\n" in data or b"\r" in data:
        lines = data.replace(b"\r\n", b"\n").replace(b"\r", b"\n").split(b"\n")
        return head + b"".join(b"data: " + line + b"\n" for line in lines) + b"\n"
    return head + b"data: " + data + b"\n\n"


def comment(text: str = "keep-alive") -> bytes:
    return b": " + text.encode() + b"\n\n"


class Decoder:
    """Feed bytes as they arrive; iterate the complete events."""

    def __init__(self) -> None:
        self._buffer = ""  # complete lines of the chunk being fed
        self._pieces: list[str] = []  # an unterminated line, in the pieces it came in
        self._pending_cr = False
        self._data: list[str] = []
        self._event = ""
        self._id: str | None = None
        self._last_id: str | None = None
        self._retry: int | None = None
        self._bytes = b""

    def feed(self, chunk: bytes) -> Iterator[Event]:
        self._bytes += chunk
        try:
            text = self._bytes.decode("utf-8")
            self._bytes = b""
        except UnicodeDecodeError as exc:
            # Keep an incomplete multi-byte sequence at the end for the next chunk.
            if exc.start >= len(self._bytes) - 3:
                text = self._bytes[: exc.start].decode("utf-8")
                self._bytes = self._bytes[exc.start :]
            else:
                text = self._bytes.decode("utf-8", errors="replace")
                self._bytes = b""
        yield from self._feed_text(text)

    def _feed_text(self, text: str) -> Iterator[Event]:
        if self._pending_cr and text.startswith("\n"):
            text = text[1:]
        self._pending_cr = False
        index = _line_end(text)
        if index < 0 and not self._buffer:
            # A line still arriving: keep its pieces and join them once it ends, so an
            # event of n bytes in small chunks costs O(n), not a copy of it per chunk.
            if text:
                self._pieces.append(text)
            return
        if self._pieces:  # (only while _buffer is empty)
            head = "".join(self._pieces)
            self._pieces = []
            text = head + text
            index += len(head)
        if self._buffer:  # lines left by an iteration stopped early come first
            text = self._buffer + text
            index = _line_end(text)
        self._buffer = text
        while index >= 0:
            line = self._buffer[:index]
            if self._buffer[index] == "\r":
                if index + 1 < len(self._buffer):
                    skip = 2 if self._buffer[index + 1] == "\n" else 1
                else:
                    skip = 1
                    self._pending_cr = True
            else:
                skip = 1
            self._buffer = self._buffer[index + skip :]
            event = self._line(line)
            if event is not None:
                yield event
            index = _line_end(self._buffer)
        if self._buffer:
            self._pieces.append(self._buffer)
            self._buffer = ""

    def _line(self, line: str) -> Event | None:
        if line == "":
            return self._dispatch()
        if line.startswith(":"):
            return None
        name, sep, value = line.partition(":")
        if sep and value.startswith(" "):
            value = value[1:]
        if name == "data":
            self._data.append(value)
        elif name == "event":
            self._event = value
        elif name == "id":
            if "\0" not in value:
                self._id = value
        elif name == "retry" and value.isascii() and value.isdigit():  # not "²": int() fails
            self._retry = int(value)
        return None

    def _dispatch(self) -> Event | None:
        if self._id is not None:
            self._last_id = self._id
        if not self._data:
            self._event = ""
            self._id = None
            return None
        event = Event(
            data="\n".join(self._data),
            event=self._event or "message",
            id=self._last_id,
            retry=self._retry,
        )
        self._data = []
        self._event = ""
        self._id = None
        return event


def _line_end(buffer: str) -> int:
    cr = buffer.find("\r")
    lf = buffer.find("\n")
    if cr < 0:
        return lf
    if lf < 0:
        return cr
    return min(cr, lf)
