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
    """
    global _last_ms, _last_seq
    ms = time.time_ns() // 1_000_000
    if ms <= _last_ms:
        ms, seq = _last_ms, _last_seq + 1
        if seq > 0xFFF:  # 4096 ids in one millisecond: borrow the next one
            ms, seq = ms + 1, 0
    else:
        seq = _random_bits(11)  # leaves room to count up within the millisecond
    _last_ms, _last_seq = ms, seq
    value = (ms & 0xFFFF_FFFF_FFFF) << 80 | 0x7 << 76 | seq << 64 | 0b10 << 62 | _random_bits(62)
    h = f"{value:032x}"
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


_last_ms = 0
_last_seq = 0
_pool = b""
_taken = 0  # bytes of _pool used


def _random_bits(bits: int) -> int:
    """Bits from the OS CSPRNG, read 4 KiB at a time (one syscall per ~500 ids); each
    byte is used once (an offset into the pool: cutting the rest off copied it)."""
    global _pool, _taken
    size = (bits + 7) // 8
    start = _taken
    if start + size > len(_pool):
        _pool, start = os.urandom(4096), 0
    _taken = start + size
    return int.from_bytes(_pool[start : start + size], "big") >> (size * 8 - bits)


__all__ = ["ID_PATTERN", "new_id", "valid_id"]
