"""Helpers for the task engine tests: callers, requests, bounded stream collection."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

from a2a_gateway.agent.base import Agent, Output, Turn
from a2a_gateway.protocol.context import CallContext, Caller
from a2a_gateway.server.engine import TaskEngine
from a2a_gateway.server.pg_store import PostgresTaskStore
from a2a_gateway.server.secret_box import SecretBox
from lf.a2a.v1 import a2a_pb2 as pb

ALICE = Caller(name="alice", workspace="/ws/one")
BOB = Caller(name="bob", workspace="/ws/one")
#: The bound on every wait of the engine tests. Only a failing test waits this long (each
#: use is an upper bound, never a sleep), so it is sized for CI's two busy cores: 5 s let
#: a PostgreSQL lock wait run out once under a full suite.
WAIT_S = 15.0

_ids = itertools.count()


def ctx(caller: Caller = ALICE, **kwargs: Any) -> CallContext:
    return CallContext(caller=caller, **kwargs)


def request(
    text: str,
    *,
    message_id: str | None = None,
    task_id: str = "",
    context_id: str = "",
    return_immediately: bool = False,
    history_length: int | None = None,
    metadata: dict[str, Any] | None = None,
    message_metadata: dict[str, Any] | None = None,
) -> pb.SendMessageRequest:
    message = pb.Message(
        message_id=message_id or f"m-{next(_ids)}",
        role=pb.ROLE_USER,
        parts=[pb.Part(text=text)],
        task_id=task_id,
        context_id=context_id,
    )
    if message_metadata is not None:
        message.metadata.update(message_metadata)
    req = pb.SendMessageRequest(message=message)
    if return_immediately:
        req.configuration.return_immediately = True
    if history_length is not None:
        req.configuration.history_length = history_length
    if metadata is not None:
        req.metadata.update(metadata)
    return req


async def send(engine: TaskEngine, text: str, caller: Caller = ALICE, **kwargs: Any) -> pb.Task:
    """SendMessage that must answer with a task."""
    async with asyncio.timeout(WAIT_S):
        response = await engine.send_message(request(text, **kwargs), ctx(caller))
    assert response.WhichOneof("payload") == "task", response
    return response.task


async def collect(stream: AsyncIterator[pb.StreamResponse]) -> list[pb.StreamResponse]:
    """Every event of a stream, bounded."""
    events: list[pb.StreamResponse] = []
    async with asyncio.timeout(WAIT_S):
        async for event in stream:
            events.append(event)
    return events


def kinds(events: list[pb.StreamResponse]) -> list[str]:
    """``task``, ``statusUpdate:WORKING``, ``artifactUpdate``... for readable asserts."""
    out: list[str] = []
    for event in events:
        kind = event.WhichOneof("payload")
        if kind == "status_update":
            state = pb.TaskState.Name(event.status_update.status.state)
            out.append(f"status:{state.removeprefix('TASK_STATE_')}")
        elif kind == "task":
            out.append(
                f"task:{pb.TaskState.Name(event.task.status.state).removeprefix('TASK_STATE_')}"
            )
        else:
            out.append(str(kind))
    return out


async def eventually(predicate: Callable[[], object]) -> None:
    """Poll ``predicate`` (cheap, in-process state) until it holds, bounded."""
    async with asyncio.timeout(WAIT_S):
        while not predicate():  # noqa: ASYNC110 - state of code we do not own a hook in
            await asyncio.sleep(0.005)


def state_name(task: pb.Task) -> str:
    return pb.TaskState.Name(task.status.state).removeprefix("TASK_STATE_")


def streamed_text(events: list[pb.StreamResponse]) -> str:
    """A subscriber's text: its snapshot's artifacts, then each artifact update's."""
    text = "".join(p.text for art in events[0].task.artifacts for p in art.parts)
    for event in events[1:]:
        if event.HasField("artifact_update"):
            text += "".join(p.text for p in event.artifact_update.artifact.parts)
    return text


def pg_engine(url: str, box_dir: Path, agent: Agent) -> TaskEngine:
    """An engine on the PostgreSQL database at ``url`` (one gateway process's worth)."""
    return TaskEngine(agent, PostgresTaskStore(url, box=SecretBox(box_dir)))


def status_text(task: pb.Task | pb.TaskStatusUpdateEvent) -> str:
    return "".join(p.text for p in task.status.message.parts)


def response_text(task: pb.Task) -> list[str]:
    return [p.text for a in task.artifacts if a.name == "response" for p in a.parts]


class Scripted(Agent):
    """An agent whose turns are a given async generator function."""

    def __init__(self, script: Callable[[Turn], AsyncIterator[Output]]) -> None:
        self.script = script

    def run(self, turn: Turn) -> AsyncIterator[Output]:
        return self.script(turn)
