"""The messageId retry keys (``a2a_retry_keys``)."""

from __future__ import annotations

from a2a_gateway.protocol.context import Caller

from .connection import (
    RETRY_KEY_OVERHEAD,
    PgConnection,
)

_FIND_MESSAGE = (
    "SELECT task_id FROM a2a_retry_keys"
    " WHERE workspace = $1 AND caller = $2 AND message_id = $3 AND fingerprint = $4"
)


class PgRetryKeys(PgConnection):
    """The messageId retry keys (``a2a_retry_keys``)."""

    # --- messageId retry keys --------------------------------------------------------

    def find_message(self, owner: Caller, message_id: str, fingerprint: str) -> str | None:
        return self._recent.get((owner, message_id, fingerprint))

    async def lookup_message(self, owner: Caller, message_id: str, fingerprint: str) -> str | None:
        known = self._recent.get((owner, message_id, fingerprint))
        if known is not None:
            return known
        rows = await self._fetch(
            _FIND_MESSAGE, owner.workspace, owner.name, message_id, fingerprint
        )
        if not rows:
            return None
        task_id = str(rows[0][0])
        self._keep(owner, message_id, fingerprint, task_id)
        return task_id

    def remember_message(
        self, owner: Caller, message_id: str, fingerprint: str, task_id: str
    ) -> None:
        self._keep(owner, message_id, fingerprint, task_id)
        self._pending.setdefault(task_id, []).append((message_id, fingerprint))

    def _keep(self, owner: Caller, message_id: str, fingerprint: str, task_id: str) -> None:
        size = len(message_id) + len(fingerprint) + len(task_id) + RETRY_KEY_OVERHEAD
        self._recent.put((owner, message_id, fingerprint), task_id, size)
