"""Our client calling an agent built on the a2a-sdk 0.3.x release itself
(``tests/interop/peers/sdk03_server.py`` in ``.venv-peer03``), on its JSON-RPC, HTTP+JSON
and gRPC interfaces: 0.3 as deployed agents speak it, not the 1.x SDK's compat layer.

What differs from the compat layer, and what each test holds us to:
- on 0.3 HTTP+JSON and gRPC ``configuration.blocking`` is a plain proto3 bool (absent is
  false): a blocking 1.0 send must say ``blocking: true`` or the agent answers at once;
- a 0.3 resubscription sends no opening task: ours opens it with a GetTask, so the 1.0
  stream starts with the task, and closes one that ends with no final state with the
  task's real state.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

import lf.a2a.v1.a2a_pb2 as pb
from a2a_gateway.client import RemoteService, connect
from a2a_gateway.protocol import errors
from tests.support.processes import Sdk03Agent

from .client_support import text_request

BOUND_S = 20.0
TRANSPORTS = ("jsonrpc", "rest", "grpc")


@pytest.fixture(params=TRANSPORTS)
async def agent(
    request: pytest.FixtureRequest, sdk03_agent: Sdk03Agent
) -> AsyncIterator[RemoteService]:
    async with asyncio.timeout(BOUND_S):
        service = await connect(sdk03_agent.base_url, transport=request.param, timeout=10)
    async with service:
        yield service


async def test_a_0_3_interface_of_each_binding(agent: RemoteService) -> None:
    assert agent.interface.protocol_version.startswith("0.3")


async def test_a_blocking_send_waits_for_the_answer(agent: RemoteService) -> None:
    async with asyncio.timeout(BOUND_S):
        reply = await agent.send_message(text_request("hello there"))
    assert reply.task.status.state == pb.TASK_STATE_COMPLETED
    assert [p.text for a in reply.task.artifacts for p in a.parts] == ["hello there"]


async def test_return_immediately_does_not_wait(agent: RemoteService) -> None:
    async with asyncio.timeout(BOUND_S):
        reply = await agent.send_message(text_request("hold:30", return_immediately=True))
        canceled = await agent.cancel_task(pb.CancelTaskRequest(id=reply.task.id))
    assert reply.task.status.state in (pb.TASK_STATE_SUBMITTED, pb.TASK_STATE_WORKING)
    assert canceled.status.state == pb.TASK_STATE_CANCELED


async def test_stream_chunks_become_1_0_events(agent: RemoteService) -> None:
    async with asyncio.timeout(BOUND_S):
        events = [e async for e in agent.send_streaming_message(text_request("chunks:3"))]
    assert events[0].WhichOneof("payload") == "task"
    chunks = [e.artifact_update for e in events if e.HasField("artifact_update")]
    assert [c.artifact.parts[0].text for c in chunks] == ["chunk-0", "chunk-1", "chunk-2"]
    assert events[-1].status_update.status.state == pb.TASK_STATE_COMPLETED


async def test_subscribe_starts_with_the_task_and_ends_cancelled(agent: RemoteService) -> None:
    async with asyncio.timeout(BOUND_S):
        task = (await agent.send_message(text_request("hold:30", return_immediately=True))).task
        stream = agent.subscribe_to_task(pb.SubscribeToTaskRequest(id=task.id))
        first = await anext(stream)
        canceled = await agent.cancel_task(pb.CancelTaskRequest(id=task.id))
        rest = [e async for e in stream]
    assert first.WhichOneof("payload") == "task"
    assert first.task.id == task.id
    assert first.task.status.state in (pb.TASK_STATE_SUBMITTED, pb.TASK_STATE_WORKING)
    assert canceled.status.state == pb.TASK_STATE_CANCELED
    assert rest[-1].status_update.status.state == pb.TASK_STATE_CANCELED


async def test_subscribe_to_a_finished_task_is_unsupported(agent: RemoteService) -> None:
    """1.0's answer for a terminal task, found by the GetTask that opens a 0.3
    subscription (the 0.3 agent is not asked: it would fail the call its own way)."""
    async with asyncio.timeout(BOUND_S):
        done = (await agent.send_message(text_request("over already"))).task
        with pytest.raises(errors.UnsupportedOperationError):
            await anext(agent.subscribe_to_task(pb.SubscribeToTaskRequest(id=done.id)))


async def test_multi_turn_ask_then_answer(agent: RemoteService) -> None:
    async with asyncio.timeout(BOUND_S):
        asked = (await agent.send_message(text_request("ask:your name?"))).task
        answered = await agent.send_message(
            text_request("Ada", task_id=asked.id, context_id=asked.context_id)
        )
        got = await agent.get_task(pb.GetTaskRequest(id=asked.id))
    assert asked.status.state == pb.TASK_STATE_INPUT_REQUIRED
    assert asked.status.message.parts[0].text == "your name?"
    assert answered.task.status.state == pb.TASK_STATE_COMPLETED
    assert answered.task.artifacts[-1].parts[0].text == "Ada"
    assert got.status.state == pb.TASK_STATE_COMPLETED


async def test_unknown_task_is_task_not_found(agent: RemoteService) -> None:
    async with asyncio.timeout(BOUND_S):
        with pytest.raises(errors.TaskNotFoundError):
            await agent.get_task(pb.GetTaskRequest(id="no-such-task"))


async def test_list_tasks_is_unsupported_and_says_why(agent: RemoteService) -> None:
    """The a2a-sdk 0.3 release serves no ListTasks: over JSON-RPC ``tasks/list`` is sent
    and answered "Method not found"; over HTTP+JSON (its ``GET /v1/tasks`` raises
    NotImplementedError, an HTTP 500) and gRPC (no such rpc) nothing is sent."""
    async with asyncio.timeout(BOUND_S):
        with pytest.raises(errors.UnsupportedOperationError) as refused:
            await agent.list_tasks(pb.ListTasksRequest())
    text = str(refused.value)
    assert text.startswith("ListTasks does not exist in A2A 0.3")
    if agent.binding == "JSONRPC":
        assert "does not serve tasks/list either: Method not found" in text
    else:
        assert "as tasks/list over JSON-RPC, none over HTTP+JSON or gRPC" in text
    assert refused.value.spec.jsonrpc_code == -32004
