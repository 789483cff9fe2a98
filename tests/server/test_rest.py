"""The HTTP+JSON binding on a real server: routes, query params, bodies, errors, mounts."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from aiohttp import web
from yarl import URL

from a2a_gateway.protocol import errors
from a2a_gateway.server.config import Mounts, ServerConfig
from a2a_gateway.server.health import Readiness
from tests.support.echo import Boom, make_error

from .conftest import KEY, TIMEOUT_S, Http, Starter, text_message

ERROR_INFO = "type.googleapis.com/google.rpc.ErrorInfo"
BAD_REQUEST = "type.googleapis.com/google.rpc.BadRequest"
REST_TYPE = "application/a2a+json"


async def call(
    http: Http,
    method: str,
    path: str,
    *,
    json: Any = None,
    data: bytes | None = None,
    headers: dict[str, str] | None = None,
    prefix: str = "/a2a/v1",
) -> tuple[int, Any, dict[str, str]]:
    """One REST request on the raw (still encoded) path; (status, body, headers)."""
    url = URL(prefix + path, encoded=True)
    async with asyncio.timeout(TIMEOUT_S):
        response = await http.client.request(method, url, json=json, data=data, headers=headers)
        async with response:
            body = await response.json(content_type=None) if await response.read() else None
            return response.status, body, dict(response.headers)


def assert_rest_error(
    status: int, body: Any, cls: type[errors.A2AError], expected_status: int | None = None
) -> dict[str, Any]:
    assert status == (expected_status or cls.spec.http_status)
    error: dict[str, Any] = body["error"]
    assert set(error) <= {"code", "status", "message", "details"}
    assert error["code"] == status
    assert error["status"] == cls.spec.grpc_status.name
    assert error["details"][0]["@type"] == ERROR_INFO
    assert error["details"][0]["reason"] == cls.spec.reason
    assert error["details"][0]["domain"] == "a2a-protocol.org"
    return error


async def sent_task(http: Http) -> str:
    status, body, _ = await call(http, "POST", "/message:send", json=text_message("hi"))
    assert status == 200, body
    return str(body["task"]["id"])


# --- every route ---------------------------------------------------------------------


async def test_send_message(http: Http) -> None:
    status, body, headers = await call(http, "POST", "/message:send", json=text_message("hi"))
    assert status == 200
    assert headers["Content-Type"] == REST_TYPE
    assert body["task"]["artifacts"][0]["parts"] == [{"text": "echo: hi"}]


@pytest.mark.parametrize("tenant", ["", "/acme"])
async def test_every_route_reaches_the_service(http: Http, tenant: str) -> None:
    status, body, _ = await call(http, "POST", tenant + "/message:send", json=text_message("x"))
    assert status == 200
    task_id = body["task"]["id"]
    assert http.service.last[2].tenant == tenant.strip("/")
    cases: list[tuple[str, str, Any, str]] = [
        ("GET", f"/tasks/{task_id}?historyLength=1", None, "get_task"),
        ("GET", "/tasks?pageSize=2", None, "list_tasks"),
        ("POST", f"/tasks/{task_id}:cancel", {}, "cancel_task"),
        (
            "POST",
            f"/tasks/{task_id}/pushNotificationConfigs",
            {"id": "c1", "url": "https://hook.example/x"},
            "create_task_push_notification_config",
        ),
        (
            "GET",
            f"/tasks/{task_id}/pushNotificationConfigs/c1",
            None,
            "get_task_push_notification_config",
        ),
        (
            "GET",
            f"/tasks/{task_id}/pushNotificationConfigs",
            None,
            "list_task_push_notification_configs",
        ),
        (
            "DELETE",
            f"/tasks/{task_id}/pushNotificationConfigs/c1",
            None,
            "delete_task_push_notification_config",
        ),
        ("GET", "/extendedAgentCard", None, "get_extended_agent_card"),
    ]
    for method, path, json, implementation in cases:
        status, body, _ = await call(http, method, tenant + path, json=json)
        assert status == 200, (method, path, body)
        name, request, context = http.service.last
        assert name == implementation
        assert context.tenant == tenant.strip("/")
        assert request.tenant == tenant.strip("/")  # type: ignore[attr-defined]
        if "task_id" in request.DESCRIPTOR.fields_by_name:
            assert request.task_id == task_id  # type: ignore[attr-defined]


async def test_path_values_fill_the_request(http: Http) -> None:
    task_id = await sent_task(http)
    await call(
        http,
        "POST",
        f"/tasks/{task_id}/pushNotificationConfigs",
        json={"id": "c9", "url": "https://hook.example/y", "token": "tok"},
    )
    status, body, _ = await call(http, "GET", f"/tasks/{task_id}/pushNotificationConfigs/c9")
    assert status == 200
    assert body == {
        "id": "c9",
        "taskId": task_id,
        "url": "https://hook.example/y",
        "token": "tok",
    }


async def test_cancel_accepts_an_empty_body_and_metadata(http: Http) -> None:
    task_id = await sent_task(http)
    status, body, _ = await call(http, "POST", f"/tasks/{task_id}:cancel", data=b"")
    assert status == 200 and body["status"]["state"] == "TASK_STATE_CANCELED"
    status, body, _ = await call(
        http, "POST", f"/tasks/{task_id}:cancel", json={"id": task_id, "metadata": {"why": "x"}}
    )
    assert status == 200
    assert http.service.last[1].metadata["why"] == "x"  # type: ignore[attr-defined]


async def test_delete_returns_an_empty_object(http: Http) -> None:
    status, body, headers = await call(http, "DELETE", "/tasks/t/pushNotificationConfigs/c")
    assert status == 200 and body == {}
    assert headers["Content-Type"] == REST_TYPE


async def test_encoded_slash_stays_inside_the_id(http: Http) -> None:
    http.service.failures["a/b"] = errors.TaskNotFoundError(metadata={"taskId": "a/b"})
    status, body, _ = await call(http, "GET", "/tasks/a%2Fb")
    assert_rest_error(status, body, errors.TaskNotFoundError)
    assert http.service.last[1].id == "a/b"  # type: ignore[attr-defined]
    status, _, _ = await call(http, "GET", "/tenant%2Fx/tasks/t%2F1/pushNotificationConfigs/c%2F2")
    request = http.service.last[1]
    assert status == 404  # no such config in the echo service
    assert (request.tenant, request.task_id, request.id) == ("tenant/x", "t/1", "c/2")  # type: ignore[attr-defined]


async def test_unicode_ids_round_trip(http: Http) -> None:
    await call(http, "GET", "/tasks/%C3%A9t%C3%A9%20x")
    assert http.service.last[1].id == "été x"  # type: ignore[attr-defined]


async def test_invalid_utf8_in_a_path_is_400(http: Http) -> None:
    status, body, _ = await call(http, "GET", "/tasks/%FF%FE")
    error = assert_rest_error(status, body, errors.InvalidParamsError)
    assert "id" in error["message"]


async def test_body_tenant_must_match_the_path(http: Http) -> None:
    body = text_message("x")
    body["tenant"] = "other"
    status, answer, _ = await call(http, "POST", "/acme/message:send", json=body)
    error = assert_rest_error(status, answer, errors.InvalidParamsError)
    assert "tenant" in error["message"]
    body["tenant"] = "acme"
    status, _, _ = await call(http, "POST", "/acme/message:send", json=body)
    assert status == 200


# --- query parameters -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("query", "field", "expected"),
    [
        ("includeArtifacts=true", "include_artifacts", True),
        ("includeArtifacts=false", "include_artifacts", False),
        ("include_artifacts=true", "include_artifacts", True),
        ("pageSize=7", "page_size", 7),
        ("historyLength=0", "history_length", 0),
        ("status=TASK_STATE_WORKING", "status", 2),
        ("status=3", "status", 3),
        ("contextId=c%2F1", "context_id", "c/1"),
        ("pageToken=abc%3D", "page_token", "abc="),
    ],
)
async def test_list_tasks_query(http: Http, query: str, field: str, expected: Any) -> None:
    status, body, _ = await call(http, "GET", f"/tasks?{query}")
    assert status == 200, body
    request = http.service.last[1]
    assert (
        request.HasField(field)
        if field in ("include_artifacts", "page_size", "history_length")
        else True
    )
    assert getattr(request, field) == expected


async def test_timestamp_query(http: Http) -> None:
    status, _, _ = await call(http, "GET", "/tasks?statusTimestampAfter=2025-10-28T10:30:00.000Z")
    assert status == 200
    stamp = http.service.last[1].status_timestamp_after  # type: ignore[attr-defined]
    assert stamp.ToJsonString() == "2025-10-28T10:30:00Z"


@pytest.mark.parametrize(
    ("query", "needle"),
    [
        ("includeArtifacts=yes", "includeArtifacts"),
        ("pageSize=abc", "pageSize"),
        ("status=DONE", "status"),
        ("pageSize=1&pageSize=2", "pageSize"),
        ("statusTimestampAfter=yesterday", "statusTimestampAfter"),
    ],
)
async def test_bad_query_is_400(http: Http, query: str, needle: str) -> None:
    status, body, _ = await call(http, "GET", f"/tasks?{query}")
    error = assert_rest_error(status, body, errors.InvalidParamsError)
    assert needle in error["message"], error
    assert http.service.calls == []


async def test_version_query_parameter_is_not_a_field(http: Http) -> None:
    status, _, _ = await call(http, "GET", "/tasks?A2A-Version=1.0&pageSize=3")
    assert status == 200
    status, body, _ = await call(http, "GET", "/tasks?A2A-Version=2.0")
    assert_rest_error(status, body, errors.VersionNotSupportedError)


async def test_get_task_history_length_query(http: Http) -> None:
    task_id = await sent_task(http)
    await call(http, "GET", f"/tasks/{task_id}?historyLength=2")
    request = http.service.last[1]
    assert request.HasField("history_length") and request.history_length == 2


# --- bodies ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("payload", "cls", "needle"),
    [
        (b"{", errors.JSONParseError, "JSON"),
        (b"[1, 2]", errors.InvalidParamsError, "object"),
        (b'"text"', errors.InvalidParamsError, "object"),
        (
            b'{"message": {"messageId": "m", "role": "ROLE_USER"}}',
            errors.InvalidParamsError,
            "parts",
        ),
        (
            b'{"message": {"role": "ROLE_USER", "parts": [{"text": "x"}]}}',
            errors.InvalidParamsError,
            "messageId",
        ),
        (b'{"mesage": {}}', errors.InvalidParamsError, "message: is required"),
        (
            b'{"message": {"messageId": "m", "role": "ROLE_USER",'
            b' "parts": [{"text": "x", "raw": "AA=="}]}}',
            errors.InvalidParamsError,
            "oneof",
        ),
    ],
)
async def test_bad_body(
    http: Http, payload: bytes, cls: type[errors.A2AError], needle: str
) -> None:
    status, body, _ = await call(
        http, "POST", "/message:send", data=payload, headers={"Content-Type": "application/json"}
    )
    error = assert_rest_error(status, body, cls)
    assert needle in error["message"], error
    assert http.service.calls == []


async def test_missing_required_field_has_a_bad_request_detail(http: Http) -> None:
    status, body, _ = await call(
        http, "POST", "/message:send", json={"message": {"role": "ROLE_USER"}}
    )
    error = assert_rest_error(status, body, errors.InvalidParamsError)
    violations = error["details"][1]
    assert violations["@type"] == BAD_REQUEST
    fields = {v["field"] for v in violations["fieldViolations"]}
    assert {"message.messageId", "message.parts"} <= fields


async def test_over_deep_body(http: Http) -> None:
    value: Any = 1
    for _ in range(40):
        value = [value]
    body = text_message("x")
    body["message"]["parts"] = [{"data": value}]
    status, answer, _ = await call(http, "POST", "/message:send", json=body)
    error = assert_rest_error(status, answer, errors.InvalidParamsError)
    assert "nesting" in error["message"]


async def test_oversize_body(start_http: Starter) -> None:
    http = await start_http(config=ServerConfig(max_body_bytes=512))
    status, body, _ = await call(http, "POST", "/message:send", json=text_message("y" * 2000))
    error = assert_rest_error(status, body, errors.InvalidRequestError)
    assert "512 bytes" in error["message"]


@pytest.mark.parametrize(
    "content_type", ["application/json", "application/a2a+json; charset=utf-8"]
)
async def test_accepted_content_types(http: Http, content_type: str) -> None:
    status, _, _ = await call(
        http,
        "POST",
        "/message:send",
        data=b'{"message":{"messageId":"m","role":"ROLE_USER","parts":[{"text":"x"}]}}',
        headers={"Content-Type": content_type},
    )
    assert status == 200


async def test_wrong_content_type_is_400_naming_it(http: Http) -> None:
    status, body, _ = await call(
        http, "POST", "/message:send", data=b"message=hi", headers={"Content-Type": "text/plain"}
    )
    error = assert_rest_error(status, body, errors.InvalidRequestError)
    assert "text/plain" in error["message"]


# --- errors -----------------------------------------------------------------------------


@pytest.mark.parametrize("cls", errors.ALL_ERRORS, ids=lambda c: c.__name__)
async def test_every_error_class(start_http: Starter, cls: type[errors.A2AError]) -> None:
    http = await start_http()
    http.service.failures["t-err"] = make_error(cls, "t-err")
    status, body, headers = await call(http, "GET", "/tasks/t-err")
    error = assert_rest_error(status, body, cls)
    assert error["message"] == f"{cls.__name__} for t-err"
    assert error["details"][0]["metadata"]["taskId"] == "t-err"
    assert error["details"][1] == {
        "@type": BAD_REQUEST,
        "fieldViolations": [{"field": "id", "description": "chosen by the test"}],
    }
    assert headers["Content-Type"] == REST_TYPE
    if cls is errors.UnauthenticatedError:
        assert headers["WWW-Authenticate"].startswith("Bearer")
    if cls is errors.RateLimitedError:
        assert headers["Retry-After"] == "1"


async def test_retry_after_headers(http: Http) -> None:
    http.service.failures["busy"] = errors.RateLimitedError(retry_after_s=9)
    http.service.failures["down"] = errors.UnavailableError(metadata={"retryAfterSeconds": "30"})
    status, _, headers = await call(http, "GET", "/tasks/busy")
    assert (status, headers["Retry-After"]) == (429, "9")
    status, _, headers = await call(http, "GET", "/tasks/down")
    assert (status, headers["Retry-After"]) == (503, "30")


@pytest.mark.server_fault
async def test_unexpected_exception_is_500_without_details(http: Http) -> None:
    http.service.failures["t-boom"] = Boom("secret internal detail")
    async with asyncio.timeout(TIMEOUT_S):
        response = await http.client.get("/a2a/v1/tasks/t-boom")
        text = await response.text()
    assert response.status == 500
    assert "secret" not in text and "Traceback" not in text
    body = await response.json(content_type=None)
    assert body["error"]["message"] == "Internal error"
    assert body["error"]["status"] == "INTERNAL"


async def test_unknown_path_is_404(http: Http) -> None:
    status, body, _ = await call(http, "GET", "/tasks/x/y/z")
    error = assert_rest_error(status, body, errors.MethodNotFoundError)
    assert "/tasks/x/y/z" in error["message"]


@pytest.mark.parametrize(
    ("method", "path", "allow"),
    [
        ("POST", "/tasks/t1", "GET"),
        ("GET", "/message:send", "POST"),
        ("PUT", "/tasks/t1/pushNotificationConfigs/c", "DELETE, GET"),
        ("DELETE", "/tasks", "GET"),
    ],
)
async def test_wrong_method_is_405_with_allow(
    http: Http, method: str, path: str, allow: str
) -> None:
    status, body, headers = await call(http, method, path)
    error = assert_rest_error(status, body, errors.MethodNotAllowedError)
    assert headers["Allow"] == allow
    assert method in error["message"]


@pytest.mark.parametrize(
    ("method", "path", "cls", "allow"),
    [
        ("GET", "/nowhere/at/all", errors.MethodNotFoundError, None),
        ("DELETE", "/", errors.MethodNotFoundError, None),
        ("POST", "/.well-known/agent-card.json", errors.MethodNotAllowedError, "GET,HEAD"),
        ("PUT", "/healthz", errors.MethodNotAllowedError, "GET,HEAD"),
    ],
)
async def test_a_path_outside_every_mount_is_a_rest_error(
    start_http: Starter,
    method: str,
    path: str,
    cls: type[errors.A2AError],
    allow: str | None,
) -> None:
    # aiohttp's own 404/405 (no route serves the path, or not with this method), in the
    # REST error shape, with no HTTP+JSON catch-all at the root.
    http = await start_http(readiness=Readiness())
    status, body, headers = await call(http, method, path, prefix="")
    error = assert_rest_error(status, body, cls)
    assert f"{method} " in error["message"]
    if allow is None:
        assert path in error["message"]
    else:
        assert headers["Allow"] == allow
        assert error["details"][0]["metadata"]["allow"] == allow


@pytest.mark.server_fault
async def test_routes_added_after_the_app_is_built_are_served_with_the_error_mapping(
    start_http: Starter,
) -> None:
    # As the Telegram webhook is: at any path, "/" included, after build_http_app.
    async def hook(request: web.Request) -> web.Response:
        return web.Response(text="hooked")

    async def broken(request: web.Request) -> web.Response:
        raise RuntimeError("a detail that stays in the log")

    def add(app: web.Application) -> None:
        app.router.add_post("/", hook)
        app.router.add_get("/broken", broken)

    http = await start_http(routes=add)
    async with asyncio.timeout(TIMEOUT_S), http.client.post("/") as response:
        assert response.status == 200 and await response.text() == "hooked"
    status, body, headers = await call(http, "GET", "/", prefix="")
    assert_rest_error(status, body, errors.MethodNotAllowedError)
    assert headers["Allow"] == "POST"
    status, body, _ = await call(http, "GET", "/broken", prefix="")
    error = assert_rest_error(status, body, errors.InternalError)
    assert "detail" not in error["message"]


async def test_missing_key_is_401(keyed: Http) -> None:
    status, body, headers = await call(keyed, "GET", "/tasks")
    assert_rest_error(status, body, errors.UnauthenticatedError)
    assert headers["WWW-Authenticate"].startswith("Bearer")
    status, _, _ = await call(keyed, "GET", "/tasks", headers={"X-API-Key": KEY})
    assert status == 200


async def test_unauthenticated_body_is_not_parsed(keyed: Http) -> None:
    status, body, _ = await call(
        keyed, "POST", "/message:send", data=b"{oops", headers={"Content-Type": "application/json"}
    )
    assert_rest_error(status, body, errors.UnauthenticatedError)


async def test_extensions_echo(http: Http) -> None:
    _, _, headers = await call(http, "GET", "/tasks", headers={"A2A-Extensions": "urn:test:echo"})
    assert headers["A2A-Extensions"] == "urn:test:echo"


# --- mounts ------------------------------------------------------------------------------


async def test_rest_at_root_and_jsonrpc_at_slash_together(start_http: Starter) -> None:
    http = await start_http(config=ServerConfig(mounts=Mounts(jsonrpc="/", rest="")))
    status, body = await http.rpc("SendMessage", text_message("both"), path="/")
    assert status == 200 and body["result"]["task"]["id"]
    task_id = body["result"]["task"]["id"]
    status, task, _ = await call(http, "GET", f"/tasks/{task_id}", prefix="")
    assert status == 200 and task["id"] == task_id
    status, _, _ = await call(http, "POST", "/message:send", json=text_message("r"), prefix="")
    assert status == 200
    status, _, _ = await call(http, "GET", "/acme/tasks", prefix="")
    assert status == 200 and http.service.last[2].tenant == "acme"
    async with asyncio.timeout(TIMEOUT_S):
        response = await http.client.get("/.well-known/agent-card.json")
        card = await response.json()
    assert response.status == 200 and card["name"]
    # GET on the JSON-RPC mount is JSON-RPC's 405, even where HTTP+JSON is at the root.
    status, body, _ = await call(http, "GET", "/", prefix="")
    assert status == 405 and body["error"]["code"] == -32600
    status, body, _ = await call(http, "GET", "/nothing-here", prefix="")
    assert_rest_error(status, body, errors.MethodNotFoundError)


async def test_custom_mounts(start_http: Starter) -> None:
    config = ServerConfig(mounts=Mounts(jsonrpc="/rpc/", rest="api/a2a", card="/card.json"))
    http = await start_http(config=config)
    status, body = await http.rpc("ListTasks", {}, path="/rpc")
    assert status == 200 and "result" in body
    status, _, _ = await call(http, "GET", "/tasks", prefix="/api/a2a")
    assert status == 200
    async with asyncio.timeout(TIMEOUT_S):
        response = await http.client.get("/card.json")
        await response.read()
    assert response.status == 200


async def test_paths_outside_the_mounts_are_404_json(http: Http) -> None:
    for path in ("/nothing", "/a2a/v2/tasks", "/a2a/v1x/tasks"):
        status, body, headers = await call(http, "GET", path, prefix="")
        assert_rest_error(status, body, errors.MethodNotFoundError)
        assert headers["Content-Type"] == REST_TYPE
