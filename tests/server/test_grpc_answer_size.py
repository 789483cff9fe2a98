"""What the gRPC server sends, and what it refuses to: answers and stream events are
bounded at twice the request cap (a proper A2A error beyond it, never grpc's bare
RESOURCE_EXHAUSTED or a logged crash), and a message whose grpc-level compression is
broken is refused by grpc core before the binding sees it (see grpc_server.py)."""

from __future__ import annotations

import gzip
import logging
import struct
from collections.abc import AsyncIterator

import grpc
import pytest

import lf.a2a.v0_3.a2a_pb2 as pb03
import lf.a2a.v0_3.a2a_pb2_grpc as a2a03_grpc
import lf.a2a.v1.a2a_pb2 as pb
import lf.a2a.v1.a2a_pb2_grpc as a2a_grpc
from a2a_gateway.protocol.context import CallContext
from a2a_gateway.server.config import ServerConfig
from a2a_gateway.server.grpc_server import max_answer_bytes
from tests.support.echo import EchoService
from tests.support.grpc_serving import grpc_serving

from .grpc_conftest_helpers import call_failure, error_info, rich_status, stream_until_error
from .h2_raw import RawH2

BOUND = 10.0  # seconds: an upper bound on anything that could hang, never asserted
BODY_CAP = 64 * 1024
ANSWER_CAP = 2 * BODY_CAP
V1 = (("a2a-version", "1.0"),)
INTERNAL = grpc.StatusCode.INTERNAL.value[0]


def _big_task(task_id: str, size: int) -> pb.Task:
    task = pb.Task(id=task_id, context_id="ctx-1")
    task.status.state = pb.TASK_STATE_COMPLETED
    task.artifacts.add(artifact_id="big", parts=[pb.Part(text="x" * size)])
    return task


class BigAnswers(EchoService):
    """GetTask ``big:N`` answers a task with an N-byte artifact; a stream for task
    ``big:N`` sends a snapshot, an N-byte artifact chunk, then the final status."""

    async def get_task(self, request: pb.GetTaskRequest, context: CallContext) -> pb.Task:
        if request.id.startswith("big:"):
            return _big_task(request.id, int(request.id.removeprefix("big:")))
        return await super().get_task(request, context)

    def subscribe_to_task(
        self, request: pb.SubscribeToTaskRequest, context: CallContext
    ) -> AsyncIterator[pb.StreamResponse]:
        return self._big_events(request.id)

    async def _big_events(self, task_id: str) -> AsyncIterator[pb.StreamResponse]:
        try:
            size = int(task_id.removeprefix("big:"))
            yield pb.StreamResponse(task=pb.Task(id=task_id, context_id="ctx-1"))
            chunk = pb.StreamResponse()
            chunk.artifact_update.task_id = task_id
            chunk.artifact_update.artifact.artifact_id = "big"
            chunk.artifact_update.artifact.parts.add(text="x" * size)
            yield chunk
            done = pb.StreamResponse()
            done.status_update.task_id = task_id
            done.status_update.status.state = pb.TASK_STATE_COMPLETED
            yield done
        finally:
            self.closed[task_id].set()


@pytest.fixture
async def served() -> AsyncIterator[tuple[BigAnswers, int]]:
    service = BigAnswers(stateless=True)
    config = ServerConfig(
        host="127.0.0.1", grpc_port=0, max_body_bytes=BODY_CAP, body_read_timeout_s=2.0
    )
    assert max_answer_bytes(config) == ANSWER_CAP
    async with grpc_serving(
        service, max_body_bytes=config.max_body_bytes, body_read_timeout_s=2.0
    ) as served:
        yield service, served.port


