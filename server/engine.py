"""The task engine: the local :class:`A2AService`. It runs an agent for each message,
keeps tasks in a :class:`~.task_store.TaskStore`, streams their events, and enforces the
lifecycle rules of the protocol and of the seed.

Decisions (digest §6 and §15 leave them open):

- Blocking SendMessage returns at a terminal or interrupted state (or, when the call
  has a deadline, at the deadline with the task as it is then). SendStreamingMessage
  closes at a terminal or interrupted state, like the SDK; SubscribeToTask closes only
  at a terminal state. Every task stream starts with the Task snapshot.
- SendMessage or SubscribeToTask on a terminal task: UnsupportedOperation.
  CancelTask on a terminal task: TaskNotCancelable. A task of another caller is
  TaskNotFound on every operation.
- Errors found before a stream's first event are raised by its first ``__anext__``.
- Interrupted = input-required or auth-required: a message with the task's id
  continues it (a different contextId is InvalidParams); in any other state it is
  UnsupportedOperation. One run per (caller, context) at a time; a second message gets
  UnsupportedOperation "context busy, retry when the current task ends".
- A retried messageId (same caller) returns the existing task instead of running twice:
  SendMessage answers with it (a blocking call waits for it as usual). A
  SendStreamingMessage retry joins the task while its run is live (snapshot, then live
  events); once that run has ended there is nothing to stream and the message starts a
  new task (streams replay nothing, and load generators such as the bench reuse
  messageIds across runs). The index is in memory, bounded (``dedupe_entries``), and
  does not survive a restart.
- Hop guard: ``a2a-gateway.hops`` from the request metadata, else the message metadata,
  else 0 (a non-negative integer, else InvalidParams); above ``max_hops`` the task is
  created and failed at once.
- Each run replaces the ``response`` artifact (same artifactId, ``append=false`` on the
  run's first chunk), so GetTask shows the latest answer.
- Runs belong to the engine, not to the request: a client that disconnects from a
  blocking or streaming call does not cancel the run (CancelTask does). Every run is
  bounded by ``run_timeout_s``.
- ``aclose`` (shutdown) cancels every live run; each is stored failed ("The server shut
  down during the run.") and its streams end after that event; streams waiting on an
  input-required task end with UnavailableError.

Persistence (the hot path matters: the bench sends thousands of ``hi`` per second):

- A task is written when its id first leaves the engine (returnImmediately answer;
  first stream event, sent after the run's first step so that a run that ends at once
  is written only finished), at every interrupted or terminal state (before anyone can
  see that state), and otherwise lazily: a status change marks it dirty, and a flusher task
  writes what is still dirty ``FLUSH_DELAY_S`` (50 ms) later. A run that ends sooner
  (the faux ``hi``) is written once, finished: under load this halves the file writes,
  and creating files is the dominant cost of a blocking send on ext4. Artifact chunks
  never cause a write; they are saved with the next status write. ListTasks writes the
  live tasks it returns first, like every other path that reveals a task id. A store
  that is not ``durable`` (memory) only gets interrupted and final states.
- Lazy restart recovery: a stored task that is submitted/working but has no live run
  in this engine (the process died mid-run) is rewritten failed ("server restarted")
  the first time anything reads it. Input-required tasks are untouched. One engine
  per store folder: two processes on one workspace would "recover" each other's runs.
- Live tasks are served from memory; finished ones from the store (serialized bytes).

Push notifications (with a :class:`~.push.PushDispatcher`): every status change of a
task that has push configs (WORKING, progress, interrupted, terminal; also a task failed
by the hop guard or by restart recovery, and a cancel) queues ``{"task": ...}`` for each
config; text and artifact chunks do not. A task with push configs is written before
its first WORKING notification goes out (its id leaves the engine). Configs are
validated like the guard will judge them (``validate_push_config``), a task holds at
most ``MAX_PUSH_CONFIGS``, and their token and credentials are never returned.

Files: a run first saves the message's file parts (``raw`` or ``url``) to the owner's
workspace inbox (``receive_files``; the default workspace for callers without one);
a refused file fails the task with the reason, before the agent runs. The stored
history keeps such parts with their ``raw`` bytes emptied (the bytes are in the inbox,
``metadata["a2a-gateway.savedAs"]`` says where), so task files stay small. Without any
workspace, file parts are ContentTypeNotSupported. An agent's :class:`File` output
becomes an artifact with one file part (cap ``max_file_bytes``); one over the cap is
skipped and the final status message says so.

Events are built only when someone listens (no stream: no event objects), and never
JSON-encoded here.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

from google.protobuf import empty_pb2, json_format

from a2a_gateway.agent.base import (
    RESPONSE_ARTIFACT,
    Agent,
    AgentError,
    ArtifactChunk,
    AuthRequired,
    Completed,
    Failed,
    File,
    InputRequired,
    Progress,
    Rejected,
    Signal,
    TextChunk,
    Turn,
    redact,
)
from a2a_gateway.protocol.context import CallContext, Caller
from a2a_gateway.protocol.errors import (
    ContentTypeNotSupportedError,
    ExtendedAgentCardNotConfiguredError,
    FieldViolation,
    InternalError,
    InvalidParamsError,
    PushNotificationNotSupportedError,
    TaskNotCancelableError,
    TaskNotFoundError,
    UnavailableError,
    UnsupportedOperationError,
)
from a2a_gateway.protocol.hops import HOPS_KEY, read_hops
from a2a_gateway.protocol.service import A2AService
from lf.a2a.v1 import a2a_pb2 as pb

from .events import Hub, Subscriber
from .files import (
    DEFAULT_MAX_FILE_BYTES,
    FileRefused,
    SavedFile,
    is_file_part,
    outgoing_parts,
    receive_files,
    sanitize_filename,
)
from .lifecycle import (
    ACTIVE,
    INTERRUPTED,
    KNOWN_STATES,
    TERMINAL,
    agent_message,
    new_id,
    set_now,
    task_view,
    timestamp_ns,
    valid_id,
)
from .limits import RunSlot, TaskLimiter
from .outbound import OutboundClient
from .paging import PageTokens
from .push import PushDispatcher, validate_push_config
from .task_store import TaskRecord, TaskStore, TaskSummary

log = logging.getLogger(__name__)

CONTEXT_BUSY = "context busy, retry when the current task ends"
UNEXPECTED = "The run failed unexpectedly."
SERVER_RESTARTED = "server restarted"
SHUTDOWN = "The server shut down during the run."
DEFAULT_PAGE_SIZE = 50
MAX_PAGE_SIZE = 100
MAX_PUSH_CONFIGS = 10
FLUSH_DELAY_S = 0.05  # how long a live task's status may stay in memory only
SAVED_AS_KEY = "a2a-gateway.savedAs"  # Part.metadata: where a received file was saved

_ContextKey = tuple[str, str, str]  # (caller workspace, caller name, context or message id)


def _invalid(field: str, description: str) -> InvalidParamsError:
    return InvalidParamsError(
        f"{field}: {description}", violations=[FieldViolation(field, description)]
    )


def _not_found(task_id: str) -> TaskNotFoundError:
    return TaskNotFoundError(f"Task {task_id} not found", metadata={"taskId": task_id})


class _Run:
    """A task with a live run (one agent turn) in this engine."""

    __slots__ = (
        "aio",
        "busy_key",
        "dirty",
        "file_notes",
        "finished",
        "record",
        "response_index",
        "settled",
        "slot",
        "stopping",
        "turn",
    )

    def __init__(
        self, record: TaskRecord, busy_key: _ContextKey, turn: Turn, slot: RunSlot | None
    ) -> None:
        self.slot = slot  # the caller's task-cap slot, given back when the run ends
        self.record = record
        self.busy_key = busy_key
        self.turn = turn
        self.aio: asyncio.Task[None] | None = None
        self.settled = Signal()  # set once the run's final state is stored and shown
        self.finished = False
        self.stopping = ""  # why the engine is stopping the run (timeout, shutdown)
        self.dirty = False
        self.response_index = -1  # index of the response artifact, once this run wrote it
        self.file_notes: tuple[str, ...] = ()  # outgoing files skipped, for the final status


class _KeyedLocks:
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


class TaskEngine(A2AService):
    """The local A2A service (see the module docstring for its rules).

    ``extended_card`` builds the caller's extended agent card (None: the operation
    answers ExtendedAgentCardNotConfigured). With ``push_enabled`` False, the four
    push-config operations and an inline ``configuration.taskPushNotificationConfig``
    answer PushNotificationNotSupported. ``push`` delivers the notifications (None:
    configs are kept but nothing is sent).

    ``outbound`` is the guarded client: it downloads file parts given by URL (None:
    URL parts are refused) and its ``allow_private_urls`` decides which webhook URLs
    are accepted. ``default_workspace`` receives the files of callers without a
    workspace of their own (anonymous); with neither, file parts are refused.
    ``max_file_bytes`` caps each file, in and out.
    """

    def __init__(
        self,
        agent: Agent,
        store: TaskStore,
        *,
        max_hops: int = 3,
        extended_card: Callable[[CallContext], pb.AgentCard] | None = None,
        push_enabled: bool = False,
        run_timeout_s: float = 3600.0,
        cancel_grace_s: float = 5.0,
        dedupe_entries: int = 100_000,
        task_limiter: TaskLimiter | None = None,
        push: PushDispatcher | None = None,
        outbound: OutboundClient | None = None,
        default_workspace: Path | None = None,
        max_file_bytes: int = DEFAULT_MAX_FILE_BYTES,
    ) -> None:
        self.agent = agent
        self.store = store
        self.max_hops = max_hops
        self.extended_card = extended_card
        self.push_enabled = push_enabled
        self.run_timeout_s = run_timeout_s
        self.cancel_grace_s = cancel_grace_s
        self.dedupe_entries = dedupe_entries
        self.task_limiter = task_limiter
        self.push = push
        self.outbound = outbound
        self.default_workspace = default_workspace
        self.max_file_bytes = max_file_bytes
        self._runs: dict[str, _Run] = {}
        self._busy: dict[_ContextKey, str] = {}
        self._seen: dict[_ContextKey, str] = {}  # (ws, caller, messageId) -> task id
        self._hubs: dict[str, Hub] = {}
        self._locks = _KeyedLocks()
        self._tokens = PageTokens()
        self._dirty: dict[str, _Run] = {}
        self._dirty_wakeup: asyncio.Event | None = None
        self._flusher: asyncio.Task[None] | None = None
        self._closing = False
        self._durable = store.durable
        self._never_set = Signal()  # the cancellation signal of reply() turns

    # --- SendMessage / SendStreamingMessage -------------------------------------------

    async def send_message(
        self, request: pb.SendMessageRequest, context: CallContext
    ) -> pb.SendMessageResponse:
        history_length = self._send_history_length(request)
        got = await self._accept(request, context, None)
        if isinstance(got, pb.Message):
            return pb.SendMessageResponse(message=got)
        response = pb.SendMessageResponse()
        if isinstance(got, pb.Task):
            task_view(got, history_length, into=response.task)
            return response
        run = got
        if not request.configuration.return_immediately and not run.settled.is_set():
            remaining = context.remaining()
            if remaining is None:
                await run.settled.wait()  # bounded: every run ends within run_timeout_s
            else:
                # At the call's deadline, answer with the task as it is then.
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(remaining):
                        await run.settled.wait()
        if not run.finished:
            await self._persist_if_dirty(run)  # its id is about to leave the engine
        task_view(run.record.task, history_length, into=response.task)
        return response

    def send_streaming_message(
        self, request: pb.SendMessageRequest, context: CallContext
    ) -> AsyncIterator[pb.StreamResponse]:
        return self._send_stream(request, context)

    async def _send_stream(
        self, request: pb.SendMessageRequest, context: CallContext
    ) -> AsyncIterator[pb.StreamResponse]:
        history_length = self._send_history_length(request)
        subscriber = Subscriber(until_interrupted=True)
        got = await self._accept(request, context, subscriber)
        # The stream may last long; its request (inline file bytes and all) must not.
        del request
        if isinstance(got, pb.Message):
            yield pb.StreamResponse(message=got)
            return
        snapshot = pb.StreamResponse()
        if isinstance(got, pb.Task):
            task_view(got, history_length, into=snapshot.task)
            yield snapshot
            return
        task_id = got.record.task.id
        try:
            # The snapshot is taken in the same step the subscriber joined the hub.
            task_view(got.record.task, history_length, into=snapshot.task)
            if got.dirty:
                # Its id is about to leave the engine, so it must be on disk. Let the
                # run take its first step first: a run that finishes without waiting
                # (the faux chunks) is then written once, finished, not twice.
                await asyncio.sleep(0)
                await self._persist_if_dirty(got)
            yield snapshot
            while batch := await subscriber.next_batch():
                for event in batch:
                    yield event
        finally:
            self._leave(task_id, subscriber)

    def _leave(self, task_id: str, subscriber: Subscriber) -> None:
        hub = self._hubs.get(task_id)
        if hub is None:
            return
        hub.remove(subscriber)
        if not hub.subscribers and task_id not in self._runs:
            del self._hubs[task_id]

    def _subscribe(self, task_id: str, subscriber: Subscriber) -> None:
        hub = self._hubs.get(task_id)
        if hub is None:
            hub = self._hubs[task_id] = Hub()
        hub.add(subscriber)

    async def _accept(
        self, request: pb.SendMessageRequest, context: CallContext, subscriber: Subscriber | None
    ) -> pb.Message | pb.Task | _Run:
        """Validate a message and start (or find) its run; ``subscriber`` joins the
        task's hub in the same step, so it misses no event."""
        if self._closing:
            raise UnavailableError("The server is shutting down.")
        _check_message(request)
        message = request.message
        caller = context.caller
        if not caller.workspace and self.default_workspace is None:
            _check_no_file_parts(message)
        inline_push = self._inline_push_config(request)
        context_id = message.context_id
        if context_id and not valid_id(context_id):
            raise _invalid("message.contextId", "must match [A-Za-z0-9_-]{1,100}")
        hops = read_hops(request)
        seen_key = (caller.workspace, caller.name, message.message_id)
        if seen_key in self._seen:
            existing = await self._existing(seen_key, caller, subscriber)
            if existing is not None:
                return existing
        if message.task_id:
            return await self._continue(request, caller, subscriber, hops, seen_key, inline_push)
        if not context_id:
            context_id = new_id()
        busy_key = (caller.workspace, caller.name, context_id)
        if busy_key in self._busy:
            raise UnsupportedOperationError(CONTEXT_BUSY)
        if hops <= self.max_hops:
            reply = await self._reply(request, caller, context_id, hops)
            if reply is not None:
                return reply
            # The agent was consulted (an await): look again before creating the task.
            if busy_key in self._busy:
                raise UnsupportedOperationError(CONTEXT_BUSY)
            if seen_key in self._seen:
                existing = await self._existing(seen_key, caller, subscriber)
                if existing is not None:
                    return existing

        task = pb.Task(id=new_id(), context_id=context_id)
        stored_message = task.history.add()
        stored_message.CopyFrom(message)
        stored_message.context_id = context_id
        stored_message.task_id = task.id
        task.status.state = pb.TASK_STATE_SUBMITTED
        set_now(task.status.timestamp)
        record = TaskRecord(task, caller)
        if inline_push is not None:
            inline_push.task_id = task.id
            record.push_configs.append(inline_push)
        if hops > self.max_hops:
            self._remember_message(seen_key, task.id)
            _apply_status(task, pb.TASK_STATE_FAILED, self._hop_message(task, hops))
            await self._save(record)
            self._notify(record)  # no stream can exist yet: only the webhooks hear it
            return task
        slot = self._admit(caller, context_id)
        return self._start(record, busy_key, seen_key, hops, request, subscriber, slot)

    async def _reply(
        self, request: pb.SendMessageRequest, caller: Caller, context_id: str, hops: int
    ) -> pb.Message | None:
        turn = _turn(request, request.message, None, caller, context_id, self._never_set, hops)
        try:
            reply = await self.agent.reply(turn)
        except Exception:
            log.exception("agent reply failed (context %s)", context_id)
            raise InternalError("The agent failed to answer.") from None
        if reply is None:
            return None
        answer = pb.Message()
        answer.CopyFrom(reply)
        answer.role = pb.ROLE_AGENT
        answer.context_id = context_id
        answer.ClearField("task_id")
        if not answer.message_id:
            answer.message_id = new_id()
        return answer

    async def _existing(
        self, seen_key: _ContextKey, caller: Caller, subscriber: Subscriber | None
    ) -> pb.Task | _Run | None:
        """The task a retried messageId already created, if we remember one (for a
        stream, i.e. with a ``subscriber``, only while its run is live)."""
        task_id = self._seen.get(seen_key)
        if task_id is None:
            return None
        run = self._live(caller, task_id)
        if run is not None:
            if subscriber is not None:
                self._subscribe(task_id, subscriber)
            return run
        if subscriber is not None:
            return None
        record = await self._load(caller, task_id)
        if record is None:
            return None
        run = self._live(caller, task_id)  # a continuation may have started meanwhile
        return run if run is not None else record.task

    async def _continue(
        self,
        request: pb.SendMessageRequest,
        caller: Caller,
        subscriber: Subscriber | None,
        hops: int,
        seen_key: _ContextKey,
        inline_push: pb.TaskPushNotificationConfig | None,
    ) -> pb.Task | _Run:
        message = request.message
        task_id = message.task_id
        if not valid_id(task_id):
            raise _not_found(task_id)
        async with self._locks.hold(task_id):
            run = self._live(caller, task_id)
            if run is not None:
                record = run.record
            else:
                loaded = await self._load(caller, task_id)
                if loaded is None:
                    raise _not_found(task_id)
                record = loaded
            task = record.task
            if message.context_id and message.context_id != task.context_id:
                raise _invalid("message.contextId", "does not match the task's contextId")
            state = task.status.state
            if state in TERMINAL:
                raise UnsupportedOperationError(
                    f"Task {task_id} is in a terminal state ({pb.TaskState.Name(state)})"
                )
            if run is not None or state not in INTERRUPTED:
                raise UnsupportedOperationError(
                    f"Task {task_id} is not waiting for input ({pb.TaskState.Name(state)})"
                )
            busy_key = (caller.workspace, caller.name, task.context_id)
            if busy_key in self._busy:
                raise UnsupportedOperationError(CONTEXT_BUSY)
            if inline_push is not None:  # refuse before anything changes
                _check_push_room(record.push_configs, inline_push)
            slot = None if hops > self.max_hops else self._admit(caller, task.context_id)
            _archive_status_message(task)  # the question, before its answer
            stored_message = task.history.add()
            stored_message.CopyFrom(message)
            stored_message.context_id = task.context_id
            if inline_push is not None:
                inline_push.task_id = task_id
                _upsert_push(record.push_configs, inline_push)
            if hops > self.max_hops:
                self._remember_message(seen_key, task_id)
                _apply_status(task, pb.TASK_STATE_FAILED, self._hop_message(task, hops))
                await self._save(record)
                self._publish_status(record)
                if self.task_limiter is not None:
                    self.task_limiter.close_context(caller, task.context_id)
                return task
            _apply_status(task, pb.TASK_STATE_WORKING, None)
            self._publish_status(record)
            return self._start(record, busy_key, seen_key, hops, request, subscriber, slot)

    def _admit(self, caller: Caller, context_id: str) -> RunSlot | None:
        """A task-cap slot for a new run (RateLimitedError when the caller is at a cap)."""
        if self.task_limiter is None:
            return None
        return self.task_limiter.start(caller, context_id)

    def _start(
        self,
        record: TaskRecord,
        busy_key: _ContextKey,
        seen_key: _ContextKey,
        hops: int,
        request: pb.SendMessageRequest,
        subscriber: Subscriber | None,
        slot: RunSlot | None,
    ) -> _Run:
        task = record.task
        turn = _turn(request, task.history[-1], task, record.owner, task.context_id, Signal(), hops)
        run = _Run(record, busy_key, turn, slot)
        task_id = task.id
        self._runs[task_id] = run
        self._busy[busy_key] = task_id
        self._remember_message(seen_key, task_id)
        if subscriber is not None:
            self._subscribe(task_id, subscriber)
        # The run's first step is scheduled before the flusher's wake-up, so a run that
        # finishes without suspending is written once, finished.
        run.aio = asyncio.create_task(self._drive(run), name=f"a2a-run-{task_id}")
        self._mark_dirty(run)
        return run

    def _remember_message(self, seen_key: _ContextKey, task_id: str) -> None:
        seen = self._seen
        seen[seen_key] = task_id
        if len(seen) > self.dedupe_entries:
            del seen[next(iter(seen))]

    def _hop_message(self, task: pb.Task, hops: int) -> pb.Message:
        text = f"Hop limit exceeded: {HOPS_KEY} is {hops}, the limit is {self.max_hops}."
        return agent_message(text, context_id=task.context_id, task_id=task.id)

    def _inline_push_config(
        self, request: pb.SendMessageRequest
    ) -> pb.TaskPushNotificationConfig | None:
        if not request.HasField("configuration"):
            return None
        configuration = request.configuration
        if not configuration.HasField("task_push_notification_config"):
            return None
        if not self.push_enabled:
            raise PushNotificationNotSupportedError()
        config = pb.TaskPushNotificationConfig()
        config.CopyFrom(configuration.task_push_notification_config)
        self._check_push_config(config, "configuration.taskPushNotificationConfig")
        if not config.id:
            config.id = new_id()
        return config

    @staticmethod
    def _send_history_length(request: pb.SendMessageRequest) -> int | None:
        configuration = request.configuration
        if not configuration.HasField("history_length"):
            return None
        if configuration.history_length < 0:
            raise _invalid("configuration.historyLength", "must not be negative")
        return configuration.history_length

    # --- running a turn ---------------------------------------------------------------

    async def _drive(self, run: _Run) -> None:
        task = run.record.task
        outputs: AsyncIterator[Any] | None = None
        ending: tuple[int, str] = (pb.TASK_STATE_COMPLETED, "")
        # A plain timer bounds the run (cheaper than asyncio.timeout on this hot path).
        timer = asyncio.get_running_loop().call_later(self.run_timeout_s, self._time_out, run)
        try:
            if task.status.state != pb.TASK_STATE_WORKING:
                _apply_status(task, pb.TASK_STATE_WORKING, None)
                self._mark_dirty(run)
                if run.record.push_configs:
                    await self._persist(run)  # the webhooks are about to learn its id
                self._publish_status(run.record)
            refused = ""
            if _has_file_parts(run.turn.message):
                refused = await self._receive_files(run)
            if refused:
                ending = (pb.TASK_STATE_FAILED, refused)
            else:
                outputs = self.agent.run(run.turn)
                ending = await self._consume(run, outputs)
        except asyncio.CancelledError:
            if run.finished:
                return  # CancelTask already stored the outcome
            run.stopping = run.stopping or SHUTDOWN
        except AgentError as exc:
            ending = (pb.TASK_STATE_FAILED, redact(str(exc)) or UNEXPECTED)
        except Exception:
            ending = self._unexpected(run)
        finally:
            timer.cancel()
            if outputs is not None:
                await _close_outputs(outputs)
        if run.stopping:  # whatever the agent did after being stopped does not count
            ending = (pb.TASK_STATE_FAILED, run.stopping)
        elif run.file_notes:
            state, text = ending
            ending = (state, "\n".join(t for t in (text, *run.file_notes) if t))
        await self._finish(run, *ending)

    async def _consume(self, run: _Run, outputs: AsyncIterator[Any]) -> tuple[int, str]:
        """Apply the agent's outputs until its ending (COMPLETED when it has none)."""
        task = run.record.task
        async for output in outputs:
            if run.finished or run.stopping:
                break
            if isinstance(output, TextChunk):
                self._text(run, output)
            elif isinstance(output, ArtifactChunk):
                self._artifact(run, output)
            elif isinstance(output, Progress):
                message = agent_message(output.text, context_id=task.context_id, task_id=task.id)
                _apply_status(task, pb.TASK_STATE_WORKING, message)
                self._mark_dirty(run)
                self._publish_status(run.record)
            elif isinstance(output, File):
                await self._file(run, output)
            else:
                return _ending(output)
            hub = self._hubs.get(task.id)
            if hub is not None and hub.pressure:
                hub.pressure = False
                await asyncio.sleep(0)  # let the streams catch up
        return (pb.TASK_STATE_COMPLETED, "")

    def _workspace_of(self, owner: Caller) -> Path | None:
        """Where ``owner``'s files go: its own workspace, else the default one."""
        return Path(owner.workspace) if owner.workspace else self.default_workspace

    async def _receive_files(self, run: _Run) -> str:
        """Save the turn's file parts to the owner's inbox and hand their paths to the
        agent; the reason when a file is refused (``""`` when all were saved). Either
        way the ``raw`` bytes leave the stored history (the inbox has them)."""
        record = run.record
        message = run.turn.message  # the stored history entry itself
        workspace = self._workspace_of(record.owner)
        saved: list[SavedFile] = []
        refused = ""
        try:
            if workspace is None:  # refused when accepted already; never saved to cwd
                raise FileRefused("message.parts: files are not accepted without a workspace")
            saved = await receive_files(
                message,
                workspace=workspace,
                caller=record.owner,
                client=self.outbound,
                max_file_bytes=self.max_file_bytes,
            )
        except FileRefused as exc:
            refused = str(exc)
            log.info("task %s: a file was refused: %s", record.task.id, refused)
        finally:
            _strip_saved_bytes(message, saved)
        if saved:
            files = tuple(file.path for file in saved)
            run.turn = dataclasses.replace(run.turn, files=files)
        self._mark_dirty(run)
        return refused

    async def _file(self, run: _Run, file: File) -> None:
        """An agent's file as a new artifact, or a note when it is skipped."""
        workspace = self._workspace_of(run.record.owner)
        if file.data is None and file.path is not None and workspace is None:
            name = sanitize_filename(file.filename)
            run.file_notes += (f"Files skipped: {name} (no workspace to read it from).",)
            return
        if file.data is None and file.path is not None:  # a read: off the event loop
            built = await asyncio.to_thread(
                outgoing_parts, [file], max_file_bytes=self.max_file_bytes, workspace=workspace
            )
        else:
            built = outgoing_parts([file], max_file_bytes=self.max_file_bytes)
        if built.note:
            run.file_notes += (built.note,)
        if built.parts:
            name = built.parts[0].filename
            artifact = pb.Artifact(name=name, parts=built.parts)
            self._artifact(run, ArtifactChunk(artifact, last_chunk=True))

    def _time_out(self, run: _Run) -> None:
        if run.aio is not None and not run.finished:
            run.stopping = f"The run took longer than {self.run_timeout_s:g} s."
            run.turn.cancelled.set()
            run.aio.cancel()

    @staticmethod
    def _unexpected(run: _Run) -> tuple[int, str]:
        log.exception("run of task %s failed", run.record.task.id)
        return (pb.TASK_STATE_FAILED, UNEXPECTED)

    def _text(self, run: _Run, chunk: TextChunk) -> None:
        task = run.record.task
        if run.response_index < 0:
            append = False
            for index, existing in enumerate(task.artifacts):
                if existing.name == RESPONSE_ARTIFACT:
                    artifact = existing
                    artifact.ClearField("parts")  # each run replaces the response
                    run.response_index = index
                    break
            else:
                run.response_index = len(task.artifacts)
                artifact = task.artifacts.add(artifact_id=new_id(), name=RESPONSE_ARTIFACT)
        else:
            append = True
            artifact = task.artifacts[run.response_index]
        artifact.parts.add(text=chunk.text)
        hub = self._hubs.get(task.id)
        if hub is not None and hub.subscribers:
            event = pb.StreamResponse()  # built in place: no copies
            update = event.artifact_update
            update.task_id = task.id
            update.context_id = task.context_id
            update.append = append
            update.last_chunk = chunk.last
            update.artifact.artifact_id = artifact.artifact_id
            update.artifact.name = RESPONSE_ARTIFACT
            update.artifact.parts.add(text=chunk.text)
            hub.publish(event)

    def _artifact(self, run: _Run, chunk: ArtifactChunk) -> None:
        task = run.record.task
        incoming = pb.Artifact()
        incoming.CopyFrom(chunk.artifact)
        if not incoming.artifact_id:
            incoming.artifact_id = new_id()
        append = False
        for existing in task.artifacts:
            if existing.artifact_id == incoming.artifact_id:
                if chunk.append:
                    existing.parts.extend(incoming.parts)
                    append = True
                else:
                    existing.CopyFrom(incoming)
                break
        else:
            task.artifacts.add().CopyFrom(incoming)
        hub = self._hubs.get(task.id)
        if hub is not None and hub.subscribers:
            event = pb.StreamResponse()
            update = event.artifact_update
            update.task_id = task.id
            update.context_id = task.context_id
            update.artifact.CopyFrom(incoming)
            update.append = append
            update.last_chunk = chunk.last_chunk
            hub.publish(event)

    async def _finish(self, run: _Run, state: int, text: str) -> None:
        """Store the run's final (terminal or interrupted) state, then show it."""
        if run.finished:
            return
        run.finished = True
        task = run.record.task
        message = agent_message(text, context_id=task.context_id, task_id=task.id) if text else None
        _apply_status(task, state, message)
        try:
            await self._persist(run)  # on disk before anyone can see the final state
        finally:
            if run.slot is not None:
                run.slot.finish(keep_context_open=state in INTERRUPTED)
            self._publish_status(run.record)
            run.settled.set()
            task_id = task.id
            del self._runs[task_id]
            if self._busy.get(run.busy_key) == task_id:
                del self._busy[run.busy_key]
            hub = self._hubs.get(task_id)  # terminal: already gone (_publish_status)
            if hub is not None and not hub.subscribers:
                del self._hubs[task_id]

    def _publish_status(self, record: TaskRecord) -> None:
        """Show the task's new status to its streams (a terminal one ends them all)
        and to its webhooks."""
        task = record.task
        if record.push_configs:
            self._notify(record)
        hub = self._hubs.get(task.id)
        if hub is None:
            return
        state = task.status.state
        if hub.subscribers:
            event = pb.StreamResponse()
            update = event.status_update
            update.task_id = task.id
            update.context_id = task.context_id
            update.status.CopyFrom(task.status)
            hub.publish(event, state)
        if state in TERMINAL:
            hub.close()
            del self._hubs[task.id]

    def _notify(self, record: TaskRecord) -> None:
        """Queue the task as it is now for each of its webhooks."""
        if self.push is not None and record.push_configs:
            self.push.notify(record.task, record.push_configs)

    # --- persistence ------------------------------------------------------------------

    def _mark_dirty(self, run: _Run) -> None:
        if run.dirty or not self._durable:
            return  # a memory store gains nothing from intermediate states
        run.dirty = True
        if self._dirty_wakeup is None:
            self._dirty_wakeup = asyncio.Event()
            self._flusher = asyncio.create_task(self._flush_loop(), name="a2a-task-flusher")
        if not self._dirty:
            self._dirty_wakeup.set()
        self._dirty[run.record.task.id] = run

    async def _flush_loop(self) -> None:
        assert self._dirty_wakeup is not None
        wakeup = self._dirty_wakeup
        while True:
            await wakeup.wait()
            # Wait a little first: most runs end within a few loop turns and are then
            # written once, finished (under load, runs started in the same turn as
            # the wake-up would otherwise be written submitted, then again finished).
            await asyncio.sleep(FLUSH_DELAY_S)
            wakeup.clear()
            while self._dirty:
                _, run = self._dirty.popitem()
                if run.dirty and not run.finished:
                    await self._persist(run)

    async def _persist_if_dirty(self, run: _Run) -> None:
        if run.dirty:
            await self._persist(run)

    async def _persist(self, run: _Run) -> None:
        run.dirty = False
        self._dirty.pop(run.record.task.id, None)
        await self._save(run.record)

    async def _save(self, record: TaskRecord) -> None:
        try:
            await self.store.save(record)
        except Exception:
            # The task stays served from memory while live; the next write retries.
            log.exception("could not store task %s", record.task.id)

    async def _save_or_fail(self, record: TaskRecord) -> None:
        """Store a change to a task with no live run: nothing would retry the write,
        so the caller is told it failed (without the server's details)."""
        try:
            await self.store.save(record)
        except Exception:
            log.exception("could not store task %s", record.task.id)
            raise InternalError(f"Task {record.task.id} could not be stored") from None

    def _live(self, caller: Caller, task_id: str) -> _Run | None:
        run = self._runs.get(task_id)
        if run is None or run.record.owner != caller:
            return None
        return run

    async def _load(self, caller: Caller, task_id: str) -> TaskRecord | None:
        """The caller's stored task, after lazy restart recovery."""
        if not valid_id(task_id):
            return None
        record = await self.store.load(caller, task_id)
        if record is None or record.task.status.state not in ACTIVE or task_id in self._runs:
            return record
        async with self._locks.hold(task_id):
            if task_id in self._runs:  # a run started while we waited
                return await self.store.load(caller, task_id)
            record = await self.store.load(caller, task_id)
            if record is not None and record.task.status.state in ACTIVE:
                task = record.task
                log.info("task %s had no live run (server restarted): marking it failed", task_id)
                message = agent_message(
                    SERVER_RESTARTED, context_id=task.context_id, task_id=task_id
                )
                _apply_status(task, pb.TASK_STATE_FAILED, message)
                await self._save(record)
                self._notify(record)
            return record

    async def _view_or_not_found(self, caller: Caller, task_id: str) -> TaskRecord:
        run = self._live(caller, task_id)
        if run is not None:
            return run.record
        record = await self._load(caller, task_id)
        if record is None:
            raise _not_found(task_id)
        return record

    # --- GetTask / ListTasks ----------------------------------------------------------

    async def get_task(self, request: pb.GetTaskRequest, context: CallContext) -> pb.Task:
        history_length = _history_length(request, "historyLength")
        record = await self._view_or_not_found(context.caller, request.id)
        return task_view(record.task, history_length)

    async def list_tasks(
        self, request: pb.ListTasksRequest, context: CallContext
    ) -> pb.ListTasksResponse:
        caller = context.caller
        page_size = DEFAULT_PAGE_SIZE
        if request.HasField("page_size"):
            page_size = request.page_size
            if not 1 <= page_size <= MAX_PAGE_SIZE:
                raise _invalid("pageSize", f"must be between 1 and {MAX_PAGE_SIZE}")
        history_length = _history_length(request, "historyLength")
        status = request.status
        if status != pb.TASK_STATE_UNSPECIFIED and status not in KNOWN_STATES:
            raise _invalid("status", f"unknown task state {status}")
        after_ns: int | None = None
        if request.HasField("status_timestamp_after"):
            after_ns = timestamp_ns(request.status_timestamp_after)
        include_artifacts = request.include_artifacts

        summaries = await self._summaries(caller)
        context_id = request.context_id
        matches = [
            s
            for s in summaries
            if (not context_id or s.context_id == context_id)
            and (not status or s.state == status)
            and (after_ns is None or s.timestamp_ns >= after_ns)
        ]
        matches.sort(key=lambda s: (s.timestamp_ns, s.task_id), reverse=True)
        query = "\x00".join(
            ("tasks", caller.workspace, caller.name, context_id, str(status), str(after_ns))
        )
        start = 0
        if request.page_token:
            cursor = self._tokens.read(request.page_token, query)
            ts_text, _, last_id = cursor.partition(":")
            position = (int(ts_text), last_id)
            while start < len(matches) and (
                (matches[start].timestamp_ns, matches[start].task_id) >= position
            ):
                start += 1
        page = matches[start : start + page_size]
        tasks: list[pb.Task] = []
        for summary in page:
            run = self._live(caller, summary.task_id)
            if run is not None:
                await self._persist_if_dirty(run)  # its id is about to leave the engine
            record = run.record if run is not None else await self._load(caller, summary.task_id)
            if record is not None:
                tasks.append(
                    task_view(record.task, history_length, include_artifacts=include_artifacts)
                )
        next_token = ""
        if page and start + len(page) < len(matches):
            last = page[-1]
            next_token = self._tokens.issue(f"{last.timestamp_ns}:{last.task_id}", query)
        return pb.ListTasksResponse(
            tasks=tasks, next_page_token=next_token, page_size=len(tasks), total_size=len(matches)
        )

    async def _summaries(self, caller: Caller) -> list[TaskSummary]:
        """Every task of ``caller``: stored ones, overlaid by live runs, recovered."""
        by_id = {s.task_id: s for s in await self.store.summaries(caller)}
        for task_id, run in self._runs.items():
            if run.record.owner == caller:
                by_id[task_id] = TaskSummary.of(run.record.task)
        for summary in list(by_id.values()):
            if summary.state in ACTIVE and summary.task_id not in self._runs:
                record = await self._load(caller, summary.task_id)
                if record is None:
                    del by_id[summary.task_id]
                else:
                    by_id[summary.task_id] = TaskSummary.of(record.task)
        return list(by_id.values())

    # --- CancelTask / SubscribeToTask -------------------------------------------------

    async def cancel_task(self, request: pb.CancelTaskRequest, context: CallContext) -> pb.Task:
        caller = context.caller
        task_id = request.id
        if not valid_id(task_id):
            raise _not_found(task_id)
        run = self._live(caller, task_id)
        if run is not None and not run.finished:
            return await self._cancel_run(run)
        if run is not None:
            # Its final state is being stored right now; answer from that state.
            _check_cancelable(run.record.task)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.cancel_grace_s):
                    await run.settled.wait()
        async with self._locks.hold(task_id):  # no continuation starts meanwhile
            run = self._live(caller, task_id)
            if run is None or run.finished:
                return await self._cancel_stored(caller, task_id)
        return await self._cancel_run(run)  # a continuation had just started

    async def _cancel_run(self, run: _Run) -> pb.Task:
        task = run.record.task
        run.turn.cancelled.set()
        await self._finish(run, pb.TASK_STATE_CANCELED, "")
        aio = run.aio
        if aio is not None and not aio.done():
            aio.cancel()
            # Give the agent a bounded moment to stop (and clean up) before answering.
            await asyncio.wait({aio}, timeout=self.cancel_grace_s)
        return task_view(task)

    async def _cancel_stored(self, caller: Caller, task_id: str) -> pb.Task:
        record = await self._load(caller, task_id)
        if record is None:
            raise _not_found(task_id)
        task = record.task
        _check_cancelable(task)
        _apply_status(task, pb.TASK_STATE_CANCELED, None)
        await self._save_or_fail(record)
        self._publish_status(record)
        if self.task_limiter is not None:
            self.task_limiter.close_context(caller, task.context_id)
        return task_view(task)

    def subscribe_to_task(
        self, request: pb.SubscribeToTaskRequest, context: CallContext
    ) -> AsyncIterator[pb.StreamResponse]:
        return self._subscribe_stream(request, context)

    async def _subscribe_stream(
        self, request: pb.SubscribeToTaskRequest, context: CallContext
    ) -> AsyncIterator[pb.StreamResponse]:
        caller = context.caller
        task_id = request.id
        subscriber = Subscriber(until_interrupted=False)
        snapshot = await self._join(caller, task_id, subscriber)
        try:
            yield snapshot
            while batch := await subscriber.next_batch():
                for event in batch:
                    yield event
        finally:
            self._leave(task_id, subscriber)

    async def _join(
        self, caller: Caller, task_id: str, subscriber: Subscriber
    ) -> pb.StreamResponse:
        """Subscribe to a non-terminal task; its snapshot, taken in the same step."""
        run = self._live(caller, task_id)
        if run is None:
            if not valid_id(task_id):
                raise _not_found(task_id)
            async with self._locks.hold(task_id):
                run = self._live(caller, task_id)
                if run is None:
                    record = await self._load(caller, task_id)
                    if record is None:
                        raise _not_found(task_id)
                    _check_not_terminal(record.task)
                    self._subscribe(task_id, subscriber)
                    return pb.StreamResponse(task=task_view(record.task))
        _check_not_terminal(run.record.task)
        self._subscribe(task_id, subscriber)
        snapshot = pb.StreamResponse(task=task_view(run.record.task))
        await self._persist_if_dirty(run)
        return snapshot

    # --- push notification configs ----------------------------------------------------

    def _require_push(self) -> None:
        if not self.push_enabled:
            raise PushNotificationNotSupportedError()

    @property
    def allow_private_urls(self) -> bool:
        """Whether webhooks may be http or private addresses: the guarded client's
        setting (the one that will deliver), else False."""
        client = self.outbound or (self.push.client if self.push is not None else None)
        return client is not None and client.allow_private_urls

    def _check_push_config(self, config: pb.TaskPushNotificationConfig, prefix: str) -> None:
        """InvalidParams naming the field unless ``config`` can be delivered to."""
        validate_push_config(config, allow_private_urls=self.allow_private_urls, prefix=prefix)
        if config.id and not valid_id(config.id):
            raise _invalid(f"{prefix}.id" if prefix else "id", "must match [A-Za-z0-9_-]{1,100}")

    @contextlib.asynccontextmanager
    async def _mutable_record(self, caller: Caller, task_id: str) -> AsyncIterator[TaskRecord]:
        """The caller's task record to change in place; stored when the block ends."""
        if not valid_id(task_id):
            raise _not_found(task_id)
        run = self._live(caller, task_id)
        if run is not None:
            yield run.record
            await self._persist(run)
            return
        async with self._locks.hold(task_id):
            run = self._live(caller, task_id)
            if run is not None:
                yield run.record
                await self._persist(run)
                return
            record = await self._load(caller, task_id)
            if record is None:
                raise _not_found(task_id)
            yield record
            await self._save_or_fail(record)

    async def create_task_push_notification_config(
        self, request: pb.TaskPushNotificationConfig, context: CallContext
    ) -> pb.TaskPushNotificationConfig:
        self._require_push()
        if not request.task_id:
            raise _invalid("taskId", "is required")
        config = pb.TaskPushNotificationConfig()
        config.CopyFrom(request)
        config.ClearField("tenant")
        self._check_push_config(config, "")
        if not config.id:
            config.id = new_id()
        async with self._mutable_record(context.caller, request.task_id) as record:
            _upsert_push(record.push_configs, config)
        return _public_push(config)

    async def get_task_push_notification_config(
        self, request: pb.GetTaskPushNotificationConfigRequest, context: CallContext
    ) -> pb.TaskPushNotificationConfig:
        self._require_push()
        record = await self._view_or_not_found(context.caller, request.task_id)
        for config in record.push_configs:
            if config.id == request.id:
                return _public_push(config)
        raise TaskNotFoundError(
            f"Push notification config {request.id} not found for task {request.task_id}",
            metadata={"taskId": request.task_id},
        )

    async def list_task_push_notification_configs(
        self, request: pb.ListTaskPushNotificationConfigsRequest, context: CallContext
    ) -> pb.ListTaskPushNotificationConfigsResponse:
        self._require_push()
        caller = context.caller
        record = await self._view_or_not_found(caller, request.task_id)
        if request.page_size < 0 or request.page_size > MAX_PAGE_SIZE:
            raise _invalid("pageSize", f"must be between 1 and {MAX_PAGE_SIZE}")
        page_size = request.page_size or MAX_PAGE_SIZE
        query = f"push\x00{caller.workspace}\x00{caller.name}\x00{request.task_id}"
        start = 0
        if request.page_token:
            start = int(self._tokens.read(request.page_token, query))
        configs = record.push_configs[start : start + page_size]
        next_token = ""
        if start + page_size < len(record.push_configs):
            next_token = self._tokens.issue(str(start + page_size), query)
        return pb.ListTaskPushNotificationConfigsResponse(
            configs=[_public_push(c) for c in configs], next_page_token=next_token
        )

    async def delete_task_push_notification_config(
        self, request: pb.DeleteTaskPushNotificationConfigRequest, context: CallContext
    ) -> empty_pb2.Empty:
        self._require_push()
        async with self._mutable_record(context.caller, request.task_id) as record:
            kept = [c for c in record.push_configs if c.id != request.id]
            record.push_configs[:] = kept
        if self.push is not None:
            self.push.forget(request.task_id, request.id)  # stops what is still queued
        return empty_pb2.Empty()

    # --- GetExtendedAgentCard ---------------------------------------------------------

    async def get_extended_agent_card(
        self, request: pb.GetExtendedAgentCardRequest, context: CallContext
    ) -> pb.AgentCard:
        if self.extended_card is None:
            raise ExtendedAgentCardNotConfiguredError()
        return self.extended_card(context)

    # --- shutdown ---------------------------------------------------------------------

    async def aclose(self) -> None:
        """Stop every live run (stored failed), end every stream, stop the flusher, close
        the store."""
        self._closing = True
        runs = list(self._runs.values())
        for run in runs:
            run.stopping = SHUTDOWN
            run.turn.cancelled.set()
            if run.aio is not None:
                run.aio.cancel()
        pending = {run.aio for run in runs if run.aio is not None}
        if pending:
            await asyncio.wait(pending, timeout=self.cancel_grace_s)
        for run in runs:
            # Runs whose task never started, or whose agent ignored the cancellation.
            await self._finish(run, pb.TASK_STATE_FAILED, SHUTDOWN)
        for hub in self._hubs.values():
            hub.close(UnavailableError("The server is shutting down."))
        self._hubs.clear()
        if self._flusher is not None:
            self._flusher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._flusher
            self._flusher = None
            self._dirty_wakeup = None
        await self.store.aclose()  # e.g. a ListTasks folder scan in progress

    # --- introspection (tests, the CLI) ----------------------------------------------

    def live_task_ids(self) -> list[str]:
        return list(self._runs)

    def __repr__(self) -> str:
        return f"TaskEngine(agent={type(self.agent).__name__}, live runs={len(self._runs)})"


