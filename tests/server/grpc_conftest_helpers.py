"""gRPC wire helpers of the binding tests: reading a stream that must fail, and the
rich status (``google.rpc.Status``) an error carries. The echo service is
``tests.support.echo``; our gRPC server in process is ``tests.support.grpc_serving``."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import grpc
import pytest
from google.rpc import error_details_pb2, status_pb2

# --- wire helpers ---------------------------------------------------------------------

BOUND = 10.0  # seconds: an upper bound on anything that could hang, never asserted


async def call_failure(call: Any, bound: float = BOUND) -> grpc.aio.AioRpcError:
    """The error a call must end in (a stream is read to its end), within ``bound``."""
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        async with asyncio.timeout(bound):
            if hasattr(call, "__aiter__"):
                [event async for event in call]
            else:
                await call
    return caught.value


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
