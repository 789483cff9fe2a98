"""The gRPC binding against a real grpc.aio server on 127.0.0.1 and the generated stub."""

from __future__ import annotations

import asyncio
import errno
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf import json_format, message
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

import lf.a2a.v1.a2a_pb2 as pb
import lf.a2a.v1.a2a_pb2_grpc as a2a_pb2_grpc
from a2a_gateway.protocol import errors
from a2a_gateway.protocol.service import SERVICE_DESCRIPTOR
from a2a_gateway.server.auth import AllowAnonymous, Authenticator, WorkspaceCallers
from a2a_gateway.server.config import ServerConfig
from a2a_gateway.server.grpc_server import build_grpc_server, grpc_address
from tests.support.echo import ECHO_EXTENSION, SECRET_DETAIL, STREAM_CHUNKS, EchoService
from tests.support.grpc_serving import grpc_serving

from .grpc_conftest_helpers import (
    call_failure,
    error_info,
    field_violations,
    rich_status,
    stream_until_error,
)

BOUND = 10.0  # seconds: an upper bound on anything that could hang, never asserted
KEY = "k-alice-0123456789"
V1 = (("a2a-version", "1.0"),)


@dataclass
class Served:
    service: EchoService
    server: grpc.aio.Server
    port: int
    channel: grpc.aio.Channel
    stub: a2a_pb2_grpc.A2AServiceStub


#: The ``workspace`` of this module's tests: alice may call it.
pytestmark = pytest.mark.callers({"name": "alice", "key": KEY})


async def _serve(authenticator: Authenticator, **config: Any) -> AsyncIterator[Served]:
    service = EchoService(stateless=True)
    async with grpc_serving(service, authenticator, **config) as served:
        channel = served.channel
        yield Served(
            service, served.server, served.port, channel, a2a_pb2_grpc.A2AServiceStub(channel)
        )


@pytest.fixture
async def anon() -> AsyncIterator[Served]:
    async for served in _serve(AllowAnonymous()):
        yield served


@pytest.fixture
async def keyed(workspace: Path) -> AsyncIterator[Served]:
    async for served in _serve(WorkspaceCallers([workspace])):
        yield served


def _send(task_id: str = "", text: str = "hello", **fields: Any) -> pb.SendMessageRequest:
    msg = pb.Message(message_id="m-1", role=pb.ROLE_USER, parts=[pb.Part(text=text)])
    msg.task_id = task_id
    return pb.SendMessageRequest(message=msg, **fields)


def _identity(data: bytes) -> bytes:
    return data


def _raw(channel: grpc.aio.Channel, rpc: str) -> grpc.aio.UnaryUnaryMultiCallable[bytes, bytes]:
    """An A2A rpc that sends and receives raw bytes (to send frames the stub cannot)."""
    return channel.unary_unary(f"/lf.a2a.v1.A2AService/{rpc}", _identity, _identity)


def _raw_stream(
    channel: grpc.aio.Channel, rpc: str
) -> grpc.aio.UnaryStreamMultiCallable[bytes, bytes]:
    return channel.unary_stream(f"/lf.a2a.v1.A2AService/{rpc}", _identity, _identity)


async def _collect(call: Any) -> list[pb.StreamResponse]:
    async with asyncio.timeout(BOUND):
        return [event async for event in call]


# --- every rpc is served -----------------------------------------------------------

MINIMAL_REQUESTS: dict[str, dict[str, Any]] = {
    "SendMessageRequest": {
        "message": {"messageId": "m", "role": "ROLE_USER", "parts": [{"text": "x"}]}
    },
    "GetTaskRequest": {"id": "t-1"},
    "ListTasksRequest": {},
    "CancelTaskRequest": {"id": "t-1"},
    "SubscribeToTaskRequest": {"id": "t-1"},
    "TaskPushNotificationConfig": {"taskId": "t-1", "url": "https://example.com/hook"},
    "GetTaskPushNotificationConfigRequest": {"taskId": "t-1", "id": "c-1"},
    "ListTaskPushNotificationConfigsRequest": {"taskId": "t-1"},
    "DeleteTaskPushNotificationConfigRequest": {"taskId": "t-1", "id": "c-1"},
    "GetExtendedAgentCardRequest": {},
}


