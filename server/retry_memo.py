"""The gRPC binding's memo of retried SendMessage answers given from the stored task.

A client that retries a send repeats its request byte for byte (a load generator
sending one request again and again does too): the engine answers each retry of a
stored task with that task's bytes (``engine/replay.py``), a function of the request,
the metadata, the caller and the stored state. The memo keeps the wire answer of such
a call under the request's exact bytes and metadata, with the caller it was given to
and the engine's check of its :class:`~.engine.replay.StoredReplay` (prepared once,
when kept); the same call again is answered
with those bytes when the caller admitted for *this* call is the same, the gateway is
not draining and the engine's check holds (the retry key names the task, the task
file as it was: an edit, a removal, a continuation or retention send it down the
engine's path again). What runs on every call still runs in the binding: the request
bound, admission (authentication, rate limits, a signing caller's signature), the
call's metrics. Bounded by entries and bytes (least recently used out first); an
answer over :data:`MAX_ANSWER_BYTES` is not kept.

Only a gateway whose service is the engine behind the drain gate alone keeps one: an
access log or tracing sees each call, so with either the memo is off (``serve``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from a2a_gateway.protocol.context import Caller

from .byte_lru import ByteLRU
from .drain import Drain

#: Entries kept (distinct retried requests), and their bytes together (requests,
#: metadata and answers).
MAX_ENTRIES = 1024
MAX_BYTES = 4 * 1024 * 1024
#: An answer larger than this is not kept (a task with a long history).
MAX_ANSWER_BYTES = 64 * 1024
#: What an entry holds besides the bytes it counts (the key tuple, the entry).
ENTRY_OVERHEAD = 400

MemoKey = tuple[bytes, Any]


class Kept:
    """One kept answer: the caller it was given to, its bytes, the service's check of
    it (made before each giving, ``holds``), and the call's metadata as the binding
    reads it (``metadata``: the same for the same call, so not read again)."""

    __slots__ = ("answer", "caller", "holds", "metadata")

    def __init__(
        self, caller: Caller, answer: bytes, holds: Callable[[], bool], metadata: Any
    ) -> None:
        self.caller = caller
        self.answer = answer
        self.holds = holds
        self.metadata = metadata


class RetryMemo:
    """Answers kept for retried calls (see the module doc). ``check(replay)`` is the
    service's (``TaskEngine.replay_check``): the check of a replay, prepared when its
    answer is kept and made before each giving (None: not kept); ``drain`` the
    gateway's gate."""

    __slots__ = ("_answers", "_check", "_drain", "get", "hits")

    def __init__(
        self,
        check: Callable[[object], Callable[[], bool] | None],
        drain: Drain | None = None,
        *,
        max_entries: int = MAX_ENTRIES,
        max_bytes: int = MAX_BYTES,
    ) -> None:
        self._check = check
        self._drain = drain
        self._answers: ByteLRU[MemoKey, Kept] = ByteLRU(max_entries, max_bytes)
        #: What is kept for this call (request bytes and metadata), if anything: its
        #: answer is given with :meth:`answer`, once the call is admitted. (The map's
        #: own method: no frame of the memo's on every call.)
        self.get: Callable[[MemoKey], Kept | None] = self._answers.get
        self.hits = 0

    def answer(self, found: Kept, caller: Caller) -> bytes | None:
        """The kept answer for ``caller``, the call's admitted caller, if it still
        holds; None: call the service."""
        kept = found.caller
        if kept is not caller and (
            kept != caller or kept.on_behalf != caller.on_behalf or kept.delegate != caller.delegate
        ):
            return None
        drain = self._drain
        if (drain is not None and drain.draining) or not found.holds():
            return None
        self.hits += 1
        return found.answer

    def keep(
        self, key: MemoKey, caller: Caller, answer: bytes, replay: object, metadata: Any = None
    ) -> None:
        """Keep the answer the service gave this call (its ``CallContext.replay``),
        when the service gives a check of it."""
        if len(answer) > MAX_ANSWER_BYTES:
            return
        holds = self._check(replay)
        if holds is None:
            return
        raw, pairs = key
        # The answer, and about as much again: the stored task it was made of, which
        # the check holds (shared with the store's cache while it keeps it).
        size = ENTRY_OVERHEAD + len(raw) + 2 * len(answer)
        for name, value in pairs:  # twice: the key's, and the view's
            size += 2 * (len(name) + len(value))
        self._answers.put(key, Kept(caller, answer, holds, metadata), size)

    def __len__(self) -> int:
        return len(self._answers)


__all__ = ["MAX_ANSWER_BYTES", "Kept", "RetryMemo"]
