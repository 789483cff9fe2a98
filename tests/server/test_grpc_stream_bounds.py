"""gRPC streams against a client that stops reading: each write is bounded.

A real grpc.aio server serves a service whose stream floods large events; the client
opens the stream and never reads, so HTTP/2 flow control holds the server's write.
"""

from __future__ import annotations

import asyncio
import gc
import logging

import grpc
import pytest

import lf.a2a.v1.a2a_pb2 as pb
from a2a_gateway.server.auth import AllowAnonymous
from a2a_gateway.server.grpc_binding import a2a_rpc_handler
from tests.support.echo import EchoService, FloodService, HoldingService

BOUND = 10.0  # seconds: an upper bound on anything that could hang, never asserted
WRITE_TIMEOUT_S = 0.5


def _identity(data: bytes) -> bytes:
    return data


async def _served(service: EchoService) -> tuple[grpc.aio.Server, int]:
    server = grpc.aio.server()
    server.add_generic_rpc_handlers(
        (a2a_rpc_handler(service, AllowAnonymous(), write_timeout_s=WRITE_TIMEOUT_S),)
    )
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    return server, port


def _request() -> bytes:
    message = pb.Message(message_id="m-1", role=pb.ROLE_USER, parts=[pb.Part(text="go")])
    return pb.SendMessageRequest(message=message).SerializeToString()


# A client whose HTTP/2 windows stay small: no BDP probing, no read-ahead.
SMALL_WINDOW = [("grpc.http2.bdp_probe", 0), ("grpc.http2.lookahead_bytes", 1024)]


@pytest.mark.parametrize("snapshot_first", [True, False], ids=["later-write", "first-write"])
async def test_a_stream_whose_client_stops_reading_is_ended(
    caplog: pytest.LogCaptureFixture, snapshot_first: bool
) -> None:
    service = FloodService(snapshot_first=snapshot_first)
    server, port = await _served(service)
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}", options=SMALL_WINDOW) as channel:
            method = "/lf.a2a.v1.A2AService/SendStreamingMessage"
            call = channel.unary_stream(method, _identity, _identity)(_request())
            try:
                with caplog.at_level(logging.WARNING, "a2a_gateway.server.grpc_binding"):
                    async with asyncio.timeout(BOUND):
                        # The client reads nothing: the write stalls, then the stream is
                        # closed (the service sees its subscriber leave).
                        await service.flood_closed.wait()
                        while not any("read nothing" in r.message for r in caplog.records):  # noqa: ASYNC110
                            await asyncio.sleep(0.01)
                stalled = [r for r in caplog.records if "read nothing" in r.message]
                assert len(stalled) == 1
                assert stalled[0].levelno == logging.WARNING
                assert "SendStreamingMessage" in stalled[0].getMessage()
                produced = service.produced
                await asyncio.sleep(WRITE_TIMEOUT_S)  # nothing more is pulled or written
                assert service.produced == produced
                # Reading again: the events already written, then the reason.
                received = 0
                with pytest.raises(grpc.aio.AioRpcError) as failure:
                    async with asyncio.timeout(BOUND):
                        async for _ in call:
                            received += 1
                assert 1 <= received <= produced
                assert failure.value.code() == grpc.StatusCode.UNAVAILABLE
                assert "read nothing" in str(failure.value.details())
            finally:
                call.cancel()
    finally:
        await server.stop(None)


async def test_a_reading_client_gets_every_event() -> None:
    # The bound is per write: a client that keeps reading is never cut off.
    service = EchoService(stateless=True)
    server, port = await _served(service)
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            method = "/lf.a2a.v1.A2AService/SendStreamingMessage"
            call = channel.unary_stream(method, _identity, pb.StreamResponse.FromString)
            async with asyncio.timeout(BOUND):
                events = [event async for event in call(_request())]
            assert events[-1].status_update.status.state == pb.TASK_STATE_COMPLETED
    finally:
        await server.stop(None)


def _live_requests(message_id: str) -> int:
    gc.collect()
    return sum(
        1
        for found in gc.get_objects()
        if isinstance(found, pb.SendMessageRequest) and found.message.message_id == message_id
    )


async def test_a_stream_does_not_keep_its_request() -> None:
    # A request may carry megabytes of inline file bytes: once the service has it,
    # the binding must not keep it (nor its bytes) for the stream's life.
    service = HoldingService()
    server, port = await _served(service)
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            method = "/lf.a2a.v1.A2AService/SendStreamingMessage"
            message = pb.Message(message_id="m-held", role=pb.ROLE_USER, parts=[pb.Part(text="x")])
            data = pb.SendMessageRequest(message=message).SerializeToString()
            del message
            call = channel.unary_stream(method, _identity, pb.StreamResponse.FromString)(data)
            try:
                async with asyncio.timeout(BOUND):
                    first = await call.read()
                    await service.started.wait()
                assert isinstance(first, pb.StreamResponse) and first.task.id == "m-held"
                assert _live_requests("m-held") == 0
            finally:
                service.release.set()
                call.cancel()
    finally:
        await server.stop(None)