@pytest.mark.parametrize("rpc", [m.name for m in SERVICE_DESCRIPTOR.methods])
async def test_every_rpc_of_the_schema_is_served(anon: Served, rpc: str) -> None:
    method = SERVICE_DESCRIPTOR.methods_by_name[rpc]
    request = json_format.ParseDict(
        MINIMAL_REQUESTS[method.input_type.name], getattr(pb, method.input_type.name)()
    )
    call = getattr(anon.stub, rpc)(request, metadata=(*V1, ("x-trace", "1")))
    if method.server_streaming:
        events = await _collect(call)
        assert events[0].WhichOneof("payload") == "task"
    else:
        async with asyncio.timeout(BOUND):
            response: message.Message = await call
        assert response.DESCRIPTOR.full_name == method.output_type.full_name
    assert anon.service.contexts[-1].version == "1.0"


async def test_send_message_echoes_into_a_completed_task(anon: Served) -> None:
    async with asyncio.timeout(BOUND):
        response = await anon.stub.SendMessage(_send(text="ping"), metadata=V1)
    assert response.task.status.state == pb.TASK_STATE_COMPLETED
    assert response.task.artifacts[0].parts[0].text == "ping"


# --- call context from metadata and request ---------------------------------------


async def test_tenant_extensions_and_deadline_reach_the_service(anon: Served) -> None:
    metadata = (
        ("a2a-version", "1.0"),
        ("a2a-extensions", f"urn:other, {ECHO_EXTENSION}"),
        ("x-a2a-extensions", "urn:legacy"),  # the 0.3 name, accepted as on HTTP
    )
    call = anon.stub.SendMessage(_send(tenant="acme"), metadata=metadata, timeout=30)
    async with asyncio.timeout(BOUND):
        await call
        initial = await call.initial_metadata()
    context = anon.service.contexts[-1]
    assert context.tenant == "acme"
    assert context.extensions == {"urn:other", "urn:legacy", ECHO_EXTENSION}
    assert context.deadline is not None
    remaining = context.remaining()
    # grpc rounds the wire timeout up a little: only check it is this call's deadline.
    assert remaining is not None and 0 < remaining <= 31
    # The activated set is echoed, like the HTTP A2A-Extensions response header.
    assert ("a2a-extensions", ECHO_EXTENSION) in list(initial or ())


async def test_no_deadline_and_no_version_header(anon: Served) -> None:
    async with asyncio.timeout(BOUND):
        await anon.stub.GetTask(pb.GetTaskRequest(id="t-1"))
    context = anon.service.contexts[-1]
    remaining = context.remaining()  # no client deadline: the server's default (300 s)
    assert remaining is not None and 200 < remaining <= 300
    assert context.version == "1.0"
    assert context.tenant == ""


async def test_unsupported_version_is_failed_precondition(anon: Served) -> None:
    call = anon.stub.GetTask(pb.GetTaskRequest(id="t-1"), metadata=(("a2a-version", "2.0"),))
    failure = await call_failure(call)
    assert failure.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert error_info(rich_status(failure)).reason == "VERSION_NOT_SUPPORTED"
    assert anon.service.contexts == []


# --- authentication -----------------------------------------------------------------


@pytest.mark.parametrize("metadata", [(("x-api-key", KEY),), (("authorization", f"Bearer {KEY}"),)])
async def test_a_valid_key_names_the_caller(
    keyed: Served, metadata: tuple[tuple[str, str], ...]
) -> None:
    async with asyncio.timeout(BOUND):
        await keyed.stub.GetTask(pb.GetTaskRequest(id="t-1"), metadata=(*V1, *metadata))
    assert keyed.service.contexts[-1].caller.name == "alice"


