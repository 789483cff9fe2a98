"""Where tasks live: the store interface and the in-memory store.

A :class:`TaskRecord` is one task plus what the protocol scopes to it: the owning caller
(every task belongs to the ``(workspace, name)`` that created it; another caller never
sees it) and its push-notification configs. Stores keep records, not behaviour: the
lifecycle rules, lazy restart recovery and paging live in the engine.

Contract for implementations:

- :meth:`TaskStore.load` returns a fresh record the caller may mutate, or ``None`` when
  the task is missing, owned by someone else, or unreadable: all three are TaskNotFound
  to the protocol, so a store never raises for them.
- :meth:`TaskStore.save` captures the record's content before its first suspension
  (the engine keeps mutating a live task), and saves of one task take effect in call
  order.
- Ids reaching a store have passed :func:`~.lifecycle.valid_id`; stores that build paths
  from them check again.

Finished tasks are kept as serialized bytes, never as message objects: a stored task
costs its encoded size plus a small index entry (the bench holds 20,000 of them).
"""

from __future__ import annotations

import abc
from dataclasses import dataclass, field

from a2a_gateway.protocol.context import Caller
from lf.a2a.v1 import a2a_pb2 as pb

from .lifecycle import timestamp_ns, valid_id


@dataclass(slots=True)
class TaskRecord:
    """One stored task: the Task, its owner and its push configs; ``push_versions`` names,
    by config id, the A2A version a config was registered with when it is not 1.0
    (``"0.3"``): its deliveries take that version's shape."""

    task: pb.Task
    owner: Caller
    push_configs: list[pb.TaskPushNotificationConfig] = field(default_factory=list)
    push_versions: dict[str, str] = field(default_factory=dict)


class TaskSummary:
    """What ListTasks filters and sorts on, without loading the task."""

    __slots__ = ("context_id", "state", "task_id", "timestamp_ns")

    def __init__(self, task_id: str, context_id: str, state: int, timestamp_ns: int) -> None:
        self.task_id = task_id
        self.context_id = context_id
        self.state = state
        self.timestamp_ns = timestamp_ns

    @classmethod
    def of(cls, task: pb.Task) -> TaskSummary:
        return cls(task.id, task.context_id, task.status.state, timestamp_ns(task.status.timestamp))

    def __repr__(self) -> str:
        return f"TaskSummary({self.task_id!r}, state={self.state}, ts={self.timestamp_ns})"


class TaskStore(abc.ABC):
    """Persistent tasks, scoped by owner (see the module docstring for the contract).

    ``durable`` says whether records outlive the process. The engine writes
    intermediate states (for restart recovery) only to durable stores; every store
    gets each task's interrupted and final states.
    """

    durable: bool = True

    @abc.abstractmethod
    async def load(self, owner: Caller, task_id: str) -> TaskRecord | None:
        """The owner's task, or None (missing, another owner's, or unreadable)."""

    @abc.abstractmethod
    async def save(self, record: TaskRecord) -> None:
        """Create or replace ``record.task.id``."""

    @abc.abstractmethod
    async def summaries(self, owner: Caller) -> list[TaskSummary]:
        """One summary per task of ``owner``, in no particular order."""

    async def aclose(self) -> None:  # noqa: B027 - optional hook
        """Release resources (nothing by default)."""


class _Entry(TaskSummary):
    __slots__ = ("data", "push", "versions")

    def __init__(
        self, task: pb.Task, data: bytes, push: tuple[bytes, ...], versions: dict[str, str]
    ) -> None:
        super().__init__(
            task.id, task.context_id, task.status.state, timestamp_ns(task.status.timestamp)
        )
        self.data = data
        self.push = push
        self.versions = versions


class MemoryTaskStore(TaskStore):
    """Tasks in this process only, as serialized bytes (lost on restart)."""

    durable = False

    def __init__(self) -> None:
        self._by_owner: dict[Caller, dict[str, _Entry]] = {}

    async def load(self, owner: Caller, task_id: str) -> TaskRecord | None:
        entry = self._by_owner.get(owner, {}).get(task_id)
        if entry is None:
            return None
        configs = [pb.TaskPushNotificationConfig.FromString(data) for data in entry.push]
        return TaskRecord(pb.Task.FromString(entry.data), owner, configs, dict(entry.versions))

    async def save(self, record: TaskRecord) -> None:
        task = record.task
        if not valid_id(task.id):
            raise ValueError(f"invalid task id {task.id!r}")
        push = tuple(config.SerializeToString() for config in record.push_configs)
        entries = self._by_owner.setdefault(record.owner, {})
        versions = dict(record.push_versions)
        entries[task.id] = _Entry(task, task.SerializeToString(), push, versions)

    async def summaries(self, owner: Caller) -> list[TaskSummary]:
        return list(self._by_owner.get(owner, {}).values())

    def __len__(self) -> int:
        return sum(len(entries) for entries in self._by_owner.values())
