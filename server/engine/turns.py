"""Running turns: a run's life from start to its stored final state (the agent's
outputs applied to the task and shown to its streams), the run bound, and CancelTask.

Files: a run first saves the message's file parts (``raw`` or ``url``) to the owner's
workspace inbox (``receive_files``; the default workspace for callers without one);
a refused file fails the task with the reason, before the agent runs. The stored
history keeps such parts with their ``raw`` bytes emptied (the bytes are in the inbox,
``metadata["a2a-gateway.savedAs"]`` says where), so task files stay small. An agent's
:class:`File` output becomes an artifact with one file part (cap ``max_file_bytes``);
one over the cap is skipped and the final status message says so.

Events are built only when someone listens (no stream: no event objects), and never
JSON-encoded here.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import math
from collections.abc import AsyncIterator, Coroutine, Generator, Sequence
from typing import TYPE_CHECKING, Any, Final

from a2a_gateway.agent.base import (
    ENDINGS,
    RESPONSE_ARTIFACT,
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
    answers_at_once,
)
from a2a_gateway.local.files import sanitize_filename
from a2a_gateway.local.redaction import redact_error
from a2a_gateway.protocol import tracing
from a2a_gateway.protocol.context import CallContext, Caller
from a2a_gateway.protocol.errors import UnavailableError
from a2a_gateway.protocol.json_schemas import ask_user_part
from lf.a2a.v1 import a2a_pb2 as pb

from ..events import ChunkEvent, ChunkStream, Subscriber
from ..files import (
    FileRefused,
    SavedFile,
    is_file_part,
    outgoing_parts,
    receive_files,
)
from ..ids import new_id, valid_id
from ..limits import RunSlot
from ..store_roles import CancelSignals
from ..task_states import ACTIVE, INTERRUPTED, agent_message, task_view, valid_text
from ..task_store import TaskRecord
from .records import Records
from .retries import RetryKey
from .rules import apply_status, check_cancelable, new_turn
from .state import SAVED_AS_KEY, SHUTDOWN, UNEXPECTED, ContextKey, EngineState, Run, not_found

if TYPE_CHECKING:
    from opentelemetry.trace import Span

log = logging.getLogger(__name__)

#: A task state's name by number (``TaskState.Name`` is a Python call per run traced).
_STATE_NAMES: Final = {number: name for name, number in pb.TaskState.items()}

#: How often a CancelTask of a run on another gateway re-reads the task for its end.
REMOTE_CANCEL_CHECK_S = 0.05


class _TurnIO:
    """A run's traffic with the agent: the turn's files in, its text, artifacts and
    files out (the :class:`Runner` drives it)."""

    _state: EngineState
    _records: Records

    async def _receive_files(self, run: Run) -> str:
        """Save the turn's file parts to the owner's inbox and hand their paths to the
        agent; the reason when a file is refused (``""`` when all were saved). Either
        way the ``raw`` bytes leave the stored history (the inbox has them)."""
        record = run.record
        message = run.turn.message  # the stored history entry itself
        workspace = self._state.workspace_of(record.owner)
        saved: list[SavedFile] = []
        refused = ""
        try:
            if workspace is None:  # refused when accepted already; never saved to cwd
                raise FileRefused("message.parts: files are not accepted without a workspace")
            saved = await receive_files(
                message,
                workspace=workspace,
                caller=record.owner,
                client=self._state.outbound,
                max_file_bytes=self._state.max_file_bytes,
            )
        except FileRefused as exc:
            refused = str(exc)
            log.info("task %s: a file was refused: %s", record.task.id, refused)
        finally:
            _strip_saved_bytes(message, saved)
        if saved:
            files = tuple(file.path for file in saved)
            run.turn = dataclasses.replace(run.turn, files=files)
        self._records.mark_dirty(run)
        return refused

    async def _file(self, run: Run, file: File) -> None:
        """An agent's file as a new artifact, or a note when it is skipped."""
        workspace = self._state.workspace_of(run.record.owner)
        if file.data is None and file.path is not None and workspace is None:
            name = sanitize_filename(file.filename)
            run.file_notes += (f"Files skipped: {name} (no workspace to read it from).",)
            return
        if file.data is None and file.path is not None:  # a read: off the event loop
            built = await asyncio.to_thread(
                outgoing_parts,
                [file],
                max_file_bytes=self._state.max_file_bytes,
                workspace=workspace,
            )
        else:
            built = outgoing_parts([file], max_file_bytes=self._state.max_file_bytes)
        if built.note:
            run.file_notes += (built.note,)
        if built.parts:
            name = built.parts[0].filename
            artifact = pb.Artifact(name=name, parts=built.parts)
            self._artifact(run, ArtifactChunk(artifact, last_chunk=True))

    def _text(self, run: Run, chunk: TextChunk, task_id: str) -> None:
        """The chunk's text into the response artifact (one text part: a run's first
        chunk replaces the artifact's parts, later ones are appended to its last text
        part by ``Run.flush_text``); its event carries the chunk alone. (``task_id``:
        the task's, read once per run.)"""
        text = chunk.text
        if not text.isascii():  # (the common case costs no call: stream events' path)
            text = valid_text(text)
        if run.response_index < 0:
            task = run.record.task
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
            artifact.parts.add(text=text)
        else:
            append = True
            run.pending_text.append(text)
        if self._state.listened(task_id):
            # The event as its pieces: no protobuf built (events.ChunkEvent).
            stream = run.chunk_stream
            if stream is None:
                task = run.record.task
                artifact = task.artifacts[run.response_index]
                stream = run.chunk_stream = ChunkStream(
                    task_id, task.context_id, artifact.artifact_id, RESPONSE_ARTIFACT
                )
            self._state.emit(task_id, ChunkEvent(stream, text, append, chunk.last))

    def _artifact(self, run: Run, chunk: ArtifactChunk) -> None:
        run.flush_text()  # the chunk may go to the response artifact
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
        if self._state.listened(task.id):
            event = pb.StreamResponse()
            update = event.artifact_update
            update.task_id = task.id
            update.context_id = task.context_id
            update.artifact.CopyFrom(incoming)
            update.append = append
            update.last_chunk = chunk.last_chunk
            self._state.emit(task.id, event)


