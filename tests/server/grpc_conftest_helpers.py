"""A small deterministic A2AService for binding tests, and gRPC wire helpers.

The echo service completes every task at once and echoes text parts. Ids (task ids,
message task ids, push config task ids) steer it:

- ``error:<ErrorClassName>``: raise that error from ``protocol.errors``;
- ``crash``: raise a plain RuntimeError (an unexpected failure);
- ``wrong-type``: return the wrong message type;
- ``hang`` (streams): send one snapshot, then wait until the stream is closed;
- ``midstream:<ErrorClassName>`` (streams): one snapshot, then raise that error.

Every call records its CallContext in ``contexts``; every stream that ends sets its
id's event in ``closed``.
"""

from __future__ import annotations

import asyncio
import collections
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import grpc
import pytest
from google.protobuf import empty_pb2
from google.rpc import error_details_pb2, status_pb2

import lf.a2a.v1.a2a_pb2 as pb
from a2a_gateway.protocol import errors
from a2a_gateway.protocol.context import CallContext
from a2a_gateway.protocol.service import A2AService
from a2a_gateway.server.auth import AllowAnonymous
from a2a_gateway.server.config import ServerConfig
from a2a_gateway.server.grpc_server import build_grpc_server

ERRORS_BY_NAME: dict[str, type[errors.A2AError]] = {e.__name__: e for e in errors.ALL_ERRORS}
SECRET_DETAIL = "s3cret-internal-detail"
ECHO_EXTENSION = "https://example.com/ext/echo/v1"
STREAM_CHUNKS = 3


def _raise_for(task_id: str) -> None:
    if task_id.startswith("error:"):
        raise ERRORS_BY_NAME[task_id.removeprefix("error:")](metadata={"taskId": task_id})
    if task_id == "crash":
        raise RuntimeError(SECRET_DETAIL)


def _task(task_id: str, state: int, text: str = "") -> pb.Task:
    task = pb.Task(id=task_id, context_id="ctx-1", status=pb.TaskStatus(state=state))
    if text:
        task.artifacts.append(pb.Artifact(artifact_id="echo", parts=[pb.Part(text=text)]))
    return task


