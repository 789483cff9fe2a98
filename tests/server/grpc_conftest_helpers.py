"""A small deterministic A2AService for binding tests, and gRPC wire helpers.

The echo service completes every task at once and echoes text parts. Ids (task ids,
message task ids, push config task ids) steer it:

- ``error:<ErrorClassName>``: raise that error from ``protocol.errors``;
- ``crash``: raise a plain RuntimeError (an unexpected failure);
- ``wrong-type``: return the wrong message type;
- ``hang`` (streams): send one snapshot, then wait until the stream is closed;
- ``midstream:<ErrorClassName>`` (streams): one snapshot, then raise that error.

Every call records its CallContext in ``contexts``; every stream that ends sets its
id's event in ``closed``.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import grpc
import pytest
from google.rpc import error_details_pb2, status_pb2

from a2a_gateway.protocol.service import A2AService
from a2a_gateway.server.auth import AllowAnonymous
from a2a_gateway.server.config import ServerConfig
from a2a_gateway.server.grpc_server import build_grpc_server

# --- wire helpers ---------------------------------------------------------------------


@asynccontextmanager
async def serving(service: A2AService, config: ServerConfig) -> AsyncIterator[int]:
    """The gRPC server for ``service`` on ``config``, open to anyone, started; its port."""
    server, port = await build_grpc_server(service, config, AllowAnonymous())
    await server.start()
    try:
        yield port
    finally:
        await server.stop(None)


async def stream_until_error(
    call: AsyncIterator[Any], bound: float
) -> tuple[list[Any], grpc.aio.AioRpcError]:
    """Reads a server stream that must end in an error: the events before it, and it."""
    received: list[Any] = []
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        async with asyncio.timeout(bound):
            async for event in call:
                received.append(event)
    return received, caught.value


def rich_status(error: grpc.aio.AioRpcError) -> status_pb2.Status:
    """The google.rpc.Status in the error's ``grpc-status-details-bin`` trailer."""
    trailers: Any = error.trailing_metadata() or ()
    found = [v for k, v in trailers if k == "grpc-status-details-bin"]
    assert len(found) == 1, f"expected one status trailer, got {error.trailing_metadata()!r}"
    value: Any = found[0]
    assert isinstance(value, bytes)
    return status_pb2.Status.FromString(value)


def error_info(status: status_pb2.Status) -> error_details_pb2.ErrorInfo:
    for detail in status.details:
        if detail.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
            info = error_details_pb2.ErrorInfo()
            detail.Unpack(info)
            return info
    raise AssertionError(f"no ErrorInfo in {status}")


def field_violations(status: status_pb2.Status) -> list[str]:
    for detail in status.details:
        if detail.Is(error_details_pb2.BadRequest.DESCRIPTOR):
            request = error_details_pb2.BadRequest()
            detail.Unpack(request)
            return [v.field for v in request.field_violations]
    return []