def _assert_refused(error: grpc.aio.AioRpcError, caplog: pytest.LogCaptureFixture) -> None:
    """The answer was refused as too large, with the A2A status details, logged once."""
    assert error.code() == grpc.StatusCode.INTERNAL
    assert f"larger than the {ANSWER_CAP} bytes" in (error.details() or "")
    assert error_info(rich_status(error)).reason == "INTERNAL_ERROR"
    refusals = [r for r in caplog.records if "over the" in r.getMessage()]
    assert [r.levelno for r in refusals] == [logging.WARNING]


async def test_an_answer_over_the_cap_is_an_internal_error_naming_the_sizes(
    served: tuple[BigAnswers, int], caplog: pytest.LogCaptureFixture
) -> None:
    _, port = served
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        stub = a2a_grpc.A2AServiceStub(channel)
        # Larger than a request may be, within what an answer may be: sent.
        fits = await stub.GetTask(pb.GetTaskRequest(id=f"big:{BODY_CAP * 3 // 2}"), metadata=V1)
        assert len(fits.artifacts[0].parts[0].text) == BODY_CAP * 3 // 2

        error = await call_failure(
            stub.GetTask(pb.GetTaskRequest(id=f"big:{ANSWER_CAP}"), metadata=V1)
        )
    _assert_refused(error, caplog)


async def test_a_stream_event_over_the_cap_ends_the_stream_after_the_events_before_it(
    served: tuple[BigAnswers, int], caplog: pytest.LogCaptureFixture
) -> None:
    service, port = served
    task_id = f"big:{ANSWER_CAP}"
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        stub = a2a_grpc.A2AServiceStub(channel)
        call = stub.SubscribeToTask(pb.SubscribeToTaskRequest(id=task_id), metadata=V1)
        received, error = await stream_until_error(call, BOUND)
    assert [e.WhichOneof("payload") for e in received] == ["task"]
    _assert_refused(error, caplog)
    assert service.closed[task_id].is_set()  # the service's stream was closed


async def test_a_0_3_answer_over_the_cap_is_refused_alike(
    served: tuple[BigAnswers, int], caplog: pytest.LogCaptureFixture
) -> None:
    _, port = served
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        stub = a2a03_grpc.A2AServiceStub(channel)
        request = pb03.GetTaskRequest(name=f"tasks/big:{ANSWER_CAP}")
        error = await call_failure(stub.GetTask(request))
    _assert_refused(error, caplog)


def _compressed(flag: int, payload: bytes) -> bytes:
    return bytes([flag]) + struct.pack(">I", len(payload)) + payload


async def test_broken_grpc_compression_is_refused_by_grpc_core_before_the_binding(
    served: tuple[BigAnswers, int], caplog: pytest.LogCaptureFixture
) -> None:
    """grpc core decompresses before the binding reads the message and answers a
    failure INTERNAL itself (as gRPC's compression spec requires); a well-formed
    compressed request still works."""
    service, port = served
    good = pb.GetTaskRequest(id="t-1").SerializeToString()
    gzip_v1 = (("grpc-encoding", "gzip"), *V1)
    raw = await RawH2.connect(port)
    try:
        broken = raw.request("/lf.a2a.v1.A2AService/GetTask", metadata=gzip_v1)
        raw.send(broken, _compressed(1, b"not gzip at all"), end_stream=True)
        no_encoding = raw.request("/lf.a2a.v1.A2AService/GetTask", metadata=V1)
        raw.send(no_encoding, _compressed(1, gzip.compress(good)), end_stream=True)
        assert (await raw.finished(broken, BOUND)).grpc_status == INTERNAL
        assert (await raw.finished(no_encoding, BOUND)).grpc_status == INTERNAL
        assert service.contexts == []  # neither reached the service
        fine = raw.request("/lf.a2a.v1.A2AService/GetTask", metadata=gzip_v1)
        raw.send(fine, _compressed(1, gzip.compress(good)), end_stream=True)
        assert (await raw.finished(fine, BOUND)).grpc_status == 0
        assert len(service.contexts) == 1
    finally:
        await raw.close()
    assert [r for r in caplog.records if r.levelno >= logging.WARNING] == []
