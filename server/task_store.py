"""Where tasks live: the records a store keeps and the store interface, the set of
its roles (``store_roles``; the in-memory store is ``memory_store``, the workspace
files ``file_store``, PostgreSQL ``pg_store``).

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

Finished tasks are kept as serialized bytes, never as message objects. Every store is
bounded by the work in flight, not by history: the workspace store keeps what ListTasks
filters and orders on in an index on disk (``task_index``); the memory store holds at
most ``max_tasks`` tasks and ``max_bytes`` bytes of them, dropping the least recently
written first.

ListTasks asks a store for pages (:meth:`TaskStore.page`, :meth:`TaskStore.count`) and
merges in the tasks whose newest state is still only in the engine's memory
(:func:`select_page`). The messageId retry keys (:meth:`TaskStore.find_message`) live in
the store too: on disk for the workspace store (they survive a restart), bounded in
memory for the memory store.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import ClassVar, Literal, NamedTuple

from a2a_gateway.protocol.context import Caller
from lf.a2a.v1 import a2a_pb2 as pb

from .store_roles import (
    CancelSignals,
    ContextClaims,
    EventLogs,
    PushConfigs,
    RetryKeys,
    StoreLife,
    TaskRecords,
)
from .task_states import timestamp_ns

#: messageIds longer than this are InvalidParams (they are keys of the retry index).
MAX_MESSAGE_ID_CHARS = 256
DEFAULT_MEMORY_TASKS = 50_000
DEFAULT_MEMORY_BYTES = 256 * 1024 * 1024
DEFAULT_RETRY_KEYS = 100_000
DEFAULT_RETRY_BYTES = 32 * 1024 * 1024
#: The pauses before a store operation that failed is tried again, where nothing would
#: make up for its loss (a run's final state, a batch of stream events, the push configs
#: read for a status change), then given up.
STORE_RETRY_PAUSES_S = (0.1, 1.0)


#: A status of a task as :func:`status_key` names it: (state, seconds, nanos, message id).
StatusKey = tuple[int, int, int, str]
#: ``TaskRecord.push_as_of`` of a task never stored: its configs are all in the record.
UNSTORED: StatusKey = (-1, 0, 0, "")
#: What :meth:`TaskStore.add_push_config` did: stored (added or replaced), refused
#: because the task holds the most it may, or nothing because the task is not there.
PushAdded = Literal["stored", "full", "missing"]


class StoredPush(NamedTuple):
    """A push config as a ``push_rows`` store holds it: the config (secrets opened), the
    A2A version it was registered over (``""``: 1.0), and when it was added (ns, on the
    reading process's wall clock, which stamps its status times; 0: with the task's
    creation)."""

    config: pb.TaskPushNotificationConfig
    version: str
    added_ns: int


def status_key(task: pb.Task) -> StatusKey:
    """Which status ``task`` is in (a new status has a new timestamp or message)."""
    status = task.status
    stamp = status.timestamp
    return (status.state, stamp.seconds, stamp.nanos, status.message.message_id)


#: A retry key without its owner (the record's): (messageId, message fingerprint).
MessageKey = tuple[str, str]


@dataclass(slots=True)
class TaskRecord:
    """One stored task: the Task, its owner and its push configs; ``push_versions`` names,
    by config id, the A2A version a config was registered with when it is not 1.0
    (``"0.3"``): its deliveries take that version's shape."""

    task: pb.Task
    owner: Caller
    push_configs: list[pb.TaskPushNotificationConfig] = field(default_factory=list)
    push_versions: dict[str, str] = field(default_factory=dict)
    #: Set by a store shared by several processes (PostgreSQL) when another live
    #: process holds the task's run lease: its run is not lost, so it is not recovered.
    held_elsewhere: bool = False
    #: How many stream events of the task the stored task reflects (a store that
    #: shares events between processes; 0 otherwise).
    event_seq: int = 0
    #: (``push_rows`` stores) The status of the task for which ``push_configs`` are
    #: what the store holds: the status a save stored (its answer brings back the
    #: configs stored then that were added by that status's time), :data:`UNSTORED`
    #: for a task never stored (no other process can know it), None when unknown (a
    #: status change reads them from the store).
    push_as_of: StatusKey | None = None
    #: (stores shared by several processes) The stored (state, status time in ns) the
    #: record was loaded with: :meth:`TaskStore.replace` stores a change only if the
    #: task is still so.
    loaded_as: tuple[int, int] | None = None
    #: Set by a shared store when a save was not stored because another process had
    #: already settled the task (it failed the run "server restarted" once the lease
    #: ran out): that process announced the task's end, so this one's later status
    #: changes go to no webhook.
    settled_elsewhere: bool = False
    #: The (messageId, fingerprint) retry keys of the messages that created or
    #: continued the task (``engine.retries``), kept in its record by stores whose
    #: index of those keys may fall behind their records (the workspace files: a
    #: restart recovers the keys from the files, see ``file_store``).
    retry_keys: list[MessageKey] = field(default_factory=list)


