"""Push URLs are checked at registration as strictly as at delivery, on every binding:
numeric host spellings are canonicalised and refused, and a host name is resolved at
registration (bounded) and refused when any answer is a forbidden address. The engine
runs behind the real HTTP app and gRPC server; a scripted resolver stands in for DNS
(names under ``.test``)."""

from __future__ import annotations

import asyncio
import hashlib
import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import aiohttp
import grpc
import pytest
from aiohttp.abc import AbstractResolver, ResolveResult

import lf.a2a.v1.a2a_pb2 as pb
import lf.a2a.v1.a2a_pb2_grpc as a2a_pb2_grpc
from a2a_gateway.agent.faux import FauxAgent
from a2a_gateway.protocol.context import ANONYMOUS, CallContext
from a2a_gateway.server.auth import AllowAnonymous
from a2a_gateway.server.card import CardProvider
from a2a_gateway.server.config import ServerConfig
from a2a_gateway.server.engine import TaskEngine
from a2a_gateway.server.grpc_server import build_grpc_server
from a2a_gateway.server.http_app import build_http_app
from a2a_gateway.server.memory_store import MemoryTaskStore
from a2a_gateway.server.outbound import OutboundClient
from a2a_gateway.server.push import PushDispatcher

BOUND_S = 10.0  # an upper bound on anything that could hang, never asserted
V1 = {"A2A-Version": "1.0"}
TOKEN = "push-token-never-echoed"

#: What the scripted DNS answers for each name (names not listed: no such host).
DNS: dict[str, list[str]] = {
    "hooks.test": ["93.184.216.34"],
    "inside.test": ["10.1.2.3"],
    "mixed.test": ["93.184.216.34", "127.0.0.1"],
    "mixed6.test": ["93.184.216.34", "fd00::1"],
    "metadata.test": ["169.254.169.254"],
    "mapped.test": ["::ffff:127.0.0.1"],
}


class NameTable(AbstractResolver):
    """DNS stand-in answering from :data:`DNS`; ``silent.test`` never answers;
    ``localhost`` would be asked of the system resolver (the policy refuses it first)."""

    def __init__(self) -> None:
        self.asked: list[str] = []
        self.system = aiohttp.ThreadedResolver()

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        self.asked.append(host)
        if host == "localhost":
            return await self.system.resolve(host, port, family)
        if host == "silent.test":
            await asyncio.Event().wait()
        if host not in DNS:
            raise OSError(socket.EAI_NONAME, "Name or service not known")
        return [
            ResolveResult(
                hostname=host,
                host=address,
                port=port,
                family=socket.AF_INET6 if ":" in address else socket.AF_INET,
                proto=0,
                flags=0,
            )
            for address in DNS[host]
        ]

    async def close(self) -> None:
        await self.system.close()


#: (webhook host, what the error must say): refused at registration on every binding.
REFUSED: list[tuple[str, str]] = [
    ("127.1", "127.0.0.1 is not allowed (loopback)"),
    ("0x7f000001", "127.0.0.1 is not allowed (loopback)"),
    ("2130706433", "127.0.0.1 is not allowed (loopback)"),
    ("0177.0.0.1", "127.0.0.1 is not allowed (loopback)"),
    ("0xa9.254.0251.0xfe", "169.254.169.254 is not allowed (link-local)"),
    ("[::ffff:127.0.0.1]", "IPv4-mapped loopback"),
    ("[::ffff:a9fe:a9fe]", "IPv4-mapped link-local"),
    ("[::ffff:0:a9fe:a9fe]", "IPv4-translated link-local"),
    ("1.2.3.4.5", "numeric but not a valid IP address"),
    ("localhost", "not allowed"),  # loopback by name (RFC 6761), without DNS
    # Host names are judged and resolved in their one spelling: case, a trailing dot
    # (a resolver may not answer "localhost.", which passed as "unresolvable for now").
    ("LocalHost.", "host localhost is not allowed (loopback)"),
    ("LOCALHOST", "host localhost is not allowed (loopback)"),
    ("api.localhost.", "host api.localhost is not allowed (loopback)"),
    ("127.0.0.1.", "127.0.0.1 is not allowed (loopback)"),
    ("[::1]", "::1 is not allowed (loopback)"),
    ("Inside.Test.", "10.1.2.3 (private)"),
    ("localhost%2e", "not a valid host name"),
    ("hooks..test", "not a valid host name"),
    ("inside.test", "10.1.2.3 (private)"),
    ("mixed.test", "127.0.0.1 (loopback)"),  # one forbidden answer is enough
    ("mixed6.test", "fd00::1 (unique-local)"),
    ("metadata.test", "169.254.169.254 (link-local)"),
    ("mapped.test", "IPv4-mapped loopback"),
]
#: Accepted at registration: a public answer, a public numeric spelling, and names
#: that do not resolve now (delivery checks the connection again).
ACCEPTED = ["hooks.test", "Hooks.TEST.", "134744072", "nxdomain.test", "silent.test"]


