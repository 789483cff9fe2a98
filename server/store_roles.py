"""The roles a task store plays, each a narrow interface (``typing.Protocol``).

A store is the set of its roles: :class:`~a2a_gateway.server.task_store.TaskStore`
subclasses every protocol below, so mypy checks each implementation (memory, file,
PostgreSQL) against each role, and a part of the engine that uses one role can ask
for that role alone. The contract of each method is in ``TaskStore``'s docstrings.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Protocol

from a2a_gateway.protocol.context import Caller
from lf.a2a.v1 import a2a_pb2 as pb

if TYPE_CHECKING:
    from .task_store import (
        Listing,
        PushAdded,
        StoredPush,
        TaskFilter,
        TaskRecord,
        TaskSummary,
        Window,
    )


class TaskRecords(Protocol):
    """Tasks: save, load, replace, list and count (scoped by owner)."""

    async def load(self, owner: Caller, task_id: str) -> TaskRecord | None: ...

    async def save(self, record: TaskRecord) -> None: ...

    async def replace(self, record: TaskRecord) -> bool: ...

    async def before_listing(self, owner: Caller) -> None: ...

    async def listing(self, owner: Caller, flt: TaskFilter, window: Window) -> Listing: ...

    async def count(self, owner: Caller, flt: TaskFilter) -> int: ...

    async def active_ids(self, owner: Caller) -> list[str]: ...

    async def prefetch_for(
        self, owner: Caller, task_ids: Sequence[str], max_bytes: int
    ) -> None: ...

    async def refresh(self, owner: Caller, task_ids: Iterable[str]) -> None: ...

    async def summaries(self, owner: Caller) -> list[TaskSummary]: ...

    async def count_by_state(self) -> Mapping[int, int] | None: ...


class RetryKeys(Protocol):
    """The messageId retry index: which task a message created or continued."""

    def find_message(self, owner: Caller, message_id: str, fingerprint: str) -> str | None: ...

    async def lookup_message(
        self, owner: Caller, message_id: str, fingerprint: str
    ) -> str | None: ...

    def remember_message(
        self, owner: Caller, message_id: str, fingerprint: str, task_id: str
    ) -> None: ...


class ContextClaims(Protocol):
    """Claims (leases, on a shared store) of the contexts where runs go on."""

    async def claim_context(
        self,
        owner: Caller,
        context_id: str,
        task_id: str,
        loaded_as: tuple[int, int] | None = None,
    ) -> bool: ...

    async def release_context(self, owner: Caller, context_id: str, task_id: str) -> None: ...

    async def lookup_or_claim(
        self, owner: Caller, message_id: str, fingerprint: str, context_id: str, task_id: str
    ) -> tuple[str | None, bool]: ...


class EventLogs(Protocol):
    """Each task's event log: append, read after a sequence number, follow."""

    def log_event(
        self, task_id: str, event: pb.StreamResponse, state: int | None
    ) -> int | None: ...

    def follow(
        self,
        task_id: str,
        after_seq: int,
        deliver: Callable[[list[pb.StreamResponse] | None, int], bool],
    ) -> None: ...

    async def hand_over(self, task_id: str) -> int | None: ...

    def followed_seq(self, task_id: str) -> int | None: ...

    async def read_events(
        self, task_id: str, after_seq: int, upto_seq: int, owner: Caller | None = None
    ) -> list[pb.StreamResponse]: ...

    def start_event_log(self, owner: Caller, task_id: str) -> int | None: ...

    async def open_event_log(self, owner: Caller, task_id: str, *, create: bool) -> int | None: ...

    def close_event_log(self, task_id: str) -> None: ...

    async def event_bounds(self, owner: Caller, task_id: str) -> tuple[int, int] | None: ...


class PushConfigs(Protocol):
    """Push configs as rows of their own (``push_rows`` stores)."""

    async def add_push_config(
        self,
        owner: Caller,
        task_id: str,
        config: pb.TaskPushNotificationConfig,
        version: str,
        most: int,
    ) -> PushAdded: ...

    async def remove_push_config(self, owner: Caller, task_id: str, config_id: str) -> None: ...

    async def read_push_configs(self, task_id: str) -> list[StoredPush]: ...


class CancelSignals(Protocol):
    """Cancellation asked of the process running a task (a store shared by several)."""

    async def request_cancel(self, task_id: str) -> bool: ...

    def on_cancel_request(self, handler: Callable[[str], None]) -> None: ...


class StoreLife(Protocol):
    """Opening, closing and watching the store (readiness, outages, gauges)."""

    async def start(self) -> None: ...

    async def aclose(self) -> None: ...

    async def readiness(self) -> str | None: ...

    def on_outage(self, handler: Callable[[], None]) -> None: ...

    def store_gauges(self) -> Mapping[str, int]: ...

    def page_token_key(self) -> bytes | None: ...


__all__ = [
    "CancelSignals",
    "ContextClaims",
    "EventLogs",
    "PushConfigs",
    "RetryKeys",
    "StoreLife",
    "TaskRecords",
]