#: A place in the listing order: (status timestamp in ns, task id).
Position = tuple[int, str]


class Window(NamedTuple):
    """Which part of a ListTasks answer to read: up to ``limit`` rows sorting after
    ``cursor`` (``None``: from the newest), plus the stored rows of ``task_ids``."""

    cursor: Position | None
    limit: int
    task_ids: Sequence[str] = ()


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

    @property
    def position(self) -> Position:
        """Where it sorts: newest first is descending (timestamp, id)."""
        return (self.timestamp_ns, self.task_id)


#: What ``TaskStore.listing`` answers: the page, how many match in all, and the
#: stored summaries of the window's ``task_ids``.
Listing = tuple[list[TaskSummary], int, list[TaskSummary]]


@dataclass(frozen=True, slots=True)
class TaskFilter:
    """ListTasks filters: empty context / state 0 / ``after_ns`` None mean "any"."""

    context_id: str = ""
    state: int = 0
    after_ns: int | None = None

    def matches(self, summary: TaskSummary) -> bool:
        return (
            (not self.context_id or summary.context_id == self.context_id)
            and (not self.state or summary.state == self.state)
            and (self.after_ns is None or summary.timestamp_ns >= self.after_ns)
        )


class TaskStore(
    TaskRecords,
    RetryKeys,
    ContextClaims,
    EventLogs,
    PushConfigs,
    CancelSignals,
    StoreLife,
    abc.ABC,
):
    """Persistent tasks, scoped by owner (see the module docstring for the contract):
    the set of the roles of ``store_roles``, each a narrow protocol. The defaults here
    are those every kind of store shares; a store is this set with an implementation
    of each role (``memory_store``, ``file_store``, ``pg_store``, ``local_roles``).

    ``durable`` says whether records outlive the process. The engine writes
    intermediate states (for restart recovery) only to durable stores; every store
    gets each task's interrupted and final states.
    """

    durable: bool = True
    #: The ``store`` label of this store's metrics: one value per kind of store.
    kind: ClassVar[str] = "other"
    #: (``store_roles.EventLogs``) Whether stream events go to other processes.
    shares_events: bool = False
    claims_in_lookup: bool = False
    #: (``store_roles.PushConfigs``) Whether push configs are rows of their own.
    push_rows: bool = False

    @abc.abstractmethod
    async def load(self, owner: Caller, task_id: str) -> TaskRecord | None:
        """The owner's task, or None (missing, another owner's, or unreadable)."""

    def stored_bytes(self, owner: Caller, task_id: str) -> tuple[int, bytes] | None:
        """The owner's stored task as its state and serialized ``Task``, when the store
        has them at hand without waiting (the file store's stat-validated record cache:
        a retried send answers with these bytes, not a record parsed and copied); None:
        ask :meth:`load` (most stores; or missing, another owner's, unreadable)."""
        return None

    def stored_json(self, owner: Caller, task_id: str, read_once: bool) -> bytes | None:
        """The owner's stored task as the ProtoJSON its answer prints (``codec.to_json``
        of the task), when it is settled (no state in ``ACTIVE``) and the store holds
        that JSON at hand without waiting (the file store: its cached record, or, with
        ``read_once``, a task file the index vouches for, read for this answer alone
        and not kept: a retry's, not a GetTask's, which the next poll asks again); None:
        ask :meth:`stored_bytes` or :meth:`load` (most stores; or missing, another
        owner's, active, unreadable)."""
        return None

    @abc.abstractmethod
    async def save(self, record: TaskRecord) -> None:
        """Create or replace ``record.task.id``."""

    async def replace(self, record: TaskRecord) -> bool:
        """Store a change made where no run of the task exists (restart recovery,
        CancelTask of a task waiting for input, the hop guard failing one), unless
        the stored task changed since ``record`` was loaded (a store shared by
        several processes: another one recovered, cancelled or started running it
        meanwhile). False when it was not stored: the change is someone else's to
        make, and to announce."""
        await self.save(record)
        return True

    # --- listing ---------------------------------------------------------------------

    async def before_listing(self, owner: Caller) -> None:
        """Called before each ListTasks: notice changes made behind the store's back."""

    @abc.abstractmethod
    async def listing(self, owner: Caller, flt: TaskFilter, window: Window) -> Listing:
        """As one consistent reading of the stored tasks of ``owner``: up to ``limit``
        of those matching ``flt`` that sort after ``cursor`` (a (timestamp, id)
        position), newest first; how many match in all; and the stored summaries of
        ``task_ids`` (those that exist)."""

    async def count(self, owner: Caller, flt: TaskFilter) -> int:
        """How many stored tasks of ``owner`` match ``flt``."""
        return (await self.listing(owner, flt, Window(None, 0)))[1]

    @abc.abstractmethod
    async def active_ids(self, owner: Caller) -> list[str]:
        """The owner's stored tasks that are submitted or working (restart recovery)."""

    async def prefetch_for(self, owner: Caller, task_ids: Sequence[str], max_bytes: int) -> None:
        """These tasks of ``owner`` are about to be loaded, in order, until about
        ``max_bytes`` of them (a ListTasks page): a store that reads them from disk may
        read them ahead, concurrently."""

    async def refresh(self, owner: Caller, task_ids: Iterable[str]) -> None:
        """These listed tasks did not load: bring what listing knows of them up to date
        (nothing to do for a store whose listing reads the records themselves)."""

    # --- messageId retry keys --------------------------------------------------------

    @abc.abstractmethod
    def find_message(self, owner: Caller, message_id: str, fingerprint: str) -> str | None:
        """The task a message of ``owner`` created or continued, by its retry key (the
        messageId and the fingerprint of ``engine.retries``)."""

    async def lookup_message(self, owner: Caller, message_id: str, fingerprint: str) -> str | None:
        """:meth:`find_message` as the engine calls it: a store shared by several
        processes (PostgreSQL) asks its database here."""
        return self.find_message(owner, message_id, fingerprint)

    def found_message(self, owner: Caller, message_id: str, fingerprint: str) -> str | None:
        """What :meth:`lookup_message` would answer, when the store knows it without
        waiting (the file store's open index, its keys recovered); None: ask
        :meth:`lookup_message` (most stores; or no task has the key). A retried send's
        stored answer is checked with it (``engine/replay.py``)."""
        return None

    def replay_check(
        self, owner: Caller, message_id: str, fingerprint: str, task_id: str, task_bytes: bytes
    ) -> Callable[[], bool] | None:
        """A check, made without waiting on each later call, that :meth:`found_message`
        still names ``task_id`` for this key and :meth:`stored_bytes` still gives
        ``task_bytes`` in a state that is not active (the file store's index maps and
        the task file's ``stat``, prepared once); None: the store has no such check
        (most stores: a retried send goes down the engine's path each time). The
        retry memo's check (``engine/replay.py``)."""
        return None

    @abc.abstractmethod
    def remember_message(
        self, owner: Caller, message_id: str, fingerprint: str, task_id: str
    ) -> None:
        """Record a retry key (replacing one with the same owner, id and fingerprint)."""

    # --- several processes on one store ----------------------------------------------

    def on_outage(self, handler: Callable[[], None]) -> None:
        """A store on a database calls ``handler()`` when an outage of it starts (its
        calls raise ``store_outage.StoreOutageError`` meanwhile; nothing to do for a
        store without one)."""

    async def lookup_or_claim(
        self, owner: Caller, message_id: str, fingerprint: str, context_id: str, task_id: str
    ) -> tuple[str | None, bool]:
        """:meth:`lookup_message`, then, when no task has the retry key,
        :meth:`claim_context` of ``context_id`` for a new task ``task_id`` (a store on a
        database does both in one round trip): the task found (None: none), and
        whether the context was claimed (never when a task was found)."""
        found = await self.lookup_message(owner, message_id, fingerprint)
        if found is not None:
            return found, False
        return None, await self.claim_context(owner, context_id, task_id)

    def page_token_key(self) -> bytes | None:
        """The page-token key every process on a shared store uses (None: each
        engine has its own)."""
        return None

    async def summaries(self, owner: Caller) -> list[TaskSummary]:
        """Every stored task of ``owner`` (costs the whole history; tests only)."""
        await self.before_listing(owner)
        return (await self.listing(owner, TaskFilter(), Window(None, 1 << 62)))[0]

    async def count_by_state(self) -> Mapping[int, int] | None:
        """How many stored tasks are in each state (TaskState number -> count), for the
        ``a2a_tasks`` gauge at scrape time; from what the store keeps anyway (never a
        scan of task files). None: this store does not count."""
        return None

    async def readiness(self) -> str | None:
        """None when the store can serve, else a short fixed reason (``/readyz``; never
        an exception's text, which may quote a database URL). Ready by default."""
        return None

    async def start(self) -> None:
        """Open what the store needs (a database: connect and migrate); nothing by
        default. The engine that holds the store starts and closes it."""

    def store_gauges(self) -> Mapping[str, int]:
        """What this store keeps count of for ``/metrics``, read at scrape time (cheap,
        on the event loop): names of :data:`a2a_gateway.server.metrics.STORE_GAUGES`.
        Nothing by default."""
        return {}

    async def aclose(self) -> None:
        """Release resources (nothing by default)."""


async def select_page(
    store: TaskRecords,
    owner: Caller,
    flt: TaskFilter,
    cursor: Position | None,
    limit: int,
    live: Mapping[str, TaskSummary],
) -> tuple[list[TaskSummary], int, bool]:
    """(page, total matching, whether more follow) of the owner's tasks, where ``live``
    (the owner's live runs, by id) overrides what the store has for those tasks.

    The store is asked for ``limit + 1 + len(live)`` rows after the cursor, so that
    dropping its rows of live tasks still leaves enough; the cost is the page plus the
    live runs, never the history."""
    window = Window(cursor, limit + 1 + len(live), list(live))
    rows, total, stored_live = await store.listing(owner, flt, window)
    live_matching = [s for s in live.values() if flt.matches(s)]
    total += len(live_matching) - sum(1 for s in stored_live if flt.matches(s))
    merged = [s for s in rows if s.task_id not in live]
    merged += [s for s in live_matching if cursor is None or s.position < cursor]
    merged.sort(key=lambda s: s.position, reverse=True)
    return merged[:limit], total, len(merged) > limit
