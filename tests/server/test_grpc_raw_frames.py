"""Every gRPC call is bounded by the server (issue 10, item 6).

Raw HTTP/2 frames (``h2``) against the real grpc.aio server, from a client that sets no
deadline: a length prefix larger than the data, a DATA frame shorter than the 5-byte
prefix, HEADERS that end the stream with no message, or no DATA at all. Each is answered
with INVALID_ARGUMENT within the request bound, on unary and streaming rpcs of both
services (1.0 and 0.3). Then the bounds on calls whose request did arrive: the default
deadline of a unary call, the idle bound of a stream.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import grpc
import pytest

import lf.a2a.v1.a2a_pb2 as pb
import lf.a2a.v1.a2a_pb2_grpc as a2a_pb2_grpc
from a2a_gateway.protocol.context import CallContext
from a2a_gateway.serve import Gateway
from a2a_gateway.settings import resolve
from tests.support.echo import EchoService
from tests.support.grpc_serving import grpc_serving

from .h2_raw import RawH2, grpc_frame

REQUEST_S = 0.3  # the request bound these tests configure
BOUND = 10.0  # an upper bound on anything that could hang, never asserted
INVALID_ARGUMENT = grpc.StatusCode.INVALID_ARGUMENT.value[0]
V1 = (("a2a-version", "1.0"),)

GET_10 = pb.GetTaskRequest(id="t-1").SerializeToString()
#: (path, a valid request message): unary and streaming rpcs of both services.
RPCS = {
    "GetTask": ("/lf.a2a.v1.A2AService/GetTask", GET_10, V1),
    "SubscribeToTask": ("/lf.a2a.v1.A2AService/SubscribeToTask", GET_10, V1),
    "SendStreamingMessage": (
        "/lf.a2a.v1.A2AService/SendStreamingMessage",
        pb.SendMessageRequest(
            message=pb.Message(message_id="m", role=pb.ROLE_USER, parts=[pb.Part(text="x")])
        ).SerializeToString(),
        V1,
    ),
    "0.3 GetTask": ("/a2a.v1.A2AService/GetTask", b"\n\x07tasks/t", ()),
    "0.3 TaskSubscription": ("/a2a.v1.A2AService/TaskSubscription", b"\n\x07tasks/t", ()),
}

#: name -> (what is sent after the HEADERS, or None: HEADERS end the stream; the word
#: the status message must carry)
FRAMES: dict[str, tuple[Callable[[RawH2, int], None] | None, str]] = {
    "length prefix larger than the data": (
        lambda raw, s: raw.send(s, b"\x00\x00\x00\x01\x00" + b"abc"),
        "did not arrive",
    ),
    "length prefix larger than the data, stream ended": (
        lambda raw, s: raw.send(s, b"\x00\x00\x00\x01\x00" + b"abc", end_stream=True),
        "without a request",
    ),
    "DATA shorter than the prefix": (lambda raw, s: raw.send(s, b"\x00\x00"), "did not arrive"),
    "DATA shorter than the prefix, stream ended": (
        lambda raw, s: raw.send(s, b"\x00\x00", end_stream=True),
        "without a request",
    ),
    "HEADERS with END_STREAM, no message": (None, "without a request"),
    "HEADERS only, stream left open": (lambda raw, s: None, "did not arrive"),
    "empty DATA, stream left open": (lambda raw, s: raw.send(s, b""), "did not arrive"),
}


@pytest.fixture
async def served() -> AsyncIterator[tuple[EchoService, int]]:
    service = EchoService(stateless=True)
    async with grpc_serving(service, body_read_timeout_s=REQUEST_S) as served:
        yield service, served.port


@pytest.mark.parametrize("rpc", RPCS)
async def test_malformed_frames_are_answered_within_the_request_bound(
    served: tuple[EchoService, int], rpc: str, caplog: pytest.LogCaptureFixture
) -> None:
    service, port = served
    path, valid, metadata = RPCS[rpc]
    raw = await RawH2.connect(port)
    try:
        streams = {}
        for name, (send, _) in FRAMES.items():
            stream = raw.request(path, metadata=metadata, end_stream=send is None)
            if send is not None:
                send(raw, stream)
            streams[name] = stream
        control = raw.request(path, metadata=metadata)  # a well-formed call alongside
        raw.send(control, grpc_frame(valid), end_stream=True)
        failures = []
        for name, stream in streams.items():
            outcome = await raw.finished(stream, BOUND)
            word = FRAMES[name][1]
            if outcome.grpc_status != INVALID_ARGUMENT or word not in outcome.grpc_message:
                failures.append(f"{name}: {outcome}")
        assert not failures, "\n".join(failures)
        assert (await raw.finished(control, BOUND)).grpc_status == 0
    finally:
        await raw.close()
    assert len(service.contexts) == 1  # only the control call reached the service
    assert [r for r in caplog.records if r.levelno >= logging.WARNING] == []


class SlowService(EchoService):
    """GetTask ``hang`` ignores its deadline; every other id records it and answers."""

    async def get_task(self, request: pb.GetTaskRequest, context: CallContext) -> pb.Task:
        if request.id == "hang":
            self._seen(context)
            await asyncio.Event().wait()
        return await super().get_task(request, context)


async def test_a_unary_call_without_a_deadline_gets_the_default() -> None:
    service = SlowService(stateless=True)
    async with grpc_serving(service, grpc_default_deadline_s=0.2) as served:
        stub = a2a_pb2_grpc.A2AServiceStub(served.channel)
        await stub.GetTask(pb.GetTaskRequest(id="t"), metadata=V1)  # no timeout
        remaining = service.contexts[-1].remaining()
        assert remaining is not None and remaining <= 0.2
        await stub.GetTask(pb.GetTaskRequest(id="t"), metadata=V1, timeout=60)
        remaining = service.contexts[-1].remaining()
        assert remaining is not None and remaining > 1  # the client's own deadline
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            async with asyncio.timeout(BOUND):
                await stub.GetTask(pb.GetTaskRequest(id="hang"), metadata=V1)
        assert caught.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
        assert "0.2 s" in str(caught.value.details())


async def test_a_silent_stream_is_ended_after_the_idle_bound(
    caplog: pytest.LogCaptureFixture,
) -> None:
    service = EchoService(stateless=True)
    async with grpc_serving(service, grpc_stream_idle_s=0.2) as served:
        stub = a2a_pb2_grpc.A2AServiceStub(served.channel)
        events = []
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            async with asyncio.timeout(BOUND):
                async for event in stub.SubscribeToTask(
                    pb.SubscribeToTaskRequest(id="hang"), metadata=V1
                ):
                    events.append(event)
        assert caught.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
        assert "no event for 0.2 s" in str(caught.value.details())
        assert len(events) == 1 and events[0].task.id == "hang"
        async with asyncio.timeout(BOUND):
            await service.closed["hang"].wait()  # the service's stream was closed
        # A stream that keeps talking is not cut off.
        async with asyncio.timeout(BOUND):
            done = [e async for e in stub.SubscribeToTask(pb.SubscribeToTaskRequest(id="ok"))]
        assert done[-1].status_update.status.state == pb.TASK_STATE_COMPLETED
    assert [r for r in caplog.records if r.levelno >= logging.WARNING] == []


@pytest.mark.parametrize(
    ("default_deadline_s", "client_deadline_s"), [(0.3, None), (300.0, 1.0), (300.0, 2.5)]
)
async def test_a_blocking_send_answers_with_the_task_as_it_is_in_time(
    tmp_path: Path, default_deadline_s: float, client_deadline_s: float | None
) -> None:
    """A run outlasting the call: the task as it is comes back at the server's default
    deadline when the client set none, and before the client's own (an answer at the
    client's deadline itself races its timer and is mostly lost, and with it the
    task's id, as DEADLINE_EXCEEDED)."""
    settings = resolve(
        {
            "workspace": [str(tmp_path / "ws")],
            "allow_anonymous": True,
            "port": 0,
            "grpc_port": 0,
            "faux": True,
            "grpc_default_deadline": default_deadline_s,
        },
        environ={},
    )
    gateway = Gateway(settings)
    await gateway.start()
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{gateway.grpc_port}") as channel:
            stub = a2a_pb2_grpc.A2AServiceStub(channel)
            answers = []
            for n in range(2):
                message = pb.Message(
                    message_id=f"m-d{n}", role=pb.ROLE_USER, parts=[pb.Part(text="hold:30")]
                )
                async with asyncio.timeout(BOUND):
                    answer = await stub.SendMessage(
                        pb.SendMessageRequest(message=message),
                        metadata=V1,
                        timeout=client_deadline_s,
                    )
                answers.append(answer.task.status.state)
                await stub.CancelTask(pb.CancelTaskRequest(id=answer.task.id), metadata=V1)
            assert answers == [pb.TASK_STATE_WORKING] * 2
    finally:
        await gateway.stop()
