"""The in-memory task store (``serve --store memory``): the store's roles, one module
each (tasks, retry keys), with the roles of a store of one process (``local_roles``:
context claims, cancel signals, push configs in the records, and the event logs of a
:class:`~..event_log.MemoryEventLog`).

Nothing outlives the process. It holds at most ``max_tasks`` tasks and ``max_bytes``
bytes of them, dropping the least recently written first (a dropped task is
TaskNotFound, like one never stored); the retry keys are bounded the same way
(``retry_keys``, ``retry_bytes``), and the event logs by ``event_log_bytes`` per task
and ``event_logs_bytes`` in all.
"""

from __future__ import annotations

from collections import Counter

from ..byte_lru import ByteLRU
from ..event_log import DEFAULT_MEMORY_LOG_BYTES, DEFAULT_TASK_LOG_BYTES, MemoryEventLog
from ..local_roles import (
    OneProcessCancels,
    OneProcessClaims,
    OneProcessEventLogs,
    PushConfigsInRecords,
)
from ..task_store import (
    DEFAULT_MEMORY_BYTES,
    DEFAULT_MEMORY_TASKS,
    DEFAULT_RETRY_BYTES,
    DEFAULT_RETRY_KEYS,
)
from .retry_keys import MemoryRetryKeys
from .tasks import MemoryTasks


class MemoryTaskStore(
    MemoryTasks,
    MemoryRetryKeys,
    OneProcessEventLogs[MemoryEventLog],
    OneProcessClaims,
    PushConfigsInRecords,
    OneProcessCancels,
):
    """Tasks in this process only, as serialized bytes (lost on restart), at most
    ``max_tasks`` of them holding at most ``max_bytes``: saving past a bound drops the
    least recently written tasks (a dropped task is TaskNotFound, like one never
    stored). Listing walks the held tasks (at most ``max_tasks``)."""

    durable = False
    kind = "memory"

    def __init__(
        self,
        *,
        max_tasks: int = DEFAULT_MEMORY_TASKS,
        max_bytes: int = DEFAULT_MEMORY_BYTES,
        retry_keys: int = DEFAULT_RETRY_KEYS,
        retry_bytes: int = DEFAULT_RETRY_BYTES,
        event_log_bytes: int = DEFAULT_TASK_LOG_BYTES,
        event_logs_bytes: int = DEFAULT_MEMORY_LOG_BYTES,
    ) -> None:
        self._states = Counter()
        self._tasks = ByteLRU(max_tasks, max_bytes, self._dropped)
        self._retry = ByteLRU(retry_keys, retry_bytes)
        self.event_log = MemoryEventLog(task_bytes=event_log_bytes, total_bytes=event_logs_bytes)


__all__ = ["MemoryTaskStore"]
