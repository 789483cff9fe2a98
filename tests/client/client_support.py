"""Shared helpers of the client tests (imported by conftest and the test modules)."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import grpc
from aiohttp import web
from aiohttp.test_utils import TestServer

import lf.a2a.v1.a2a_pb2 as pb
import lf.a2a.v1.a2a_pb2_grpc as a2a_pb2_grpc
from a2a_gateway.client import (
    Credentials,
    Grpc03Transport,
    JsonRpc03Transport,
    Redactor,
    RemoteService,
    Rest03Transport,
    choose_interface,
    credentials_for,
    fetch_card,
    make_transport,
)
from a2a_gateway.client.http_calls import new_http_client

HOST = "127.0.0.1"
#: The key the SDK peer requires (long enough to be scrubbed wherever it appears).
PEER_KEY = "peer-key-7c1e9b2a4d"
#: The caller key our own gateway is started with.
OWN_KEY = "own-key-3e5d7f9b1a2c"
TRANSPORTS = ("jsonrpc", "rest", "grpc")
#: A forced transport's binding name, and the 0.3 transport class our client uses for it.
BINDINGS = {"jsonrpc": "JSONRPC", "rest": "HTTP+JSON", "grpc": "GRPC"}
TRANSPORTS_03 = {
    "JSONRPC": JsonRpc03Transport,
    "HTTP+JSON": Rest03Transport,
    "GRPC": Grpc03Transport,
}


def text_request(
    text: str,
    *,
    task_id: str = "",
    context_id: str = "",
    return_immediately: bool = False,
) -> pb.SendMessageRequest:
    message = pb.Message(
        role=pb.ROLE_USER,
        message_id=uuid.uuid4().hex,
        parts=[pb.Part(text=text)],
        task_id=task_id,
        context_id=context_id,
    )
    request = pb.SendMessageRequest(message=message)
    if return_immediately:
        request.configuration.return_immediately = True
    return request


@dataclass(frozen=True)
class Peer:
    url: str  # the agent's base URL (card at /.well-known/agent-card.json)
    key: str


def remote(
    binding: str,
    url: str,
    *,
    key: str | None = None,
    credentials: Credentials | None = None,
    tenant: str = "",
    timeout: float = 5.0,
    idle_timeout: float = 5.0,
    extensions: tuple[str, ...] = (),
) -> RemoteService:
    """A RemoteService over one binding without a card (the test picks the interface)."""
    redact = Redactor([key])
    if credentials is None and key is not None:
        credentials = Credentials("X-API-Key", key)
    interface = pb.AgentInterface(
        url=url, protocol_binding=binding, protocol_version="1.0", tenant=tenant
    )
    http = new_http_client(timeout)
    wire = make_transport(interface, http=http, credentials=credentials, redact=redact)
    return RemoteService(
        wire,
        interface=interface,
        timeout=timeout,
        stream_idle_timeout=idle_timeout,
        extensions=extensions,
        http=http,
    )


async def own_legacy_service(
    own_server: Peer, transport: str, key: str | None = None
) -> RemoteService:
    """A RemoteService over our gateway's 0.3 interface of ``transport``: its card with the
    1.x interfaces taken out, as a 0.3-only agent's would be."""
    http = new_http_client(10)
    try:
        card = await fetch_card(own_server.url, http=http, timeout=10)
        legacy = [i for i in card.supported_interfaces if i.protocol_version == "0.3"]
        del card.supported_interfaces[:]
        card.supported_interfaces.extend(legacy)
        interface = choose_interface(card, transport)
        wire = make_transport(
            interface, http=http, credentials=credentials_for(card, key or own_server.key)
        )
    except BaseException:
        await http.aclose()
        raise
    return RemoteService(wire, card=card, interface=interface, timeout=10, http=http)


@contextlib.asynccontextmanager
async def serving(app: web.Application) -> AsyncIterator[str]:
    """Run ``app`` on a free 127.0.0.1 port; yields its base URL."""
    server = TestServer(app, host=HOST, port=0)
    await server.start_server()
    try:
        yield str(server.make_url("")).rstrip("/")
    finally:
        await server.close()


@contextlib.asynccontextmanager
async def stream_peer(
    binding: str, handler: Any, *, bound: float = 10.0, **options: Any
) -> AsyncIterator[RemoteService]:
    """A RemoteService over ``binding`` (JSONRPC or HTTP+JSON) to an aiohttp ``handler`` that
    answers the JSON-RPC URL and the REST stream path; the body runs within ``bound`` s."""
    app = web.Application()
    app.router.add_post("/rpc", handler)
    app.router.add_post("/rest/message:stream", handler)
    async with serving(app) as base, asyncio.timeout(bound):
        url = base + ("/rpc" if binding == "JSONRPC" else "/rest")
        async with remote(binding, url, **options) as service:
            yield service


@contextlib.asynccontextmanager
async def grpc_serving(servicer: a2a_pb2_grpc.A2AServiceServicer) -> AsyncIterator[str]:
    """Serve ``servicer`` over gRPC on a free 127.0.0.1 port; yields its target."""
    server = grpc.aio.server()
    a2a_pb2_grpc.add_A2AServiceServicer_to_server(servicer, server)
    port = server.add_insecure_port(f"{HOST}:0")
    await server.start()
    try:
        yield f"{HOST}:{port}"
    finally:
        await server.stop(None)


@contextlib.asynccontextmanager
async def silent_server() -> AsyncIterator[int]:
    """A TCP server that accepts connections and never answers; yields its port."""
    writers: list[asyncio.StreamWriter] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writers.append(writer)
        with contextlib.suppress(ConnectionError):
            await reader.read()  # until the client gives up

    server = await asyncio.start_server(handle, HOST, 0)
    try:
        yield int(server.sockets[0].getsockname()[1])
    finally:
        server.close()
        for writer in writers:
            writer.close()
        await server.wait_closed()
