"""The A2A 0.3 gRPC binding (``a2a.v1.A2AService``) on a real grpc.aio server, called with
the generated 0.3 stubs: every rpc, the translations both ways, errors, version, auth."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf import empty_pb2, json_format, message
from grpc_health.v1 import health_pb2, health_pb2_grpc

import lf.a2a.v0_3.a2a_pb2 as pb03
import lf.a2a.v0_3.a2a_pb2_grpc as a2a03_grpc
import lf.a2a.v1.a2a_pb2 as pb
import lf.a2a.v1.a2a_pb2_grpc as a2a_grpc
from a2a_gateway.local import signing
from a2a_gateway.protocol.context import CallContext
from a2a_gateway.server.auth import AllowAnonymous, Authenticator, WorkspaceCallers
from a2a_gateway.server.grpc03 import (
    LEGACY_RPCS,
    LEGACY_SERVICE_DESCRIPTOR,
    legacy_card,
    legacy_rpc_handler,
)
from tests.support.echo import (
    ECHO_EXTENSION,
    SECRET_DETAIL,
    STREAM_CHUNKS,
    EchoService,
    FloodService,
)
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
KEY_SIGNED = "k-signer-0123456789"
SECRET = "signing-secret-0123456789abcdef"
V03 = (("a2a-version", "0.3"),)  # what the SDK's 0.3 gRPC client sends


class RecordingService(EchoService):
    """The echo service, also keeping the 1.0 requests the binding made, and with a card
    that lists a 0.3 interface (or none, when ``legacy_interface`` is False)."""

    def __init__(self) -> None:
        super().__init__(stateless=True)
        self.requests: list[message.Message] = []
        self.legacy_interface = True

    async def send_message(
        self, request: pb.SendMessageRequest, context: CallContext
    ) -> pb.SendMessageResponse:
        self.requests.append(request)
        return await super().send_message(request, context)

    async def get_task(self, request: pb.GetTaskRequest, context: CallContext) -> pb.Task:
        self.requests.append(request)
        return await super().get_task(request, context)

    async def create_task_push_notification_config(
        self, request: pb.TaskPushNotificationConfig, context: CallContext
    ) -> pb.TaskPushNotificationConfig:
        self.requests.append(request)
        return await super().create_task_push_notification_config(request, context)

    async def get_task_push_notification_config(
        self, request: pb.GetTaskPushNotificationConfigRequest, context: CallContext
    ) -> pb.TaskPushNotificationConfig:
        self.requests.append(request)
        return await super().get_task_push_notification_config(request, context)

    async def delete_task_push_notification_config(
        self, request: pb.DeleteTaskPushNotificationConfigRequest, context: CallContext
    ) -> empty_pb2.Empty:
        self.requests.append(request)
        return await super().delete_task_push_notification_config(request, context)

    async def get_extended_agent_card(
        self, request: pb.GetExtendedAgentCardRequest, context: CallContext
    ) -> pb.AgentCard:
        card = await super().get_extended_agent_card(request, context)
        card.supported_interfaces.add(url="127.0.0.1:1", protocol_binding="GRPC")
        card.supported_interfaces[0].protocol_version = "1.0"
        if self.legacy_interface:
            card.supported_interfaces.add(
                url="127.0.0.1:1", protocol_binding="GRPC", protocol_version="0.3"
            )
        card.capabilities.streaming = True
        card.capabilities.extended_agent_card = True
        scheme = card.security_schemes["apiKey"].api_key_security_scheme
        scheme.location, scheme.name = "header", "X-API-Key"
        card.security_requirements.add().schemes["apiKey"].SetInParent()
        card.skills.add(id="chat", name="Chat", description="Talk.", tags=["chat"])
        return card


@dataclass
class Served:
    service: RecordingService
    channel: grpc.aio.Channel
    stub: a2a03_grpc.A2AServiceStub


#: The ``workspace`` of this module's tests: alice, and a caller that signs.
pytestmark = pytest.mark.callers(
    {"name": "alice", "key": KEY},
    {"name": "signer", "key": KEY_SIGNED, "signing_secret": SECRET},
)


async def _serve(authenticator: Authenticator) -> AsyncIterator[Served]:
    service = RecordingService()
    async with grpc_serving(service, authenticator) as served:
        yield Served(service, served.channel, a2a03_grpc.A2AServiceStub(served.channel))


@pytest.fixture
async def anon() -> AsyncIterator[Served]:
    async for served in _serve(AllowAnonymous()):
        yield served


@pytest.fixture
async def keyed(workspace: Path) -> AsyncIterator[Served]:
    async for served in _serve(WorkspaceCallers([workspace])):
        yield served


def _send(task_id: str = "", text: str = "hello", **fields: Any) -> pb03.SendMessageRequest:
    msg = pb03.Message(message_id="m-1", role=pb03.ROLE_USER, content=[pb03.Part(text=text)])
    msg.task_id = task_id
    return pb03.SendMessageRequest(request=msg, **fields)


async def _collect(call: Any) -> list[pb03.StreamResponse]:
    async with asyncio.timeout(BOUND):
        return [event async for event in call]


def _identity(data: bytes) -> bytes:
    return data


# --- every rpc ----------------------------------------------------------------------------

MINIMAL_REQUESTS: dict[str, message.Message] = {
    "SendMessage": _send(),
    "SendStreamingMessage": _send(),
    "GetTask": pb03.GetTaskRequest(name="tasks/t-1"),
    "CancelTask": pb03.CancelTaskRequest(name="tasks/t-1"),
    "TaskSubscription": pb03.TaskSubscriptionRequest(name="tasks/t-1"),
    "CreateTaskPushNotificationConfig": pb03.CreateTaskPushNotificationConfigRequest(
        parent="tasks/t-1",
        config_id="c-1",
        config=pb03.TaskPushNotificationConfig(
            push_notification_config=pb03.PushNotificationConfig(url="https://example.com/h")
        ),
    ),
    "GetTaskPushNotificationConfig": pb03.GetTaskPushNotificationConfigRequest(
        name="tasks/t-1/pushNotificationConfigs/c-1"
    ),
    "ListTaskPushNotificationConfig": pb03.ListTaskPushNotificationConfigRequest(
        parent="tasks/t-1"
    ),
    "DeleteTaskPushNotificationConfig": pb03.DeleteTaskPushNotificationConfigRequest(
        name="tasks/t-1/pushNotificationConfigs/c-1"
    ),
    "GetAgentCard": pb03.GetAgentCardRequest(),
}


def test_the_table_covers_the_0_3_service() -> None:
    assert sorted(r.wire for r in LEGACY_RPCS) == sorted(
        m.name for m in LEGACY_SERVICE_DESCRIPTOR.methods
    )


@pytest.mark.parametrize("rpc", [m.name for m in LEGACY_SERVICE_DESCRIPTOR.methods])
async def test_every_0_3_rpc_is_served(anon: Served, rpc: str) -> None:
    method = LEGACY_SERVICE_DESCRIPTOR.methods_by_name[rpc]
    call = getattr(anon.stub, rpc)(MINIMAL_REQUESTS[rpc], metadata=V03)
    if method.server_streaming:
        events = await _collect(call)
        assert events[0].WhichOneof("payload") == "task"
    else:
        async with asyncio.timeout(BOUND):
            response: message.Message = await call
        assert response.DESCRIPTOR.full_name == method.output_type.full_name
    assert anon.service.contexts[-1].version == "0.3"


async def test_1_0_and_0_3_share_the_port(anon: Served) -> None:
    stub = a2a_grpc.A2AServiceStub(anon.channel)
    async with asyncio.timeout(BOUND):
        task = await stub.GetTask(pb.GetTaskRequest(id="t-1"), metadata=(("a2a-version", "1.0"),))
        legacy = await anon.stub.GetTask(pb03.GetTaskRequest(name="tasks/t-1"))
    assert task.id == legacy.id == "t-1"
    assert [c.version for c in anon.service.contexts] == ["1.0", "0.3"]


# --- translations -----------------------------------------------------------------------


async def test_send_message_translates_parts_config_and_result(anon: Served) -> None:
    msg = pb03.Message(
        message_id="m-7",
        context_id="ctx-9",
        role=pb03.ROLE_USER,
        content=[
            pb03.Part(text="ping"),
            pb03.Part(
                file=pb03.FilePart(file_with_uri="https://example.com/a.png", mime_type="image/png")
            ),
            pb03.Part(file=pb03.FilePart(file_with_bytes=b"\x00\x01", name="b.bin")),
            pb03.Part(data=pb03.DataPart()),
        ],
    )
    msg.content[3].data.data.update({"k": 1})
    config = pb03.SendMessageConfiguration(
        blocking=True,
        history_length=5,
        accepted_output_modes=["text/plain"],
        push_notification=pb03.PushNotificationConfig(
            url="https://example.com/hook",
            token="tok-1",
            authentication=pb03.AuthenticationInfo(schemes=["Bearer"], credentials="c"),
        ),
    )
    async with asyncio.timeout(BOUND):
        response = await anon.stub.SendMessage(
            pb03.SendMessageRequest(request=msg, configuration=config), metadata=V03
        )
    (request,) = anon.service.requests
    assert isinstance(request, pb.SendMessageRequest)
    sent = request.message
    assert (sent.message_id, sent.context_id, sent.role) == ("m-7", "ctx-9", pb.ROLE_USER)
    assert [p.WhichOneof("content") for p in sent.parts] == ["text", "url", "raw", "data"]
    assert sent.parts[1].media_type == "image/png"
    assert (sent.parts[2].raw, sent.parts[2].filename) == (b"\x00\x01", "b.bin")
    assert json_format.MessageToDict(sent.parts[3].data) == {"k": 1.0}
    sent_config = request.configuration
    assert sent_config.return_immediately is False
    assert sent_config.history_length == 5
    assert list(sent_config.accepted_output_modes) == ["text/plain"]
    push = sent_config.task_push_notification_config
    assert (push.url, push.token, push.authentication.scheme) == (
        "https://example.com/hook",
        "tok-1",
        "Bearer",
    )
    assert response.WhichOneof("payload") == "task"
    assert response.task.id == "task-m-7"
    assert response.task.status.state == pb03.TASK_STATE_COMPLETED
    assert response.task.artifacts[0].parts[0].text == "ping"


async def test_no_configuration_or_an_empty_one_is_non_blocking(anon: Served) -> None:
    # The 0.3 proto's blocking is a plain bool, read as the SDK's 0.3 gRPC server does.
    async with asyncio.timeout(BOUND):
        await anon.stub.SendMessage(
            _send(configuration=pb03.SendMessageConfiguration()), metadata=V03
        )
        await anon.stub.SendMessage(_send(), metadata=V03)
    first, second = anon.service.requests
    assert isinstance(first, pb.SendMessageRequest) and isinstance(second, pb.SendMessageRequest)
    assert first.configuration.return_immediately is True
    assert second.configuration.return_immediately is True


async def test_stream_events_are_0_3_stream_responses(anon: Served) -> None:
    events = await _collect(anon.stub.SendStreamingMessage(_send(task_id="s-1"), metadata=V03))
    kinds = [e.WhichOneof("payload") for e in events]
    assert kinds == ["task", *["artifact_update"] * STREAM_CHUNKS, "status_update"]
    assert events[0].task.status.state == pb03.TASK_STATE_WORKING
    chunks = [e.artifact_update for e in events[1:-1]]
    assert [c.append for c in chunks] == [False, True, True]
    assert [c.last_chunk for c in chunks] == [False, False, True]
    assert chunks[0].artifact.parts[0].text == "chunk 0"
    final = events[-1].status_update
    assert (final.task_id, final.final) == ("s-1", True)
    assert final.status.state == pb03.TASK_STATE_COMPLETED
    assert anon.service.closed["s-1"].is_set()


async def test_task_subscription_by_resource_name(anon: Served) -> None:
    call = anon.stub.TaskSubscription(pb03.TaskSubscriptionRequest(name="tasks/sub-1"))
    events = await _collect(call)
    assert events[0].task.id == "sub-1"
    assert events[-1].status_update.final is True


async def test_get_and_cancel_by_resource_name(anon: Served) -> None:
    async with asyncio.timeout(BOUND):
        task = await anon.stub.GetTask(pb03.GetTaskRequest(name="tasks/t-4", history_length=3))
        canceled = await anon.stub.CancelTask(pb03.CancelTaskRequest(name="tasks/t-5"))
    (request,) = anon.service.requests
    assert isinstance(request, pb.GetTaskRequest)
    assert (request.id, request.history_length) == ("t-4", 3)
    assert task.id == "t-4" and task.status.state == pb03.TASK_STATE_COMPLETED
    # 0.3 spells the state TASK_STATE_CANCELLED.
    assert canceled.status.state == pb03.TASK_STATE_CANCELLED


async def test_push_config_crud(anon: Served) -> None:
    create = pb03.CreateTaskPushNotificationConfigRequest(
        parent="tasks/t-1",
        config_id="cfg-2",
        config=pb03.TaskPushNotificationConfig(
            push_notification_config=pb03.PushNotificationConfig(
                url="https://example.com/hook",
                authentication=pb03.AuthenticationInfo(schemes=["Bearer"]),
            )
        ),
    )
    name = "tasks/t-1/pushNotificationConfigs/cfg-2"
    async with asyncio.timeout(BOUND):
        created = await anon.stub.CreateTaskPushNotificationConfig(create)
        got = await anon.stub.GetTaskPushNotificationConfig(
            pb03.GetTaskPushNotificationConfigRequest(name=name)
        )
        listed = await anon.stub.ListTaskPushNotificationConfig(
            pb03.ListTaskPushNotificationConfigRequest(parent="tasks/t-1")
        )
        deleted = await anon.stub.DeleteTaskPushNotificationConfig(
            pb03.DeleteTaskPushNotificationConfigRequest(name=name)
        )
    made, fetched, removed = anon.service.requests
    assert isinstance(made, pb.TaskPushNotificationConfig)
    assert (made.task_id, made.id, made.authentication.scheme) == ("t-1", "cfg-2", "Bearer")
    assert isinstance(fetched, pb.GetTaskPushNotificationConfigRequest)
    assert (fetched.task_id, fetched.id) == ("t-1", "cfg-2")
    assert isinstance(removed, pb.DeleteTaskPushNotificationConfigRequest)
    assert (removed.task_id, removed.id) == ("t-1", "cfg-2")
    assert created.name == name
    assert created.push_notification_config.url == "https://example.com/hook"
    assert list(created.push_notification_config.authentication.schemes) == ["Bearer"]
    assert got.name == name and got.push_notification_config.id == "cfg-2"
    assert list(listed.configs) == []
    assert deleted == empty_pb2.Empty()


async def test_agent_card_in_the_0_3_shape(anon: Served) -> None:
    async with asyncio.timeout(BOUND):
        card = await anon.stub.GetAgentCard(pb03.GetAgentCardRequest())
    assert (card.name, card.protocol_version) == ("echo", "0.3.0")
    assert (card.url, card.preferred_transport) == ("127.0.0.1:1", "GRPC")
    assert card.supports_authenticated_extended_card is True
    assert card.capabilities.streaming is True
    scheme = card.security_schemes["apiKey"]
    assert scheme.WhichOneof("scheme") == "api_key_security_scheme"
    assert (scheme.api_key_security_scheme.location, scheme.api_key_security_scheme.name) == (
        "header",
        "X-API-Key",
    )
    assert list(card.security[0].schemes) == ["apiKey"]
    assert [s.id for s in card.skills] == ["chat"]


def test_a_1_0_only_oauth_flow_is_dropped_from_the_0_3_card() -> None:
    card = pb.AgentCard(name="a", description="d", version="1")
    card.supported_interfaces.add(url="u", protocol_binding="GRPC", protocol_version="0.3")
    flows = card.security_schemes["o"].oauth2_security_scheme.flows
    flows.device_code.token_url = "https://example.com/token"
    legacy = legacy_card(card)
    assert legacy.security_schemes["o"].oauth2_security_scheme.flows.WhichOneof("flow") is None


async def test_a_card_without_a_0_3_interface_is_version_not_supported(anon: Served) -> None:
    anon.service.legacy_interface = False
    failure = await call_failure(anon.stub.GetAgentCard(pb03.GetAgentCardRequest()))
    assert failure.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert (failure.details() or "").startswith("VersionNotSupportedError: ")


# --- errors --------------------------------------------------------------------------------


async def test_a2a_errors_carry_the_class_name_and_the_status_trailer(anon: Served) -> None:
    failure = await call_failure(
        anon.stub.GetTask(pb03.GetTaskRequest(name="tasks/error:TaskNotFoundError"))
    )
    assert failure.code() == grpc.StatusCode.NOT_FOUND
    details = failure.details() or ""
    assert details.startswith("TaskNotFoundError: ")
    status = rich_status(failure)
    assert (status.code, status.message) == (grpc.StatusCode.NOT_FOUND.value[0], details)
    assert error_info(status).reason == "TASK_NOT_FOUND"


async def test_errors_before_and_during_a_stream(anon: Served) -> None:
    before = await call_failure(
        anon.stub.SendStreamingMessage(_send(task_id="error:TaskNotCancelableError"))
    )
    assert before.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert (before.details() or "").startswith("TaskNotCancelableError: ")
    call = anon.stub.TaskSubscription(
        pb03.TaskSubscriptionRequest(name="tasks/midstream:UnsupportedOperationError")
    )
    events, error = await stream_until_error(call, BOUND)
    assert [e.WhichOneof("payload") for e in events] == ["task"]
    assert (error.details() or "").startswith("UnsupportedOperationError: ")


@pytest.mark.server_fault
async def test_an_unexpected_failure_is_internal_without_details(anon: Served) -> None:
    failure = await call_failure(anon.stub.GetTask(pb03.GetTaskRequest(name="tasks/crash")))
    assert failure.code() == grpc.StatusCode.INTERNAL
    assert (failure.details() or "").startswith("InternalError: ")
    assert SECRET_DETAIL not in (failure.details() or "")


@pytest.mark.parametrize(
    ("rpc", "request_", "field"),
    [
        ("GetTask", pb03.GetTaskRequest(name="t-1"), "name"),
        ("GetTask", pb03.GetTaskRequest(name="tasks/a/b"), "name"),
        ("CancelTask", pb03.CancelTaskRequest(), "name"),
        ("ListTaskPushNotificationConfig", pb03.ListTaskPushNotificationConfigRequest(), "parent"),
        (
            "GetTaskPushNotificationConfig",
            pb03.GetTaskPushNotificationConfigRequest(name="tasks/t-1"),
            "name",
        ),
        (
            "CreateTaskPushNotificationConfig",
            pb03.CreateTaskPushNotificationConfigRequest(parent="tasks/t-1"),
            "params.pushNotificationConfig",
        ),
        ("SendMessage", pb03.SendMessageRequest(), "params.message"),
        ("SendMessage", pb03.SendMessageRequest(request=pb03.Message(message_id="m")), None),
    ],
)
async def test_bad_requests_are_invalid_params_naming_the_field(
    anon: Served, rpc: str, request_: message.Message, field: str | None
) -> None:
    failure = await call_failure(getattr(anon.stub, rpc)(request_))
    assert failure.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert (failure.details() or "").startswith("InvalidParamsError: ")
    violations = field_violations(rich_status(failure))
    assert violations
    if field is not None:
        assert violations[0] == field
    assert anon.service.contexts == []  # refused before the service


async def test_bytes_that_are_not_a_message_are_invalid_request(anon: Served) -> None:
    raw = anon.channel.unary_unary("/a2a.v1.A2AService/GetTask", _identity, _identity)
    failure = await call_failure(raw(b"\xff\xff\xff"))
    assert failure.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert (failure.details() or "").startswith("InvalidRequestError: ")


# --- version, extensions, auth -----------------------------------------------------------


async def test_a_1_0_version_on_the_0_3_service_is_refused(anon: Served) -> None:
    call = anon.stub.GetTask(
        pb03.GetTaskRequest(name="tasks/t-1"), metadata=(("a2a-version", "1.0"),)
    )
    failure = await call_failure(call)
    assert failure.code() == grpc.StatusCode.FAILED_PRECONDITION
    # the one version rule of every binding (versioning.negotiate_legacy_version),
    # answered as the 1.0 service answers it (0.3 has nothing for it)
    assert failure.details() == (
        "A2A-Version '1.0' does not match the 0.3 operation "
        "'a2a.v1.A2AService/GetTask': send no A2A-Version, or 0.3 (served: 1.0, 0.3)"
    )
    info = error_info(rich_status(failure))
    assert info.reason == "VERSION_NOT_SUPPORTED"
    assert info.metadata["supportedVersions"] == "1.0, 0.3"
    assert anon.service.contexts == []
    async with asyncio.timeout(BOUND):  # none, and 0.3.x, are 0.3
        await anon.stub.GetTask(pb03.GetTaskRequest(name="tasks/t-1"))
        await anon.stub.GetTask(
            pb03.GetTaskRequest(name="tasks/t-1"), metadata=(("a2a-version", "0.3.0"),)
        )
    assert [c.version for c in anon.service.contexts] == ["0.3", "0.3"]


async def test_both_extension_keys_reach_the_service(anon: Served) -> None:
    metadata = (*V03, ("x-a2a-extensions", ECHO_EXTENSION), ("a2a-extensions", "urn:new"))
    call = anon.stub.SendMessage(_send(), metadata=metadata)
    async with asyncio.timeout(BOUND):
        await call
        initial = await call.initial_metadata()
    assert anon.service.contexts[-1].extensions == {ECHO_EXTENSION, "urn:new"}
    assert ("a2a-extensions", ECHO_EXTENSION) in list(initial or ())


async def test_a_key_is_required_and_checked_before_decoding(keyed: Served) -> None:
    missing = await call_failure(keyed.stub.GetTask(pb03.GetTaskRequest(name="tasks/t-1")))
    assert missing.code() == grpc.StatusCode.UNAUTHENTICATED
    assert (missing.details() or "").startswith("UnauthenticatedError: ")
    raw = keyed.channel.unary_unary("/a2a.v1.A2AService/GetTask", _identity, _identity)
    garbage = await call_failure(raw(b"\xff\xff\xff"))
    assert garbage.code() == grpc.StatusCode.UNAUTHENTICATED
    wrong = await call_failure(
        keyed.stub.GetTask(pb03.GetTaskRequest(name="tasks/t-1"), metadata=(("x-api-key", "no"),))
    )
    assert wrong.code() == grpc.StatusCode.UNAUTHENTICATED
    assert "no" not in (wrong.details() or "").removeprefix("UnauthenticatedError: ").split()
    async with asyncio.timeout(BOUND):
        task = await keyed.stub.GetTask(
            pb03.GetTaskRequest(name="tasks/t-1"), metadata=(("x-api-key", KEY),)
        )
    assert task.id == "t-1"
    assert keyed.service.contexts[-1].caller.name == "alice"


async def test_a_signing_caller_signs_the_0_3_bytes(keyed: Served) -> None:
    raw = keyed.channel.unary_unary("/a2a.v1.A2AService/GetTask", _identity, pb03.Task.FromString)
    body = pb03.GetTaskRequest(name="tasks/t-1").SerializeToString()
    base = (("x-api-key", KEY_SIGNED),)
    header = signing.signature_header(SECRET, body)
    async with asyncio.timeout(BOUND):
        task = await raw(body, metadata=(*base, ("x-a2a-signature", header)))
    assert task.id == "t-1"
    other = signing.signature_header(
        SECRET, pb03.GetTaskRequest(name="tasks/x").SerializeToString()
    )
    for metadata in (base, (*base, ("x-a2a-signature", other))):
        failure = await call_failure(raw(body, metadata=metadata))
        assert failure.code() == grpc.StatusCode.UNAUTHENTICATED


async def test_health_reports_the_0_3_service(anon: Served) -> None:
    stub = health_pb2_grpc.HealthStub(anon.channel)
    async with asyncio.timeout(BOUND):
        reply = await stub.Check(health_pb2.HealthCheckRequest(service="a2a.v1.A2AService"))
    assert reply.status == health_pb2.HealthCheckResponse.SERVING


# --- stream write bound (the 1.0 machinery, on a 0.3 stream) --------------------------------


async def test_a_0_3_stream_whose_client_stops_reading_is_ended() -> None:
    service = FloodService()
    server = grpc.aio.server()
    server.add_generic_rpc_handlers(
        (legacy_rpc_handler(service, AllowAnonymous(), write_timeout_s=0.5),)
    )
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    small_window = [("grpc.http2.bdp_probe", 0), ("grpc.http2.lookahead_bytes", 1024)]
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}", options=small_window) as channel:
            call = a2a03_grpc.A2AServiceStub(channel).SendStreamingMessage(_send())
            try:
                async with asyncio.timeout(BOUND):
                    await service.flood_closed.wait()  # the client read nothing
                failure = await call_failure(call)
                assert failure.code() == grpc.StatusCode.UNAVAILABLE
                assert (failure.details() or "").startswith("UnavailableError: ")
                assert "read nothing" in (failure.details() or "")
            finally:
                call.cancel()
    finally:
        await server.stop(None)
