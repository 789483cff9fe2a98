"""Our client against the official a2a-sdk server, every operation over all three bindings
(the multi-turn scenario, shared with the 0.3 agents, is in test_client_compat03.py)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator

import pytest

import lf.a2a.v1.a2a_pb2 as pb
from a2a_gateway.client import AuthRejected, RemoteService, connect
from a2a_gateway.protocol import errors

from .client_support import BINDINGS, TRANSPORTS, Peer, text_request

BOUND_S = 20.0


@pytest.fixture(params=TRANSPORTS)
async def agent(request: pytest.FixtureRequest, sdk_peer: Peer) -> AsyncIterator[RemoteService]:
    async with asyncio.timeout(BOUND_S):
        service = await connect(sdk_peer.url, key=sdk_peer.key, transport=request.param, timeout=10)
    assert service.binding == BINDINGS[request.param]  # the forced one, not another
    async with service:
        yield service


async def test_binding_is_the_forced_one(agent: RemoteService) -> None:
    expected = {"JSONRPC", "HTTP+JSON", "GRPC"}
    assert agent.binding in expected
    assert agent.interface.protocol_binding == agent.binding


async def test_send_message_completes_with_artifact(agent: RemoteService) -> None:
    async with asyncio.timeout(BOUND_S):
        reply = await agent.send_message(text_request("hello there"))
    assert reply.WhichOneof("payload") == "task"
    assert reply.task.status.state == pb.TASK_STATE_COMPLETED
    assert [p.text for a in reply.task.artifacts for p in a.parts] == ["hello there"]


async def test_send_message_plain_message_reply(agent: RemoteService) -> None:
    async with asyncio.timeout(BOUND_S):
        reply = await agent.send_message(text_request("message:just words"))
    assert reply.WhichOneof("payload") == "message"
    assert reply.message.role == pb.ROLE_AGENT
    assert reply.message.parts[0].text == "just words"


async def test_streaming_chunks_in_order(agent: RemoteService) -> None:
    async with asyncio.timeout(BOUND_S):
        events = [e async for e in agent.send_streaming_message(text_request("chunks:3"))]
    kinds = [e.WhichOneof("payload") for e in events]
    assert kinds[0] == "task"
    chunks = [e.artifact_update for e in events if e.HasField("artifact_update")]
    assert [c.artifact.parts[0].text for c in chunks] == ["chunk-0", "chunk-1", "chunk-2"]
    assert [c.append for c in chunks] == [False, True, True]
    assert chunks[-1].last_chunk
    assert events[-1].status_update.status.state == pb.TASK_STATE_COMPLETED


async def test_streaming_message_reply_is_one_event(agent: RemoteService) -> None:
    async with asyncio.timeout(BOUND_S):
        events = [e async for e in agent.send_streaming_message(text_request("message:one"))]
    assert [e.WhichOneof("payload") for e in events] == ["message"]
    assert events[0].message.parts[0].text == "one"


async def test_get_and_list_tasks(agent: RemoteService) -> None:
    async with asyncio.timeout(BOUND_S):
        task = (await agent.send_message(text_request("list me"))).task
        got = await agent.get_task(pb.GetTaskRequest(id=task.id, history_length=0))
        full = await agent.get_task(pb.GetTaskRequest(id=task.id))
        listed = await agent.list_tasks(pb.ListTasksRequest(context_id=task.context_id))
    assert got.id == task.id and got.status.state == pb.TASK_STATE_COMPLETED
    assert len(got.history) == 0
    assert len(full.history) >= 1
    assert [t.id for t in listed.tasks] == [task.id]
    assert listed.total_size == 1


async def test_failed_task(agent: RemoteService) -> None:
    async with asyncio.timeout(BOUND_S):
        reply = await agent.send_message(text_request("fail:broken"))
    assert reply.task.status.state == pb.TASK_STATE_FAILED


async def test_subscribe_then_cancel(agent: RemoteService) -> None:
    async with asyncio.timeout(BOUND_S):
        task = (await agent.send_message(text_request("hold:30", return_immediately=True))).task
        stream = agent.subscribe_to_task(pb.SubscribeToTaskRequest(id=task.id))
        first = await anext(stream)
        assert first.WhichOneof("payload") == "task"
        assert first.task.id == task.id
        canceled = await agent.cancel_task(pb.CancelTaskRequest(id=task.id))
        assert canceled.status.state == pb.TASK_STATE_CANCELED
        rest = [e async for e in stream]
        assert rest[-1].status_update.status.state == pb.TASK_STATE_CANCELED
        with pytest.raises(errors.TaskNotCancelableError) as caught:
            await agent.cancel_task(pb.CancelTaskRequest(id=task.id))
    assert caught.value.spec.jsonrpc_code == -32002


async def test_closing_a_stream_early_leaves_the_task(agent: RemoteService) -> None:
    async with asyncio.timeout(BOUND_S):
        stream = agent.send_streaming_message(text_request("hold:30"))
        first = await anext(stream)
        await stream.aclose()
        task_id = first.task.id
        # The connection is gone, the task is not: it can still be read and canceled.
        got = await agent.get_task(pb.GetTaskRequest(id=task_id))
        assert got.id == task_id
        canceled = await agent.cancel_task(pb.CancelTaskRequest(id=task_id))
    assert canceled.status.state == pb.TASK_STATE_CANCELED


async def test_push_config_crud(agent: RemoteService) -> None:
    async with asyncio.timeout(BOUND_S):
        task = (await agent.send_message(text_request("hold:30", return_immediately=True))).task
        try:
            created = await agent.create_task_push_notification_config(
                pb.TaskPushNotificationConfig(
                    task_id=task.id, id="hook-1", url="http://127.0.0.1:9/hook", token="tok"
                )
            )
            assert (created.task_id, created.id) == (task.id, "hook-1")
            got = await agent.get_task_push_notification_config(
                pb.GetTaskPushNotificationConfigRequest(task_id=task.id, id="hook-1")
            )
            assert got.url == "http://127.0.0.1:9/hook"
            listed = await agent.list_task_push_notification_configs(
                pb.ListTaskPushNotificationConfigsRequest(task_id=task.id)
            )
            assert [c.id for c in listed.configs] == ["hook-1"]
            await agent.delete_task_push_notification_config(
                pb.DeleteTaskPushNotificationConfigRequest(task_id=task.id, id="hook-1")
            )
            with pytest.raises(errors.TaskNotFoundError):
                await agent.get_task_push_notification_config(
                    pb.GetTaskPushNotificationConfigRequest(task_id=task.id, id="hook-1")
                )
        finally:
            await agent.cancel_task(pb.CancelTaskRequest(id=task.id))


async def test_unknown_task_is_task_not_found(agent: RemoteService) -> None:
    async with asyncio.timeout(BOUND_S):
        with pytest.raises(errors.TaskNotFoundError) as caught:
            await agent.get_task(pb.GetTaskRequest(id="no-such-task"))
        assert caught.value.spec.reason == "TASK_NOT_FOUND"
        with pytest.raises(errors.TaskNotFoundError):
            await anext(agent.subscribe_to_task(pb.SubscribeToTaskRequest(id="no-such-task")))
        with pytest.raises(errors.TaskNotFoundError):
            await agent.cancel_task(pb.CancelTaskRequest(id="no-such-task"))


async def test_invalid_request_is_invalid_params(agent: RemoteService) -> None:
    request = text_request("x")
    request.message.role = pb.ROLE_UNSPECIFIED
    async with asyncio.timeout(BOUND_S):
        with pytest.raises(errors.InvalidParamsError):
            await agent.send_message(request)


async def test_extended_card_replaces_public_card(agent: RemoteService) -> None:
    assert "extended-echo" in [s.id for s in agent.card.skills]
    async with asyncio.timeout(BOUND_S):
        again = await agent.get_extended_agent_card()
    assert again.name == agent.card.name


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_public_card_without_key(sdk_peer: Peer, transport: str) -> None:
    async with asyncio.timeout(BOUND_S):
        async with await connect(sdk_peer.url, transport=transport) as service:
            assert "extended-echo" not in [s.id for s in service.card.skills]
            with pytest.raises(AuthRejected) as caught:
                await service.send_message(text_request("hi"))
    assert "requires a key" in str(caught.value)
    assert caught.value.spec.http_status == 401


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_wrong_key_is_rejected_and_never_shown(
    sdk_peer: Peer, transport: str, caplog: pytest.LogCaptureFixture
) -> None:
    wrong = "wrong-key-5f3a2b1c9d0e"
    caplog.set_level(logging.DEBUG)
    async with asyncio.timeout(BOUND_S):
        async with await connect(sdk_peer.url, key=wrong, transport=transport) as service:
            # The extended card failed (401) and the public card was kept.
            assert "extended-echo" not in [s.id for s in service.card.skills]
            with pytest.raises(AuthRejected) as caught:
                await service.get_task(pb.GetTaskRequest(id="t"))
            with pytest.raises(AuthRejected):
                await anext(service.send_streaming_message(text_request("hi")))
    assert "rejected the key" in str(caught.value)
    assert wrong not in str(caught.value) and wrong not in repr(caught.value)
    assert "extended card" in caplog.text
    assert wrong not in caplog.text