@pytest.mark.parametrize("metadata", [(), (("x-api-key", "wrong-key-123"),)])
async def test_missing_or_wrong_key_is_unauthenticated(
    keyed: Served, metadata: tuple[tuple[str, str], ...]
) -> None:
    failure = await call_failure(keyed.stub.GetTask(pb.GetTaskRequest(id="t-1"), metadata=metadata))
    assert failure.code() == grpc.StatusCode.UNAUTHENTICATED
    status = rich_status(failure)
    assert error_info(status).reason == "UNAUTHENTICATED"
    assert "wrong-key-123" not in status.SerializeToString().decode("utf-8", "replace")
    assert "wrong-key-123" not in (failure.details() or "")
    assert keyed.service.contexts == []


async def test_authentication_comes_before_parsing(keyed: Served) -> None:
    raw = _raw(keyed.channel, "GetTask")
    failure = await call_failure(raw(b"\xff\xff\xff"))
    assert failure.code() == grpc.StatusCode.UNAUTHENTICATED


# --- errors -------------------------------------------------------------------------


@pytest.mark.parametrize("error", errors.ALL_ERRORS, ids=lambda e: e.__name__)
async def test_each_error_class_maps_to_its_status_and_reason(
    anon: Served, error: type[errors.A2AError]
) -> None:
    task_id = f"error:{error.__name__}"
    failure = await call_failure(anon.stub.GetTask(pb.GetTaskRequest(id=task_id), metadata=V1))
    assert failure.code() == error.spec.grpc_status
    assert failure.details() == error.spec.default_message
    status = rich_status(failure)
    assert status.code == error.spec.grpc_status.value[0]
    assert status.message == error.spec.default_message
    info = error_info(status)
    assert (info.reason, info.domain) == (error.spec.reason, errors.ERROR_DOMAIN)
    assert info.metadata["taskId"] == task_id
    assert type(errors.error_from_status(status)) is error or error.spec.reason in {
        "INVALID_REQUEST"  # JSONParseError and InvalidRequestError share a reason
    }


@pytest.mark.server_fault
async def test_unexpected_exception_is_internal_without_details(anon: Served) -> None:
    failure = await call_failure(anon.stub.GetTask(pb.GetTaskRequest(id="crash"), metadata=V1))
    assert failure.code() == grpc.StatusCode.INTERNAL
    assert SECRET_DETAIL not in (failure.details() or "")
    status = rich_status(failure)
    assert error_info(status).reason == "INTERNAL_ERROR"
    assert SECRET_DETAIL not in str(status)


@pytest.mark.server_fault
async def test_a_response_of_the_wrong_type_is_internal(anon: Served) -> None:
    failure = await call_failure(anon.stub.GetTask(pb.GetTaskRequest(id="wrong-type"), metadata=V1))
    assert failure.code() == grpc.StatusCode.INTERNAL


async def test_an_unknown_method_is_unimplemented(anon: Served) -> None:
    raw = _raw(anon.channel, "NoSuchRpc")
    failure = await call_failure(raw(b""))
    assert failure.code() == grpc.StatusCode.UNIMPLEMENTED


