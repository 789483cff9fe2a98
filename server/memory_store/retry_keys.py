"""The memory store's messageId retry keys: bounded by a count and a byte budget."""

from __future__ import annotations

from a2a_gateway.protocol.context import Caller

from ..byte_lru import ByteLRU
from ..task_store import TaskStore

_RETRY_KEY_OVERHEAD = 200  # bytes an entry costs beyond its strings (tuple, dict slot)


class MemoryRetryKeys(TaskStore):
    """Retry keys in a :class:`~..byte_lru.ByteLRU` (the least recently used go first)."""

    _retry: ByteLRU[tuple[Caller, str, str], str]

    def find_message(self, owner: Caller, message_id: str, fingerprint: str) -> str | None:
        return self._retry.get((owner, message_id, fingerprint))

    def remember_message(
        self, owner: Caller, message_id: str, fingerprint: str, task_id: str
    ) -> None:
        size = len(message_id) + len(fingerprint) + len(task_id) + _RETRY_KEY_OVERHEAD
        self._retry.put((owner, message_id, fingerprint), task_id, size)
