"""Taking a message in: SendMessage and SendStreamingMessage, the retry index, the
agent's direct reply, and the continuation and context rules (which task a message
continues, when a context is busy, the hop guard). Without any workspace, file parts
are ContentTypeNotSupported."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncGenerator

from a2a_gateway.agent.base import Signal
from a2a_gateway.protocol.context import CallContext, Caller
from a2a_gateway.protocol.errors import (
    ContentTypeNotSupportedError,
    FieldViolation,
    InternalError,
    UnsupportedOperationError,
)
from a2a_gateway.protocol.hops import read_hops
from a2a_gateway.protocol.resume import RESUME_EXTENSION
from lf.a2a.v1 import a2a_pb2 as pb

from ..drain import shutting_down
from ..events import NOT_LOGGED, Batch, Subscriber, TaskStream
from ..files import is_file_part
from ..ids import new_id, valid_id
from ..limits import RunSlot
from ..local_roles import OneProcessClaims
from ..store_roles import ContextClaims, TaskRecords
from ..task_states import INTERRUPTED, TERMINAL, agent_message, set_now, task_view
from ..task_store import UNSTORED, TaskRecord
from .push_configs import PushConfigs, check_push_room, upsert_push
from .records import Records
from .replay import StoredReplay
from .retries import RetryKey, retry_key
from .rules import apply_status, archive_status_message, check_answer, check_message, new_turn
from .state import (
    CONTEXT_BUSY,
    NO_STREAMING,
    ContextKey,
    EngineState,
    Run,
    invalid,
    not_found,
)
from .turns import Runner

log = logging.getLogger(__name__)

#: A message to a task whose run waits for out-of-band credentials.
OWNER_GIVES = (
    "Task {task_id} waits for a value that comes from its owner, asked privately"
    " (TASK_STATE_AUTH_REQUIRED), not from a message: it goes on by itself once the"
    " owner has given it"
)


class Intake:
    """SendMessage and SendStreamingMessage: validate, find or continue the task, run it."""

    def __init__(
        self,
        state: EngineState,
        records: Records,
        runner: Runner,
        push_configs: PushConfigs,
        tasks: TaskRecords,
        claims: ContextClaims,
    ) -> None:
        self._state = state
        self._records = records
        self._runner = runner
        self._push_configs = push_configs
        self._tasks = tasks
        self._claims = claims
        self._claims_granted = type(claims).claim_context is OneProcessClaims.claim_context
        self._never_set = Signal()  # the cancellation signal of reply() turns

    async def send_message(
        self, request: pb.SendMessageRequest, context: CallContext
    ) -> pb.SendMessageResponse:
        history_length, blocking = send_history_length(request), _blocking(request)
        got = await self._accept(request, context, None)
        if not isinstance(got, Run):
            return _answer_without_run(got, history_length)
        run = got
        self._runner.take_over(run, blocking=blocking)  # in the step the run started
        if blocking and not run.replyable.is_set():
            await _until_replyable(run, context)
        if run.unstored is not None:  # not a task the store holds: UNAVAILABLE
            raise run.unstored
        # The answer is the task as stored: its view is taken before the write, which
        # may wait (a database) while the run goes on.
        response = pb.SendMessageResponse()
        task_view(run.record.task, history_length, into=response.task)
        if not run.finished:
            await self._records.persist_if_dirty(run)  # its id is about to leave the engine
        return response

    async def streaming_batches(
        self, request: pb.SendMessageRequest, context: CallContext, stream: TaskStream
    ) -> AsyncGenerator[Batch]:
        """SendStreamingMessage: the first batches of its :class:`~..events.TaskStream`
        (``stream``), which then follows the task's hub itself."""
        if not self._state.agent.streaming:
            raise UnsupportedOperationError(NO_STREAMING)
        history_length = send_history_length(request)
        subscriber = Subscriber(until_interrupted=True)
        got = await self._accept(request, context, subscriber)
        # The stream may last long; its request (inline file bytes and all) must not.
        del request
        if isinstance(got, bytes):  # (not with a subscriber: for the types)
            got = pb.Task.FromString(got)
        if isinstance(got, pb.Message):
            yield [pb.StreamResponse(message=got)], NOT_LOGGED, ""
            return
        snapshot = pb.StreamResponse()
        if isinstance(got, pb.Task):
            task_view(got, history_length, into=snapshot.task)
            yield [snapshot], NOT_LOGGED, ""
            return
        run = got
        # The snapshot is taken in the same step the subscriber joined the hub.
        task_view(run.record.task, history_length, into=snapshot.task)
        task_id = run.record.task.id
        snapshot_seq = self._state.snapshot_seq(task_id, subscriber)
        if RESUME_EXTENSION in context.extensions:
            context.activated_extensions.add(RESUME_EXTENSION)
        del got
        # The snapshot once the task is on disk; then the stream reads the hub's events
        # itself (this generator ends: no frame of its held while the stream waits)
        # and leaves the hub however it ends; until then, this leaves it.
        try:
            await _stored_before_shown(self._records, run)
        except BaseException:
            self._state.leave(task_id, subscriber)
            raise
        del run
        prefix = task_id + ":"
        stream.follow(subscriber, prefix, self._state.leave)
        yield [snapshot], [snapshot_seq], prefix

    async def _accept(
        self, request: pb.SendMessageRequest, context: CallContext, subscriber: Subscriber | None
    ) -> pb.Message | pb.Task | Run | bytes:
        """Validate a message and start (or find) its run; ``subscriber`` joins the
        task's hub in the same step, so it misses no event."""
        if self._state.closing:
            raise shutting_down()
        check_message(request)
        message = request.message
        caller = context.caller
        if not caller.workspace and self._state.default_workspace is None:
            _check_no_file_parts(message)
        inline_push = None
        if request.HasField("configuration"):  # (no coroutine for the common send)
            inline_push = await self._push_configs.inline_config(request)
        context_id = message.context_id
        if context_id and not valid_id(context_id):
            raise invalid("message.contextId", "must match [A-Za-z0-9_-]{1,100}")
        hops = read_hops(request)
        seen_key = retry_key(caller, message)  # a retry is the same message (retries.py)
        task_id = ""  # a new task's, once its context is claimed
        claimed = False  # the context, for task_id: given back unless its run starts
        # On a database a new task's context is claimed with the retry lookup (one round
        # trip); elsewhere a retry makes no ids (a claim there is not a round trip).
        combined = (
            self._claims.claims_in_lookup and not message.task_id and hops <= self._state.max_hops
        )
        if combined and not context_id:
            context_id = new_id()
        if combined and (caller.workspace, caller.name, context_id) not in self._state.busy:
            task_id = new_id()
            retried, claimed = await self._state.retried_or_claimed(
                self._claims, seen_key, context_id, task_id
            )
        else:
            retried = await self._state.retried(seen_key, caller)
        if retried is not None:
            if subscriber is None and self._state.live(caller, retried) is None:
                # A stored task, as the store's JSON or bytes when it has them at hand
                # (no record parsed and copied into the answer; the file still stat'ed).
                if send_history_length(request) is None:
                    named = self._records.json_answer(context, retried, read_once=True)
                    if named is not None:
                        return named
                stored = self._records.stored_answer(caller, retried)
                if stored is not None:
                    if inline_push is None:  # nothing but the request and these shape it
                        context.replay = StoredReplay(caller, *seen_key[2:], retried, stored)
                    return stored
            existing = await self._existing(retried, caller, subscriber)
            if existing is not None:
                return existing
        if message.task_id:
            return await self._continue(
                request, caller, subscriber, hops, seen_key, inline_push, context.version
            )
        if not context_id:
            context_id = new_id()
        busy_key = (caller.workspace, caller.name, context_id)
        try:
            got = await self._new_task(
                request, context, subscriber, (hops, seen_key, inline_push), busy_key, task_id,
                claimed,
            )  # fmt: skip
        except BaseException:
            if claimed:
                await self._claims.release_context(caller, context_id, task_id)
            raise
        if claimed and not isinstance(got, Run):  # an answer without a run
            await self._claims.release_context(caller, context_id, task_id)
        return got

    async def _new_task(
        self,
        request: pb.SendMessageRequest,
        context: CallContext,
        subscriber: Subscriber | None,
        taken: tuple[int, RetryKey, pb.TaskPushNotificationConfig | None],
        busy_key: ContextKey,
        task_id: str,
        claimed: bool,
    ) -> pb.Message | pb.Task | Run:
        """A message that continues no task: the agent's reply, or a new task (its run
        started; with ``claimed``, its context is claimed already)."""
        hops, seen_key, inline_push = taken
        message = request.message
        caller = context.caller
        context_id = busy_key[2]
        if busy_key in self._state.busy:
            raise UnsupportedOperationError(CONTEXT_BUSY)
        if hops <= self._state.max_hops and context.message_replies:
            learned = self._state.keys_learned
            reply = await self._reply(request, caller, context_id, hops)
            if reply is not None:
                return reply
            # The agent was consulted (an await): look again before creating the task,
            # for a retry this process started meanwhile. Not in a shared store's
            # database: a task another process creates shows its keys there only from
            # its first save, so the round trip (a third statement for a blocking send
            # on PostgreSQL) would close almost none of that window.
            # (Only when a key was remembered or found here meanwhile: else the answer
            # is the lookup's above, and a send does not ask the index twice.)
            if (
                learned != self._state.keys_learned
                and (retried := self._state.retried_here(seen_key)) is not None
            ):
                existing = await self._existing(retried, caller, subscriber)
                if existing is not None:
                    return existing
            if busy_key in self._state.busy:
                raise UnsupportedOperationError(CONTEXT_BUSY)

        task = pb.Task(id=task_id or new_id(), context_id=context_id)
        stored_message = task.history.add()
        stored_message.CopyFrom(message)
        stored_message.context_id = context_id
        stored_message.task_id = task.id
        task.status.state = pb.TASK_STATE_SUBMITTED
        set_now(task.status.timestamp)
        record = TaskRecord(task, caller, push_as_of=UNSTORED)  # no other process knows it
        if inline_push is not None:
            inline_push.task_id = task.id
            upsert_push(record, inline_push, context.version)
        if hops > self._state.max_hops:
            self._state.remember_message(seen_key, record)
            apply_status(task, pb.TASK_STATE_FAILED, hop_message(task, hops, self._state.max_hops))
            await self._records.save(record)
            self._state.notify(record)  # no stream can exist yet: only the webhooks hear it
            return task
        if claimed:  # (given back by the caller if the run does not start)
            if busy_key in self._state.busy:
                raise UnsupportedOperationError(CONTEXT_BUSY)
            slot = self._runner.admit(caller, context_id)
        else:
            slot = await self._claim_and_admit(caller, context_id, task.id, busy_key)
        return self._runner.start(record, busy_key, seen_key, hops, request, subscriber, slot)

    async def _claim_and_admit(
        self,
        caller: Caller,
        context_id: str,
        task_id: str,
        busy_key: ContextKey,
        loaded_as: tuple[int, int] | None = None,
    ) -> RunSlot | None:
        """The context's run for ``task_id`` across every process on the store (a
        shared store's claim; CONTEXT_BUSY when another process runs one, or changed
        the stored task since it was read as ``loaded_as``), then the caller's
        task-cap slot. Nothing waits after the last busy check."""
        store = self._claims
        if self._claims_granted and busy_key not in self._state.busy:  # (a store of one
            return self._runner.admit(caller, context_id)  # process: nothing to await)
        if not await store.claim_context(caller, context_id, task_id, loaded_as):
            raise UnsupportedOperationError(CONTEXT_BUSY)
        try:
            if busy_key in self._state.busy:  # a run started here while we waited
                raise UnsupportedOperationError(CONTEXT_BUSY)
            return self._runner.admit(caller, context_id)
        except BaseException:
            await store.release_context(caller, context_id, task_id)
            raise

    async def _unclaim(
        self, caller: Caller, context_id: str, task_id: str, slot: RunSlot | None
    ) -> None:
        """Give back what :meth:`_claim_and_admit` took for a run that does not start
        (the task keeps waiting for input)."""
        if slot is not None:
            slot.finish(keep_context_open=True)
        await self._claims.release_context(caller, context_id, task_id)

    async def _reply(
        self, request: pb.SendMessageRequest, caller: Caller, context_id: str, hops: int
    ) -> pb.Message | None:
        turn = new_turn(
            request,
            request.message,
            None,
            caller,
            context_id,
            self._never_set,
            hops,
            payload=self._state.agent.wants_payload,
        )
        try:
            reply = await self._state.agent.reply(turn)
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
        self, task_id: str, caller: Caller, subscriber: Subscriber | None
    ) -> pb.Task | Run | None:
        """The task a retried messageId already created (for a stream, i.e. with a
        ``subscriber``, only while its run is live)."""
        run = self._state.live(caller, task_id)
        if run is not None:
            if subscriber is not None:
                self._state.subscribe(task_id, subscriber, caller)
            return run
        if subscriber is not None:
            return None
        record = await self._records.load(caller, task_id)
        if record is None:
            return None
        run = self._state.live(caller, task_id)  # a continuation may have started meanwhile
        return run if run is not None else record.task

    async def _continue(
        self,
        request: pb.SendMessageRequest,
        caller: Caller,
        subscriber: Subscriber | None,
        hops: int,
        seen_key: RetryKey,
        inline_push: pb.TaskPushNotificationConfig | None,
        push_version: str,
    ) -> pb.Task | Run:
        message = request.message
        task_id = message.task_id
        if not valid_id(task_id):
            raise not_found(task_id)
        async with self._state.locks.hold(task_id):
            run = self._state.live(caller, task_id)
            if run is not None:
                record = run.record
            else:
                loaded = await self._records.load(caller, task_id, locked=True)
                if loaded is None:
                    raise not_found(task_id)
                record = loaded
            task = record.task
            if message.context_id and message.context_id != task.context_id:
                raise invalid("message.contextId", "does not match the task's contextId")
            state = task.status.state
            if state in TERMINAL:
                raise _terminal(task_id, state)
            if run is not None and state == pb.TASK_STATE_AUTH_REQUIRED:
                raise UnsupportedOperationError(OWNER_GIVES.format(task_id=task_id))
            if run is not None or state not in INTERRUPTED:
                raise UnsupportedOperationError(
                    f"Task {task_id} is not waiting for input ({pb.TaskState.Name(state)})"
                )
            check_answer(task, message)  # before anything changes
            busy_key = (caller.workspace, caller.name, task.context_id)
            if busy_key in self._state.busy:
                raise UnsupportedOperationError(CONTEXT_BUSY)
            if inline_push is not None:  # refuse before anything changes
                check_push_room(record.push_configs, inline_push)
            slot = None
            if hops <= self._state.max_hops:
                try:
                    slot = await self._claim_and_admit(
                        caller, task.context_id, task_id, busy_key, record.loaded_as
                    )
                except UnsupportedOperationError:
                    await _refuse_if_settled(self._tasks, caller, task_id)
                    raise
            if inline_push is not None:
                inline_push.task_id = task_id
                try:
                    await self._push_configs.add_to_stored(record, inline_push, push_version)
                except BaseException:
                    if hops <= self._state.max_hops:
                        await self._unclaim(caller, task.context_id, task_id, slot)
                    raise
            archive_status_message(task)  # the question, before its answer
            stored_message = task.history.add()
            stored_message.CopyFrom(message)
            stored_message.context_id = task.context_id
            if inline_push is not None:
                upsert_push(record, inline_push, push_version)
            if hops > self._state.max_hops:
                self._state.remember_message(seen_key, record)
                apply_status(
                    task, pb.TASK_STATE_FAILED, hop_message(task, hops, self._state.max_hops)
                )
                # No run of it exists: stored only if no other process continued or
                # cancelled the task since it was read (a shared store).
                if not await self._records.replace_or_fail(record):
                    await _refuse_if_settled(self._tasks, caller, task_id)
                    raise UnsupportedOperationError(CONTEXT_BUSY)
                self._state.publish_status(record)
                if self._state.task_limiter is not None:
                    self._state.task_limiter.close_context(caller, task.context_id)
                return task
            # Streams here that followed the task's earlier run elsewhere get its last
            # events before this run's; a task streamed before goes on being logged.
            try:
                await self._state.hand_over(task_id)
                await self._state.open_log(caller, task_id, create=subscriber is not None)
            except BaseException:  # the call was cancelled: the run does not start
                await self._unclaim(caller, task.context_id, task_id, slot)
                raise
            apply_status(task, pb.TASK_STATE_WORKING, None)
            self._state.publish_status(record)
            return self._runner.start(record, busy_key, seen_key, hops, request, subscriber, slot)


