"""Timeouts, unreachable agents, tolerant SSE and cancellable streams, on real sockets."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import grpc
import orjson
import pytest
from aiohttp import web

import lf.a2a.v1.a2a_pb2 as pb
import lf.a2a.v1.a2a_pb2_grpc as a2a_pb2_grpc
from a2a_gateway.client import Timeout, Unreachable, connect
from a2a_gateway.protocol import errors
from tests.support.ports import free_port

from .client_support import (
    HOST,
    grpc_serving,
    remote,
    silent_server,
    stream_peer,
    text_request,
)

BOUND_S = 10.0
HTTP_BINDINGS = ("JSONRPC", "HTTP+JSON")


def http_url(binding: str, base: str) -> str:
    return base + ("/rpc" if binding == "JSONRPC" else "/rest")


# --- a server that never answers --------------------------------------------------------


async def test_card_from_silent_server_times_out() -> None:
    async with silent_server() as port, asyncio.timeout(BOUND_S):
        with pytest.raises(Timeout) as caught:
            await connect(f"http://{HOST}:{port}", timeout=0.5)
    assert "did not answer within 0.5 s" in str(caught.value)
    assert caught.value.spec.http_status == 504


@pytest.mark.parametrize("binding", [*HTTP_BINDINGS, "GRPC"])
async def test_unary_call_to_silent_server_times_out(binding: str) -> None:
    async with silent_server() as port, asyncio.timeout(BOUND_S):
        base = f"http://{HOST}:{port}"
        url = f"{HOST}:{port}" if binding == "GRPC" else http_url(binding, base)
        async with remote(binding, url, timeout=0.5) as service:
            with pytest.raises(Timeout):
                await service.get_task(pb.GetTaskRequest(id="t-1"))


@pytest.mark.parametrize("binding", [*HTTP_BINDINGS, "GRPC"])
async def test_opening_a_stream_to_silent_server_times_out(binding: str) -> None:
    async with silent_server() as port, asyncio.timeout(BOUND_S):
        base = f"http://{HOST}:{port}"
        url = f"{HOST}:{port}" if binding == "GRPC" else http_url(binding, base)
        async with remote(binding, url, timeout=0.5) as service:
            with pytest.raises(Timeout):
                await anext(service.send_streaming_message(text_request("hi")))


# --- nothing listening ------------------------------------------------------------------


async def test_card_from_closed_port_is_unreachable() -> None:
    port = free_port()
    async with asyncio.timeout(BOUND_S):
        with pytest.raises(Unreachable) as caught:
            await connect(f"http://{HOST}:{port}", timeout=2)
    assert f"Could not reach http://{HOST}:{port}/.well-known/agent-card.json" in str(caught.value)
    assert caught.value.spec.http_status == 503


@pytest.mark.parametrize("binding", [*HTTP_BINDINGS, "GRPC"])
async def test_call_to_closed_port_is_unreachable(binding: str) -> None:
    port = free_port()
    url = f"{HOST}:{port}" if binding == "GRPC" else http_url(binding, f"http://{HOST}:{port}")
    async with asyncio.timeout(BOUND_S), remote(binding, url, timeout=3) as service:
        with pytest.raises(Unreachable):
            await service.get_task(pb.GetTaskRequest(id="t-1"))
        with pytest.raises(Unreachable):
            await anext(service.subscribe_to_task(pb.SubscribeToTaskRequest(id="t-1")))


async def test_bad_url_is_unreachable_not_a_crash() -> None:
    async with asyncio.timeout(BOUND_S):
        with pytest.raises(Unreachable, match=r"invalid URL|not an absolute"):
            await connect("ftp://example.invalid/agent", timeout=1)


# --- SSE tolerance ----------------------------------------------------------------------

TASK = {"task": {"id": "t-1", "contextId": "c-1", "status": {"state": "TASK_STATE_WORKING"}}}
DONE = {
    "statusUpdate": {
        "taskId": "t-1",
        "contextId": "c-1",
        "status": {"state": "TASK_STATE_COMPLETED"},
    }
}


async def sse_response(request: web.Request, chunks: list[bytes]) -> web.StreamResponse:
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await response.prepare(request)
    for chunk in chunks:
        await response.write(chunk)
        await asyncio.sleep(0)  # separate network writes: events span chunk boundaries
    await response.write_eof()
    return response


def rpc(result: object) -> bytes:
    return orjson.dumps({"jsonrpc": "2.0", "id": "1", "result": result})


async def test_sse_tolerates_crlf_comments_and_multiline_data() -> None:
    task = orjson.dumps({"jsonrpc": "2.0", "id": "1", "result": TASK}).decode()
    cut = task.index(',"result"') + 1  # a line break between JSON tokens is whitespace
    head, tail = task[:cut], task[cut:]

    async def handler(request: web.Request) -> web.StreamResponse:
        return await sse_response(
            request,
            [
                b": ping - 2026-01-01 00:00:00\r\n\r\n",
                # One JSON document split over two data lines, CRLF endings, split writes.
                f"data: {head}\r\ndata: {tail}\r\n".encode(),
                b"\r\n",
                b"retry: 100\r\nid: 7\r\ndata: " + rpc(DONE) + b"\r",
                b"\n\r\n",
            ],
        )

    async with stream_peer("JSONRPC", handler, bound=BOUND_S) as service:
        events = [e async for e in service.send_streaming_message(text_request("hi"))]
    assert [e.WhichOneof("payload") for e in events] == ["task", "status_update"]
    assert events[0].task.id == "t-1"
    assert events[1].status_update.status.state == pb.TASK_STATE_COMPLETED


async def test_jsonrpc_error_event_mid_stream_is_typed() -> None:
    error = {
        "jsonrpc": "2.0",
        "id": "1",
        "error": {
            "code": -32001,
            "message": "Task vanished",
            "data": [
                {
                    "@type": "type.googleapis.com/google.rpc.ErrorInfo",
                    "reason": "TASK_NOT_FOUND",
                    "domain": "a2a-protocol.org",
                    "metadata": {"taskId": "t-1"},
                }
            ],
        },
    }

    async def handler(request: web.Request) -> web.StreamResponse:
        return await sse_response(
            request,
            [
                b"data: " + rpc(TASK) + b"\n\n",
                b"event: error\ndata: " + orjson.dumps(error) + b"\n\n",
            ],
        )

    async with stream_peer("JSONRPC", handler, bound=BOUND_S) as service:
        stream = service.send_streaming_message(text_request("hi"))
        first = await anext(stream)
        with pytest.raises(errors.TaskNotFoundError) as caught:
            await anext(stream)
    assert first.task.id == "t-1"
    assert caught.value.message == "Task vanished"
    assert caught.value.metadata == {"taskId": "t-1"}


async def test_rest_error_event_mid_stream_is_typed() -> None:
    error = {
        "error": {
            "code": 400,
            "status": "FAILED_PRECONDITION",
            "message": "nope",
            "details": [
                {
                    "@type": "type.googleapis.com/google.rpc.ErrorInfo",
                    "reason": "UNSUPPORTED_OPERATION",
                    "domain": "a2a-protocol.org",
                }
            ],
        }
    }

    async def handler(request: web.Request) -> web.StreamResponse:
        return await sse_response(
            request,
            [
                b"data: " + orjson.dumps(TASK) + b"\n\n",
                b"event: error\ndata: " + orjson.dumps(error) + b"\n\n",
            ],
        )

    async with stream_peer("HTTP+JSON", handler, bound=BOUND_S) as service:
        stream = service.send_streaming_message(text_request("hi"))
        assert (await anext(stream)).task.id == "t-1"
        with pytest.raises(errors.UnsupportedOperationError):
            await anext(stream)


async def test_rest_error_event_of_any_shape_ends_the_stream_with_an_error() -> None:
    """An ``event: error`` whose data is not ``{"error": Status}`` is still an error: read
    as a StreamResponse it would be an empty event, dropped, and the failure lost."""

    async def handler(request: web.Request) -> web.StreamResponse:
        return await sse_response(
            request,
            [
                b"data: " + orjson.dumps(TASK) + b"\n\n",
                b'event: error\ndata: {"code": 503, "status": "UNAVAILABLE"}\n\n',
                b"data: " + orjson.dumps(TASK) + b"\n\n",
            ],
        )

    async with stream_peer("HTTP+JSON", handler, bound=BOUND_S) as service:
        stream = service.send_streaming_message(text_request("hi"))
        assert (await anext(stream)).task.id == "t-1"
        with pytest.raises(errors.A2AError):
            await anext(stream)


async def test_error_before_stream_is_plain_json() -> None:
    async def handler(request: web.Request) -> web.Response:
        return web.json_response(
            {"jsonrpc": "2.0", "id": "1", "error": {"code": -32004, "message": "no streaming"}}
        )

    async with stream_peer("JSONRPC", handler, bound=BOUND_S) as service:
        with pytest.raises(errors.UnsupportedOperationError, match="no streaming"):
            await anext(service.send_streaming_message(text_request("hi")))


# --- idle streams and cancellation ------------------------------------------------------


@pytest.mark.parametrize("binding", HTTP_BINDINGS)
async def test_silent_open_stream_hits_idle_timeout(binding: str) -> None:
    async def handler(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        body = rpc(TASK) if binding == "JSONRPC" else orjson.dumps(TASK)
        await response.write(b"data: " + body + b"\n\n")
        await asyncio.sleep(30)  # then nothing, not even a keep-alive
        return response

    async with stream_peer(binding, handler, idle_timeout=0.5, bound=BOUND_S) as service:
        stream = service.send_streaming_message(text_request("hi"))
        assert (await anext(stream)).task.id == "t-1"
        with pytest.raises(Timeout, match=r"sent nothing for 0\.5 s"):
            await anext(stream)


@pytest.mark.parametrize("binding", HTTP_BINDINGS)
async def test_closing_the_iterator_closes_the_http_response(binding: str) -> None:
    gone = asyncio.Event()

    async def handler(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        body = rpc(TASK) if binding == "JSONRPC" else orjson.dumps(TASK)
        try:
            await response.write(b"data: " + body + b"\n\n")
            for _ in range(500):  # keep-alives until the client hangs up
                await asyncio.sleep(0.02)
                await response.write(b": keep-alive\n\n")
        except (ConnectionError, asyncio.CancelledError):
            gone.set()
            raise
        return response

    async with stream_peer(binding, handler, bound=BOUND_S) as service:
        stream = service.send_streaming_message(text_request("hi"))
        assert (await anext(stream)).task.id == "t-1"
        await stream.aclose()
        await gone.wait()  # the server saw the connection go away


async def test_cancelling_the_consumer_task_closes_the_stream() -> None:
    gone = asyncio.Event()
    first_sent = asyncio.Event()

    async def handler(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        try:
            await response.write(b"data: " + rpc(TASK) + b"\n\n")
            first_sent.set()
            for _ in range(500):
                await asyncio.sleep(0.02)
                await response.write(b": keep-alive\n\n")
        except (ConnectionError, asyncio.CancelledError):
            gone.set()
            raise
        return response

    async with stream_peer("JSONRPC", handler, bound=BOUND_S) as service:

        async def consume() -> None:
            async for _ in service.send_streaming_message(text_request("hi")):
                pass

        consumer = asyncio.create_task(consume())
        await first_sent.wait()
        consumer.cancel()
        with pytest.raises(asyncio.CancelledError):
            await consumer
        await gone.wait()


# --- gRPC streams -----------------------------------------------------------------------


class StreamingServicer(a2a_pb2_grpc.A2AServiceServicer):
    """One event, then 30 s of silence; ``cancelled`` is set when the call ends before
    that (the tests' bounds are shorter): the client's cancel may land in the sleep, or
    while grpc still sends the first event (this generator then closed at its yield,
    never resumed into the sleep)."""

    def __init__(self) -> None:
        self.cancelled = asyncio.Event()

    async def SendStreamingMessage(
        self, request: pb.SendMessageRequest, context: grpc.aio.ServicerContext[object, object]
    ) -> AsyncIterator[pb.StreamResponse]:
        try:
            yield pb.StreamResponse(
                task=pb.Task(
                    id="t-1", context_id="c-1", status=pb.TaskStatus(state=pb.TASK_STATE_WORKING)
                )
            )
            await asyncio.sleep(30)
        finally:
            self.cancelled.set()


@pytest.fixture
async def grpc_streamer() -> AsyncIterator[tuple[str, StreamingServicer]]:
    servicer = StreamingServicer()
    async with grpc_serving(servicer) as target:
        yield target, servicer


async def test_grpc_stream_close_cancels_the_call(
    grpc_streamer: tuple[str, StreamingServicer],
) -> None:
    target, servicer = grpc_streamer
    async with asyncio.timeout(BOUND_S), remote("GRPC", target) as service:
        stream = service.send_streaming_message(text_request("hi"))
        assert (await anext(stream)).task.id == "t-1"
        await stream.aclose()
        await servicer.cancelled.wait()


async def test_grpc_stream_idle_timeout(grpc_streamer: tuple[str, StreamingServicer]) -> None:
    target, servicer = grpc_streamer
    async with asyncio.timeout(BOUND_S), remote("GRPC", target, idle_timeout=0.5) as service:
        stream = service.send_streaming_message(text_request("hi"))
        assert (await anext(stream)).task.id == "t-1"
        with pytest.raises(Timeout, match=r"sent nothing for 0\.5 s"):
            await anext(stream)
        await servicer.cancelled.wait()