#: A deadline this near counts as passed (see :meth:`Runner._check_deadlines`).
_DEADLINE_SLACK_S = 0.001


class _AtOnce(_TurnIO):
    """Runs whose agent has its outputs at once, driven by their sender."""

    if TYPE_CHECKING:  # (the Runner's)

        def launch(self, run: Run) -> None: ...
        async def finish(self, run: Run, state: int, text: str) -> None: ...

    def take_over(self, run: Run, *, blocking: bool) -> None:
        """A run :meth:`Runner.start` left to its sender (``Run.eager``): driven (a
        blocking send's) or launched, in the step it started."""
        if not run.eager:
            return
        if blocking:
            self.drive_now(run)
        else:
            self.launch(run)

    def drive_now(self, run: Run) -> None:
        """A blocking send's run that :meth:`Runner.start` left to it (``Run.eager``),
        driven in the sender's task when the agent has its outputs at once
        (:meth:`Agent.answer_now`): no task, timer or flusher wake-up of its own, the
        same states, events and stored bytes as :meth:`_drive`. Its final save is
        stepped here too; one that waits (a database, an fsync) goes on in a task of
        its own (``run.aio``), as a run's end does, so the sender's wait (its deadline,
        its cancellation) does not stop it. Otherwise the run's task is started."""
        run.eager = False
        outputs: Sequence[Any] | None = None
        with contextlib.suppress(Exception):  # asked again, and handled, by run()
            outputs = self._state.agent.answer_now(run.turn)
        if outputs is None or not all(map(_at_once, outputs)):
            self.launch(run)
            return
        record = run.record
        task = record.task
        state = self._state
        ending: tuple[int, str]
        try:
            # WORKING is seen only by webhooks, streams and the event log: for none of
            # them it is not set (the final status replaces it, nothing can see it
            # meanwhile, the stored task is the same).
            if task.status.state != pb.TASK_STATE_WORKING and (
                state.push_feed is not None or state.listened(task.id)
            ):
                apply_status(task, pb.TASK_STATE_WORKING, None)
                state.publish_status(record)
            ending = self._apply_now(run, outputs)
        except Exception:
            ending = _unexpected(run)
        end = self.finish(run, *ending)
        try:
            waiting = end.send(None)
        except StopIteration:
            return  # stored and shown without a wait
        run.aio = asyncio.create_task(_rest_of(end, waiting), name=f"a2a-run-{task.id}")

    def _apply_now(self, run: Run, outputs: Sequence[Any]) -> tuple[int, str]:
        """:meth:`_drive`'s loop over outputs that need no wait (:func:`_at_once`)."""
        task_id = run.record.task.id
        for output in outputs:
            if not self._applied(run, output, task_id):
                return _ending(run, output)
        return (pb.TASK_STATE_COMPLETED, "")

    def _applied(self, run: Run, output: Any, task_id: str) -> bool:
        """Apply an output that changes the task and needs no wait (text, an artifact,
        progress): True; False for any other (the caller's to handle)."""
        if isinstance(output, TextChunk):
            self._text(run, output, task_id)
        elif isinstance(output, ArtifactChunk):
            self._artifact(run, output)
        elif isinstance(output, Progress):
            self._progress(run, output)
        else:
            return False
        return True

    def _progress(self, run: Run, output: Progress) -> None:
        run.flush_text()  # the status goes to webhooks with the task as it is
        task = run.record.task
        message = agent_message(output.text, context_id=task.context_id, task_id=task.id)
        apply_status(task, pb.TASK_STATE_WORKING, message)
        self._records.mark_dirty(run)
        self._state.publish_status(run.record)


