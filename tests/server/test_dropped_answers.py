"""A client that disconnects while a large unary answer is being written: the answer's
body is freed when the write fails, without waiting for a garbage collection (the
collector is disabled throughout, as it is between the server's rare full collections
after ``gc.freeze()``)."""

from __future__ import annotations

import asyncio
import gc
import json
import socket
import struct
import tracemalloc
from collections.abc import AsyncIterator, Iterator

import pytest
from aiohttp import web

from a2a_gateway.server.auth import AllowAnonymous
from a2a_gateway.server.card import CardProvider
from a2a_gateway.server.config import ServerConfig
from a2a_gateway.server.http_app import build_http_app
from lf.a2a.v1 import a2a_pb2 as pb
from tests.support.echo import EchoService

BODY_MIB = 24


@pytest.fixture
async def served() -> AsyncIterator[tuple[EchoService, web.AppRunner]]:
    """The HTTP app run as ``serve`` runs it (aiohttp's test server cancels handlers
    whose client left, which ``serve`` does not)."""
    config = ServerConfig()
    cards = CardProvider(config)
    service = EchoService(cards=cards)
    app = build_http_app(service, config, AllowAnonymous(), cards)
    runner = web.AppRunner(app, handle_signals=False, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    yield service, runner
    await runner.cleanup()


@pytest.fixture
def no_gc() -> Iterator[None]:
    gc.collect()
    gc.disable()
    tracemalloc.start()
    try:
        yield
    finally:
        tracemalloc.stop()
        gc.enable()


def big_task(service: EchoService) -> str:
    task = pb.Task(id="t-big", context_id="c-big")
    task.status.state = pb.TASK_STATE_COMPLETED
    task.artifacts.add(artifact_id="a", name="response").parts.add(text="x" * (BODY_MIB << 20))
    service.tasks[task.id] = task
    return task.id


async def drop_mid_answer(runner: web.AppRunner, request: bytes) -> None:
    """Send ``request``, read a little of the answer, then reset the connection."""
    port = int(runner.addresses[0][1])
    loop = asyncio.get_running_loop()
    server = runner.server
    assert server is not None
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.setblocking(False)
    try:
        await loop.sock_connect(sock, ("127.0.0.1", port))
        await loop.sock_sendall(sock, request)
        async with asyncio.timeout(10):
            first = await loop.sock_recv(sock, 1024)
        assert first.startswith(b"HTTP/1.1 200")
        async with asyncio.timeout(10):  # the server waits for the client to read on
            while not (server.connections and server.connections[0]._paused):  # noqa: ASYNC110
                await asyncio.sleep(0.01)
        # A reset, not a polite close: the server's pending write fails at once.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    finally:
        sock.close()
    async with asyncio.timeout(10):
        while server.connections:  # noqa: ASYNC110 - the server notices the reset
            await asyncio.sleep(0.01)
    for _ in range(3):
        await asyncio.sleep(0)


@pytest.mark.parametrize("binding", ["rest", "jsonrpc"])
async def test_a_dropped_clients_answer_is_freed_without_a_gc_pass(
    served: tuple[EchoService, web.AppRunner], no_gc: None, binding: str
) -> None:
    service, runner = served
    task_id = big_task(service)
    if binding == "rest":
        request = f"GET /a2a/v1/tasks/{task_id} HTTP/1.1\r\nHost: t\r\n\r\n".encode()
    else:
        body = json.dumps(
            {"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": task_id}}
        ).encode()
        request = (
            b"POST /a2a HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n"
            + f"Content-Length: {len(body)}\r\n\r\n".encode()
            + body
        )
    before, _ = tracemalloc.get_traced_memory()
    await drop_mid_answer(runner, request)
    after, peak = tracemalloc.get_traced_memory()
    assert peak - before > BODY_MIB << 20  # the answer was built
    assert after - before < 4 << 20, f"{(after - before) >> 20} MiB still held"