# --- helpers ---------------------------------------------------------------------------


def _turn(
    request: pb.SendMessageRequest,
    message: pb.Message,
    task: pb.Task | None,
    caller: Caller,
    context_id: str,
    cancelled: Signal,
    hops: int,
) -> Turn:
    """The agent's view of a turn. It keeps no reference to the request (a held
    stream should not pin the parsed request in memory)."""
    configuration = request.configuration
    modes = (
        tuple(configuration.accepted_output_modes) if configuration.accepted_output_modes else ()
    )
    if request.HasField("metadata"):
        metadata = json_format.MessageToDict(request.metadata)
        return Turn(message, task, caller, context_id, cancelled, hops, modes, metadata)
    return Turn(message, task, caller, context_id, cancelled, hops, modes)


def _check_cancelable(task: pb.Task) -> None:
    state = task.status.state
    if state in TERMINAL:
        raise TaskNotCancelableError(
            f"Task {task.id} is already {pb.TaskState.Name(state)}", metadata={"taskId": task.id}
        )


def _check_not_terminal(task: pb.Task) -> None:
    state = task.status.state
    if state in TERMINAL:
        raise UnsupportedOperationError(
            f"Task {task.id} is in a terminal state ({pb.TaskState.Name(state)})"
        )


def _check_message(request: pb.SendMessageRequest) -> None:
    if not request.HasField("message"):
        raise _invalid("message", "is required")
    message = request.message
    if not message.message_id:
        raise _invalid("message.messageId", "is required")
    if message.role != pb.ROLE_USER:
        raise _invalid("message.role", "must be ROLE_USER")
    if not message.parts:
        raise _invalid("message.parts", "must contain at least one part")


