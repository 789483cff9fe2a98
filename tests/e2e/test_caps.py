"""Per-caller caps on running tasks, enforced by the engine on every binding."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import grpc
import pytest

from a2a_gateway.local.layout import WorkspaceLayout
from a2a_gateway.serve import Gateway
from a2a_gateway.settings import resolve
from tests.support.workspace import write_callers

from .conftest import BINDINGS, KEY_ALICE, KEY_BOB, Driver
from .test_scenarios import expect_error, send


@pytest.fixture
async def capped(tmp_path: Path) -> AsyncIterator[Gateway]:
    workspace = tmp_path / "ws"
    WorkspaceLayout(workspace).state.mkdir(parents=True)
    callers = [
        {"name": "alice", "key": KEY_ALICE, "max_running_tasks": 1},
        {"name": "bob", "key": KEY_BOB},
    ]
    write_callers(workspace, callers)
    settings = resolve(
        {"workspace": [str(workspace)], "port": 0, "grpc_port": 0, "faux": True}, environ={}
    )
    server = Gateway(settings)
    await server.start()
    try:
        yield server
    finally:
        await server.stop()


@pytest.mark.parametrize("binding", BINDINGS)
async def test_running_task_cap_per_caller(capped: Gateway, binding: str) -> None:
    async with (
        aiohttp.ClientSession() as http,
        grpc.aio.insecure_channel(f"127.0.0.1:{capped.grpc_port}") as channel,
    ):
        alice = Driver(binding, http, f"http://127.0.0.1:{capped.http_port}", channel)
        held = send("hold:30", configuration={"returnImmediately": True})
        first = (await alice.call("SendMessage", held))["task"]
        await expect_error("RATE_LIMITED", alice.call("SendMessage", send("second")))
        # Another caller is not affected, and the slot comes back when the run ends.
        bob = Driver(binding, http, alice.base, channel, key=KEY_BOB)
        assert (await bob.call("SendMessage", send("bob")))["task"]["status"]["state"] == (
            "TASK_STATE_COMPLETED"
        )
        await alice.call("CancelTask", {"id": first["id"]})
        again = (await alice.call("SendMessage", send("third")))["task"]
        assert again["status"]["state"] == "TASK_STATE_COMPLETED"
