"""Helpers of the delegation tests: a faux gateway in-process (the remote agent), and
workspaces whose agents.json points at it."""

from __future__ import annotations

import asyncio
import json
import os
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import lf.a2a.v1.a2a_pb2 as pb
from a2a_gateway.agent.base import Signal
from a2a_gateway.agent.tools.base import ToolContext
from a2a_gateway.client import connect
from a2a_gateway.client.a2a_tool import A2ATool
from a2a_gateway.local.layout import WorkspaceLayout
from a2a_gateway.serve import Gateway
from a2a_gateway.settings import resolve
from tests.support.workspace import write_callers

#: The key workspace B presents to gateway A (written to both sides' files).
REMOTE_KEY = "k_b_0123456789abcdef"
#: The owner's conversation the a2a tool is called from.
SCOPE = "local-owner"


def ctx(workspace: Path, *, hops: int = 0, caller: str | None = None) -> ToolContext:
    return ToolContext(workspace, SCOPE, caller, hops, Signal())


async def call(tool: A2ATool, workspace: Path, **arguments: Any) -> str:
    """The tool's result text (a call that must not fail)."""
    result = await tool.call(arguments, ctx(workspace))
    assert not result.is_error
    return result.text


def ids(text: str) -> tuple[str, str]:
    """The task and context ids of a result's first line."""
    words = text.split("\n", 1)[0].split()
    return words[3], words[5].rstrip(")")


@asynccontextmanager
async def faux_gateway(
    folder: Path, *, key: str = REMOTE_KEY, **settings: Any
) -> AsyncIterator[Gateway]:
    """``serve --faux`` in-process on a free port, one caller (``assistant-b``), no gRPC."""
    write_callers(folder, [{"name": "assistant-b", "key": key}])
    values = {"workspace": [str(folder)], "port": 0, "grpc_port": -1, "faux": True}
    values.update(settings)
    gateway = Gateway(resolve(values, environ={}))
    await gateway.start()
    try:
        yield gateway
    finally:
        await gateway.stop()


def base_url(gateway: Gateway) -> str:
    return f"http://127.0.0.1:{gateway.http_port}"


def workspace_calling(folder: Path, gateway: Gateway, **entry: Any) -> Path:
    """Workspace ``folder`` (resolved) whose agents.json lists ``gateway`` as
    ``assistant-a``, with the caller key, on loopback (``entry`` adds members)."""
    workspace = folder.resolve()
    values = {"name": "assistant-a", "url": base_url(gateway), "key": REMOTE_KEY}
    write_agents(workspace, [{**values, "allow_private": True, **entry}])
    return workspace


def write_agents(workspace: Path, entries: list[dict[str, Any]] | str) -> Path:
    path = WorkspaceLayout(workspace).agents
    path.parent.mkdir(parents=True, exist_ok=True)
    # Replaced whole (as an editor saving atomically would): a watch reading it in a
    # worker thread never sees it half-way (test_watches.write_in_place does that).
    temp = path.with_name("agents.json.tmp")
    temp.write_text(entries if isinstance(entries, str) else json.dumps(entries))
    os.replace(temp, path)
    return path


class ManualClock:
    """The delegation clock, driven by hand: ``sleep`` waits until :meth:`advance`
    passes its deadline (or its wake event is set). ``slept`` lists every requested
    delay, in order: the schedule under test."""

    def __init__(self, start: datetime | None = None) -> None:
        self._now = start or datetime(2026, 10, 8, 12, 0, tzinfo=UTC)
        self._sleepers: list[tuple[datetime, asyncio.Future[None]]] = []
        self.slept: list[float] = []

    def now(self) -> datetime:
        return self._now

    async def sleep(self, seconds: float, wake: asyncio.Event | None = None) -> bool:
        self.slept.append(seconds)
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        entry = (self._now + timedelta(seconds=seconds), future)
        self._sleepers.append(entry)
        waiter = asyncio.ensure_future(wake.wait()) if wake is not None else None
        try:
            waits: set[asyncio.Future[Any]] = {future} if waiter is None else {future, waiter}
            done, _ = await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
            return waiter is not None and waiter in done
        finally:
            self._sleepers.remove(entry)
            if waiter is not None:
                waiter.cancel()

    def advance(self, seconds: float) -> None:
        self._now += timedelta(seconds=seconds)
        for deadline, future in list(self._sleepers):
            if deadline <= self._now and not future.done():
                future.set_result(None)

    @property
    def sleeping(self) -> int:
        return len(self._sleepers)

    async def slept_count(self, count: int, *, bound: float = 20.0) -> list[float]:
        """Wait (real time, bounded) until ``count`` sleeps were requested and one is
        pending; the delays so far."""
        await eventually(lambda: len(self.slept) >= count and self.sleeping > 0, bound=bound)
        return list(self.slept)


async def eventually(condition: Callable[[], bool], *, bound: float = 20.0) -> None:
    """Wait until ``condition()`` holds; fails after ``bound`` real seconds."""
    async with asyncio.timeout(bound):
        while not condition():  # noqa: ASYNC110 - polls state across processes
            await asyncio.sleep(0.01)


class Inbox:
    """A host's delivery target that keeps what it got (optionally failing)."""

    def __init__(self, *, fail: bool = False) -> None:
        self.texts: list[tuple[str, str]] = []
        self.fail = fail
        self.attempts = 0

    async def __call__(self, scope: str, text: str) -> None:
        self.attempts += 1
        if self.fail:
            raise RuntimeError("the conversation is gone")
        self.texts.append((scope, text))


async def start_remote_task(url: str, text: str, *, key: str = REMOTE_KEY) -> pb.Task:
    """Send ``text`` to the agent at ``url`` with returnImmediately; the task."""
    async with await connect(url, key=key) as service:
        request = pb.SendMessageRequest(
            message=pb.Message(
                role=pb.ROLE_USER, message_id=uuid.uuid4().hex, parts=[pb.Part(text=text)]
            )
        )
        request.configuration.return_immediately = True
        reply = await service.send_message(request)
        return reply.task


async def cancel_remote_task(url: str, task_id: str, *, key: str = REMOTE_KEY) -> pb.Task:
    async with await connect(url, key=key) as service:
        return await service.cancel_task(pb.CancelTaskRequest(id=task_id))
