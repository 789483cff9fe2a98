"""What the client puts on each wire (service parameters, tenant, credentials) and how it
reads remote errors back into the typed A2A errors, with keys scrubbed throughout."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import grpc
import orjson
import pytest
from aiohttp import web

import lf.a2a.v1.a2a_pb2 as pb
import lf.a2a.v1.a2a_pb2_grpc as a2a_pb2_grpc
from a2a_gateway.client import AuthRejected, Credentials, Timeout
from a2a_gateway.protocol import errors
from a2a_gateway.protocol.context import CallContext
from a2a_gateway.server import jsonrpc, rest

from .client_support import HOST, grpc_serving, remote, serving, silent_server, text_request

BOUND_S = 10.0
KEY = "sk-live-0123456789abcdef"
PROTOCOL_ERRORS = errors.A2A_PROTOCOL_ERRORS
TASK = {"id": "t-1", "contextId": "c-1", "status": {"state": "TASK_STATE_COMPLETED"}}


def sample_error(cls: type[errors.A2AError]) -> errors.A2AError:
    return cls(
        f"{cls.__name__} happened",
        metadata={"taskId": "t-1"},
        violations=[errors.FieldViolation("message.parts", "is required")],
    )


def assert_same_error(got: errors.A2AError, sent: errors.A2AError) -> None:
    assert type(got) is type(sent)
    assert got.message == sent.message
    assert got.metadata == sent.metadata
    assert got.violations == sent.violations


# --- a scripted HTTP peer ---------------------------------------------------------------


@dataclass
class Seen:
    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str]
    body: Any


@dataclass
class HttpPeer:
    """Records every request; answers with ``reply(seen)`` -> web.Response."""

    seen: list[Seen] = field(default_factory=list)
    reply: Any = None

    async def handle(self, request: web.Request) -> web.StreamResponse:
        raw = await request.read()
        seen = Seen(
            request.method,
            request.raw_path.split("?", 1)[0],
            dict(request.query),
            {k.lower(): v for k, v in request.headers.items()},
            orjson.loads(raw) if raw else None,
        )
        self.seen.append(seen)
        response: web.StreamResponse = self.reply(seen)
        return response

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self.handle)
        return app


def rpc_result(result: Any, extensions: str = "") -> web.Response:
    headers = {"A2A-Extensions": extensions} if extensions else {}
    return web.json_response({"jsonrpc": "2.0", "id": "1", "result": result}, headers=headers)


def rpc_error(error: errors.A2AError) -> web.Response:
    """The error as our own JSON-RPC binding writes it."""
    return web.json_response(jsonrpc.error_payload("1", error))


def rest_error(error: errors.A2AError) -> web.Response:
    """The error as our own HTTP+JSON binding writes it."""
    return web.json_response(rest.error_body(error), status=error.spec.http_status)


# --- service parameters and tenant ------------------------------------------------------


async def test_jsonrpc_request_carries_version_tenant_extensions_and_key() -> None:
    peer = HttpPeer(reply=lambda seen: rpc_result(TASK, extensions="urn:ext:a"))
    async with (
        serving(peer.app()) as base,
        asyncio.timeout(BOUND_S),
        remote(
            "JSONRPC", base + "/rpc", key=KEY, tenant="acme", extensions=("urn:ext:a",)
        ) as service,
    ):
        context = CallContext(extensions=frozenset({"urn:ext:b"}))
        original = pb.GetTaskRequest(id="t-1", tenant="caller-tenant", history_length=2)
        task = await service.get_task(original, context)
    assert task.id == "t-1"
    assert original.tenant == "caller-tenant"  # the caller's message is not modified
    seen = peer.seen[0]
    assert seen.headers["a2a-version"] == "1.0"
    assert seen.headers["a2a-extensions"] == "urn:ext:a, urn:ext:b"
    assert seen.headers["x-api-key"] == KEY
    assert seen.body["method"] == "GetTask"
    assert seen.body["params"] == {"id": "t-1", "tenant": "acme", "historyLength": 2}
    assert context.activated_extensions == {"urn:ext:a"}


async def test_jsonrpc_without_interface_tenant_omits_it() -> None:
    peer = HttpPeer(reply=lambda seen: rpc_result(TASK))
    async with (
        serving(peer.app()) as base,
        asyncio.timeout(BOUND_S),
        remote("JSONRPC", base + "/rpc") as service,
    ):
        await service.get_task(pb.GetTaskRequest(id="t-1", tenant="caller-tenant"))
    assert peer.seen[0].body["params"] == {"id": "t-1"}
    assert "x-api-key" not in peer.seen[0].headers
    assert "a2a-extensions" not in peer.seen[0].headers


async def test_rest_paths_come_from_the_schema_with_tenant_prefix() -> None:
    def reply(seen: Seen) -> web.Response:
        if seen.path.endswith("message:send"):
            return web.json_response({"task": TASK})
        if seen.method == "DELETE":
            return web.json_response({})
        return web.json_response(TASK)

    peer = HttpPeer(reply=reply)
    async with (
        serving(peer.app()) as base,
        asyncio.timeout(BOUND_S),
        remote("HTTP+JSON", base + "/api/", key=KEY, tenant="acme") as service,
    ):
        await service.get_task(pb.GetTaskRequest(id="a/b", history_length=2))
        await service.send_message(text_request("hi"))
        await service.cancel_task(pb.CancelTaskRequest(id="t-1"))
        await service.delete_task_push_notification_config(
            pb.DeleteTaskPushNotificationConfigRequest(task_id="t-1", id="h-1")
        )
    get, send, cancel, delete = peer.seen
    assert (get.method, get.path, get.query) == (
        "GET",
        "/api/acme/tasks/a%2Fb",
        {"historyLength": "2"},
    )
    assert get.body is None
    assert (send.method, send.path) == ("POST", "/api/acme/message:send")
    assert send.headers["content-type"] == "application/a2a+json"
    assert "tenant" not in send.body and send.body["message"]["parts"] == [{"text": "hi"}]
    assert (cancel.method, cancel.path) == ("POST", "/api/acme/tasks/t-1:cancel")
    assert (delete.method, delete.path) == (
        "DELETE",
        "/api/acme/tasks/t-1/pushNotificationConfigs/h-1",
    )
    for seen in peer.seen:
        assert seen.headers["a2a-version"] == "1.0"
        assert seen.headers["x-api-key"] == KEY


async def test_rest_without_tenant_uses_primary_routes() -> None:
    peer = HttpPeer(reply=lambda seen: web.json_response({"tasks": [], "nextPageToken": ""}))
    async with (
        serving(peer.app()) as base,
        asyncio.timeout(BOUND_S),
        remote("HTTP+JSON", base) as service,
    ):
        listed = await service.list_tasks(
            pb.ListTasksRequest(status=pb.TASK_STATE_WORKING, page_size=5, include_artifacts=True)
        )
    assert listed.next_page_token == ""
    seen = peer.seen[0]
    assert (seen.method, seen.path) == ("GET", "/tasks")
    assert seen.query == {
        "status": "TASK_STATE_WORKING",
        "pageSize": "5",
        "includeArtifacts": "true",
    }


async def test_bearer_credentials_are_sent_as_authorization() -> None:
    peer = HttpPeer(reply=lambda seen: rpc_result(TASK))
    bearer = Credentials("Authorization", f"Bearer {KEY}")
    async with (
        serving(peer.app()) as base,
        asyncio.timeout(BOUND_S),
        remote("JSONRPC", base, key=KEY, credentials=bearer) as service,
    ):
        await service.get_task(pb.GetTaskRequest(id="t-1"))
    assert peer.seen[0].headers["authorization"] == f"Bearer {KEY}"
    assert "x-api-key" not in peer.seen[0].headers


async def test_call_context_deadline_shortens_the_bound() -> None:
    async with (
        silent_server() as port,
        asyncio.timeout(BOUND_S),
        remote("JSONRPC", f"http://{HOST}:{port}/", timeout=30) as service,
    ):
        context = CallContext(deadline=asyncio.get_running_loop().time() + 0.3)
        with pytest.raises(Timeout, match=r"within 0\.\d+ s"):
            await service.get_task(pb.GetTaskRequest(id="t-1"), context)


async def test_invalid_response_is_invalid_agent_response() -> None:
    peer = HttpPeer(reply=lambda seen: rpc_result({"id": 5, "status": "weird"}))
    async with (
        serving(peer.app()) as base,
        asyncio.timeout(BOUND_S),
        remote("JSONRPC", base) as service,
    ):
        with pytest.raises(errors.InvalidAgentResponseError, match="invalid Task"):
            await service.get_task(pb.GetTaskRequest(id="t-1"))


async def test_unknown_response_fields_are_ignored() -> None:
    task = dict(TASK, futureField={"x": 1})
    peer = HttpPeer(reply=lambda seen: rpc_result(task))
    async with (
        serving(peer.app()) as base,
        asyncio.timeout(BOUND_S),
        remote("JSONRPC", base) as service,
    ):
        got = await service.get_task(pb.GetTaskRequest(id="t-1"))
    assert got.id == "t-1"


async def test_missing_path_field_names_the_field() -> None:
    async with remote("HTTP+JSON", f"http://{HOST}:9") as service:
        with pytest.raises(errors.InvalidParamsError, match="id is required"):
            await service.get_task(pb.GetTaskRequest())


# --- remote errors back to typed errors -------------------------------------------------


@pytest.mark.parametrize("cls", PROTOCOL_ERRORS, ids=lambda c: c.__name__)
async def test_jsonrpc_errors_map_back(cls: type[errors.A2AError]) -> None:
    sent = sample_error(cls)
    peer = HttpPeer(reply=lambda seen: rpc_error(sent))
    async with (
        serving(peer.app()) as base,
        asyncio.timeout(BOUND_S),
        remote("JSONRPC", base) as service,
    ):
        with pytest.raises(cls) as caught:
            await service.get_task(pb.GetTaskRequest(id="t-1"))
    assert_same_error(caught.value, sent)


@pytest.mark.parametrize("cls", PROTOCOL_ERRORS, ids=lambda c: c.__name__)
async def test_rest_errors_map_back(cls: type[errors.A2AError]) -> None:
    sent = sample_error(cls)
    peer = HttpPeer(reply=lambda seen: rest_error(sent))
    async with (
        serving(peer.app()) as base,
        asyncio.timeout(BOUND_S),
        remote("HTTP+JSON", base) as service,
    ):
        with pytest.raises(cls) as caught:
            await service.get_task(pb.GetTaskRequest(id="t-1"))
        with pytest.raises(cls):
            await anext(service.subscribe_to_task(pb.SubscribeToTaskRequest(id="t-1")))
    assert_same_error(caught.value, sent)


@pytest.mark.parametrize(
    ("code", "expected"),
    [
        (-32001, errors.TaskNotFoundError),
        (-32004, errors.UnsupportedOperationError),
        (-32009, errors.VersionNotSupportedError),
        (-32602, errors.InvalidParamsError),
        (-32601, errors.MethodNotFoundError),
        (-32603, errors.InternalError),
    ],
)
async def test_jsonrpc_code_alone_picks_the_class(
    code: int, expected: type[errors.A2AError]
) -> None:
    body = {"jsonrpc": "2.0", "id": "1", "error": {"code": code, "message": "m", "data": {"x": 1}}}
    peer = HttpPeer(reply=lambda seen: web.json_response(body))
    async with (
        serving(peer.app()) as base,
        asyncio.timeout(BOUND_S),
        remote("JSONRPC", base) as service,
    ):
        with pytest.raises(expected):
            await service.get_task(pb.GetTaskRequest(id="t-1"))


async def test_jsonrpc_reason_wins_and_odd_metadata_is_kept_as_text() -> None:
    data = [
        {
            "@type": "type.googleapis.com/google.rpc.ErrorInfo",
            "reason": "TASK_NOT_CANCELABLE",
            "domain": "a2a-protocol.org",
            "metadata": {"ids": [1, 2], "taskId": "t-1"},
        }
    ]
    body = {"jsonrpc": "2.0", "id": "1", "error": {"code": -32603, "message": "m", "data": data}}
    peer = HttpPeer(reply=lambda seen: web.json_response(body))
    async with (
        serving(peer.app()) as base,
        asyncio.timeout(BOUND_S),
        remote("JSONRPC", base) as service,
    ):
        with pytest.raises(errors.TaskNotCancelableError) as caught:
            await service.cancel_task(pb.CancelTaskRequest(id="t-1"))
    assert caught.value.metadata == {"ids": "[1,2]", "taskId": "t-1"}


async def test_jsonrpc_unknown_code_is_internal_with_the_code() -> None:
    body = {"jsonrpc": "2.0", "id": "1", "error": {"code": -32055, "message": "odd"}}
    peer = HttpPeer(reply=lambda seen: web.json_response(body))
    async with (
        serving(peer.app()) as base,
        asyncio.timeout(BOUND_S),
        remote("JSONRPC", base) as service,
    ):
        with pytest.raises(errors.InternalError, match="remote error -32055: odd"):
            await service.get_task(pb.GetTaskRequest(id="t-1"))


@pytest.mark.parametrize(
    ("status", "expected"),
    [
        (404, errors.MethodNotFoundError),
        (429, errors.RateLimitedError),
        (503, errors.UnavailableError),
        (500, errors.InternalError),
        (403, errors.PermissionDeniedError),
    ],
)
async def test_rest_status_without_error_body(status: int, expected: type[errors.A2AError]) -> None:
    peer = HttpPeer(reply=lambda seen: web.Response(status=status, text="<html>nope</html>"))
    async with (
        serving(peer.app()) as base,
        asyncio.timeout(BOUND_S),
        remote("HTTP+JSON", base) as service,
    ):
        with pytest.raises(expected, match=f"HTTP {status}"):
            await service.get_task(pb.GetTaskRequest(id="t-1"))


@pytest.mark.parametrize("binding", ["JSONRPC", "HTTP+JSON"])
async def test_http_401_is_auth_rejected_and_scrubbed(
    binding: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)

    def reply(seen: Seen) -> web.Response:
        echoed = f"bad key {seen.headers.get('x-api-key')}"  # a careless server echoes it
        return web.json_response(
            {"error": {"code": 401, "status": "UNAUTHENTICATED", "message": echoed}}, status=401
        )

    peer = HttpPeer(reply=reply)
    async with (
        serving(peer.app()) as base,
        asyncio.timeout(BOUND_S),
        remote(binding, base, key=KEY) as service,
    ):
        with pytest.raises(AuthRejected) as caught:
            await service.get_task(pb.GetTaskRequest(id="t-1"))
        with pytest.raises(AuthRejected) as streamed:
            await anext(service.send_streaming_message(text_request("hi")))
    for error in (caught.value, streamed.value):
        assert KEY not in str(error) and KEY not in repr(error)
        assert "[redacted]" in str(error)
        assert "rejected the key" in str(error)
        assert error.spec.http_status == 401
    assert KEY not in caplog.text


async def test_remote_metadata_and_violations_are_scrubbed() -> None:
    leaked = errors.InvalidParamsError(
        f"saw {KEY}",
        metadata={"header": KEY},
        violations=[errors.FieldViolation("x", f"value {KEY}")],
    )
    peer = HttpPeer(reply=lambda seen: rpc_error(leaked))
    async with (
        serving(peer.app()) as base,
        asyncio.timeout(BOUND_S),
        remote("JSONRPC", base, key=KEY) as service,
    ):
        with pytest.raises(errors.InvalidParamsError) as caught:
            await service.get_task(pb.GetTaskRequest(id="t-1"))
    error = caught.value
    assert KEY not in f"{error} {error.metadata} {error.violations} {error.args}"


# --- gRPC -------------------------------------------------------------------------------


class ScriptedServicer(a2a_pb2_grpc.A2AServiceServicer):
    """GetTask: the id names what happens; everything seen is recorded."""

    def __init__(self) -> None:
        self.metadata: list[dict[str, str]] = []
        self.requests: list[Any] = []
        self.fail_with: errors.A2AError | None = None
        self.plain_code: grpc.StatusCode | None = None

    async def GetTask(
        self, request: pb.GetTaskRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.Task:
        self.requests.append(request)
        self.metadata.append({k: str(v) for k, v in context.invocation_metadata() or ()})
        if self.fail_with is not None:
            status = errors.status_proto(self.fail_with)
            await context.abort(
                self.fail_with.spec.grpc_status,
                self.fail_with.message,
                trailing_metadata=(("grpc-status-details-bin", status.SerializeToString()),),
            )
        if self.plain_code is not None:
            await context.abort(self.plain_code, f"plain {self.plain_code.name} for {request.id}")
        await context.send_initial_metadata((("a2a-extensions", "urn:ext:a"),))
        return pb.Task(id=request.id, context_id="c-1")


@pytest.fixture
async def grpc_peer() -> AsyncIterator[tuple[str, ScriptedServicer]]:
    servicer = ScriptedServicer()
    async with grpc_serving(servicer) as target:
        yield target, servicer


async def test_grpc_metadata_tenant_and_extensions(
    grpc_peer: tuple[str, ScriptedServicer],
) -> None:
    target, servicer = grpc_peer
    async with (
        asyncio.timeout(BOUND_S),
        remote("GRPC", target, key=KEY, tenant="acme", extensions=("urn:ext:a",)) as service,
    ):
        context = CallContext()
        task = await service.get_task(pb.GetTaskRequest(id="t-9"), context)
    assert task.id == "t-9"
    assert servicer.requests[0].tenant == "acme"
    metadata = servicer.metadata[0]
    assert metadata["a2a-version"] == "1.0"
    assert metadata["a2a-extensions"] == "urn:ext:a"
    assert metadata["x-api-key"] == KEY
    assert context.activated_extensions == {"urn:ext:a"}


@pytest.mark.parametrize("cls", PROTOCOL_ERRORS, ids=lambda c: c.__name__)
async def test_grpc_status_details_map_back(
    grpc_peer: tuple[str, ScriptedServicer], cls: type[errors.A2AError]
) -> None:
    target, servicer = grpc_peer
    sent = sample_error(cls)
    servicer.fail_with = sent
    async with asyncio.timeout(BOUND_S), remote("GRPC", target) as service:
        with pytest.raises(cls) as caught:
            await service.get_task(pb.GetTaskRequest(id="t-1"))
    assert_same_error(caught.value, sent)


@pytest.mark.parametrize(
    ("code", "expected"),
    [
        (grpc.StatusCode.NOT_FOUND, errors.TaskNotFoundError),
        (grpc.StatusCode.INVALID_ARGUMENT, errors.InvalidParamsError),
        (grpc.StatusCode.UNIMPLEMENTED, errors.MethodNotFoundError),
        (grpc.StatusCode.PERMISSION_DENIED, errors.PermissionDeniedError),
        (grpc.StatusCode.UNAUTHENTICATED, AuthRejected),
        (grpc.StatusCode.DATA_LOSS, errors.InternalError),
    ],
)
async def test_grpc_plain_codes_map_to_classes(
    grpc_peer: tuple[str, ScriptedServicer],
    code: grpc.StatusCode,
    expected: type[errors.A2AError],
) -> None:
    target, servicer = grpc_peer
    servicer.plain_code = code
    async with asyncio.timeout(BOUND_S), remote("GRPC", target, key=KEY) as service:
        with pytest.raises(expected) as caught:
            await service.get_task(pb.GetTaskRequest(id=f"id-{KEY}"))
    assert KEY not in str(caught.value)


async def test_rate_limit_keeps_retry_after() -> None:
    sent = errors.RateLimitedError("slow down", retry_after_s=7)
    peer = HttpPeer(reply=lambda seen: rest_error(sent))
    async with (
        serving(peer.app()) as base,
        asyncio.timeout(BOUND_S),
        remote("HTTP+JSON", base) as service,
    ):
        with pytest.raises(errors.RateLimitedError) as caught:
            await service.get_task(pb.GetTaskRequest(id="t-1"))
    assert caught.value.retry_after_s == 7