class Runner(_AtOnce):
    """Starts runs, drives the agent's outputs into the task, finishes and cancels runs."""

    def __init__(self, state: EngineState, records: Records, cancels: CancelSignals) -> None:
        self._state = state
        self._records = records
        self._cancels = cancels
        self._remote_cancels: set[asyncio.Task[None]] = set()
        #: The one timer of the live runs' deadlines (``_arm``), set for the nearest.
        self._deadline_timer: asyncio.TimerHandle | None = None
        self._answers_at_once = answers_at_once(state.agent)  # (asked once: a class's)
        cancels.on_cancel_request(self.cancel_requested)

    def admit(self, caller: Caller, context_id: str) -> RunSlot | None:
        """A task-cap slot for a new run (RateLimitedError when the caller is at a cap)."""
        if self._state.task_limiter is None:
            return None
        return self._state.task_limiter.start(caller, context_id)

    def start(
        self,
        record: TaskRecord,
        busy_key: ContextKey,
        seen_key: RetryKey,
        hops: int,
        request: pb.SendMessageRequest,
        subscriber: Subscriber | None,
        slot: RunSlot | None,
    ) -> Run:
        """Start the task's run. One without a subscriber (a SendMessage's) that nothing
        else can see (no webhook, no stream, no span, no file) is left to its sender
        (``Run.eager``), which in the same step drives it (:meth:`drive_now`, a blocking
        send) or launches it (:meth:`launch`)."""
        task = record.task
        turn = new_turn(
            request,
            task.history[-1],
            task,
            record.owner,
            task.context_id,
            Signal(),
            hops,
            payload=self._state.agent.wants_payload,
        )
        run = Run(record, busy_key, turn, slot)
        run.continued = bool(request.message.task_id)  # (a new task's message names none)
        task_id = task.id
        self._state.runs[task_id] = run
        self._state.busy[busy_key] = task_id
        self._state.remember_message(seen_key, record)
        if subscriber is not None:
            self._state.subscribe(task_id, subscriber, record.owner)
        if (
            self._answers_at_once
            and subscriber is None
            and not record.push_configs
            and task_id not in self._state.hubs
            and tracing.current_tracer() is None
            and not _has_file_parts(turn.message)
        ):
            run.eager = True
            return run
        self.launch(run)
        return run

    def launch(self, run: Run) -> None:
        """The run's task (and its span, when the call is traced)."""
        task_id = run.record.task.id
        # The run's first step is scheduled before the flusher's wake-up, so a run that
        # finishes without suspending is written once, finished.
        # A traced call's run gets its span here, where the run is made: one parent
        # lookup, and the task starts with the span current (no context switch of its
        # own). A task cancelled before its first step never ends (nor exports) it.
        traced = tracing.start_task_span("A2A run", {"a2a.task_id": task_id})
        if traced is None:
            run.aio = asyncio.create_task(self._drive(run), name=f"a2a-run-{task_id}")
        else:
            current, context = traced
            run.aio = asyncio.create_task(
                self._traced(run, current, enter=context is None),
                name=f"a2a-run-{task_id}",
                context=context,
            )
        self._records.mark_dirty(run)

    async def _traced(self, run: Run, current: Span, *, enter: bool) -> None:
        """The run with its span (started by :meth:`start`, current in the run's task
        already unless ``enter``: the runtime context is not ``contextvars``)."""
        task = run.record.task
        try:
            if enter:
                tracer = tracing.current_tracer()
                assert tracer is not None  # a span was made: the call is traced
                with tracing.Current(current, tracer):
                    await self._drive(run)
            else:
                await self._drive(run)
        except BaseException as exc:
            tracing.mark_failed(current, exc)
            raise
        else:
            state = task.status.state
            current.set_attribute("a2a.state", _STATE_NAMES.get(state) or pb.TaskState.Name(state))
        finally:
            current.end()

    async def _drive(self, run: Run) -> None:
        task = run.record.task
        outputs: AsyncIterator[Any] | None = None
        ending: tuple[int, str] = (pb.TASK_STATE_COMPLETED, "")
        self._arm(run)  # bounds the run: one timer for all runs, none of its own
        try:
            if task.status.state != pb.TASK_STATE_WORKING:
                apply_status(task, pb.TASK_STATE_WORKING, None)
                self._records.mark_dirty(run)
                if run.record.push_configs:
                    await self._records.persist(run)  # the webhooks are about to learn its id
                self._state.publish_status(run.record)
            refused = ""
            if _has_file_parts(run.turn.message):
                refused = await self._receive_files(run)
            if refused:
                ending = (pb.TASK_STATE_FAILED, refused)
            else:
                outputs = self._state.agent.run(run.turn)
                # The agent's outputs applied until its ending (COMPLETED when it has
                # none), inline: a held run keeps no frame of a method of its own.
                task_id = task.id  # (read once: each read of a field costs a name lookup)
                async for output in outputs:
                    if run.finished or run.stopping:
                        break
                    if run.awaiting_auth:
                        self._resume(run, output)
                    if self._applied(run, output, task_id):
                        pass
                    elif isinstance(output, File):
                        await self._file(run, output)
                    elif isinstance(output, AuthRequired) and output.resumes:
                        await self._await_auth(run, output.text)
                    else:
                        ending = _ending(run, output)
                        break
                    del output  # not held while the run waits for the next one
                    hub = self._state.hubs.get(task_id)
                    if hub is not None and hub.pressure:
                        hub.pressure = False
                        await asyncio.sleep(0)  # let the streams catch up
        except asyncio.CancelledError:
            if run.finished:
                return  # CancelTask already stored the outcome
            run.stopping = run.stopping or SHUTDOWN
        except AgentError as exc:
            ending = (pb.TASK_STATE_FAILED, redact_error(str(exc)) or UNEXPECTED)
        except Exception:
            ending = _unexpected(run)
        finally:
            run.deadline = math.inf
            if outputs is not None:
                await _close_outputs(outputs)
        if run.stopping:  # whatever the agent did after being stopped does not count
            ending = (pb.TASK_STATE_FAILED, run.stopping)
        elif run.file_notes:
            state, text = ending
            ending = (state, "\n".join(t for t in (text, *run.file_notes) if t))
        await self.finish(run, *ending)

    async def _await_auth(self, run: Run, text: str) -> None:
        """AUTH_REQUIRED while the run goes on (credentials come out of band): stored
        before anyone sees it, shown to streams and webhooks; a blocking send answers."""
        run.flush_text()
        task = run.record.task
        message = agent_message(text, context_id=task.context_id, task_id=task.id)
        apply_status(task, pb.TASK_STATE_AUTH_REQUIRED, message)
        run.awaiting_auth = True
        self._records.mark_dirty(run)
        await self._records.persist(run)
        self._state.publish_status(run.record)
        run.replyable.set()

    def _resume(self, run: Run, output: Any) -> None:
        """The run's first output after AUTH_REQUIRED puts the task back to WORKING
        (a Progress with its own text; an ending with its own state)."""
        run.awaiting_auth = False
        if isinstance(output, (Progress, *ENDINGS)):
            return
        run.flush_text()
        apply_status(run.record.task, pb.TASK_STATE_WORKING, None)
        self._records.mark_dirty(run)
        self._state.publish_status(run.record)

    def _arm(self, run: Run) -> None:
        """Set the run's deadline; the one timer of all runs fires at the nearest.

        A timer handle per run (its callback and arguments, ~0.5 KiB) would stay for the
        run's life, which for a held stream is the stream's: runs share one, which
        looks at the live runs only when the nearest deadline is due."""
        loop = asyncio.get_running_loop()
        deadline = run.deadline = loop.time() + self._state.run_timeout_s
        timer = self._deadline_timer
        if timer is None or timer.when() > deadline:
            if timer is not None:
                timer.cancel()
            self._deadline_timer = loop.call_at(deadline, self._check_deadlines)

    def _check_deadlines(self) -> None:
        """The timer of :meth:`_arm`: time out the runs past their deadline, then wait
        for the nearest of the others (none without live runs)."""
        self._deadline_timer = None
        loop = asyncio.get_running_loop()
        # The loop may run a timer up to its clock's resolution early.
        limit = loop.time() + _DEADLINE_SLACK_S
        nearest = math.inf
        expired: list[Run] = []
        for run in self._state.runs.values():
            deadline = run.deadline
            if deadline <= limit:
                expired.append(run)
            elif deadline < nearest:
                nearest = deadline
        for run in expired:
            run.deadline = math.inf
            self._time_out(run)
        if nearest != math.inf:
            self._deadline_timer = loop.call_at(nearest, self._check_deadlines)

    def _time_out(self, run: Run) -> None:
        if run.aio is not None and not run.finished:
            run.stopping = f"The run took longer than {self._state.run_timeout_s:g} s."
            run.turn.cancelled.set()
            run.aio.cancel()

    async def finish(self, run: Run, state: int, text: str) -> None:
        """Store the run's final (terminal or interrupted) state, then show it."""
        if run.finished:
            return
        run.finished = True
        task = run.record.task
        message = agent_message(text, context_id=task.context_id, task_id=task.id) if text else None
        if message is not None and state == pb.TASK_STATE_INPUT_REQUIRED and run.status_data:
            # The JSON Schema of the expected answer rides along as a tagged data part.
            message.parts.append(ask_user_part(run.status_data))
        apply_status(task, state, message)
        try:
            await self._records.persist_final(run)  # stored before anyone sees it
        finally:
            if run.slot is not None:
                run.slot.finish(keep_context_open=state in INTERRUPTED)
            last_seq = self._state.publish_status(run.record)
            run.settled.set()
            run.replyable.set()
            task_id = task.id
            del self._state.runs[task_id]
            if not self._state.runs and self._deadline_timer is not None:
                self._deadline_timer.cancel()  # no run left to time out
                self._deadline_timer = None
            if self._state.busy.get(run.busy_key) == task_id:
                del self._state.busy[run.busy_key]
            if state in INTERRUPTED:  # its next run may be in another process
                self._state.keep_following(task_id, last_seq)
            hub = self._state.hubs.get(task_id)  # terminal: already gone (_publish_status)
            if hub is not None and not hub.subscribers:
                del self._state.hubs[task_id]
            self._state.release_log(task_id)

    async def cancel_task(self, request: pb.CancelTaskRequest, context: CallContext) -> pb.Task:
        caller = context.caller
        task_id = request.id
        if not valid_id(task_id):
            raise not_found(task_id)
        run = self._state.live(caller, task_id)
        if run is not None and not run.finished:
            return await self._cancel_run(run)
        if run is not None:
            # Its final state is being stored right now; answer from that state.
            check_cancelable(run.record.task)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self._state.cancel_grace_s):
                    await run.settled.wait()
        async with self._state.locks.hold(task_id):  # no continuation starts meanwhile
            run = self._state.live(caller, task_id)
            if run is None or run.finished:
                return await self._cancel_stored(caller, task_id)
        return await self._cancel_run(run)  # a continuation had just started

    async def _cancel_run(self, run: Run) -> pb.Task:
        task = run.record.task
        run.turn.cancelled.set()
        await self.finish(run, pb.TASK_STATE_CANCELED, "")
        aio = run.aio
        if aio is not None and not aio.done():
            aio.cancel()
            # Give the agent a bounded moment to stop (and clean up) before answering.
            await asyncio.wait({aio}, timeout=self._state.cancel_grace_s)
        return task_view(task)

    def cancel_requested(self, task_id: str) -> None:
        """Another process on a shared store asked to cancel ``task_id``: cancel its
        run if it runs here (in a task of its own, bounded by ``cancel_grace_s``)."""
        run = self._state.runs.get(task_id)
        if run is None or run.finished or self._state.closing:
            return
        job = asyncio.get_running_loop().create_task(
            self._cancel_for_elsewhere(run), name=f"a2a-cancel-{task_id}"
        )
        self._remote_cancels.add(job)
        job.add_done_callback(self._remote_cancels.discard)

    async def _cancel_for_elsewhere(self, run: Run) -> None:
        try:
            await self._cancel_run(run)
        except Exception:
            log.exception("cancelling task %s for another gateway failed", run.record.task.id)

    async def _cancel_stored(self, caller: Caller, task_id: str) -> pb.Task:
        """(holding the task's lock) Cancel a task with no run here. With a store
        shared by several processes, the cancel is stored only if no other process
        changed the task meanwhile (it cancelled it too, or started running it): then
        it is read again and decided anew, for at most the cancel grace."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._state.cancel_grace_s
        while True:
            record = await self._records.load(caller, task_id, locked=True)
            if record is None:
                raise not_found(task_id)
            task = record.task
            check_cancelable(task)
            if record.held_elsewhere and await self._cancels.request_cancel(task_id):
                return await self._cancelled_elsewhere(caller, task_id)
            apply_status(task, pb.TASK_STATE_CANCELED, None)
            if await self._records.replace_or_fail(record):
                break
            if loop.time() >= deadline:
                raise UnavailableError(
                    f"Task {task_id} is being changed on another gateway: retry the cancel"
                )
            await asyncio.sleep(REMOTE_CANCEL_CHECK_S)
        self._state.publish_status(record)
        if self._state.task_limiter is not None:
            self._state.task_limiter.close_context(caller, task.context_id)
        return task_view(task)

    async def _cancelled_elsewhere(self, caller: Caller, task_id: str) -> pb.Task:
        """The task once the process running it has stored it settled (re-read every
        ``REMOTE_CANCEL_CHECK_S``, for at most the cancel grace and a margin)."""
        deadline = asyncio.get_running_loop().time() + self._state.cancel_grace_s + 5.0
        while asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(REMOTE_CANCEL_CHECK_S)
            record = await self._records.load(caller, task_id, locked=True)
            if record is None:
                raise not_found(task_id)
            if record.task.status.state not in ACTIVE:
                return task_view(record.task)
        raise UnavailableError(
            f"Task {task_id} runs on another gateway, which did not confirm its cancellation"
        )

    async def stop_all(self) -> None:
        """Stop every live run (shutdown): each is stored failed."""
        for job in list(self._remote_cancels):
            job.cancel()
        runs = list(self._state.runs.values())
        for run in runs:
            run.stopping = SHUTDOWN
            run.turn.cancelled.set()
            if run.aio is not None:
                run.aio.cancel()
        pending = {run.aio for run in runs if run.aio is not None}
        if pending:
            await asyncio.wait(pending, timeout=self._state.cancel_grace_s)
        for run in runs:
            # Runs whose task never started, or whose agent ignored the cancellation.
            await self.finish(run, pb.TASK_STATE_FAILED, SHUTDOWN)


def _unexpected(run: Run) -> tuple[int, str]:
    log.exception("run of task %s failed", run.record.task.id)
    return (pb.TASK_STATE_FAILED, UNEXPECTED)


def _at_once(output: Any) -> bool:
    """Whether :meth:`Runner._apply_now` applies the output (it needs no wait)."""
    if isinstance(output, AuthRequired):
        return not output.resumes
    return isinstance(output, (TextChunk, ArtifactChunk, Progress, *ENDINGS))


class _Rest:
    """Awaited in a task: the rest of a coroutine that was stepped outside any task
    (``send(None)``) and suspended on ``waiting`` (what it yielded), from there on."""

    __slots__ = ("_coro", "_waiting")

    def __init__(self, coro: Coroutine[Any, Any, None], waiting: Any) -> None:
        self._coro = coro
        self._waiting = waiting

    def __await__(self) -> Generator[Any, Any, None]:
        coro, waiting = self._coro, self._waiting
        del self._coro, self._waiting
        while True:
            try:
                sent = yield waiting
            except BaseException as exc:  # thrown into this task (its cancellation)
                try:
                    waiting = coro.throw(exc)
                except StopIteration:
                    return
            else:
                try:
                    waiting = coro.send(sent)
                except StopIteration:
                    return


async def _rest_of(coro: Coroutine[Any, Any, None], waiting: Any) -> None:
    await _Rest(coro, waiting)


def _ending(run: Run, output: Any) -> tuple[int, str]:
    """The run's final state and text from the agent's ending (a question's schema,
    if any, kept for the status message)."""
    if isinstance(output, Completed):
        return (pb.TASK_STATE_COMPLETED, output.text)
    if isinstance(output, InputRequired):
        if output.schema is not None:
            run.status_data = output.schema
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


def _has_file_parts(message: pb.Message) -> bool:
    return any(is_file_part(part) for part in message.parts)


def _strip_saved_bytes(message: pb.Message, saved: list[SavedFile]) -> None:
    """Empty the ``raw`` bytes of the stored message's file parts (saved ones are in
    the inbox; refused ones are not kept) and note where each saved file went."""
    for file in saved:
        message.parts[file.part_index].metadata[SAVED_AS_KEY] = file.relative
    for part in message.parts:
        if part.WhichOneof("content") == "raw" and part.raw:
            part.raw = b""