# --- invalid requests ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("rpc", "request_msg", "field"),
    [
        ("SendMessage", pb.SendMessageRequest(), "message"),
        (
            "SendMessage",
            pb.SendMessageRequest(message=pb.Message(message_id="m", role=pb.ROLE_USER)),
            "message.parts",
        ),
        (
            "SendMessage",
            pb.SendMessageRequest(
                message=pb.Message(message_id="m", role=pb.ROLE_USER, parts=[pb.Part()])
            ),
            "message.parts[0]",
        ),
        ("GetTask", pb.GetTaskRequest(), "id"),
        ("CreateTaskPushNotificationConfig", pb.TaskPushNotificationConfig(task_id="t"), "url"),
        ("SendStreamingMessage", pb.SendMessageRequest(), "message"),
    ],
)
async def test_missing_required_fields_are_invalid_argument_naming_the_field(
    anon: Served, rpc: str, request_msg: message.Message, field: str
) -> None:
    call = getattr(anon.stub, rpc)(request_msg, metadata=V1)
    failure = await call_failure(call if rpc != "SendStreamingMessage" else _collect(call))
    assert failure.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert field in (failure.details() or "")
    status = rich_status(failure)
    assert error_info(status).reason == "INVALID_PARAMS"
    assert field in field_violations(status)
    assert anon.service.contexts == []


@pytest.mark.parametrize("rpc", ["GetTask", "SendStreamingMessage"])
async def test_garbage_bytes_are_invalid_argument(anon: Served, rpc: str) -> None:
    if rpc == "GetTask":
        failure = await call_failure(_raw(anon.channel, rpc)(b"\xff\xff\xff", metadata=V1))
    else:
        failure = await call_failure(
            _collect(_raw_stream(anon.channel, rpc)(b"\x0a\x05ab", metadata=V1))
        )
    assert failure.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "not a valid protobuf message" in (failure.details() or "")
    assert error_info(rich_status(failure)).reason == "INVALID_REQUEST"


async def test_over_deep_message_is_invalid_argument(anon: Served) -> None:
    data: Any = {"leaf": True}
    for _ in range(40):
        data = {"nested": data}
    request = _send()
    json_format.ParseDict({"data": data}, request.message.parts[0])
    raw = _raw(anon.channel, "SendMessage")
    failure = await call_failure(raw(request.SerializeToString(), metadata=V1))
    assert failure.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "too deep" in (failure.details() or "")
    assert error_info(rich_status(failure)).reason == "INVALID_PARAMS"


async def test_messages_over_the_body_limit_are_refused() -> None:
    async for served in _serve(AllowAnonymous(), max_body_bytes=4096):
        small = served.stub.SendMessage(_send(text="x" * 1000), metadata=V1)
        async with asyncio.timeout(BOUND):
            await small
        # Just over the cap: the binding's size error, with its status details.
        failure = await call_failure(served.stub.SendMessage(_send(text="x" * 8000), metadata=V1))
        assert failure.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "larger than 4096 bytes" in str(failure.details())
        assert error_info(rich_status(failure)).reason == "INVALID_REQUEST"
        # Far over (past grpc's own limit, the cap plus its slack): grpc's refusal.
        huge = _send(text="x" * (2 * 1024 * 1024))
        failure = await call_failure(served.stub.SendMessage(huge, metadata=V1))
        assert failure.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert served.service.contexts[-1].caller  # only the small call reached the service
        assert len(served.service.contexts) == 1


# --- streams ------------------------------------------------------------------------


async def test_streaming_sends_every_event_in_order(anon: Served) -> None:
    events = await _collect(anon.stub.SendStreamingMessage(_send(task_id="s-1"), metadata=V1))
    kinds = [e.WhichOneof("payload") for e in events]
    assert kinds == ["task"] + ["artifact_update"] * STREAM_CHUNKS + ["status_update"]
    texts = [e.artifact_update.artifact.parts[0].text for e in events[1:-1]]
    assert texts == [f"chunk {i}" for i in range(STREAM_CHUNKS)]
    assert events[-1].status_update.status.state == pb.TASK_STATE_COMPLETED
    assert anon.service.closed["s-1"].is_set()


async def test_stream_error_before_the_first_event_is_a_plain_status(anon: Served) -> None:
    call = anon.stub.SubscribeToTask(
        pb.SubscribeToTaskRequest(id="error:UnsupportedOperationError"), metadata=V1
    )
    received, error = await stream_until_error(call, BOUND)
    assert received == []
    assert error.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert error_info(rich_status(error)).reason == "UNSUPPORTED_OPERATION"


