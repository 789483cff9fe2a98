"""What the engine's parts share: its settings, the tables of live runs, and the few
operations on those tables every part needs (find a caller's live run, join or leave a
task's hub, show a new status)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
from collections.abc import (
    AsyncIterator,
    Callable,
    Iterator,
    Mapping,
)
from pathlib import Path
from typing import Any, Protocol

from a2a_gateway.agent.base import Agent, Signal, Turn
from a2a_gateway.protocol.context import CallContext, Caller
from a2a_gateway.protocol.errors import (
    A2AError,
    FieldViolation,
    InternalError,
    InvalidParamsError,
    TaskNotFoundError,
    UnavailableError,
)
from lf.a2a.v1 import a2a_pb2 as pb

from ..events import ChunkStream, Event, Hub, Subscriber
from ..limits import RunSlot, TaskLimiter
from ..outbound import OutboundClient
from ..paging import PageTokens
from ..push import PushDispatcher
from ..store_outage import StoreOutageError
from ..store_roles import ContextClaims, EventLogs, PushConfigs, RetryKeys, StoreLife
from ..task_states import TERMINAL
from ..task_store import TaskRecord
from .push_feed import PushFeed
from .retries import RetryKey

CONTEXT_BUSY = "context busy, retry when the current task ends"
NO_STREAMING = "this agent does not stream: use SendMessage"
UNEXPECTED = "The run failed unexpectedly."
SERVER_RESTARTED = "server restarted"
SHUTDOWN = "The server shut down during the run."
DEFAULT_PAGE_SIZE = 50
MAX_PAGE_SIZE = 100
DEFAULT_LIST_MAX_BYTES = 8 * 1024 * 1024  # one ListTasks answer's tasks, encoded
MAX_PUSH_CONFIGS = 10
FLUSH_DELAY_S = 0.05  # how long a live task's status may stay in memory only
SAVED_AS_KEY = "a2a-gateway.savedAs"  # Part.metadata: where a received file was saved
EVENTS_GONE = "The task's recent events could not be read; resubscribe with SubscribeToTask."
#: Why a subscription to a run in another process ended: that process stopped.
RUN_LOST = "The gateway running this task stopped; resubscribe to read its outcome."

ContextKey = tuple[str, str, str]  # (caller workspace, caller name, context or message id)


class StateStore(EventLogs, RetryKeys, PushConfigs, StoreLife, Protocol):
    """The roles of the store the shared state uses: the tasks' event logs (streams),
    the retry keys, whether push configs are rows (the push feed reads them) and the
    store's outages and page-token key."""


log = logging.getLogger(__name__)


def invalid(field: str, description: str) -> InvalidParamsError:
    return InvalidParamsError(
        f"{field}: {description}", violations=[FieldViolation(field, description)]
    )


def not_found(task_id: str) -> TaskNotFoundError:
    return TaskNotFoundError(f"Task {task_id} not found", metadata={"taskId": task_id})


@contextlib.contextmanager
def store_failure_as_internal(what: str) -> Iterator[None]:
    """A store call whose caller waits on it and nothing retries: a failure is logged
    with its traceback and answered InternalError("``what``", without the server's
    details)."""
    try:
        yield
    except StoreOutageError:
        raise  # UNAVAILABLE, the outage logged once by the store
    except Exception:
        log.exception("store call failed: %s", what)
        raise InternalError(what) from None