@dataclass
class Gateway:
    engine: TaskEngine
    resolver: NameTable
    http: aiohttp.ClientSession
    base: str
    stub: a2a_pb2_grpc.A2AServiceStub


@pytest.fixture
async def gateway() -> AsyncIterator[Gateway]:
    resolver = NameTable()
    outbound = OutboundClient(resolver=resolver, connect_timeout_s=0.2)
    push = PushDispatcher(outbound)
    engine = TaskEngine(
        FauxAgent(), MemoryTaskStore(), push_enabled=True, push=push, outbound=outbound
    )
    config = ServerConfig(host="127.0.0.1", grpc_port=0)
    app = build_http_app(engine, config, AllowAnonymous(), CardProvider(config))
    runner = aiohttp.web.AppRunner(app)
    await runner.setup()
    site = aiohttp.web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    server, grpc_port = await build_grpc_server(engine, config, AllowAnonymous())
    await server.start()
    try:
        async with (
            grpc.aio.insecure_channel(f"127.0.0.1:{grpc_port}") as channel,
            aiohttp.ClientSession() as http,
        ):
            stub = a2a_pb2_grpc.A2AServiceStub(channel)
            yield Gateway(engine, resolver, http, f"http://127.0.0.1:{port}", stub)
    finally:
        await server.stop(None)
        await runner.cleanup()
    await engine.aclose()
    await push.aclose()
    await outbound.aclose()


Register = Callable[[Gateway, str, str], Awaitable[str | None]]


async def _json(gw: Gateway, path: str, body: Any, headers: dict[str, str]) -> tuple[int, Any]:
    async with asyncio.timeout(BOUND_S):
        async with gw.http.post(gw.base + path, json=body, headers=headers) as response:
            return response.status, await response.json(content_type=None)


def _rpc_error(status: int, body: Any) -> str | None:
    assert status == 200, body
    if "result" in body:
        return None
    assert body["error"]["code"] == -32602, body
    return str(body["error"]["message"])


def _id(url: str) -> str:
    return "c-" + hashlib.sha256(url.encode()).hexdigest()[:16]


async def jsonrpc(gw: Gateway, task_id: str, url: str) -> str | None:
    params = {"taskId": task_id, "id": _id(url), "url": url, "token": TOKEN}
    call = {"jsonrpc": "2.0", "id": 1, "method": "CreateTaskPushNotificationConfig"}
    return _rpc_error(*await _json(gw, "/a2a", {**call, "params": params}, V1))


async def rest(gw: Gateway, task_id: str, url: str) -> str | None:
    path = f"/a2a/v1/tasks/{task_id}/pushNotificationConfigs"
    status, body = await _json(gw, path, {"id": _id(url), "url": url, "token": TOKEN}, V1)
    if status == 200:
        return None
    assert status == 400 and body["error"]["status"] == "INVALID_ARGUMENT", body
    return str(body["error"]["message"])


async def grpc_call(gw: Gateway, task_id: str, url: str) -> str | None:
    request = pb.TaskPushNotificationConfig(task_id=task_id, id=_id(url), url=url, token=TOKEN)
    try:
        async with asyncio.timeout(BOUND_S):
            await gw.stub.CreateTaskPushNotificationConfig(
                request, metadata=(("a2a-version", "1.0"),)
            )
    except grpc.aio.AioRpcError as exc:
        assert exc.code() == grpc.StatusCode.INVALID_ARGUMENT, exc
        return str(exc.details())
    return None


