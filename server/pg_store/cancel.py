"""Cancellation asked across processes (NOTIFY a2a_cancel)."""

from __future__ import annotations

from collections.abc import Callable

from ..ids import valid_id
from .connection import (
    CANCEL_CHANNEL,
    PgConnection,
)

# A cancel request is kept on the run's context claim (which ends with the run), so the
# run's process finds it even when it missed the NOTIFY.
_REQUEST_CANCEL = """
WITH flagged AS (UPDATE a2a_contexts SET cancel_requested = true WHERE task_id = $2)
SELECT pg_notify($1, $2)
"""


class PgCancelSignals(PgConnection):
    """Cancellation asked across processes (NOTIFY a2a_cancel)."""

    # --- cancellation across processes ----------------------------------------------

    def on_cancel_request(self, handler: Callable[[str], None]) -> None:
        self._cancel_handler = handler

    async def request_cancel(self, task_id: str) -> bool:
        await self._fetch(_REQUEST_CANCEL, CANCEL_CHANNEL, task_id)
        return True

    def _on_cancel(self, _conn: object, _pid: int, _channel: str, payload: object) -> None:
        handler = self._cancel_handler
        if handler is not None and isinstance(payload, str) and valid_id(payload):
            handler(payload)