class Run:
    """A task with a live run (one agent turn) in this engine."""

    __slots__ = (
        "aio",
        "awaiting_auth",
        "busy_key",
        "chunk_stream",
        "continued",
        "deadline",
        "dirty",
        "eager",
        "file_notes",
        "finished",
        "pending_text",
        "record",
        "replyable",
        "response_index",
        "settled",
        "slot",
        "status_data",
        "stopping",
        "turn",
        "unstored",
    )

    def __init__(
        self, record: TaskRecord, busy_key: ContextKey, turn: Turn, slot: RunSlot | None
    ) -> None:
        self.slot = slot  # the caller's task-cap slot, given back when the run ends
        self.record = record
        self.busy_key = busy_key
        self.turn = turn
        self.aio: asyncio.Task[None] | None = None
        #: Loop time by which the run must end (``Runner``'s one timer of all runs);
        #: infinite until the run drives, and again once it stops driving.
        self.deadline = math.inf
        self.settled = Signal()  # set once the run's final state is stored and shown
        #: Set with ``settled``, or as the run waits for out-of-band credentials
        #: (AUTH_REQUIRED while it goes on): a blocking send answers then.
        self.replyable = Signal()
        self.awaiting_auth = False
        self.finished = False
        self.stopping = ""  # why the engine is stopping the run (timeout, shutdown)
        self.dirty = False
        self.response_index = -1  # index of the response artifact, once this run wrote it
        #: The ids of the response artifact's chunk events, once one was shown.
        self.chunk_stream: ChunkStream | None = None
        # Response text streamed since the artifact was last written (see flush_text).
        self.pending_text: list[str] = []
        self.file_notes: tuple[str, ...] = ()  # outgoing files skipped, for the final status
        self.status_data: Mapping[str, Any] | None = None  # InputRequired.schema, if any
        #: Its final state could not be stored (the store's database was away): a
        #: blocking send answers this error, not a task the store does not hold.
        self.unstored: StoreOutageError | None = None
        #: The run continues a stored task (not one it created): a log opened for a
        #: stream that joins it is numbered above any log the task had.
        self.continued = False
        #: Left by ``Runner.start`` to its sender (a SendMessage), which drives or
        #: launches it in the step it started, before anything else can see the run.
        self.eager = False

    def flush_text(self) -> None:
        """Append the response text streamed since the last flush to the response
        artifact's last text part, so that the stored answer is one text part.

        Deltas are gathered here rather than appended to the part one by one: the
        protobuf runtime copies a string field into the task's arena on every
        assignment and frees nothing before the task goes, so a part grown delta by
        delta would hold every prefix of the answer (megabytes for a long one).
        Everything that reads a live task (``EngineState.live``, a save, a status
        change, another artifact) flushes first."""
        pending = self.pending_text
        if not pending:
            return
        text = "".join(pending)
        pending.clear()
        parts = self.record.task.artifacts[self.response_index].parts
        if parts and parts[-1].WhichOneof("content") == "text":
            parts[-1].text += text
        else:
            parts.add(text=text)


class KeyedLocks:
    """One asyncio.Lock per task id, alive only while someone holds or awaits it."""

    def __init__(self) -> None:
        self._locks: dict[str, tuple[asyncio.Lock, int]] = {}

    @contextlib.asynccontextmanager
    async def hold(self, key: str) -> AsyncIterator[None]:
        lock, users = self._locks.get(key) or (asyncio.Lock(), 0)
        self._locks[key] = (lock, users + 1)
        try:
            async with lock:
                yield
        finally:
            lock, users = self._locks[key]
            if users <= 1:
                del self._locks[key]
            else:
                self._locks[key] = (lock, users - 1)


