"""The memory store's tasks: serialized bytes in a bounded LRU, counted by state."""

from __future__ import annotations

import heapq
from collections import Counter
from collections.abc import Iterable, Mapping

from a2a_gateway.protocol.context import Caller
from lf.a2a.v1 import a2a_pb2 as pb

from ..byte_lru import ByteLRU
from ..ids import valid_id
from ..task_states import ACTIVE, timestamp_ns
from ..task_store import (
    Listing,
    TaskFilter,
    TaskRecord,
    TaskStore,
    TaskSummary,
    Window,
)


class _Entry(TaskSummary):
    __slots__ = ("data", "owner", "push", "versions")

    def __init__(
        self,
        task: pb.Task,
        owner: Caller,
        data: bytes,
        push: tuple[bytes, ...],
        versions: dict[str, str],
    ) -> None:
        super().__init__(
            task.id, task.context_id, task.status.state, timestamp_ns(task.status.timestamp)
        )
        self.owner = owner
        self.data = data
        self.push = push
        self.versions = versions


class MemoryTasks(TaskStore):
    """Tasks in this process only, as serialized bytes (lost on restart), in a
    :class:`~..byte_lru.ByteLRU` that drops the least recently written past its
    bounds. Listing walks the held tasks (at most ``max_tasks``)."""

    durable = False
    # Tasks held by state, kept as tasks come and go (a scrape reads it, never a walk).
    _states: Counter[int]
    _tasks: ByteLRU[str, _Entry]

    async def load(self, owner: Caller, task_id: str) -> TaskRecord | None:
        entry = self._tasks.peek(task_id)
        if entry is None or entry.owner != owner:
            return None
        configs = [pb.TaskPushNotificationConfig.FromString(data) for data in entry.push]
        return TaskRecord(pb.Task.FromString(entry.data), owner, configs, dict(entry.versions))

    async def save(self, record: TaskRecord) -> None:
        task = record.task
        if not valid_id(task.id):
            raise ValueError(f"invalid task id {task.id!r}")
        push = tuple(config.SerializeToString() for config in record.push_configs)
        data = task.SerializeToString()
        versions = dict(record.push_versions)
        size = len(data) + sum(len(p) for p in push) + 200  # plus the entry itself
        entry = _Entry(task, record.owner, data, push, versions)
        self._states[entry.state] += 1  # before put: its on_drop may take it back
        self._tasks.put(task.id, entry, size)

    def _dropped(self, entry: _Entry) -> None:
        """A task left the held ones (replaced, evicted): its state's count goes down."""
        left = self._states[entry.state] - 1
        if left:
            self._states[entry.state] = left
        else:
            del self._states[entry.state]

    def _of(self, owner: Caller, flt: TaskFilter) -> Iterable[_Entry]:
        return (e for e in self._tasks.values() if e.owner == owner and flt.matches(e))

    async def listing(self, owner: Caller, flt: TaskFilter, window: Window) -> Listing:
        cursor, limit, task_ids = window
        matching = list(self._of(owner, flt))
        after = matching if cursor is None else [e for e in matching if e.position < cursor]
        page: list[TaskSummary] = heapq.nlargest(limit, after, key=lambda e: e.position)
        found = (self._tasks.peek(task_id) for task_id in task_ids)
        named: list[TaskSummary] = [e for e in found if e is not None and e.owner == owner]
        return page, len(matching), named

    async def active_ids(self, owner: Caller) -> list[str]:
        return [e.task_id for e in self._tasks.values() if e.owner == owner and e.state in ACTIVE]

    async def count_by_state(self) -> Mapping[int, int] | None:
        return dict(self._states)

    def __len__(self) -> int:
        return len(self._tasks)
