"""The old home of :mod:`.task_states` and :mod:`.ids`, kept only for the store modules
(``task_store``, ``task_index``, ``file_store``, ``pg_store``) while they are being split
into roles (issue 24): import from those two modules; delete this once nothing imports it.
"""

from __future__ import annotations

from .ids import ID_PATTERN, new_id, valid_id
from .task_states import (
    ACTIVE,
    INTERRUPTED,
    KNOWN_STATES,
    TERMINAL,
    agent_message,
    set_now,
    task_view,
    timestamp_ns,
)

__all__ = [
    "ACTIVE",
    "ID_PATTERN",
    "INTERRUPTED",
    "KNOWN_STATES",
    "TERMINAL",
    "agent_message",
    "new_id",
    "set_now",
    "task_view",
    "timestamp_ns",
    "valid_id",
]