class EngineState:
    """The engine's settings (see :class:`~.task_engine.TaskEngine`) and its tables:
    live runs by task id, the busy contexts, the hubs of the
    task streams, the per-task locks and the page tokens."""

    def __init__(
        self,
        agent: Agent,
        store: StateStore,
        *,
        max_hops: int,
        extended_card: Callable[[CallContext], pb.AgentCard] | None,
        push_enabled: bool,
        run_timeout_s: float,
        cancel_grace_s: float,
        list_max_bytes: int,
        task_limiter: TaskLimiter | None,
        push: PushDispatcher | None,
        outbound: OutboundClient | None,
        default_workspace: Path | None,
        max_file_bytes: int,
    ) -> None:
        self.agent = agent
        self.store = store
        self.max_hops = max_hops
        self.extended_card = extended_card
        self.push_enabled = push_enabled
        self.run_timeout_s = run_timeout_s
        self.cancel_grace_s = cancel_grace_s
        self.list_max_bytes = list_max_bytes
        self.task_limiter = task_limiter
        self.push = push
        # Configs any process changes (a shared store): each status change reads them.
        self.push_feed = PushFeed(store, push) if push is not None and store.push_rows else None
        self.outbound = outbound
        self.default_workspace = default_workspace
        self.max_file_bytes = max_file_bytes
        self.runs: dict[str, Run] = {}
        self.busy: dict[ContextKey, str] = {}
        self.hubs: dict[str, Hub] = {}
        self.locks = KeyedLocks()
        self.tokens = PageTokens(shared=store.page_token_key)
        self.closing = False
        self.shared_events = store.shares_events  # events also go to other processes
        #: (a store of one process) The tasks whose events are logged: those streamed
        #: here while a run or a stream of theirs is (see ``..event_log``).
        self.logged: set[str] = set()
        #: Bumped whenever :meth:`retried_here` may answer differently: a key remembered
        #: here, or found (a shared store keeps the keys it read). A send whose agent
        #: ``reply`` hook ran while this stayed put need not look again.
        self.keys_learned = 0
        # Streams follow events the database carries: they end when it goes away.
        store.on_outage(lambda: self.end_streams(StoreOutageError()))

    def end_streams(self, error: A2AError) -> None:
        """End every open stream with ``error`` (UNAVAILABLE: its client subscribes
        again, where and when it can); the runs go on."""
        for hub in self.hubs.values():
            hub.close(error)
        self.hubs.clear()

    def live(self, caller: Caller, task_id: str) -> Run | None:
        """The caller's live run of ``task_id`` (another caller's is not found), its
        streamed text flushed into the task (the caller is about to read or change it)."""
        run = self.runs.get(task_id)
        if run is None or run.record.owner != caller:
            return None
        run.flush_text()
        return run

    def subscribe(self, task_id: str, subscriber: Subscriber, owner: Caller | None = None) -> int:
        """Add the stream to the task's hub; with ``owner`` (a task streamed here from
        now on) the task's events are logged, and the stream starts at the last one
        (its snapshot's number, which is returned: -1 when not logged)."""
        hub = self.hubs.get(task_id)
        if hub is None:
            hub = self.hubs[task_id] = Hub()
        hub.add(subscriber)
        if owner is None:
            return subscriber.seq
        run = self.runs.get(task_id)
        seq = self.store.start_event_log(owner, task_id, renewed=run is not None and run.continued)
        if seq is not None:
            if not self.shared_events:
                self.logged.add(task_id)
            subscriber.seq = seq
        return self.snapshot_seq(task_id, subscriber)

    def snapshot_seq(self, task_id: str, subscriber: Subscriber) -> int:
        """The number of the snapshot of a stream that just joined (-1: not logged)."""
        return subscriber.seq if self.shared_events or task_id in self.logged else -1

    async def open_log(self, owner: Caller, task_id: str, *, create: bool) -> None:
        """Before a stream joins a stored task, or a run of it starts: open its event
        log (``create``: a new one if it has none), so its events go on being numbered
        where they were."""
        if self.shared_events:
            return
        if await self.store.open_event_log(owner, task_id, create=create) is not None:
            self.logged.add(task_id)

    def release_log(self, task_id: str) -> None:
        """No run or stream of the task is left here: its log's counters may go."""
        if task_id in self.logged and task_id not in self.hubs and task_id not in self.runs:
            self.logged.discard(task_id)
            self.store.close_event_log(task_id)

    def leave(self, task_id: str, subscriber: Subscriber) -> None:
        hub = self.hubs.get(task_id)
        if hub is None:
            return
        hub.remove(subscriber)
        if not hub.subscribers and task_id not in self.runs:
            del self.hubs[task_id]
            self.release_log(task_id)

    def follow_log(self, task_id: str, after_seq: int) -> None:
        """(A shared store) Give the task's subscribers here the events another
        process logs for it after ``after_seq``, until none is left or its run is here."""
        self.store.follow(
            task_id, after_seq, lambda events, seq: self._deliver(task_id, events, seq)
        )

    def _deliver(
        self, task_id: str, events: list[pb.StreamResponse] | None, first_seq: int
    ) -> bool:
        """Events of a run in another process, numbered from ``first_seq``, to this
        process's subscribers of the task; False once nobody here listens (or the run
        is here)."""
        hub = self.hubs.get(task_id)
        if hub is None or not hub.subscribers or task_id in self.runs:
            return False
        if events is None:  # its process is gone: a resubscribe reads the recovered task
            hub.close(UnavailableError(RUN_LOST))
            del self.hubs[task_id]
            return False
        for seq, event in enumerate(events, first_seq):
            state = event.status_update.status.state if event.HasField("status_update") else None
            hub.publish(event, state, seq)
            if state in TERMINAL:
                hub.close()
                del self.hubs[task_id]
                return False
        return True

    def keep_following(self, task_id: str, last_seq: int | None) -> None:
        """A run here was interrupted (input-required) with ``last_seq`` its last logged
        event: the task's subscribers here, which stay, follow its next run, which may
        be another process's."""
        hub = self.hubs.get(task_id)
        if last_seq is None or hub is None or not hub.subscribers:
            return
        for subscriber in hub.subscribers:  # each holds every event so far
            subscriber.seq = max(subscriber.seq, last_seq)
        self.follow_log(task_id, last_seq)

    async def hand_over(self, task_id: str) -> None:
        """This process claimed the task's context to run it (a continuation): the
        streams here that followed its run in another process first get the events
        logged there (the store's follow delivers them); one still short of them
        (not read in time) ends with UnavailableError, so its client resubscribes."""
        if not self.shared_events:
            return
        last = await self.store.hand_over(task_id)
        hub = self.hubs.get(task_id)
        if last is None or hub is None:
            return
        for subscriber in [s for s in hub.subscribers if s.seq < last]:
            subscriber.finish(UnavailableError(EVENTS_GONE))
            self.leave(task_id, subscriber)

    def remember_message(self, seen_key: RetryKey, record: TaskRecord) -> None:
        """Record the retry key of a message that created or continued the task of
        ``record`` (see ``retries``): in the store (the workspace index on disk
        survives restarts; the memory store's keys are bounded by count and bytes), and
        in the record, so that its next save stores the key with the task (the
        workspace files: a key is durable with the answer that names its task)."""
        workspace, name, message_id, fingerprint = seen_key
        self.keys_learned += 1
        if (message_id, fingerprint) not in record.retry_keys:
            record.retry_keys.append((message_id, fingerprint))
        owner = record.owner  # the identity alone (see retried): most often it is
        if (
            owner.on_behalf is not None
            or owner.delegate
            or owner.name != name
            or owner.workspace != workspace
        ):
            owner = Caller(name, workspace)
        self.store.remember_message(owner, message_id, fingerprint, record.task.id)

    async def retried(self, seen_key: RetryKey, caller: Caller | None = None) -> str | None:
        """The task a message with this retry key created or continued, if any.
        ``caller``: the one the key is of, passed to the store as the owner when it is
        only a name and a workspace (a Caller built per call costs ~1.5 us)."""
        workspace, name, message_id, fingerprint = seen_key
        owner = caller
        if owner is None or owner.on_behalf is not None or owner.delegate:
            owner = Caller(name, workspace)  # the identity alone: stores keep no more
        found = await self.store.lookup_message(owner, message_id, fingerprint)
        if found is not None:
            self.keys_learned += 1  # a shared store keeps a key it read (find_message)
        return found

    async def retried_or_claimed(
        self, claims: ContextClaims, seen_key: RetryKey, context_id: str, task_id: str
    ) -> tuple[str | None, bool]:
        """:meth:`retried`; when no task has the key, the store's claim of
        ``context_id`` for a new task ``task_id`` too (one round trip on a database):
        the task found, and whether the context was claimed (then give it back with
        ``claims.release_context`` if the run does not start)."""
        workspace, name, message_id, fingerprint = seen_key
        found, claimed = await claims.lookup_or_claim(
            Caller(name, workspace), message_id, fingerprint, context_id, task_id
        )
        if found is not None:
            self.keys_learned += 1  # a shared store keeps a key it read (find_message)
        return found, claimed

    def retried_here(self, seen_key: RetryKey) -> str | None:
        """:meth:`retried` without asking a shared store's database: the keys this
        process remembered or read (the same answer on a store of one process)."""
        workspace, name, message_id, fingerprint = seen_key
        return self.store.find_message(Caller(name, workspace), message_id, fingerprint)

    def workspace_of(self, owner: Caller) -> Path | None:
        """Where ``owner``'s files go: its own workspace, else the default one."""
        return Path(owner.workspace) if owner.workspace else self.default_workspace

    @property
    def allow_private_urls(self) -> bool:
        """Whether webhooks may be http or private addresses: the guarded client's
        setting (the one that will deliver), else False."""
        client = self.outbound or (self.push.client if self.push is not None else None)
        return client is not None and client.allow_private_urls

    def publish_status(self, record: TaskRecord) -> int | None:
        """Show the task's new status to its streams (a terminal one ends them all)
        and to its webhooks. Its event's number in a shared event log, if logged."""
        task = record.task
        if record.push_configs or self.push_feed is not None:
            self.notify(record)
        hub = self.hubs.get(task.id)
        if hub is None and not self.shared_events and task.id not in self.logged:
            return None
        state = task.status.state
        seq = None
        if self.listened(task.id):
            event = pb.StreamResponse()
            update = event.status_update
            update.task_id = task.id
            update.context_id = task.context_id
            update.status.CopyFrom(task.status)
            seq = self.emit(task.id, event, state)
        if hub is not None and state in TERMINAL:
            hub.close()
            del self.hubs[task.id]
            self.release_log(task.id)
        return seq

    def listened(self, task_id: str) -> bool:
        """Whether an event of the task reaches anyone: a stream here or, with a shared
        store, the event log (streams in other processes). Else it is not built."""
        hub = self.hubs.get(task_id)
        return (
            self.shared_events
            or task_id in self.logged
            or (hub is not None and bool(hub.subscribers))
        )

    def emit(self, task_id: str, event: Event, state: int | None = None) -> int | None:
        """Give the event to the shared event log (if any) and to the streams here;
        its number in the log, if logged."""
        seq = None
        if self.shared_events or task_id in self.logged:
            seq = self.store.log_event(task_id, event, state)
        hub = self.hubs.get(task_id)
        if hub is not None and hub.subscribers:
            hub.publish(event, state, seq or 0)
        return seq

    def notify(self, record: TaskRecord) -> None:
        """Queue the task as it is now for each of its webhooks (with a shared store,
        those the store holds now: ``push_feed``); not when another process settled
        the task (and announced it)."""
        if record.settled_elsewhere:
            return
        if self.push_feed is not None:
            self.push_feed.notify(record)
        elif self.push is not None and record.push_configs:
            self.push.notify(record.task, record.push_configs, record.push_versions)
