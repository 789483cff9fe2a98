"""Our client calling our own gateway's A2A 0.3 surface on every binding (JSON-RPC,
HTTP+JSON and gRPC's ``a2a.v1.A2AService`` with the 0.3 schema), reached through a card
cut down to its 0.3 interfaces, as a 0.3-only agent's would be; and the 0.3 gRPC wire
against hand-made servers. The official SDK's 0.3 peer (``sdk_server.py --only-0.3
--grpc-0.3``) is in ``test_client_compat03.py``."""

from __future__ import annotations

import asyncio
import base64
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import grpc
import pytest

import lf.a2a.v0_3.a2a_pb2 as pb03
import lf.a2a.v1.a2a_pb2 as pb
from a2a_gateway.client import (
    AuthRejected,
    Grpc03Transport,
    RemoteService,
)
from a2a_gateway.client.grpc03 import legacy_grpc_request
from a2a_gateway.protocol import errors
from a2a_gateway.server.grpc03 import legacy_status_message
from tests.support.ports import free_port

from .client_support import BINDINGS, HOST, TRANSPORTS_03, Peer, own_legacy_service, text_request

BOUND_S = 20.0


@pytest.fixture(params=("jsonrpc", "rest", "grpc"))
async def agent(request: pytest.FixtureRequest, own_server: Peer) -> AsyncIterator[RemoteService]:
    async with asyncio.timeout(BOUND_S):
        service = await own_legacy_service(own_server, request.param)
    assert service.binding == BINDINGS[request.param]
    async with service:
        yield service


async def test_a_0_3_interface_gets_the_0_3_transport(agent: RemoteService) -> None:
    assert agent.interface.protocol_version == "0.3"
    assert isinstance(agent.transport, TRANSPORTS_03[agent.binding])


async def test_send_get_and_stream_chunks(agent: RemoteService) -> None:
    async with asyncio.timeout(BOUND_S):
        reply = await agent.send_message(text_request("hello there"))
        got = await agent.get_task(pb.GetTaskRequest(id=reply.task.id, history_length=5))
        events = [e async for e in agent.send_streaming_message(text_request("chunks:3"))]
        with pytest.raises(errors.TaskNotCancelableError):  # it is done
            await agent.cancel_task(pb.CancelTaskRequest(id=reply.task.id))
    assert reply.task.status.state == pb.TASK_STATE_COMPLETED
    assert got.id == reply.task.id and got.status.state == pb.TASK_STATE_COMPLETED
    assert got.history[0].role == pb.ROLE_USER and got.history[0].parts[0].text == "hello there"
    chunks = [e.artifact_update for e in events if e.HasField("artifact_update")]
    assert [c.artifact.parts[0].text for c in chunks] == ["chunk-0", "chunk-1", "chunk-2"]
    assert chunks[-1].last_chunk
    assert events[-1].status_update.status.state == pb.TASK_STATE_COMPLETED


async def test_push_config_set_get_list_delete(agent: RemoteService) -> None:
    # The gateway accepts https webhooks only; the config is deleted before the cancel,
    # so nothing is ever delivered to it.
    hook = "https://hooks.example/a2a"
    async with asyncio.timeout(BOUND_S):
        task = (await agent.send_message(text_request("hold:30", return_immediately=True))).task
        try:
            created = await agent.create_task_push_notification_config(
                pb.TaskPushNotificationConfig(task_id=task.id, id="hook-1", url=hook, token="tok")
            )
            assert (created.task_id, created.id, created.url) == (task.id, "hook-1", hook)
            got = await agent.get_task_push_notification_config(
                pb.GetTaskPushNotificationConfigRequest(task_id=task.id, id="hook-1")
            )
            assert got.url == hook
            listed = await agent.list_task_push_notification_configs(
                pb.ListTaskPushNotificationConfigsRequest(task_id=task.id)
            )
            assert [c.id for c in listed.configs] == ["hook-1"]
            await agent.delete_task_push_notification_config(
                pb.DeleteTaskPushNotificationConfigRequest(task_id=task.id, id="hook-1")
            )
            listed = await agent.list_task_push_notification_configs(
                pb.ListTaskPushNotificationConfigsRequest(task_id=task.id)
            )
            assert list(listed.configs) == []
        finally:
            await agent.cancel_task(pb.CancelTaskRequest(id=task.id))


async def test_unknown_task_is_task_not_found(agent: RemoteService) -> None:
    async with asyncio.timeout(BOUND_S):
        with pytest.raises(errors.TaskNotFoundError) as caught:
            await agent.get_task(pb.GetTaskRequest(id="no-such-task"))
        with pytest.raises(errors.TaskNotFoundError):
            await agent.cancel_task(pb.CancelTaskRequest(id="no-such-task"))
        with pytest.raises(errors.TaskNotFoundError):
            await anext(agent.subscribe_to_task(pb.SubscribeToTaskRequest(id="no-such-task")))
    # the class prefix of the 0.3 status message is not repeated in ours
    assert not caught.value.message.startswith("TaskNotFoundError")


async def test_list_tasks_is_refused_before_any_call() -> None:
    async with RemoteService(Grpc03Transport(f"grpc://{HOST}:{free_port()}")) as agent:
        with pytest.raises(errors.UnsupportedOperationError, match=r"does not exist in A2A 0\.3"):
            await agent.list_tasks(pb.ListTasksRequest())