def _blocking(request: pb.SendMessageRequest) -> bool:
    """Whether a SendMessage waits for its run (a read of an absent ``configuration``
    would make an empty one: asked first)."""
    return not (request.HasField("configuration") and request.configuration.return_immediately)


def _answer_without_run(
    got: pb.Message | pb.Task | bytes, history_length: int | None
) -> pb.SendMessageResponse:
    """The answer of a send that started no run: a message, a task, or a retry of a
    stored task as the store's bytes (no record parsed and copied when whole)."""
    if isinstance(got, pb.Message):
        return pb.SendMessageResponse(message=got)
    response = pb.SendMessageResponse()
    if isinstance(got, bytes):
        if history_length is None:
            response.task.MergeFromString(got)
        else:
            task_view(pb.Task.FromString(got), history_length, into=response.task)
        return response
    task_view(got, history_length, into=response.task)
    return response


async def _stored_before_shown(records: Records, run: Run) -> None:
    """A streamed run's task on disk before its id leaves the engine. The run takes
    its first step first: one that finishes without waiting (the faux chunks) is then
    written once, finished, not twice."""
    if run.dirty:
        await asyncio.sleep(0)
        await records.persist_if_dirty(run)


async def _until_replyable(run: Run, context: CallContext) -> None:
    """Wait until the run can be answered, or the call's deadline comes (then the
    answer is the task as it is)."""
    remaining = context.remaining()
    if remaining is None:
        # Bounded: every run ends within run_timeout_s. A run that waits for
        # out-of-band credentials (AUTH_REQUIRED) answers at once.
        await run.replyable.wait()
    else:
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(remaining):
                await run.replyable.wait()


