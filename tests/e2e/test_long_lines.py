"""Header lines and request lines up to 16 KiB work on every binding; longer ones are a
4xx that echoes nothing of the request (issue 10, item 5). A real gateway (serve's own
runner and gRPC options)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import aiohttp
import grpc
import pytest

import lf.a2a.v1.a2a_pb2 as pb
import lf.a2a.v1.a2a_pb2_grpc as a2a_pb2_grpc
from a2a_gateway.serve import Gateway

from .conftest import KEY_ALICE

#: 1,000 extension URIs in one A2A-Extensions value: 15,998 bytes.
EXTENSIONS = ", ".join(f"urn:a2a:x:{i:04d}" for i in range(1000))
#: A tenant that makes a request line of almost 16 KiB.
TENANT = "t" + "e" * 16_000
MARK = "ECHO-ME-NOT"
HEADERS = {"X-API-Key": KEY_ALICE, "A2A-Version": "1.0"}


@pytest.fixture
async def http(gateway: Gateway) -> AsyncIterator[aiohttp.ClientSession]:
    base = f"http://127.0.0.1:{gateway.http_port}"
    async with aiohttp.ClientSession(base, timeout=aiohttp.ClientTimeout(total=30)) as session:
        yield session


@pytest.fixture
async def stub(gateway: Gateway) -> AsyncIterator[a2a_pb2_grpc.A2AServiceStub]:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{gateway.grpc_port}") as channel:
        yield a2a_pb2_grpc.A2AServiceStub(channel)


def test_the_table_is_as_long_as_the_issue_says() -> None:
    assert 15_000 < len(EXTENSIONS) <= 16 * 1024
    assert len(f"GET /a2a/v1/{TENANT}/tasks HTTP/1.1") <= 16 * 1024


async def test_a_1000_uri_extensions_header_on_every_binding(
    http: aiohttp.ClientSession, stub: a2a_pb2_grpc.A2AServiceStub
) -> None:
    headers = {**HEADERS, "A2A-Extensions": EXTENSIONS}
    body = {"jsonrpc": "2.0", "id": 1, "method": "ListTasks", "params": {}}
    async with http.post("/a2a", json=body, headers=headers) as response:
        assert response.status == 200
        assert "result" in await response.json()
    async with http.get("/a2a/v1/tasks", headers=headers) as response:
        assert response.status == 200
    metadata = (("x-api-key", KEY_ALICE), ("a2a-version", "1.0"), ("a2a-extensions", EXTENSIONS))
    answer = await stub.ListTasks(pb.ListTasksRequest(), metadata=metadata, timeout=10)
    assert isinstance(answer, pb.ListTasksResponse)


async def test_a_long_tenant_on_every_binding(
    http: aiohttp.ClientSession, stub: a2a_pb2_grpc.A2AServiceStub
) -> None:
    async with http.get(f"/a2a/v1/{TENANT}/tasks", headers=HEADERS) as response:
        assert response.status == 200, await response.text()
    body = {"jsonrpc": "2.0", "id": 1, "method": "ListTasks", "params": {"tenant": TENANT}}
    async with http.post("/a2a", json=body, headers=HEADERS) as response:
        assert "result" in await response.json()
    metadata = (("x-api-key", KEY_ALICE), ("a2a-version", "1.0"))
    await stub.ListTasks(pb.ListTasksRequest(tenant=TENANT), metadata=metadata, timeout=10)


async def _raw(gateway: Gateway, data: bytes) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", gateway.http_port)
    try:
        writer.write(data)
        await writer.drain()
        async with asyncio.timeout(10):
            return await reader.read()  # the refusal closes the connection
    finally:
        writer.close()


#: Over the limit: a header line or a request line of 17 KiB and more.
OVER = {
    "extensions header": b"POST /a2a HTTP/1.1\r\nHost: x\r\nA2A-Extensions: "
    + MARK.encode()
    + b"u" * 17_000
    + b"\r\nContent-Length: 0\r\n\r\n",
    "key header": b"GET /a2a/v1/tasks HTTP/1.1\r\nHost: x\r\nX-API-Key: "
    + MARK.encode()
    + b"k" * 20_000
    + b"\r\n\r\n",
    "request line (tenant)": b"GET /a2a/v1/"
    + MARK.encode()
    + b"t" * 17_000
    + b"/tasks HTTP/1.1\r\nHost: x\r\n\r\n",
    "request line (query)": b"POST /a2a?" + MARK.encode() + b"q" * 70_000 + b" HTTP/1.1\r\n\r\n",
}


@pytest.mark.parametrize("name", OVER)
async def test_over_the_limit_is_a_4xx_quoting_nothing(gateway: Gateway, name: str) -> None:
    raw = await _raw(gateway, OVER[name])
    status = int(raw.split(b" ", 2)[1])
    assert 400 <= status < 500
    assert MARK.encode() not in raw
    assert b"malformed HTTP request" in raw


async def test_grpc_metadata_over_the_limit_quotes_nothing(
    stub: a2a_pb2_grpc.A2AServiceStub,
) -> None:
    metadata = (("x-api-key", KEY_ALICE), ("a2a-extensions", MARK + "u" * 40_000))
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await stub.ListTasks(pb.ListTasksRequest(), metadata=metadata, timeout=10)
    assert caught.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert MARK not in (caught.value.details() or "")
