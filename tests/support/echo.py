"""The one echo service of the binding tests: a small deterministic ``A2AService``.

It is not the task engine: it is just enough behaviour to check what the bindings put on
the wire. Every call is recorded in ``calls`` (name, request, CallContext); ``contexts``
lists the contexts alone. It activates the echo extensions a caller asks for
(``urn:test:echo``, :data:`ECHO_EXTENSION`).

Two ways to steer it, both always on:

- ``failures``: any operation naming an id (message id, task id) listed there raises
  that error;
- ids: ``error:<ErrorClassName>`` raises that error from ``protocol.errors``, ``crash``
  a plain RuntimeError (an unexpected failure); on streams, ``hang`` sends one snapshot
  then waits until the stream is closed, ``midstream:<ErrorClassName>`` one snapshot
  then that error; GetTask ``wrong-type`` returns the wrong message type.

Two conventions for what it answers (``stateless``):

- stateful (the default; the HTTP binding tests): send keeps a numbered task
  (``task-N``, context from the message or ``ctx-N``) whose artifact ``a-1`` echoes the
  first text part as ``echo: <text>``; get, list, cancel, subscribe and push configs
  work on what was kept (an unknown id is TaskNotFound). A message's ``metadata``
  steers streams: ``chunks`` (2 by default), ``idle``, ``hang``, ``fail``, ``crash``;
  ``reply`` makes send answer a message.
- ``stateless=True`` (the gRPC binding tests): every answer is built from the request's
  ids: send completes ``task-<message id>`` in ``ctx-1`` with artifact ``echo`` holding
  the text parts joined; any task id exists; a stream (task id from the message, or
  ``stream-1``) sends :data:`STREAM_CHUNKS` chunks, the last marked ``last_chunk``.

Every stream that ends sets ``stream_closed`` and its task id's event in ``closed``.
"""

from __future__ import annotations

import asyncio
import collections
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

from google.protobuf import empty_pb2, message

import lf.a2a.v1.a2a_pb2 as pb
from a2a_gateway.protocol import errors
from a2a_gateway.protocol.context import CallContext
from a2a_gateway.protocol.service import A2AService
from a2a_gateway.server.card import CardProvider

ERRORS_BY_NAME: dict[str, type[errors.A2AError]] = {e.__name__: e for e in errors.ALL_ERRORS}
SECRET_DETAIL = "s3cret-internal-detail"
ECHO_EXTENSION = "https://example.com/ext/echo/v1"
ECHO_EXTENSIONS = frozenset({"urn:test:echo", ECHO_EXTENSION})
STREAM_CHUNKS = 3  # stateless streams; stateful ones send ``chunks`` (2 by default)
_NO_REQUEST = empty_pb2.Empty()


class Boom(RuntimeError):
    """An unexpected (non-A2A) exception raised by the service."""


def make_error(cls: type[errors.A2AError], subject: str) -> errors.A2AError:
    """An instance of ``cls`` carrying ``subject`` in its metadata (and a violation)."""
    return cls(
        f"{cls.__name__} for {subject}",
        metadata={"taskId": subject},
        violations=[errors.FieldViolation("id", "chosen by the test")],
    )


def _raise_for(subject: str) -> None:
    if subject.startswith("error:"):
        raise ERRORS_BY_NAME[subject.removeprefix("error:")](metadata={"taskId": subject})
    if subject == "crash":
        raise RuntimeError(SECRET_DETAIL)


def _task(task_id: str, state: int, text: str = "") -> pb.Task:
    task = pb.Task(id=task_id, context_id="ctx-1", status=pb.TaskStatus(state=state))  # type: ignore[arg-type]
    if text:
        task.artifacts.append(pb.Artifact(artifact_id="echo", parts=[pb.Part(text=text)]))
    return task