def _history_length(request: pb.GetTaskRequest | pb.ListTasksRequest, field: str) -> int | None:
    if not request.HasField("history_length"):
        return None
    if request.history_length < 0:
        raise _invalid(field, "must not be negative")
    return request.history_length


def _apply_status(task: pb.Task, state: int, message: pb.Message | None) -> None:
    """Move to ``state`` now; the previous status message goes into history."""
    _archive_status_message(task)
    status = task.status
    status.state = state  # type: ignore[assignment]
    if message is not None:
        status.message.CopyFrom(message)
    set_now(status.timestamp)


def _archive_status_message(task: pb.Task) -> None:
    status = task.status
    if status.HasField("message"):
        task.history.append(status.message)
        status.ClearField("message")


def _ending(output: Any) -> tuple[int, str]:
    if isinstance(output, Completed):
        return (pb.TASK_STATE_COMPLETED, output.text)
    if isinstance(output, InputRequired):
        return (pb.TASK_STATE_INPUT_REQUIRED, output.question)
    if isinstance(output, AuthRequired):
        return (pb.TASK_STATE_AUTH_REQUIRED, output.text)
    if isinstance(output, Failed):
        return (pb.TASK_STATE_FAILED, output.text)
    if isinstance(output, Rejected):
        return (pb.TASK_STATE_REJECTED, output.text)
    log.error("agent yielded %s, which is not an agent output", type(output).__name__)
    return (pb.TASK_STATE_FAILED, UNEXPECTED)


