"""The bindings' scenario table (``test_scenarios``) once more, against two gateways on
one PostgreSQL database and one workspace: each call goes to the next gateway in turn
(a round-robin balancer), so a task created on one is read, listed, subscribed to and
cancelled on the other."""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import grpc
import pytest

from a2a_gateway.serve import Gateway
from a2a_gateway.server.pg_local import LocalPostgres
from a2a_gateway.settings import resolve
from tests.support.postgres import fresh_database
from tests.support.workspace import write_callers

from . import test_scenarios
from .conftest import BINDINGS, KEY_ALICE, KEY_BOB, Driver


@dataclasses.dataclass
class RoundRobin(Driver):
    """A driver whose every call goes to the next of ``targets`` ((base, channel))."""

    targets: list[tuple[str, grpc.aio.Channel]] = dataclasses.field(default_factory=list)
    turn: Any = dataclasses.field(default_factory=itertools.count)

    def _run(
        self, rpc: str, request: dict[str, Any], *, stream: bool
    ) -> AsyncIterator[dict[str, Any]]:
        base, channel = self.targets[next(self.turn) % len(self.targets)]
        one = Driver(self.binding, self.http, base, channel, self.key, self.version)
        return one._run(rpc, request, stream=stream)


@pytest.fixture(params=BINDINGS)
async def driver(
    request: pytest.FixtureRequest, tmp_path: Path, postgres: LocalPostgres
) -> AsyncIterator[Driver]:
    url = await fresh_database(postgres)
    workspace = tmp_path / "ws"
    write_callers(workspace, [{"name": "alice", "key": KEY_ALICE}, {"name": "bob", "key": KEY_BOB}])
    flags = {
        "workspace": [str(workspace)], "port": 0, "grpc_port": 0, "faux": True,
        "keepalive": 0.2, "store": "postgres", "database_url": url, "database_pool_size": 2,
    }  # fmt: skip
    gateways = [Gateway(resolve(flags, environ={})) for _ in range(2)]
    channels: list[grpc.aio.Channel] = []
    try:
        for gateway in gateways:
            await gateway.start()
            channels.append(grpc.aio.insecure_channel(f"127.0.0.1:{gateway.grpc_port}"))
        targets = [
            (f"http://127.0.0.1:{g.http_port}", c) for g, c in zip(gateways, channels, strict=True)
        ]
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as http:
            yield RoundRobin(request.param, http, targets[0][0], channels[0], targets=targets)
    finally:
        for channel in channels:
            await channel.close()
        for gateway in gateways:
            await gateway.stop()


# Every scenario of the table, collected here with this module's ``driver``.
globals().update(
    {name: value for name, value in vars(test_scenarios).items() if name.startswith("test_")}
)
