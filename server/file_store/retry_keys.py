"""The workspace's messageId retry keys: rows of its index (see ``task_index``)."""

from __future__ import annotations

from collections.abc import Coroutine
from typing import Any

from a2a_gateway.protocol.context import Caller

from .folder import TaskFiles


class FileRetryKeys(TaskFiles):
    """Retry keys in the workspace's index on disk (they survive a restart; the task
    files hold them too, see the package docstring)."""

    def find_message(self, owner: Caller, message_id: str, fingerprint: str) -> str | None:
        return self.index.find_message(owner, message_id, fingerprint)

    def lookup_message(
        self, owner: Caller, message_id: str, fingerprint: str
    ) -> Coroutine[Any, Any, str | None]:
        # Started: a reconcile owed at open (the keys it recovers) runs. The index's
        # coroutine itself, not one around it (a retried send makes this lookup).
        return self._start().lookup_message(owner, message_id, fingerprint)

    def found_message(self, owner: Caller, message_id: str, fingerprint: str) -> str | None:
        if not self._started:  # lookup_message starts the index (and its reconcile)
            return None
        return self.index.found_message(owner, message_id, fingerprint)

    def remember_message(
        self, owner: Caller, message_id: str, fingerprint: str, task_id: str
    ) -> None:
        self.index.remember_message(owner, message_id, fingerprint, task_id)