@dataclass
class EchoService(A2AService):
    """Deterministic A2A service: send completes a task whose artifact echoes the text."""

    cards: CardProvider | None = None
    stateless: bool = False
    failures: dict[str, errors.A2AError | Exception] = field(default_factory=dict)
    tasks: dict[str, pb.Task] = field(default_factory=dict)
    configs: dict[tuple[str, str], pb.TaskPushNotificationConfig] = field(default_factory=dict)
    calls: list[tuple[str, message.Message, CallContext]] = field(default_factory=list)
    stream_started: asyncio.Event = field(default_factory=asyncio.Event)
    stream_closed: asyncio.Event = field(default_factory=asyncio.Event)
    closed: collections.defaultdict[str, asyncio.Event] = field(
        default_factory=lambda: collections.defaultdict(asyncio.Event)
    )
    counter: int = 0

    @property
    def contexts(self) -> list[CallContext]:
        return [context for _, _, context in self.calls]

    @property
    def last(self) -> tuple[str, message.Message, CallContext]:
        return self.calls[-1]

    def _seen(
        self,
        context: CallContext,
        name: str = "",
        request: message.Message = _NO_REQUEST,
        *ids: str,
    ) -> None:
        self.calls.append((name, request, context))
        context.activated_extensions.update(ECHO_EXTENSIONS & context.extensions)
        for subject in ids:
            failure = self.failures.get(subject)
            if failure is not None:
                raise failure
            _raise_for(subject)

    def _new_task(self, request: pb.SendMessageRequest, state: int) -> pb.Task:
        self.counter += 1
        task = pb.Task(
            id=f"task-{self.counter}",
            context_id=request.message.context_id or f"ctx-{self.counter}",
            status=pb.TaskStatus(state=state),  # type: ignore[arg-type]
        )
        task.history.append(request.message)
        self.tasks[task.id] = task
        return task

    def _task(self, task_id: str) -> pb.Task:
        if self.stateless:
            return _task(task_id, pb.TASK_STATE_COMPLETED)
        task = self.tasks.get(task_id)
        if task is None:
            raise errors.TaskNotFoundError(metadata={"taskId": task_id})
        return task

    async def send_message(
        self, request: pb.SendMessageRequest, context: CallContext
    ) -> pb.SendMessageResponse:
        ids = (request.message.message_id, request.message.task_id)
        self._seen(context, "send_message", request, *ids)
        if self.stateless:
            parts = request.message.parts
            text = " ".join(p.text for p in parts if p.WhichOneof("content") == "text")
            task = _task("task-" + request.message.message_id, pb.TASK_STATE_COMPLETED, text)
            return pb.SendMessageResponse(task=task)
        if request.metadata.fields.get("reply") is not None:
            reply = pb.Message(message_id="r-1", role=pb.ROLE_AGENT, parts=[pb.Part(text="hi")])
            return pb.SendMessageResponse(message=reply)
        task = self._new_task(request, pb.TASK_STATE_COMPLETED)
        text = request.message.parts[0].text
        task.artifacts.append(pb.Artifact(artifact_id="a-1", parts=[pb.Part(text=f"echo: {text}")]))
        return pb.SendMessageResponse(task=task)

    def send_streaming_message(
        self, request: pb.SendMessageRequest, context: CallContext
    ) -> AsyncIterator[pb.StreamResponse]:
        return self._stream("send_streaming_message", request, request.message.task_id, context)

    async def _stream(
        self, name: str, request: message.Message, task_id: str, context: CallContext
    ) -> AsyncIterator[pb.StreamResponse]:
        """A task's stream: a snapshot, the artifact chunks, the final status."""
        if self.stateless:
            task_id = task_id or "stream-1"
        try:
            ids = [task_id]
            if isinstance(request, pb.SendMessageRequest):
                ids.append(request.message.message_id)
            self._seen(context, name, request, *ids)  # before the first event: a plain error
            options = request.metadata.fields if isinstance(request, pb.SendMessageRequest) else {}
            if isinstance(request, pb.SendMessageRequest) and not self.stateless:
                task = self._new_task(request, pb.TASK_STATE_WORKING)
                task_id = task.id
            else:
                task = _task(task_id, pb.TASK_STATE_WORKING)
            self.stream_started.set()
            yield pb.StreamResponse(task=task)
            if "hang" in options or task_id == "hang":
                await asyncio.Event().wait()  # only a cancel or a close ends this
            if task_id.startswith("midstream:"):
                _raise_for("error:" + task_id.removeprefix("midstream:"))
            if "idle" in options:
                await asyncio.sleep(options["idle"].number_value)
            if "fail" in options:
                raise make_error(
                    errors.error_for_reason(options["fail"].string_value) or errors.InternalError,
                    task.id,
                )
            if "crash" in options:
                raise Boom("secret internal detail")
            if self.stateless:
                count = STREAM_CHUNKS
            else:
                count = int(options["chunks"].number_value) if "chunks" in options else 2
            artifact_id = "echo" if self.stateless else "a-1"
            for index in range(count):
                chunk = pb.Artifact(artifact_id=artifact_id, parts=[pb.Part(text=f"chunk {index}")])
                update = pb.TaskArtifactUpdateEvent(
                    task_id=task.id, context_id=task.context_id, artifact=chunk, append=index > 0
                )
                if self.stateless:
                    update.last_chunk = index == count - 1
                yield pb.StreamResponse(artifact_update=update)
            yield pb.StreamResponse(
                status_update=pb.TaskStatusUpdateEvent(
                    task_id=task.id,
                    context_id=task.context_id,
                    status=pb.TaskStatus(state=pb.TASK_STATE_COMPLETED),
                )
            )
        finally:
            self.stream_closed.set()
            self.closed[task_id].set()

    async def get_task(self, request: pb.GetTaskRequest, context: CallContext) -> pb.Task:
        self._seen(context, "get_task", request, request.id)
        if request.id == "wrong-type":
            return pb.Message(message_id="oops")  # type: ignore[return-value]
        return self._task(request.id)

    async def list_tasks(
        self, request: pb.ListTasksRequest, context: CallContext
    ) -> pb.ListTasksResponse:
        self._seen(context, "list_tasks", request)
        if self.stateless:
            return pb.ListTasksResponse(tasks=[_task("t-1", pb.TASK_STATE_COMPLETED)], page_size=50)
        tasks = list(self.tasks.values())
        return pb.ListTasksResponse(
            tasks=tasks, page_size=request.page_size or 50, total_size=len(tasks)
        )

    async def cancel_task(self, request: pb.CancelTaskRequest, context: CallContext) -> pb.Task:
        self._seen(context, "cancel_task", request, request.id)
        task = self._task(request.id)
        task.status.state = pb.TASK_STATE_CANCELED
        return task

    def subscribe_to_task(
        self, request: pb.SubscribeToTaskRequest, context: CallContext
    ) -> AsyncIterator[pb.StreamResponse]:
        if self.stateless:  # the task's whole stream, as if it ran now
            return self._stream("subscribe_to_task", request, request.id, context)
        return self._subscribe(request, context)

    async def _subscribe(
        self, request: pb.SubscribeToTaskRequest, context: CallContext
    ) -> AsyncIterator[pb.StreamResponse]:
        self._seen(context, "subscribe_to_task", request, request.id)
        task = self._task(request.id)
        yield pb.StreamResponse(task=task)
        yield pb.StreamResponse(
            status_update=pb.TaskStatusUpdateEvent(
                task_id=task.id, context_id=task.context_id, status=task.status
            )
        )

    async def create_task_push_notification_config(
        self, request: pb.TaskPushNotificationConfig, context: CallContext
    ) -> pb.TaskPushNotificationConfig:
        self._seen(context, "create_task_push_notification_config", request, request.task_id)
        stored = pb.TaskPushNotificationConfig()
        stored.CopyFrom(request)
        stored.id = stored.id or ("cfg-1" if self.stateless else request.task_id)
        self.configs[(stored.task_id, stored.id)] = stored
        return stored

    async def get_task_push_notification_config(
        self, request: pb.GetTaskPushNotificationConfigRequest, context: CallContext
    ) -> pb.TaskPushNotificationConfig:
        self._seen(context, "get_task_push_notification_config", request, request.task_id)
        if self.stateless:
            return pb.TaskPushNotificationConfig(
                id=request.id, task_id=request.task_id, url="https://example.com/hook"
            )
        found = self.configs.get((request.task_id, request.id))
        if found is None:
            raise errors.TaskNotFoundError(metadata={"taskId": request.task_id})
        return found

    async def list_task_push_notification_configs(
        self, request: pb.ListTaskPushNotificationConfigsRequest, context: CallContext
    ) -> pb.ListTaskPushNotificationConfigsResponse:
        self._seen(context, "list_task_push_notification_configs", request, request.task_id)
        if self.stateless:
            return pb.ListTaskPushNotificationConfigsResponse()
        found = [c for (t, _), c in self.configs.items() if t == request.task_id]
        return pb.ListTaskPushNotificationConfigsResponse(configs=found)

    async def delete_task_push_notification_config(
        self, request: pb.DeleteTaskPushNotificationConfigRequest, context: CallContext
    ) -> empty_pb2.Empty:
        self._seen(context, "delete_task_push_notification_config", request, request.task_id)
        self.configs.pop((request.task_id, request.id), None)
        return empty_pb2.Empty()

    async def get_extended_agent_card(
        self, request: pb.GetExtendedAgentCardRequest, context: CallContext
    ) -> pb.AgentCard:
        self._seen(context, "get_extended_agent_card", request)
        if self.cards is not None:
            return self.cards.extended_card(context)
        if self.stateless:
            return pb.AgentCard(name="echo", description="echo agent", version="1.0.0")
        raise errors.ExtendedAgentCardNotConfiguredError()


