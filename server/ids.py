"""Task, context and message ids: the ids we accept (they become file names) and the
time-ordered ids we make."""

from __future__ import annotations

import os
import re
import time

#: Task and context ids we accept: they become file names, so nothing else ever may.
ID_PATTERN = re.compile(r"[A-Za-z0-9_-]{1,100}")


def valid_id(value: str) -> bool:
    """True when ``value`` is a safe task/context id (``[A-Za-z0-9_-]{1,100}``)."""
    return ID_PATTERN.fullmatch(value) is not None


def new_id() -> str:
    """A time-ordered (version 7, RFC 9562) UUID string, monotonic within this process.

    ListTasks orders by status timestamp (millisecond precision) and breaks ties on the
    id, descending, as the official SDK does; time-ordered ids make that tie-break
    "newest first" too, so tasks settled within one millisecond still list in order.
    (A new send makes three or four: the millisecond's text is kept, the random tail
    is the pool's bytes as hex: 1.45 -> 0.90 us an id here.)
    """
    global _last_ms, _last_seq, _head_ms, _head
    ms = time.time_ns() // 1_000_000
    if ms <= _last_ms:
        ms, seq = _last_ms, _last_seq + 1
        if seq > 0xFFF:  # 4096 ids in one millisecond: borrow the next one
            ms, seq = ms + 1, 0
    else:
        seq = _random_bits(11)  # leaves room to count up within the millisecond
    _last_ms, _last_seq = ms, seq
    if ms != _head_ms:  # the 48-bit millisecond and the version, as text
        h = f"{ms & 0xFFFF_FFFF_FFFF:012x}"
        _head, _head_ms = f"{h[:8]}-{h[8:]}-7", ms
    tail = _random_bytes(8).hex()  # 64 bits; the first digit's top two: the variant
    return f"{_head}{seq:03x}-{_VARIANT[tail[0]]}{tail[1:4]}-{tail[4:]}"


_last_ms = 0
_last_seq = 0
_head_ms = -1
_head = ""
#: A hex digit with its top two bits set to the RFC 9562 variant (``10``), its low two kept.
_VARIANT = {digit: "89ab"[int(digit, 16) & 3] for digit in "0123456789abcdef"}
_pool = b""
_taken = 0  # bytes of _pool used


def _random_bytes(size: int) -> bytes:
    """Bytes from the OS CSPRNG, read 4 KiB at a time (one syscall per ~300 ids); each
    byte is used once (an offset into the pool: cutting the rest off copied it)."""
    global _pool, _taken
    start = _taken
    if start + size > len(_pool):
        _pool, start = os.urandom(4096), 0
    _taken = start + size
    return _pool[start : start + size]


def _random_bits(bits: int) -> int:
    """``bits`` random bits from :func:`_random_bytes`."""
    size = (bits + 7) // 8
    return int.from_bytes(_random_bytes(size), "big") >> (size * 8 - bits)


__all__ = ["ID_PATTERN", "new_id", "valid_id"]
