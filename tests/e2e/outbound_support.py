"""For the push and file end-to-end tests: a gateway whose outbound guard allows
127.0.0.1 (``allow_private_urls``), a recording webhook receiver, a small file server,
and drivers whose gRPC channel carries 10 MB files (grpc's default cap is 4 MB)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import grpc
import orjson
from aiohttp import web
from aiohttp.test_utils import TestServer

from a2a_gateway.serve import Gateway
from a2a_gateway.server.push import PushPolicy
from a2a_gateway.settings import resolve
from tests.support.workspace import write_callers

from .conftest import KEY_ALICE, KEY_BOB, Driver

WAIT_S = 10.0
#: Retries quickly: a 500 is retried within tens of milliseconds, not seconds.
FAST_RETRIES = PushPolicy(first_backoff_s=0.02, max_backoff_s=0.05, attempt_timeout_s=5.0)
MAX_GRPC_MESSAGE = 32 * 1024 * 1024
GRPC_OPTIONS = (
    ("grpc.max_receive_message_length", MAX_GRPC_MESSAGE),
    ("grpc.max_send_message_length", MAX_GRPC_MESSAGE),
)


def workspace_with_callers(root: Path) -> Path:
    workspace = root / "ws"
    write_callers(workspace, [{"name": "alice", "key": KEY_ALICE}, {"name": "bob", "key": KEY_BOB}])
    return workspace


@contextlib.asynccontextmanager
async def private_gateway(workspace: Path) -> AsyncIterator[Gateway]:
    """A gateway on free ports that may call 127.0.0.1 (webhooks, file URLs), with
    quick push retries; stopped on exit."""
    settings = resolve(
        {
            "workspace": [str(workspace)],
            "port": 0,
            "grpc_port": 0,
            "faux": True,
            "keepalive": 0.2,
            "allow_private_urls": True,
        },
        environ={},
    )
    gateway = Gateway(settings)
    assert gateway.push is not None and gateway.engine is not None
    gateway.push.policy = FAST_RETRIES
    await gateway.start()
    try:
        yield gateway
    finally:
        await gateway.stop()


@contextlib.asynccontextmanager
async def wire_driver(binding: str, gateway: Gateway) -> AsyncIterator[Driver]:
    """The e2e wire driver for ``binding``, its gRPC channel sized for 10 MB files."""
    async with (
        aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as http,
        grpc.aio.insecure_channel(
            f"127.0.0.1:{gateway.grpc_port}", options=GRPC_OPTIONS
        ) as channel,
    ):
        yield Driver(binding, http, f"http://127.0.0.1:{gateway.http_port}", channel)


# --- a webhook receiver ----------------------------------------------------------------


@dataclass
class Hit:
    path: str
    query: str
    headers: dict[str, str]
    body: dict[str, Any]

    @property
    def state(self) -> str:
        return str(self.body["task"]["status"]["state"]).removeprefix("TASK_STATE_")


@dataclass
class Receiver:
    """Records every POST; answers each path with its scripted statuses in turn, then
    200."""

    base: str = ""
    hits: list[Hit] = field(default_factory=list)
    statuses: dict[str, list[int]] = field(default_factory=dict)
    changed: asyncio.Condition = field(default_factory=asyncio.Condition)

    def url(self, path: str) -> str:
        return f"{self.base}{path}"

    async def handle(self, request: web.Request) -> web.Response:
        body = orjson.loads(await request.read())
        scripted = self.statuses.get(request.path) or []
        status = scripted.pop(0) if scripted else 200
        async with self.changed:
            self.hits.append(Hit(request.path, request.query_string, dict(request.headers), body))
            self.changed.notify_all()
        return web.Response(status=status)

    def on(self, path: str) -> list[Hit]:
        return [hit for hit in self.hits if hit.path == path]

    async def wait_for(self, path: str, count: int) -> list[Hit]:
        """The hits on ``path`` once there are at least ``count`` (bounded)."""
        async with asyncio.timeout(WAIT_S), self.changed:
            await self.changed.wait_for(lambda: len(self.on(path)) >= count)
        return self.on(path)


@contextlib.asynccontextmanager
async def webhook_receiver() -> AsyncIterator[Receiver]:
    receiver = Receiver()
    app = web.Application()
    app.router.add_post("/{name}", receiver.handle)
    server = TestServer(app, host="127.0.0.1", port=0)
    await server.start_server(access_log=None)  # an access log would show the query
    receiver.base = f"http://127.0.0.1:{server.port}"
    try:
        yield receiver
    finally:
        await server.close()


# --- a file server ---------------------------------------------------------------------


@contextlib.asynccontextmanager
async def file_server(files: dict[str, tuple[bytes, str]]) -> AsyncIterator[str]:
    """Serves ``GET /files/<name>`` from ``files`` (name -> (bytes, content type)); any
    other name is 404. Yields the base URL."""

    async def serve(request: web.Request) -> web.Response:
        found = files.get(request.match_info["name"])
        if found is None:
            return web.Response(status=404)
        data, content_type = found
        return web.Response(body=data, content_type=content_type)

    app = web.Application()
    app.router.add_get("/files/{name}", serve)
    server = TestServer(app, host="127.0.0.1", port=0)
    await server.start_server(access_log=None)
    try:
        yield f"http://127.0.0.1:{server.port}"
    finally:
        await server.close()


async def settle(gateway: Gateway) -> None:
    """Wait (bounded) until no push delivery is queued or in flight."""
    assert gateway.push is not None
    assert await gateway.push.wait_idle(WAIT_S), "push deliveries did not settle"