BIG_TEXT = "x" * 512 * 1024  # larger than any HTTP/2 window a client opens


@dataclass
class FloodService(EchoService):
    """Streams large artifact chunks (:data:`BIG_TEXT`) until the stream is closed, after
    a small first event as the engine sends (unless ``snapshot_first`` is False);
    ``produced`` counts the events made, ``flood_closed`` is set when the stream ends."""

    snapshot_first: bool = True
    produced: int = 0
    flood_closed: asyncio.Event = field(default_factory=asyncio.Event)

    def send_streaming_message(
        self, request: pb.SendMessageRequest, context: CallContext
    ) -> AsyncIterator[pb.StreamResponse]:
        return self._flood()

    async def _flood(self) -> AsyncIterator[pb.StreamResponse]:
        try:
            if self.snapshot_first:
                self.produced += 1
                yield pb.StreamResponse(task=pb.Task(id="t-1", context_id="c-1"))
            big = pb.Artifact(artifact_id="big", parts=[pb.Part(text=BIG_TEXT)])
            while True:
                self.produced += 1
                yield pb.StreamResponse(
                    artifact_update=pb.TaskArtifactUpdateEvent(task_id="t-1", artifact=big)
                )
        finally:
            self.flood_closed.set()


@dataclass
class HoldingService(EchoService):
    """A stream that keeps only the request's message id, sends one event (a task of that
    id), sets ``started``, then waits for ``release``."""

    started: asyncio.Event = field(default_factory=asyncio.Event)
    release: asyncio.Event = field(default_factory=asyncio.Event)

    def send_streaming_message(
        self, request: pb.SendMessageRequest, context: CallContext
    ) -> AsyncIterator[pb.StreamResponse]:
        return self._hold(request.message.message_id)

    async def _hold(self, message_id: str) -> AsyncIterator[pb.StreamResponse]:
        yield pb.StreamResponse(task=pb.Task(id=message_id, context_id="c-1"))
        self.started.set()
        await self.release.wait()
