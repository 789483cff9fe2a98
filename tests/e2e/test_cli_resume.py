"""The CLI's streams resume by themselves: ``subscribe`` and ``send --stream`` through a
TCP proxy that cuts every connection 2 s after it opened print every chunk once, in
order, and say on stderr that they resumed."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import pytest

from a2a_gateway.serve import Gateway

from .test_cli import cli

CUT_AFTER_S = 2.0
CHUNKS = 100


class CuttingProxy:
    """Forwards TCP connections to ``port``, dropping each (both sides) ``cut_after_s``
    after it opened, as a proxy with an idle timeout or a flaky network would."""

    def __init__(self, port: int, cut_after_s: float) -> None:
        self.port = port
        self.cut_after_s = cut_after_s
        self.cuts = 0
        self._tasks: set[asyncio.Task[None]] = set()
        self._server: asyncio.Server | None = None

    async def start(self) -> int:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        port: int = self._server.sockets[0].getsockname()[1]
        return port

    def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.create_task(self._serve(reader, writer))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.port)
        pipes = [
            asyncio.create_task(_pipe(reader, up_writer)),
            asyncio.create_task(_pipe(up_reader, writer)),
        ]
        try:
            _, pending = await asyncio.wait(pipes, timeout=self.cut_after_s)
            if pending:
                self.cuts += 1
        finally:
            for pipe in pipes:
                pipe.cancel()
            for side in (writer, up_writer):
                side.transport.abort()
            await asyncio.gather(*pipes, return_exceptions=True)

    async def aclose(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    while data := await reader.read(65536):
        writer.write(data)
        await writer.drain()
    with contextlib.suppress(OSError):
        writer.write_eof()


@pytest.fixture
async def proxied(gateway: Gateway) -> AsyncIterator[tuple[str, CuttingProxy]]:
    proxy = CuttingProxy(gateway.http_port, CUT_AFTER_S)
    port = await proxy.start()
    try:
        yield f"http://127.0.0.1:{port}", proxy
    finally:
        await proxy.aclose()


ALL_CHUNKS = "".join(f"chunk-{i}" for i in range(CHUNKS))


async def test_subscribe_through_a_cutting_proxy_prints_every_chunk_once(
    proxied: tuple[str, CuttingProxy], gateway: Gateway
) -> None:
    url, proxy = proxied
    direct = f"http://127.0.0.1:{gateway.http_port}"
    started = await cli("send", direct, f"chunks:{CHUNKS}:50", "--return-immediately", "--json")
    assert started.code == 0, started.stderr
    task_id = started.lines()[0]["task"]["id"]
    run = await cli("subscribe", url, task_id, "--transport", "jsonrpc")
    assert run.code == 0, run.stderr
    text, last = run.stdout.rstrip("\n").rsplit("\n", 1)
    assert text == ALL_CHUNKS  # each once, in order (the snapshot's, then the rest)
    assert last.startswith(f"task {task_id}: completed")
    assert proxy.cuts >= 1 and "stream resumed after event" in run.stderr


async def test_send_stream_through_a_cutting_proxy_prints_every_chunk_once(
    proxied: tuple[str, CuttingProxy],
) -> None:
    url, proxy = proxied
    run = await cli("send", url, f"chunks:{CHUNKS}:30", "--stream", "--transport", "rest")
    assert run.code == 0, run.stderr
    text, last = run.stdout.rstrip("\n").rsplit("\n", 1)
    assert text == ALL_CHUNKS
    assert ": completed (context " in last
    assert proxy.cuts >= 1 and "stream resumed after event" in run.stderr