async def test_stream_error_after_events_ends_the_stream_with_it(anon: Served) -> None:
    call = anon.stub.SubscribeToTask(
        pb.SubscribeToTaskRequest(id="midstream:TaskNotFoundError"), metadata=V1
    )
    received, error = await stream_until_error(call, BOUND)
    assert [e.WhichOneof("payload") for e in received] == ["task"]
    assert error.code() == grpc.StatusCode.NOT_FOUND
    assert error_info(rich_status(error)).reason == "TASK_NOT_FOUND"


async def test_client_cancel_closes_the_service_stream(anon: Served) -> None:
    call = anon.stub.SubscribeToTask(pb.SubscribeToTaskRequest(id="hang"), metadata=V1)
    async with asyncio.timeout(BOUND):
        first = await call.read()
        assert isinstance(first, pb.StreamResponse)
        assert first.WhichOneof("payload") == "task"
        assert not anon.service.closed["hang"].is_set()
        call.cancel()
        await anon.service.closed["hang"].wait()
    # The server keeps serving.
    async with asyncio.timeout(BOUND):
        await anon.stub.GetTask(pb.GetTaskRequest(id="t-1"), metadata=V1)


async def test_server_stop_closes_open_streams() -> None:
    async for served in _serve(AllowAnonymous()):
        call = served.stub.SubscribeToTask(pb.SubscribeToTaskRequest(id="hang"), metadata=V1)
        async with asyncio.timeout(BOUND):
            await call.read()
            await served.server.stop(0.1)
            await served.service.closed["hang"].wait()
        failure = await call_failure(call.read())
        assert failure.code() in {grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED}


# --- health and reflection ----------------------------------------------------------


@pytest.mark.parametrize("name", ["", "lf.a2a.v1.A2AService"])
async def test_health_is_serving(anon: Served, name: str) -> None:
    stub = health_pb2_grpc.HealthStub(anon.channel)
    async with asyncio.timeout(BOUND):
        reply = await stub.Check(health_pb2.HealthCheckRequest(service=name))
    assert reply.status == health_pb2.HealthCheckResponse.SERVING


async def test_reflection_lists_the_services_and_resolves_the_schema(anon: Served) -> None:
    stub = reflection_pb2_grpc.ServerReflectionStub(anon.channel)
    requests = [
        reflection_pb2.ServerReflectionRequest(list_services=""),
        reflection_pb2.ServerReflectionRequest(file_containing_symbol="lf.a2a.v1.A2AService"),
    ]
    async with asyncio.timeout(BOUND):
        replies = [r async for r in stub.ServerReflectionInfo(iter(requests))]
    names = {s.name for s in replies[0].list_services_response.service}
    assert names == {
        "lf.a2a.v1.A2AService",
        "a2a.v1.A2AService",
        "grpc.health.v1.Health",
        "grpc.reflection.v1alpha.ServerReflection",
    }
    files = replies[1].file_descriptor_response.file_descriptor_proto
    assert files, replies[1]


# --- binding the port ---------------------------------------------------------------


async def test_a_taken_port_is_an_error_not_a_shared_port(anon: Served) -> None:
    port = anon.port  # the fixture's server is still serving on it
    with pytest.raises(OSError) as refused:  # checked with a plain socket before grpc binds
        await build_grpc_server(
            EchoService(stateless=True),
            ServerConfig(host="127.0.0.1", grpc_port=port),
            AllowAnonymous(),
        )
    assert refused.value.errno == errno.EADDRINUSE


def test_grpc_addresses_bracket_ipv6_hosts() -> None:
    assert grpc_address("127.0.0.1", 8081) == "127.0.0.1:8081"
    assert grpc_address("::1", 8081) == "[::1]:8081"
    assert grpc_address("[::]", 0) == "[::]:0"