async def jsonrpc03(gw: Gateway, task_id: str, url: str) -> str | None:
    config = {"id": _id(url), "url": url, "token": TOKEN}
    params = {"taskId": task_id, "pushNotificationConfig": config}
    call = {"jsonrpc": "2.0", "id": 1, "method": "tasks/pushNotificationConfig/set"}
    return _rpc_error(*await _json(gw, "/a2a", {**call, "params": params}, {}))


BINDINGS: dict[str, Register] = {
    "jsonrpc": jsonrpc,
    "rest": rest,
    "grpc": grpc_call,
    "jsonrpc03": jsonrpc03,
}


async def _task(gw: Gateway) -> str:
    request = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "SendMessage",
        "params": {"message": {"messageId": "m-0", "role": "ROLE_USER", "parts": [{"text": "hi"}]}},
    }
    status, body = await _json(gw, "/a2a", request, V1)
    assert status == 200 and "result" in body, body
    return str(body["result"]["task"]["id"])


async def _configs(gw: Gateway, task_id: str) -> list[str]:
    call = {"jsonrpc": "2.0", "id": 1, "method": "ListTaskPushNotificationConfigs"}
    status, body = await _json(gw, "/a2a", {**call, "params": {"taskId": task_id}}, V1)
    assert status == 200 and "result" in body, body
    return [c["url"] for c in body["result"].get("configs", [])]


@pytest.mark.parametrize("binding", BINDINGS)
@pytest.mark.parametrize(("host", "reason"), REFUSED)
async def test_forbidden_webhooks_are_refused_at_registration(
    gateway: Gateway, binding: str, host: str, reason: str
) -> None:
    task_id = await _task(gateway)
    message = await BINDINGS[binding](gateway, task_id, f"https://{host}:8443/hook?sig=s3cr3t")
    assert message is not None, f"{host} was accepted over {binding}"
    assert "url" in message.split(":", 1)[0], message  # the field is named first
    assert reason in message, message
    assert "s3cr3t" not in message and TOKEN not in message
    assert await _configs(gateway, task_id) == []  # nothing stored


@pytest.mark.parametrize("binding", BINDINGS)
async def test_allowed_and_unresolvable_webhooks_are_accepted(
    gateway: Gateway, binding: str
) -> None:
    task_id = await _task(gateway)
    urls = [f"https://{host}/hook" for host in ACCEPTED]
    for url in urls:
        assert await BINDINGS[binding](gateway, task_id, url) is None, url
    assert sorted(await _configs(gateway, task_id)) == sorted(urls)
    assert "silent.test" in gateway.resolver.asked  # bounded by connect_timeout_s
    assert "hooks.test" in gateway.resolver.asked  # Hooks.TEST., in its one spelling
    assert not [host for host in gateway.resolver.asked if host.endswith(".")]


@pytest.mark.parametrize(("host", "reason"), REFUSED)
async def test_an_inline_push_config_is_checked_the_same(
    gateway: Gateway, host: str, reason: str
) -> None:
    message = {"messageId": "m-1", "role": "ROLE_USER", "parts": [{"text": "hi"}]}
    params = {
        "message": message,
        "configuration": {"taskPushNotificationConfig": {"url": f"https://{host}/hook"}},
    }
    call = {"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": params}
    error = _rpc_error(*await _json(gateway, "/a2a", call, V1))
    assert error is not None and error.startswith("configuration.taskPushNotificationConfig.url:")
    assert reason in error
    status, body = await _json(gateway, "/a2a/v1/message:send", params, V1)
    assert status == 400 and reason in body["error"]["message"], body
    listed = await gateway.engine.list_tasks(pb.ListTasksRequest(), _anonymous())
    assert listed.total_size == 0  # no task was created


def _anonymous() -> CallContext:
    return CallContext(caller=ANONYMOUS)
