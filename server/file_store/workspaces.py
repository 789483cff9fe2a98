"""Each owner's tasks in the store of its own workspace."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Coroutine, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from a2a_gateway.protocol.context import Caller
from lf.a2a.v1 import a2a_pb2 as pb

from ..events import Event
from ..local_roles import (
    NoOtherProcessEvents,
    OneProcessCancels,
    OneProcessClaims,
    PushConfigsInRecords,
)
from ..task_store import Listing, TaskFilter, TaskRecord, Window
from .store import WorkspaceTaskStore


class WorkspaceTaskStores(
    OneProcessClaims, PushConfigsInRecords, OneProcessCancels, NoOtherProcessEvents
):
    """Routes each owner to the store of its own workspace.

    Callers authenticated from ``<ws>/.a2a/callers.json`` have ``workspace == str(ws)``;
    their tasks live in ``<ws>/.a2a/tasks``. Callers without a workspace (anonymous)
    use ``default``. ``options`` go to every :class:`WorkspaceTaskStore`.
    """

    kind = "files"

    def __init__(self, default: Path, *, fsync: bool = False, **options: Any) -> None:
        self.fsync = fsync
        self.options = options
        self.default = WorkspaceTaskStore(default, fsync=fsync, **options)
        self._stores: dict[str, WorkspaceTaskStore] = {}
        self._logging: dict[str, WorkspaceTaskStore] = {}  # the store of each open log

    def store_for(self, owner: Caller) -> WorkspaceTaskStore:
        if not owner.workspace:
            return self.default
        store = self._stores.get(owner.workspace)
        if store is None:
            store = self._stores[owner.workspace] = WorkspaceTaskStore(
                Path(owner.workspace), fsync=self.fsync, **self.options
            )
        return store

    def stores(self) -> list[WorkspaceTaskStore]:
        return [self.default, *self._stores.values()]

    async def count_by_state(self) -> Mapping[int, int] | None:
        """The sums over the workspaces' stores opened so far (a workspace whose callers
        have not called since the start is not counted), each folder once: the default
        store may be a workspace's too (they share its index)."""
        by_index = {id(store.index): store for store in self.stores()}
        total: Counter[int] = Counter()
        for store in by_index.values():
            total.update(await store.count_by_state() or {})
        return total

    def store_gauges(self) -> Mapping[str, int]:
        """The rebuilds of the workspaces' indexes opened so far, each index once."""
        indexes = {id(store.index): store.index for store in self.stores()}
        return {"index_rebuilds": sum(index.rebuilds for index in indexes.values())}

    # The two reads of a retried send hand back the workspace store's own coroutine
    # (not awaited in one of their own: a frame less per call; docs/performance.md).
    def load(self, owner: Caller, task_id: str) -> Coroutine[Any, Any, TaskRecord | None]:
        return self.store_for(owner).load(owner, task_id)

    # The memo's check (server/retry_memo.py) makes these two reads on every kept
    # answer: store_for written out (a frame less each).
    def stored_bytes(self, owner: Caller, task_id: str) -> tuple[int, bytes] | None:
        store = self._stores.get(owner.workspace) if owner.workspace else self.default
        if store is None:
            store = self.store_for(owner)
        return store.stored_bytes(owner, task_id)

    def stored_json(self, owner: Caller, task_id: str, read_once: bool) -> bytes | None:
        return self.store_for(owner).stored_json(owner, task_id, read_once)

    def replay_check(
        self, owner: Caller, message_id: str, fingerprint: str, task_id: str, task_bytes: bytes
    ) -> Callable[[], bool] | None:
        # The workspace store's own check: no frame of the router's on each call.
        return self.store_for(owner).replay_check(
            owner, message_id, fingerprint, task_id, task_bytes
        )

    async def save(self, record: TaskRecord) -> None:
        await self.store_for(record.owner).save(record)

    async def before_listing(self, owner: Caller) -> None:
        await self.store_for(owner).before_listing(owner)

    async def listing(self, owner: Caller, flt: TaskFilter, window: Window) -> Listing:
        return await self.store_for(owner).listing(owner, flt, window)

    async def active_ids(self, owner: Caller) -> list[str]:
        return await self.store_for(owner).active_ids(owner)

    async def refresh(self, owner: Caller, task_ids: Iterable[str]) -> None:
        await self.store_for(owner).refresh(owner, task_ids)

    async def prefetch_for(self, owner: Caller, task_ids: Sequence[str], max_bytes: int) -> None:
        await self.store_for(owner).prefetch_for(owner, task_ids, max_bytes)

    def find_message(self, owner: Caller, message_id: str, fingerprint: str) -> str | None:
        return self.store_for(owner).find_message(owner, message_id, fingerprint)

    def lookup_message(
        self, owner: Caller, message_id: str, fingerprint: str
    ) -> Coroutine[Any, Any, str | None]:
        return self.store_for(owner).lookup_message(owner, message_id, fingerprint)

    def found_message(self, owner: Caller, message_id: str, fingerprint: str) -> str | None:
        store = self._stores.get(owner.workspace) if owner.workspace else self.default
        if store is None:
            store = self.store_for(owner)
        return store.found_message(owner, message_id, fingerprint)

    def remember_message(
        self, owner: Caller, message_id: str, fingerprint: str, task_id: str
    ) -> None:
        self.store_for(owner).remember_message(owner, message_id, fingerprint, task_id)

    def start_event_log(self, owner: Caller, task_id: str, *, renewed: bool = False) -> int | None:
        store = self._logging[task_id] = self.store_for(owner)
        return store.start_event_log(owner, task_id, renewed=renewed)

    async def open_event_log(self, owner: Caller, task_id: str, *, create: bool) -> int | None:
        store = self.store_for(owner)
        last = await store.open_event_log(owner, task_id, create=create)
        if last is not None:
            self._logging[task_id] = store
        return last

    def close_event_log(self, task_id: str) -> None:
        store = self._logging.pop(task_id, None)
        if store is not None:
            store.close_event_log(task_id)

    def log_event(self, task_id: str, event: Event, state: int | None) -> int | None:
        store = self._logging.get(task_id)
        return None if store is None else store.log_event(task_id, event, state)

    async def event_bounds(self, owner: Caller, task_id: str) -> tuple[int, int] | None:
        return await self.store_for(owner).event_bounds(owner, task_id)

    async def read_events(
        self, task_id: str, after_seq: int, upto_seq: int, owner: Caller | None = None
    ) -> list[pb.StreamResponse]:
        store = self._logging.get(task_id) if owner is None else self.store_for(owner)
        return [] if store is None else await store.read_events(task_id, after_seq, upto_seq)

    async def readiness(self) -> str | None:
        """The first store not ready (the default workspace's and those opened so far)."""
        for store in self.stores():
            why = await store.readiness()
            if why is not None:
                return why
        return None

    async def start(self) -> None:
        """The default workspace's store (the others load at their first use)."""
        await self.default.start()

    async def aclose(self) -> None:
        for store in self.stores():
            await store.aclose()
