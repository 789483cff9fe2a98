"""Request bodies sent with a ``Content-Encoding``: decoded here, strictly and bounded.

aiohttp's own decoding is off (``auto_decompress=False``, see :mod:`.http_app`): it
accepted a gzip stream cut before its trailer, read an unknown coding as plain bytes,
and reported a plain body labelled gzip as a server fault. Here every failure is the
caller's mistake (:class:`~a2a_gateway.protocol.errors.JSONParseError`, naming the
coding), and the decoded size is bounded by the same cap as a plain body, so a small
compressed body cannot expand without limit.

Codings: ``gzip`` (also ``x-gzip``; several members allowed), ``deflate`` (zlib-wrapped,
or raw deflate as some clients send it) and ``identity``; a list is undone from the
last to the first. Anything else is refused.
"""

from __future__ import annotations

import asyncio
import zlib
from collections.abc import Callable

from a2a_gateway.protocol.errors import A2AError, JSONParseError

#: Codings we decode, by their lower-case name.
GZIP = "gzip"
DEFLATE = "deflate"
IDENTITY = "identity"
_ALIASES = {"x-gzip": GZIP}
SUPPORTED = (GZIP, DEFLATE, IDENTITY)
#: Compressed bodies larger than this are decoded off the event loop.
THREAD_THRESHOLD_BYTES = 256 * 1024


def codings(header: str | None) -> list[str]:
    """The codings named by a ``Content-Encoding`` value, in the order applied;
    ``identity`` dropped. Raises JSONParseError for one we cannot decode."""
    if header is None:
        return []
    found: list[str] = []
    for item in header.split(","):
        name = item.strip().lower()
        name = _ALIASES.get(name, name)
        if not name or name == IDENTITY:
            continue
        if name not in SUPPORTED:
            shown = name[:32]
            raise JSONParseError(
                f"Content-Encoding {shown!r} is not supported; send gzip, deflate or none",
                metadata={"contentEncoding": shown},
            )
        found.append(name)
    return found


def _inflate(data: bytes, coding: str, limit: int, too_large: Callable[[], A2AError]) -> bytes:
    """One coding undone, at most ``limit`` bytes out; JSONParseError when the data is
    not a complete stream of that coding."""
    broken = JSONParseError(
        f"the request body is not valid {coding} data (Content-Encoding: {coding})",
        metadata={"contentEncoding": coding},
    )
    if not data:
        raise broken
    if coding == DEFLATE:
        # zlib-wrapped is the standard; a first byte that is not a zlib header is raw.
        wbits = zlib.MAX_WBITS if data[0] & 0x0F == 8 else -zlib.MAX_WBITS
    else:
        wbits = 16 + zlib.MAX_WBITS
    out: list[bytes] = []
    size = 0
    rest = data
    while rest:
        decoder = zlib.decompressobj(wbits=wbits)
        try:
            chunk = decoder.decompress(rest, limit + 1 - size)
        except zlib.error:
            raise broken from None
        size += len(chunk)
        if size > limit:
            raise too_large()
        out.append(chunk)
        if decoder.unconsumed_tail:  # stopped at the output bound with input left
            raise too_large()
        if not decoder.eof:
            raise broken  # cut short: the stream's end (and trailer) never came
        rest = decoder.unused_data
        if coding == DEFLATE and rest:
            raise broken  # deflate has one stream; anything after it is garbage
    return b"".join(out)


def decode_sync(
    body: bytes, applied: list[str], limit: int, too_large: Callable[[], A2AError]
) -> bytes:
    for coding in reversed(applied):
        body = _inflate(body, coding, limit, too_large)
    return body


async def decode(
    body: bytes, applied: list[str], limit: int, too_large: Callable[[], A2AError]
) -> bytes:
    """``body`` with ``applied`` codings undone (see :func:`codings`); a large body is
    decoded in a worker thread so the event loop keeps serving."""
    if not applied:
        return body
    if len(body) > THREAD_THRESHOLD_BYTES:
        return await asyncio.to_thread(decode_sync, body, applied, limit, too_large)
    return decode_sync(body, applied, limit, too_large)


__all__ = ["SUPPORTED", "codings", "decode", "decode_sync"]
