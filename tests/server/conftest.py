"""Fixtures for the HTTP binding tests: a small deterministic service and real servers.

The service behind them is ``tests.support.echo.EchoService`` (stateful: the tasks it
answers are kept and numbered; see there for how a test steers it).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp.test_utils import TestClient, TestServer
from aiohttp.typedefs import Middleware

from a2a_gateway.local.layout import WorkspaceLayout
from a2a_gateway.server.auth import AllowAnonymous, Authenticator, WorkspaceCallers
from a2a_gateway.server.card import CardProvider
from a2a_gateway.server.config import ServerConfig
from a2a_gateway.server.health import Readiness
from a2a_gateway.server.http_app import AppRunner, build_http_app
from a2a_gateway.server.metrics import NULL_METRICS, MetricsLike
from tests.support.echo import EchoService
from tests.support.workspace import write_callers

KEY = "k-test-6b1f0c9d2e"
TIMEOUT_S = 5.0


def text_message(text: str, message_id: str = "m-1", **metadata: Any) -> dict[str, Any]:
    """A SendMessageRequest as ProtoJSON."""
    body: dict[str, Any] = {
        "message": {"messageId": message_id, "role": "ROLE_USER", "parts": [{"text": text}]}
    }
    if metadata:
        body["metadata"] = metadata
    return body


@dataclass
class Http:
    """One running HTTP app and a client session bound to it."""

    client: TestClient[aiohttp.web.Request, aiohttp.web.Application]
    service: EchoService
    config: ServerConfig
    cards: CardProvider

    @property
    def base(self) -> str:
        return str(self.client.make_url("")).rstrip("/")

    async def rpc(
        self,
        method: str,
        params: Any = None,
        *,
        request_id: Any = 1,
        headers: dict[str, str] | None = None,
        path: str | None = None,
    ) -> tuple[int, Any]:
        """One JSON-RPC call; returns (HTTP status, decoded body)."""
        body: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id, "method": method}
        if params is not None:
            body["params"] = params
        url = path if path is not None else self.config.mounts.jsonrpc or "/"
        async with asyncio.timeout(TIMEOUT_S):
            response = await self.client.post(url, json=body, headers=headers)
            async with response:
                return response.status, await response.json(content_type=None)


Starter = Callable[..., Awaitable[Http]]


class GatewayTestServer(TestServer):
    """aiohttp's test server with the runner ``serve`` uses (its connection handler
    answers malformed HTTP without quoting it)."""

    async def _make_runner(self, **kwargs: Any) -> AppRunner:
        return AppRunner(self.app, **kwargs)


@pytest.fixture
async def start_http() -> AsyncIterator[Starter]:
    """Start HTTP apps on 127.0.0.1 (free port); all are closed after the test."""
    clients: list[TestClient[aiohttp.web.Request, aiohttp.web.Application]] = []

    async def start(
        *,
        config: ServerConfig | None = None,
        service: EchoService | None = None,
        authenticator: Authenticator | None = None,
        metrics: MetricsLike = NULL_METRICS,
        readiness: Readiness | None = None,
        middlewares: Sequence[Middleware] = (),
        routes: Callable[[aiohttp.web.Application], None] | None = None,
    ) -> Http:
        """``middlewares``: a test's own (a stand-in client address); the app has none."""
        config = config or ServerConfig()
        cards = CardProvider(config)
        service = service or EchoService()
        if service.cards is None:
            service.cards = cards
        app = build_http_app(
            service,
            config,
            authenticator or AllowAnonymous(),
            cards,
            metrics=metrics,
            readiness=readiness,
        )
        app.middlewares.extend(middlewares)
        if routes is not None:  # a caller's own routes, added after the app is built
            routes(app)
        client = TestClient(GatewayTestServer(app, host="127.0.0.1", port=0))
        await client.start_server()
        clients.append(client)
        return Http(client, service, config, cards)

    yield start
    for client in clients:
        await client.close()


@pytest.fixture
async def http(start_http: Starter) -> Http:
    """Anonymous access, default mounts, a fast keep-alive."""
    return await start_http(config=ServerConfig(keepalive_interval_s=0.05))


@pytest.fixture
def keyed_workspace(tmp_path: Path) -> Path:
    workspace = tmp_path / "ws"
    WorkspaceLayout(workspace).state.mkdir(parents=True)
    callers = [{"name": "alice", "key": KEY}]
    write_callers(workspace, callers)
    return workspace


@pytest.fixture
async def keyed(start_http: Starter, keyed_workspace: Path) -> Http:
    """Keys required (callers.json of one workspace)."""
    config = ServerConfig(workspaces=[keyed_workspace])
    return await start_http(config=config, authenticator=WorkspaceCallers([keyed_workspace]))
