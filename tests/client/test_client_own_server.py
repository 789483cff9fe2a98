"""Our client against our own gateway (``serve --faux``), over all three bindings."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator

import pytest

import lf.a2a.v1.a2a_pb2 as pb
from a2a_gateway.client import AuthRejected, RemoteService, connect
from a2a_gateway.protocol import errors

from .client_support import TRANSPORTS, Peer, text_request

BOUND_S = 20.0


@pytest.fixture(params=TRANSPORTS)
async def agent(request: pytest.FixtureRequest, own_server: Peer) -> AsyncIterator[RemoteService]:
    async with asyncio.timeout(BOUND_S):
        service = await connect(own_server.url, key=own_server.key, transport=request.param)
    async with service:
        yield service


async def test_card_and_interface(agent: RemoteService) -> None:
    assert agent.card.name
    assert agent.interface.protocol_binding == agent.binding
    assert agent.interface.protocol_version == "1.0"


async def test_send_message_completes(agent: RemoteService) -> None:
    async with asyncio.timeout(BOUND_S):
        reply = await agent.send_message(text_request("hello gateway"))
    assert reply.task.status.state == pb.TASK_STATE_COMPLETED
    assert "hello gateway" in [p.text for a in reply.task.artifacts for p in a.parts]


async def test_message_reply(agent: RemoteService) -> None:
    async with asyncio.timeout(BOUND_S):
        reply = await agent.send_message(text_request("message:plain words"))
        events = [e async for e in agent.send_streaming_message(text_request("message:one"))]
    assert reply.message.parts[0].text == "plain words"
    assert [e.WhichOneof("payload") for e in events] == ["message"]


async def test_streaming_chunks(agent: RemoteService) -> None:
    async with asyncio.timeout(BOUND_S):
        events = [e async for e in agent.send_streaming_message(text_request("chunks:3"))]
    assert events[0].WhichOneof("payload") == "task"
    chunks = [e.artifact_update for e in events if e.HasField("artifact_update")]
    assert [c.artifact.parts[0].text for c in chunks] == ["chunk-0", "chunk-1", "chunk-2"]
    assert chunks[-1].last_chunk
    assert events[-1].status_update.status.state == pb.TASK_STATE_COMPLETED


async def test_get_list_and_multi_turn(agent: RemoteService) -> None:
    async with asyncio.timeout(BOUND_S):
        asked = (await agent.send_message(text_request("ask:which city?"))).task
        assert asked.status.state == pb.TASK_STATE_INPUT_REQUIRED
        got = await agent.get_task(pb.GetTaskRequest(id=asked.id, history_length=1))
        assert got.id == asked.id and len(got.history) <= 1
        listed = await agent.list_tasks(pb.ListTasksRequest(context_id=asked.context_id))
        assert [t.id for t in listed.tasks] == [asked.id]
        answered = await agent.send_message(
            text_request("Lisbon", task_id=asked.id, context_id=asked.context_id)
        )
    assert answered.task.status.state == pb.TASK_STATE_COMPLETED


async def test_subscribe_cancel_and_errors(agent: RemoteService) -> None:
    async with asyncio.timeout(BOUND_S):
        task = (await agent.send_message(text_request("hold:30", return_immediately=True))).task
        stream = agent.subscribe_to_task(pb.SubscribeToTaskRequest(id=task.id))
        assert (await anext(stream)).task.id == task.id
        canceled = await agent.cancel_task(pb.CancelTaskRequest(id=task.id))
        assert canceled.status.state == pb.TASK_STATE_CANCELED
        rest = [e async for e in stream]
        assert rest[-1].status_update.status.state == pb.TASK_STATE_CANCELED
        with pytest.raises(errors.TaskNotCancelableError):
            await agent.cancel_task(pb.CancelTaskRequest(id=task.id))
        with pytest.raises(errors.TaskNotFoundError):
            await agent.get_task(pb.GetTaskRequest(id="no-such-task"))
        created = await agent.create_task_push_notification_config(
            pb.TaskPushNotificationConfig(
                task_id=task.id, url="https://example.com/hook", token="own-push-token-1"
            )
        )
        assert created.id and not created.token  # the token is never returned
        with pytest.raises(errors.InvalidParamsError, match="url"):
            await agent.create_task_push_notification_config(
                pb.TaskPushNotificationConfig(task_id=task.id, url="http://example.com/hook")
            )


async def test_closing_a_stream_early_leaves_the_task(agent: RemoteService) -> None:
    async with asyncio.timeout(BOUND_S):
        stream = agent.send_streaming_message(text_request("hold:30"))
        first = await anext(stream)
        await stream.aclose()
        got = await agent.get_task(pb.GetTaskRequest(id=first.task.id))
        assert got.id == first.task.id
        if got.status.state not in (pb.TASK_STATE_CANCELED, pb.TASK_STATE_FAILED):
            await agent.cancel_task(pb.CancelTaskRequest(id=got.id))


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_keys_are_required_and_never_shown(
    own_server: Peer, transport: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    wrong = "wrong-own-key-a1b2c3d4e5"
    async with asyncio.timeout(BOUND_S):
        async with await connect(own_server.url, transport=transport) as service:
            with pytest.raises(AuthRejected, match="requires a key"):
                await service.send_message(text_request("hi"))
        async with await connect(own_server.url, key=wrong, transport=transport) as service:
            with pytest.raises(AuthRejected, match="rejected the key") as caught:
                await service.get_task(pb.GetTaskRequest(id="t"))
    assert wrong not in str(caught.value)
    assert wrong not in caplog.text