async def test_wrong_key_is_rejected_and_never_shown(own_server: Peer) -> None:
    wrong = "wrong-key-5f3a2b1c9d0e"
    async with asyncio.timeout(BOUND_S):
        async with await own_legacy_service(own_server, "grpc", key=wrong) as service:
            with pytest.raises(AuthRejected) as caught:
                await service.send_message(text_request("hi"))
    assert "rejected the key" in str(caught.value)
    assert wrong not in str(caught.value) and wrong not in repr(service.transport)


def test_requests_use_0_3_rpc_names_and_resource_names() -> None:
    wire, request = legacy_grpc_request(
        "GetTaskPushNotificationConfig",
        pb.GetTaskPushNotificationConfigRequest(task_id="t-1", id="c-1"),
    )
    assert isinstance(request, pb03.GetTaskPushNotificationConfigRequest)
    assert (wire, request.name) == (
        "GetTaskPushNotificationConfig",
        "tasks/t-1/pushNotificationConfigs/c-1",
    )
    wire, request = legacy_grpc_request("SubscribeToTask", pb.SubscribeToTaskRequest(id="t-1"))
    assert isinstance(request, pb03.TaskSubscriptionRequest)
    assert (wire, request.name) == ("TaskSubscription", "tasks/t-1")


@contextlib.asynccontextmanager
async def _get_task_server(
    get_task: Callable[[Any, grpc.aio.ServicerContext[Any, Any]], Awaitable[Any]],
) -> AsyncIterator[Grpc03Transport]:
    """A 0.3 gRPC server answering only ``GetTask`` with ``get_task``; yields a transport
    to it."""
    rpc = grpc.unary_unary_rpc_method_handler(
        get_task,
        request_deserializer=pb03.GetTaskRequest.FromString,
        response_serializer=pb03.Task.SerializeToString,
    )
    handler = grpc.method_handlers_generic_handler("a2a.v1.A2AService", {"GetTask": rpc})
    server = grpc.aio.server()
    server.add_generic_rpc_handlers((handler,))
    port = server.add_insecure_port(f"{HOST}:0")
    await server.start()
    try:
        async with asyncio.timeout(BOUND_S):
            yield Grpc03Transport(f"grpc://{HOST}:{port}")
    finally:
        await server.stop(None)


@pytest.mark.parametrize(
    "error",
    [
        errors.TaskNotCancelableError("task t-1 is done"),
        errors.ContentTypeNotSupportedError("no images"),
    ],
)
async def test_sdk_style_class_name_picks_the_error(error: errors.A2AError) -> None:
    """Failing like the SDK's 0.3 server: ``"<ErrorClass>: <message>"`` in the status
    message and no ``google.rpc.Status`` trailer."""

    async def get_task(request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
        await context.abort(error.spec.grpc_status, legacy_status_message(error))

    async with _get_task_server(get_task) as wire, RemoteService(wire) as agent:
        with pytest.raises(type(error)) as caught:
            await agent.get_task(pb.GetTaskRequest(id="t-1"))
    assert caught.value.message == error.message


async def test_file_bytes_as_the_sdk_writes_them() -> None:
    """The SDK stores the base64 TEXT of a file in the 0.3 proto's bytes field; it reads
    back as the content, and our requests write it the same way."""
    content = b"\x00\x01hi"
    seen: list[str] = []

    async def get_task(request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
        seen.append(request.name)
        file = pb03.FilePart(file_with_bytes=base64.b64encode(content), mime_type="x/y")
        return pb03.Task(
            id="t-1",
            context_id="c-1",
            status=pb03.TaskStatus(state=pb03.TASK_STATE_COMPLETED),
            artifacts=[pb03.Artifact(artifact_id="a-1", parts=[pb03.Part(file=file)])],
        )

    async with _get_task_server(get_task) as wire, RemoteService(wire) as agent:
        task = await agent.get_task(pb.GetTaskRequest(id="t-1"))
    assert seen == ["tasks/t-1"]
    assert task.status.state == pb.TASK_STATE_COMPLETED
    part = task.artifacts[0].parts[0]
    assert (part.raw, part.media_type) == (content, "x/y")
    message = pb.Message(
        role=pb.ROLE_USER, message_id="m-1", parts=[pb.Part(raw=content, media_type="x/y")]
    )
    _, request = legacy_grpc_request("SendMessage", pb.SendMessageRequest(message=message))
    assert isinstance(request, pb03.SendMessageRequest)
    assert request.request.content[0].file.file_with_bytes == base64.b64encode(content)


async def test_extended_card_over_get_agent_card(agent: RemoteService) -> None:
    async with asyncio.timeout(BOUND_S):
        card = await agent.get_extended_agent_card(pb.GetExtendedAgentCardRequest())
    assert card.name == agent.card.name
    assert {i.protocol_version for i in card.supported_interfaces} >= {"0.3"}
    # the 0.3 proto's security shapes are 1.0's: they survive the trip
    assert set(card.security_schemes) == set(agent.card.security_schemes) != set()
    assert card.security_requirements == agent.card.security_requirements