async def _refuse_if_settled(tasks: TaskRecords, caller: Caller, task_id: str) -> None:
    """A continuation's claim was refused: when the task is now stored terminal
    (another gateway cancelled it since it was read), say that instead."""
    stored = await tasks.load(caller, task_id)
    if stored is not None and stored.task.status.state in TERMINAL:
        raise _terminal(task_id, stored.task.status.state)


def _terminal(task_id: str, state: pb.TaskState.ValueType) -> UnsupportedOperationError:
    return UnsupportedOperationError(
        f"Task {task_id} is in a terminal state ({pb.TaskState.Name(state)})"
    )


def _check_no_file_parts(message: pb.Message) -> None:
    """ContentTypeNotSupported for a file part when there is nowhere to save it."""
    for index, part in enumerate(message.parts):
        if is_file_part(part):
            field = f"message.parts[{index}]"
            description = "file parts are not accepted: the server has no workspace"
            raise ContentTypeNotSupportedError(
                f"{field}: {description}", violations=[FieldViolation(field, description)]
            )


def send_history_length(request: pb.SendMessageRequest) -> int | None:
    """The send's ``configuration.historyLength`` (None: not given)."""
    if not request.HasField("configuration"):
        return None
    configuration = request.configuration
    if not configuration.HasField("history_length"):
        return None
    if configuration.history_length < 0:
        raise invalid("configuration.historyLength", "must not be negative")
    return configuration.history_length


def hop_message(task: pb.Task, hops: int, limit: int) -> pb.Message:
    """The agent's answer to a message over the hop limit (its task fails with it)."""
    text = f"Hop limit exceeded: the hop count is {hops}, the limit is {limit}."
    return agent_message(text, context_id=task.context_id, task_id=task.id)