class EchoService(A2AService):
    def __init__(self) -> None:
        self.contexts: list[CallContext] = []
        self.closed: dict[str, asyncio.Event] = collections.defaultdict(asyncio.Event)

    def _seen(self, context: CallContext) -> None:
        self.contexts.append(context)
        if ECHO_EXTENSION in context.extensions:
            context.activated_extensions.add(ECHO_EXTENSION)

    async def send_message(
        self, request: pb.SendMessageRequest, context: CallContext
    ) -> pb.SendMessageResponse:
        self._seen(context)
        _raise_for(request.message.task_id)
        text = " ".join(p.text for p in request.message.parts if p.WhichOneof("content") == "text")
        task = _task("task-" + request.message.message_id, pb.TASK_STATE_COMPLETED, text)
        return pb.SendMessageResponse(task=task)

    async def _events(self, task_id: str, context: CallContext) -> AsyncIterator[pb.StreamResponse]:
        try:
            self._seen(context)
            _raise_for(task_id)  # before the first event: a plain error
            yield pb.StreamResponse(task=_task(task_id, pb.TASK_STATE_WORKING))
            if task_id == "hang":
                await asyncio.Event().wait()  # only a cancel or a close ends this
            if task_id.startswith("midstream:"):
                _raise_for("error:" + task_id.removeprefix("midstream:"))
            for index in range(STREAM_CHUNKS):
                artifact = pb.Artifact(artifact_id="echo", parts=[pb.Part(text=f"chunk {index}")])
                yield pb.StreamResponse(
                    artifact_update=pb.TaskArtifactUpdateEvent(
                        task_id=task_id,
                        context_id="ctx-1",
                        artifact=artifact,
                        append=index > 0,
                        last_chunk=index == STREAM_CHUNKS - 1,
                    )
                )
            yield pb.StreamResponse(
                status_update=pb.TaskStatusUpdateEvent(
                    task_id=task_id,
                    context_id="ctx-1",
                    status=pb.TaskStatus(state=pb.TASK_STATE_COMPLETED),
                )
            )
        finally:
            self.closed[task_id].set()

    def send_streaming_message(
        self, request: pb.SendMessageRequest, context: CallContext
    ) -> AsyncIterator[pb.StreamResponse]:
        return self._events(request.message.task_id or "stream-1", context)

    async def get_task(self, request: pb.GetTaskRequest, context: CallContext) -> pb.Task:
        self._seen(context)
        _raise_for(request.id)
        if request.id == "wrong-type":
            return pb.Message(message_id="oops")  # type: ignore[return-value]
        return _task(request.id, pb.TASK_STATE_COMPLETED)

    async def list_tasks(
        self, request: pb.ListTasksRequest, context: CallContext
    ) -> pb.ListTasksResponse:
        self._seen(context)
        return pb.ListTasksResponse(tasks=[_task("t-1", pb.TASK_STATE_COMPLETED)], page_size=50)

    async def cancel_task(self, request: pb.CancelTaskRequest, context: CallContext) -> pb.Task:
        self._seen(context)
        _raise_for(request.id)
        return _task(request.id, pb.TASK_STATE_CANCELED)

    def subscribe_to_task(
        self, request: pb.SubscribeToTaskRequest, context: CallContext
    ) -> AsyncIterator[pb.StreamResponse]:
        return self._events(request.id, context)

    async def create_task_push_notification_config(
        self, request: pb.TaskPushNotificationConfig, context: CallContext
    ) -> pb.TaskPushNotificationConfig:
        self._seen(context)
        _raise_for(request.task_id)
        stored = pb.TaskPushNotificationConfig()
        stored.CopyFrom(request)
        stored.id = stored.id or "cfg-1"
        return stored

    async def get_task_push_notification_config(
        self, request: pb.GetTaskPushNotificationConfigRequest, context: CallContext
    ) -> pb.TaskPushNotificationConfig:
        self._seen(context)
        _raise_for(request.task_id)
        return pb.TaskPushNotificationConfig(
            id=request.id, task_id=request.task_id, url="https://example.com/hook"
        )

    async def list_task_push_notification_configs(
        self, request: pb.ListTaskPushNotificationConfigsRequest, context: CallContext
    ) -> pb.ListTaskPushNotificationConfigsResponse:
        self._seen(context)
        _raise_for(request.task_id)
        return pb.ListTaskPushNotificationConfigsResponse()

    async def delete_task_push_notification_config(
        self, request: pb.DeleteTaskPushNotificationConfigRequest, context: CallContext
    ) -> empty_pb2.Empty:
        self._seen(context)
        _raise_for(request.task_id)
        return empty_pb2.Empty()

    async def get_extended_agent_card(
        self, request: pb.GetExtendedAgentCardRequest, context: CallContext
    ) -> pb.AgentCard:
        self._seen(context)
        return pb.AgentCard(name="echo", description="echo agent", version="1.0.0")


# --- wire helpers ---------------------------------------------------------------------


@asynccontextmanager
async def serving(service: A2AService, config: ServerConfig) -> AsyncIterator[int]:
    """The gRPC server for ``service`` on ``config``, open to anyone, started; its port."""
    server, port = await build_grpc_server(service, config, AllowAnonymous())
    await server.start()
    try:
        yield port
    finally:
        await server.stop(None)


async def stream_until_error(
    call: AsyncIterator[Any], bound: float
) -> tuple[list[Any], grpc.aio.AioRpcError]:
    """Reads a server stream that must end in an error: the events before it, and it."""
    received: list[Any] = []
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        async with asyncio.timeout(bound):
            async for event in call:
                received.append(event)
    return received, caught.value


def rich_status(error: grpc.aio.AioRpcError) -> status_pb2.Status:
    """The google.rpc.Status in the error's ``grpc-status-details-bin`` trailer."""
    trailers: Any = error.trailing_metadata() or ()
    found = [v for k, v in trailers if k == "grpc-status-details-bin"]
    assert len(found) == 1, f"expected one status trailer, got {error.trailing_metadata()!r}"
    value: Any = found[0]
    assert isinstance(value, bytes)
    return status_pb2.Status.FromString(value)


def error_info(status: status_pb2.Status) -> error_details_pb2.ErrorInfo:
    for detail in status.details:
        if detail.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
            info = error_details_pb2.ErrorInfo()
            detail.Unpack(info)
            return info
    raise AssertionError(f"no ErrorInfo in {status}")


def field_violations(status: status_pb2.Status) -> list[str]:
    for detail in status.details:
        if detail.Is(error_details_pb2.BadRequest.DESCRIPTOR):
            request = error_details_pb2.BadRequest()
            detail.Unpack(request)
            return [v.field for v in request.field_violations]
    return []