async def _close_outputs(outputs: AsyncIterator[Any]) -> None:
    """Close the agent's generator (bounded) unless it already ran to its end."""
    if getattr(outputs, "ag_frame", True) is None:
        return  # a finished async generator: nothing to close
    aclose = getattr(outputs, "aclose", None)
    if aclose is None:
        return
    try:
        async with asyncio.timeout(5.0):
            await aclose()
    except Exception:
        log.exception("agent did not close cleanly")


def _check_push_room(
    configs: list[pb.TaskPushNotificationConfig], config: pb.TaskPushNotificationConfig
) -> None:
    """InvalidParams when adding ``config`` (not replacing one) exceeds the cap."""
    if len(configs) >= MAX_PUSH_CONFIGS and all(c.id != config.id for c in configs):
        raise _invalid("id", f"a task has at most {MAX_PUSH_CONFIGS} push notification configs")


def _upsert_push(
    configs: list[pb.TaskPushNotificationConfig], config: pb.TaskPushNotificationConfig
) -> None:
    for index, existing in enumerate(configs):
        if existing.id == config.id:
            configs[index] = config
            return
    _check_push_room(configs, config)
    configs.append(config)


def _public_push(config: pb.TaskPushNotificationConfig) -> pb.TaskPushNotificationConfig:
    """The config as answered to callers: token and credentials are never returned."""
    public = pb.TaskPushNotificationConfig()
    public.CopyFrom(config)
    public.ClearField("token")
    if public.HasField("authentication"):
        public.authentication.ClearField("credentials")
    return public


# --- file parts ------------------------------------------------------------------------


def _has_file_parts(message: pb.Message) -> bool:
    return any(is_file_part(part) for part in message.parts)


def _check_no_file_parts(message: pb.Message) -> None:
    """ContentTypeNotSupported for a file part when there is nowhere to save it."""
    for index, part in enumerate(message.parts):
        if is_file_part(part):
            field = f"message.parts[{index}]"
            description = "file parts are not accepted: the server has no workspace"
            raise ContentTypeNotSupportedError(
                f"{field}: {description}", violations=[FieldViolation(field, description)]
            )


def _strip_saved_bytes(message: pb.Message, saved: list[SavedFile]) -> None:
    """Empty the ``raw`` bytes of the stored message's file parts (saved ones are in
    the inbox; refused ones are not kept) and note where each saved file went."""
    for file in saved:
        message.parts[file.part_index].metadata[SAVED_AS_KEY] = file.relative
    for part in message.parts:
        if part.WhichOneof("content") == "raw" and part.raw:
            part.raw = b""
