"""The roles a task store plays, each a narrow interface (``typing.Protocol``).

A store is the set of its roles: :class:`~a2a_gateway.server.task_store.TaskStore`
subclasses every protocol below, so mypy checks each implementation (memory, file,
PostgreSQL) against each role, and each part of the engine holds the roles it uses
alone. Each role has an implementation per kind of store, each in a module of its
own: ``memory_store/`` (tasks, retry keys), ``file_store/`` (the task files: reads,
writes, retention; retry keys on the index; the folder's life) and ``pg_store/`` (one
module per role, over its connection); a store of one process (memory, files) shares
its claims, cancel signals, event logs (over its ``event_log``) and push configs (in
the records) from ``local_roles``.

The contract of each method is in its docstring here, or, for those every store
shares a default of, in ``TaskStore``'s.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Protocol

from a2a_gateway.protocol.context import Caller
from lf.a2a.v1 import a2a_pb2 as pb

from .events import Event

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

    #: Whether records outlive the process (see ``TaskStore``).
    durable: bool

    async def load(self, owner: Caller, task_id: str) -> TaskRecord | None: ...

    def stored_bytes(self, owner: Caller, task_id: str) -> tuple[int, bytes] | None: ...

    def stored_json(self, owner: Caller, task_id: str, read_once: bool) -> bytes | None: ...

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

    def found_message(self, owner: Caller, message_id: str, fingerprint: str) -> str | None: ...

    def replay_check(
        self, owner: Caller, message_id: str, fingerprint: str, task_id: str, task_bytes: bytes
    ) -> Callable[[], bool] | None: ...

    def remember_message(
        self, owner: Caller, message_id: str, fingerprint: str, task_id: str
    ) -> None: ...


class ContextClaims(Protocol):
    """Claims (leases, on a shared store) of the contexts where runs go on."""

    #: The store claims a new task's context in the round trip of its retry lookup
    #: (:meth:`lookup_or_claim`; a database): the engine then asks them together.
    claims_in_lookup: bool

    async def claim_context(
        self,
        owner: Caller,
        context_id: str,
        task_id: str,
        loaded_as: tuple[int, int] | None = None,
    ) -> bool:
        """Before a run of ``task_id`` starts in ``context_id``: whether no other process
        on a shared store runs one there (then the context is this run's until its task
        is saved settled or interrupted, or :meth:`release_context`), and, for a stored
        task read as ``loaded_as`` (``TaskRecord.loaded_as``), whether it is still
        stored so (no other process ran or cancelled it since). Always True for a
        store of one process: the engine's own table of busy contexts decides."""
        ...

    async def release_context(self, owner: Caller, context_id: str, task_id: str) -> None:
        """Give back a claim whose run did not start."""
        ...

    async def lookup_or_claim(
        self, owner: Caller, message_id: str, fingerprint: str, context_id: str, task_id: str
    ) -> tuple[str | None, bool]: ...


class EventLogs(Protocol):
    """Each task's event log: append, read after a sequence number, follow."""

    #: Whether stream events go through the store to subscribers in other processes.
    shares_events: bool

    def log_event(self, task_id: str, event: Event, state: int | None) -> int | None:
        """An event of the task, to its log (``shares_events`` stores: for the
        subscribers of other processes too); ``state`` is set for status events. Its
        number in the task's log (None when not logged)."""
        ...

    def follow(
        self,
        task_id: str,
        after_seq: int,
        deliver: Callable[[list[pb.StreamResponse] | None, int], bool],
    ) -> None:
        """(``shares_events`` stores) Call ``deliver(events, first_seq)`` with the
        events of ``task_id`` after ``after_seq``, in order, as another process logs
        them (``first_seq``: the number of the first), until it returns False (an
        empty ``events`` asks whether anyone still listens);
        ``deliver(None, 0)`` when the run's process is gone (its lease expired)."""
        ...

    async def hand_over(self, task_id: str) -> int | None:
        """(``shares_events`` stores) This process claimed the context of ``task_id``
        to run it (a continuation): its :meth:`follow`, if any, first delivers every
        event logged before the claim (waiting a bounded time for those not committed
        yet), then ends. The number of the last event before this process's run when
        the task was followed (a subscriber short of it missed events), else None."""
        ...

    def followed_seq(self, task_id: str) -> int | None:
        """(``shares_events`` stores) The number of the last event of ``task_id`` its
        :meth:`follow` delivered (None when the task is not followed)."""
        ...

    async def read_events(
        self, task_id: str, after_seq: int, upto_seq: int, owner: Caller | None = None
    ) -> list[pb.StreamResponse]:
        """The logged events of ``task_id`` (of ``owner``, when known) numbered
        ``after_seq + 1`` to ``upto_seq`` that are still kept, in order."""
        ...

    def start_event_log(self, owner: Caller, task_id: str, *, renewed: bool = False) -> int | None:
        """The task is streamed here: log its events from now on (a store of one
        process opens its log, a new one if none is open: call :meth:`open_event_log`
        first for a task that may have one on disk; ``renewed``: the task is not new,
        so a new log numbers above any it had). The number of its last logged event
        (None: not logged)."""
        ...

    async def open_event_log(self, owner: Caller, task_id: str, *, create: bool) -> int | None:
        """(a store of one process) Open the task's log if it has one (a new one with
        ``create``), so that :meth:`log_event` numbers its events; its last event's
        number, None when it has none."""
        ...

    def close_event_log(self, task_id: str) -> None:
        """(a store of one process) No run or stream of the task is left here: what an
        open log holds in memory to append may go (its events stay kept)."""
        ...

    async def event_bounds(self, owner: Caller, task_id: str) -> tuple[int, int] | None:
        """(first kept, last) numbers of the task's logged events (first = last + 1
        when none is kept), None when it has no log."""
        ...


class PushConfigs(Protocol):
    """Push configs as rows of their own (``push_rows`` stores)."""

    #: Whether push configs are rows of their own that any process changes one at a
    #: time (:meth:`add_push_config`, :meth:`remove_push_config`): a save writes a
    #: task's configs only when it creates the task, and refreshes the record's from
    #: the store (``TaskRecord.push_as_of``). Otherwise a save writes the record's.
    push_rows: bool

    async def add_push_config(
        self,
        owner: Caller,
        task_id: str,
        config: pb.TaskPushNotificationConfig,
        version: str,
        most: int,
    ) -> PushAdded:
        """(``push_rows`` stores) Add ``config`` to the owner's task, or replace the one
        with its id, registered over A2A ``version`` (``""``: 1.0); "full" when it is
        new and the task already holds ``most`` (decided atomically)."""
        ...

    async def remove_push_config(self, owner: Caller, task_id: str, config_id: str) -> None:
        """(``push_rows`` stores) Remove a config of the owner's task (if it is there)."""
        ...

    async def read_push_configs(self, task_id: str) -> list[StoredPush]:
        """(``push_rows`` stores) The task's push configs as stored now, in the order
        they were added."""
        ...


class CancelSignals(Protocol):
    """Cancellation asked of the process running a task (a store shared by several)."""

    async def request_cancel(self, task_id: str) -> bool:
        """Ask the process running ``task_id`` to cancel it; False when the store is not
        shared (no other process can be running it)."""
        ...

    def on_cancel_request(self, handler: Callable[[str], None]) -> None:
        """A store shared by several processes calls ``handler(task_id)`` when another
        process asks for the cancellation of a run (nothing to do for one process)."""
        ...


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
