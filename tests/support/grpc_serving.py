"""Our gRPC server in process, on a free port of 127.0.0.1, with a channel to it: the
launcher of the server suites' gRPC tests."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import grpc

from a2a_gateway.protocol.service import A2AService
from a2a_gateway.server.auth import AllowAnonymous, Authenticator
from a2a_gateway.server.config import ServerConfig
from a2a_gateway.server.grpc_server import build_grpc_server

from .ports import HOST


@dataclass(frozen=True)
class GrpcServed:
    server: grpc.aio.Server
    port: int
    channel: grpc.aio.Channel


@asynccontextmanager
async def grpc_serving(
    service: A2AService,
    authenticator: Authenticator | None = None,
    *,
    build: dict[str, Any] | None = None,
    **config: Any,
) -> AsyncIterator[GrpcServed]:
    """``service`` behind our gRPC server (``config``: more :class:`ServerConfig` fields;
    ``build``: ``build_grpc_server``'s keywords, ``meter`` or ``readiness``), open to
    anyone unless an ``authenticator`` is given, started, with a channel to it; stopped
    after the ``with`` body."""
    server, port = await build_grpc_server(
        service,
        ServerConfig(host=HOST, grpc_port=0, **config),
        authenticator if authenticator is not None else AllowAnonymous(),
        **(build or {}),
    )
    await server.start()
    try:
        async with grpc.aio.insecure_channel(f"{HOST}:{port}") as channel:
            yield GrpcServed(server, port, channel)
    finally:
        await server.stop(None)
