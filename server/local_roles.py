"""The roles a store of one process plays the same way whatever holds its tasks
(``memory_store``, ``file_store``): no other process can run, claim or cancel a task
of its, its push configs are in its records, and its stream events are kept in its
own ``event_log`` (memory or files, see ``event_log``). Their contracts are in
``store_roles``; the PostgreSQL store's are in ``pg_store``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Generic, TypeVar

from a2a_gateway.protocol.context import Caller
from lf.a2a.v1 import a2a_pb2 as pb

from .event_log import EventLog
from .events import Event
from .task_store import PushAdded, StoredPush, TaskStore

#: The kind of event log a store of one process keeps (memory, files).
Log = TypeVar("Log", bound=EventLog)


class OneProcessClaims(TaskStore):
    """Context claims of a store of one process: always granted (the engine's own table
    of busy contexts decides)."""

    async def claim_context(
        self,
        owner: Caller,
        context_id: str,
        task_id: str,
        loaded_as: tuple[int, int] | None = None,
    ) -> bool:
        return True

    async def release_context(self, owner: Caller, context_id: str, task_id: str) -> None:
        """Nothing was claimed."""


class OneProcessCancels(TaskStore):
    """Cancel signals of a store of one process: no other process can be running a
    task, so there is nobody to ask and nobody asks."""

    async def request_cancel(self, task_id: str) -> bool:
        return False

    def on_cancel_request(self, handler: Callable[[str], None]) -> None:
        """No other process asks."""


class PushConfigsInRecords(TaskStore):
    """Push configs kept in each task's record (``push_rows`` False): a save writes the
    record's, so the row operations are never called."""

    push_rows = False

    async def add_push_config(
        self,
        owner: Caller,
        task_id: str,
        config: pb.TaskPushNotificationConfig,
        version: str,
        most: int,
    ) -> PushAdded:
        raise NotImplementedError

    async def remove_push_config(self, owner: Caller, task_id: str, config_id: str) -> None:
        raise NotImplementedError

    async def read_push_configs(self, task_id: str) -> list[StoredPush]:
        raise NotImplementedError


class NoOtherProcessEvents(TaskStore):
    """The event-log hooks of a store no other process writes to: nothing to follow or
    hand over (the workspace router and each store of one process)."""

    shares_events = False

    def follow(
        self,
        task_id: str,
        after_seq: int,
        deliver: Callable[[list[pb.StreamResponse] | None, int], bool],
    ) -> None:
        """No other process logs events of the store's tasks."""

    async def hand_over(self, task_id: str) -> int | None:
        return None

    def followed_seq(self, task_id: str) -> int | None:
        return None


class OneProcessEventLogs(NoOtherProcessEvents, Generic[Log]):
    """The tasks' event logs of a store of one process: its ``event_log`` (set by the
    store), which no other process follows."""

    #: The tasks' event logs, which the methods below read and write.
    event_log: Log

    def log_event(self, task_id: str, event: Event, state: int | None) -> int | None:
        return self.event_log.append(task_id, event)

    async def read_events(
        self, task_id: str, after_seq: int, upto_seq: int, owner: Caller | None = None
    ) -> list[pb.StreamResponse]:
        return await self.event_log.read(task_id, after_seq, upto_seq)

    def start_event_log(self, owner: Caller, task_id: str, *, renewed: bool = False) -> int | None:
        return self.event_log.start(task_id, renewed)

    async def open_event_log(self, owner: Caller, task_id: str, *, create: bool) -> int | None:
        return await self.event_log.open(task_id, create)

    def close_event_log(self, task_id: str) -> None:
        self.event_log.close(task_id)

    async def event_bounds(self, owner: Caller, task_id: str) -> tuple[int, int] | None:
        return await self.event_log.bounds(task_id)


__all__ = [
    "OneProcessCancels",
    "OneProcessClaims",
    "OneProcessEventLogs",
    "PushConfigsInRecords",
]
