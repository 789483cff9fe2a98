"""The JSON-RPC binding on a real server: envelopes, ids, params, errors, auth."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from a2a_gateway.protocol import errors
from a2a_gateway.server.config import Mounts, ServerConfig
from tests.support.echo import Boom, make_error

from .conftest import KEY, TIMEOUT_S, Http, Starter, text_message

ERROR_INFO = "type.googleapis.com/google.rpc.ErrorInfo"
BAD_REQUEST = "type.googleapis.com/google.rpc.BadRequest"


async def post_raw(
    http: Http, data: bytes | str, headers: dict[str, str] | None = None
) -> tuple[int, Any]:
    async with asyncio.timeout(TIMEOUT_S):
        response = await http.client.post(
            "/a2a", data=data, headers={"Content-Type": "application/json", **(headers or {})}
        )
        async with response:
            return response.status, await response.json(content_type=None)


def assert_error(body: Any, code: int, request_id: Any = None) -> dict[str, Any]:
    assert body["jsonrpc"] == "2.0"
    assert body["id"] == request_id
    assert type(body["id"]) is type(request_id)
    assert "result" not in body
    error: dict[str, Any] = body["error"]
    assert error["code"] == code, error
    assert isinstance(error["data"], list)
    assert error["data"][0]["@type"] == ERROR_INFO
    assert error["data"][0]["domain"] == "a2a-protocol.org"
    return error


# --- success and id echo ------------------------------------------------------------


@pytest.mark.parametrize("request_id", ["abc-1", 7, 0, -3, 2.5, None, ""])
async def test_send_message_echoes_the_id_exactly(http: Http, request_id: Any) -> None:
    status, body = await http.rpc("SendMessage", text_message("hello"), request_id=request_id)
    assert status == 200
    assert body["jsonrpc"] == "2.0"
    assert body["id"] == request_id and type(body["id"]) is type(request_id)
    task = body["result"]["task"]
    assert task["status"]["state"] == "TASK_STATE_COMPLETED"
    assert task["artifacts"][0]["parts"] == [{"text": "echo: hello"}]


async def test_id_is_echoed_byte_for_byte(http: Http) -> None:
    raw = b'{"jsonrpc":"2.0","id":12345678901234,"method":"GetTask","params":{"id":"nope"}}'
    async with asyncio.timeout(TIMEOUT_S):
        response = await http.client.post(
            "/a2a", data=raw, headers={"Content-Type": "application/json"}
        )
        text = await response.text()
    assert '"id":12345678901234' in text


async def test_a_missing_id_is_answered_with_null(http: Http) -> None:
    status, body = await post_raw(http, b'{"jsonrpc":"2.0","method":"ListTasks","params":{}}')
    assert status == 200
    assert body["id"] is None
    assert body["result"]["tasks"] == []


async def test_message_reply_and_response_content_type(http: Http) -> None:
    async with asyncio.timeout(TIMEOUT_S):
        response = await http.client.post(
            "/a2a",
            json={
                "jsonrpc": "2.0",
                "id": 1,
                "method": "SendMessage",
                "params": text_message("hi", reply=True),
            },
        )
        body = await response.json()
    assert response.content_type == "application/json"
    assert body["result"] == {
        "message": {"messageId": "r-1", "role": "ROLE_AGENT", "parts": [{"text": "hi"}]}
    }


async def test_every_unary_method_reaches_the_service(http: Http) -> None:
    _, sent = await http.rpc("SendMessage", text_message("x"))
    task_id = sent["result"]["task"]["id"]
    cases: list[tuple[str, dict[str, Any] | None, str]] = [
        ("GetTask", {"id": task_id, "historyLength": 0}, "get_task"),
        ("ListTasks", {"pageSize": 5}, "list_tasks"),
        ("CancelTask", {"id": task_id}, "cancel_task"),
        (
            "CreateTaskPushNotificationConfig",
            {"taskId": task_id, "id": "c1", "url": "https://hook.example/x"},
            "create_task_push_notification_config",
        ),
        (
            "GetTaskPushNotificationConfig",
            {"taskId": task_id, "id": "c1"},
            "get_task_push_notification_config",
        ),
        (
            "ListTaskPushNotificationConfigs",
            {"taskId": task_id},
            "list_task_push_notification_configs",
        ),
        (
            "DeleteTaskPushNotificationConfig",
            {"taskId": task_id, "id": "c1"},
            "delete_task_push_notification_config",
        ),
        ("GetExtendedAgentCard", None, "get_extended_agent_card"),
    ]
    for method, params, implementation in cases:
        status, body = await http.rpc(method, params)
        assert status == 200, body
        assert "result" in body, (method, body)
        assert http.service.last[0] == implementation
    assert http.service.calls[2][1].page_size == 5  # type: ignore[attr-defined]


async def test_delete_push_config_result_is_an_empty_object(http: Http) -> None:
    _, body = await http.rpc("DeleteTaskPushNotificationConfig", {"taskId": "t", "id": "c"})
    assert body["result"] == {}


async def test_list_tasks_always_carries_required_fields(http: Http) -> None:
    _, body = await http.rpc("ListTasks", {})
    assert body["result"] == {"tasks": [], "nextPageToken": "", "pageSize": 50, "totalSize": 0}


async def test_tenant_param_reaches_the_context(http: Http) -> None:
    await http.rpc("ListTasks", {"tenant": "acme"})
    assert http.service.last[2].tenant == "acme"


async def test_snake_case_params_are_accepted(http: Http) -> None:
    status, body = await http.rpc("ListTasks", {"page_size": 3, "include_artifacts": True})
    assert status == 200 and "result" in body
    request = http.service.last[1]
    assert request.page_size == 3  # type: ignore[attr-defined]


async def test_null_params_count_as_absent(http: Http) -> None:
    status, body = await post_raw(
        http, b'{"jsonrpc":"2.0","id":"n","method":"GetExtendedAgentCard","params":null}'
    )
    assert status == 200 and body["result"]["name"]


# --- envelope errors -----------------------------------------------------------------


@pytest.mark.parametrize(
    "raw",
    [b"{", b"not json", b'{"jsonrpc": "2.0", "id": 1,}', b"\xff\xfe", b""],
    ids=["truncated", "text", "trailing-comma", "binary", "empty"],
)
async def test_parse_error(http: Http, raw: bytes) -> None:
    status, body = await post_raw(http, raw)
    assert status == 200
    error = assert_error(body, -32700)
    assert error["data"][0]["reason"] == "INVALID_REQUEST"


@pytest.mark.parametrize(
    ("raw", "request_id", "needle"),
    [
        (b"[]", None, "batch"),
        (b'[{"jsonrpc":"2.0","id":1,"method":"GetTask"}]', None, "batch"),
        (b'"GetTask"', None, "object"),
        (b"42", None, "object"),
        (b'{"id":1,"method":"GetTask"}', 1, "jsonrpc"),
        (b'{"jsonrpc":"1.0","id":"a","method":"GetTask"}', "a", "jsonrpc"),
        (b'{"jsonrpc":2.0,"id":"a","method":"GetTask"}', "a", "jsonrpc"),
        (b'{"jsonrpc":"2.0","id":2}', 2, "method"),
        (b'{"jsonrpc":"2.0","id":2,"method":""}', 2, "method"),
        (b'{"jsonrpc":"2.0","id":2,"method":7}', 2, "method"),
        (b'{"jsonrpc":"2.0","id":true,"method":"ListTasks"}', None, "id"),
        (b'{"jsonrpc":"2.0","id":{"a":1},"method":"ListTasks"}', None, "id"),
        (b'{"jsonrpc":"2.0","id":[1],"method":"ListTasks"}', None, "id"),
        (b'{"jsonrpc":"2.0","id":3,"method":"ListTasks","params":[1]}', 3, "params"),
        (b'{"jsonrpc":"2.0","id":3,"method":"ListTasks","params":"x"}', 3, "params"),
    ],
)
async def test_invalid_request(http: Http, raw: bytes, request_id: Any, needle: str) -> None:
    status, body = await post_raw(http, raw)
    assert status == 200
    error = assert_error(body, -32600, request_id)
    assert needle in error["message"]
    assert error["data"][0]["reason"] == "INVALID_REQUEST"
    assert http.service.calls == []


# tasks/list is a 0.3 method now (as deployed 0.3 peers call it): tasks/lists is not.
@pytest.mark.parametrize("method", ["message/sendx", "sendMessage", "Nope", "tasks/lists"])
async def test_unknown_method(http: Http, method: str) -> None:
    status, body = await http.rpc(method, {}, request_id="m")
    assert status == 200
    error = assert_error(body, -32601, "m")
    assert method in error["message"]
    assert error["data"][0]["reason"] == "METHOD_NOT_FOUND"


# --- params errors (-32602 naming the field) ----------------------------------------


@pytest.mark.parametrize(
    ("method", "params", "needle"),
    [
        ("SendMessage", {"message": {"role": "ROLE_USER", "parts": [{"text": "x"}]}}, "messageId"),
        ("SendMessage", {"message": {"messageId": "m", "parts": [{"text": "x"}]}}, "role"),
        ("SendMessage", {"message": {"messageId": "m", "role": "ROLE_USER"}}, "parts"),
        ("SendMessage", {}, "message"),
        ("GetTask", {}, "id"),
        ("GetTask", {"bogusField": 1}, "id"),  # the unknown field is ignored, not the gap
        ("GetTask", {"id": "t", "historyLength": "many"}, "historyLength"),
        ("ListTasks", {"status": "done"}, "status"),
        ("ListTasks", {"pageSize": 2**40}, "pageSize"),
        (
            "SendMessage",
            {
                "message": {
                    "messageId": "m",
                    "role": "ROLE_USER",
                    "parts": [{"text": "x", "url": "https://a.example/f"}],
                }
            },
            "oneof",
        ),
        (
            "SendMessage",
            {"message": {"messageId": "m", "role": "ROLE_USER", "parts": [{}]}},
            "text",
        ),
        ("CreateTaskPushNotificationConfig", {"taskId": "t"}, "url"),
    ],
)
async def test_invalid_params_name_the_field(
    http: Http, method: str, params: dict[str, Any], needle: str
) -> None:
    status, body = await http.rpc(method, params, request_id=9)
    assert status == 200
    error = assert_error(body, -32602, 9)
    assert needle in error["message"], error
    assert error["data"][0]["reason"] == "INVALID_PARAMS"
    assert error["data"][1]["@type"] == BAD_REQUEST
    assert error["data"][1]["fieldViolations"]
    assert http.service.calls == []


def nested(depth: int) -> Any:
    value: Any = "leaf"
    for _ in range(depth):
        value = {"k": value}
    return value


async def test_over_deep_params_are_refused(http: Http) -> None:
    params = text_message("x")
    params["message"]["parts"] = [{"data": nested(40)}]
    status, body = await http.rpc("SendMessage", params, request_id="deep")
    error = assert_error(body, -32602, "deep")
    assert "nesting" in error["message"]
    assert status == 200


async def test_nesting_within_the_limit_is_accepted(http: Http) -> None:
    params = text_message("x")
    params["message"]["parts"] = [{"data": nested(20)}]
    status, body = await http.rpc("SendMessage", params)
    assert status == 200 and "result" in body, body


# --- every error class through the binding ------------------------------------------


@pytest.mark.parametrize("cls", errors.ALL_ERRORS, ids=lambda c: c.__name__)
async def test_every_error_class(start_http: Starter, cls: type[errors.A2AError]) -> None:
    http = await start_http()
    http.service.failures["t-err"] = make_error(cls, "t-err")
    status, body = await http.rpc("GetTask", {"id": "t-err"}, request_id="e1")
    error = assert_error(body, cls.spec.jsonrpc_code, "e1")
    assert error["message"] == f"{cls.__name__} for t-err"
    info = error["data"][0]
    assert info["reason"] == cls.spec.reason
    assert info["metadata"]["taskId"] == "t-err"
    assert error["data"][1] == {
        "@type": BAD_REQUEST,
        "fieldViolations": [{"field": "id", "description": "chosen by the test"}],
    }
    expected_status = {401: 401, 429: 429}.get(cls.spec.http_status, 200)
    assert status == expected_status


async def test_rate_limit_sets_retry_after(http: Http) -> None:
    http.service.failures["busy"] = errors.RateLimitedError(retry_after_s=7)
    async with asyncio.timeout(TIMEOUT_S):
        response = await http.client.post(
            "/a2a", json={"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": "busy"}}
        )
        body = await response.json()
    assert response.status == 429
    assert response.headers["Retry-After"] == "7"
    assert body["error"]["code"] == errors.RateLimitedError.spec.jsonrpc_code


@pytest.mark.server_fault
async def test_unexpected_exception_is_a_generic_internal_error(http: Http) -> None:
    http.service.failures["t-boom"] = Boom("secret internal detail")
    async with asyncio.timeout(TIMEOUT_S):
        response = await http.client.post(
            "/a2a",
            json={"jsonrpc": "2.0", "id": 5, "method": "GetTask", "params": {"id": "t-boom"}},
        )
        text = await response.text()
    assert response.status == 200
    assert "secret" not in text and "Traceback" not in text and "Boom" not in text
    body = await response.json()
    assert body["error"]["code"] == -32603
    assert body["error"]["message"] == "Internal error"


# --- transport: content types, sizes, methods ---------------------------------------


@pytest.mark.parametrize(
    "content_type",
    [
        "application/json",
        "application/json; charset=utf-8",
        "Application/JSON;charset=UTF-8",
        "application/a2a+json",
    ],
)
async def test_accepted_content_types(http: Http, content_type: str) -> None:
    status, body = await post_raw(
        http,
        b'{"jsonrpc":"2.0","id":1,"method":"ListTasks"}',
        headers={"Content-Type": content_type},
    )
    assert status == 200 and "result" in body, body


async def test_missing_content_type_is_read_as_json(http: Http) -> None:
    async with asyncio.timeout(TIMEOUT_S):
        response = await http.client.post(
            "/a2a",
            data=b'{"jsonrpc":"2.0","id":1,"method":"ListTasks"}',
            skip_auto_headers=["Content-Type"],
        )
        body = await response.json()
    assert "Content-Type" not in response.request_info.headers
    assert "result" in body


@pytest.mark.parametrize(
    ("content_type", "needle"),
    [
        ("text/plain", "text/plain"),
        ("application/x-www-form-urlencoded", "application/x-www-form-urlencoded"),
        ("application/json; charset=latin-1", "latin-1"),
    ],
)
async def test_wrong_content_type_is_an_invalid_request(
    http: Http, content_type: str, needle: str
) -> None:
    status, body = await post_raw(
        http,
        b'{"jsonrpc":"2.0","id":1,"method":"ListTasks"}',
        headers={"Content-Type": content_type},
    )
    assert status == 200
    error = assert_error(body, -32600, 1)  # refused from the headers, answered with the id
    assert needle in error["message"]
    assert http.service.calls == []


async def test_oversize_body_is_refused(start_http: Starter) -> None:
    http = await start_http(config=ServerConfig(max_body_bytes=1024))
    params = text_message("x" * 4096)
    status, body = await http.rpc("SendMessage", params)
    assert status == 200
    error = assert_error(body, -32600)
    assert "1024 bytes" in error["message"]
    assert http.service.calls == []


async def test_oversize_declared_length_is_answered_without_reading_the_body(
    start_http: Starter,
) -> None:
    http = await start_http(config=ServerConfig(max_body_bytes=1024))
    port = http.client.port
    async with asyncio.timeout(TIMEOUT_S):
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            writer.write(
                b"POST /a2a HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                b"Content-Type: application/json\r\nContent-Length: 50000000\r\n\r\n{"
            )
            await writer.drain()
            head = await reader.readuntil(b"\r\n\r\n")
            assert head.startswith(b"HTTP/1.1 200")
            length = int(
                next(
                    line.split(b":", 1)[1]
                    for line in head.split(b"\r\n")
                    if line.lower().startswith(b"content-length:")
                )
            )
            payload = await reader.readexactly(length)
        finally:
            writer.close()
            await writer.wait_closed()
    assert b"-32600" in payload and b"larger than 1024 bytes" in payload


@pytest.mark.parametrize("path", ["/a2a", "/a2a/"])
@pytest.mark.parametrize("method", ["GET", "PUT", "DELETE", "PATCH", "HEAD", "OPTIONS"])
async def test_other_methods_on_the_jsonrpc_mount_are_405_in_jsonrpc(
    http: Http, method: str, path: str
) -> None:
    async with asyncio.timeout(TIMEOUT_S):
        response = await http.client.request(method, path, data=b'{"jsonrpc":"2.0","id":1}')
        raw = await response.read()
    assert response.status == 405
    assert response.headers["Allow"] == "POST"
    if method != "HEAD":
        assert_error(json.loads(raw), -32600)
    assert http.service.calls == []


@pytest.mark.parametrize("path", ["/a2a", "/a2a/", "/a2a?x=1", "/a2a/?x=1"])
async def test_the_mount_answers_with_and_without_a_trailing_slash(http: Http, path: str) -> None:
    status, body = await http.rpc("ListTasks", {}, request_id="s", path=path)
    assert status == 200 and body["id"] == "s" and "result" in body, body


# --- service parameters: auth, version, extensions -----------------------------------


async def test_missing_key_is_401_with_challenge(keyed: Http) -> None:
    async with asyncio.timeout(TIMEOUT_S):
        response = await keyed.client.post(
            "/a2a", json={"jsonrpc": "2.0", "id": 4, "method": "ListTasks"}
        )
        body = await response.json()
    assert response.status == 401
    assert response.headers["WWW-Authenticate"].startswith("Bearer")
    assert response.content_type == "application/json"
    # Authentication runs before the body is read, so the id is not known yet.
    error = assert_error(body, errors.UnauthenticatedError.spec.jsonrpc_code, None)
    assert error["data"][0]["reason"] == "UNAUTHENTICATED"
    assert keyed.service.calls == []


async def test_wrong_key_is_401_and_never_echoed(keyed: Http) -> None:
    async with asyncio.timeout(TIMEOUT_S):
        response = await keyed.client.post(
            "/a2a",
            json={"jsonrpc": "2.0", "id": 4, "method": "ListTasks"},
            headers={"X-API-Key": "wrong-key-123456"},
        )
        text = await response.text()
    assert response.status == 401
    assert "wrong-key-123456" not in text


async def test_unauthenticated_bad_body_is_still_401(keyed: Http) -> None:
    async with asyncio.timeout(TIMEOUT_S):
        response = await keyed.client.post(
            "/a2a", data=b"{not json", headers={"Content-Type": "application/json"}
        )
    assert response.status == 401


@pytest.mark.parametrize("header", ["X-API-Key", "Authorization"])
async def test_valid_key_names_the_caller(keyed: Http, header: str) -> None:
    value = KEY if header == "X-API-Key" else f"Bearer {KEY}"
    status, body = await keyed.rpc("ListTasks", {}, headers={header: value})
    assert status == 200 and "result" in body
    assert keyed.service.last[2].caller.name == "alice"


@pytest.mark.parametrize("version", ["2.0", "0.3", "banana", "1"])
async def test_unsupported_version_header(http: Http, version: str) -> None:
    status, body = await http.rpc("ListTasks", {}, request_id=3, headers={"A2A-Version": version})
    assert status == 200
    error = assert_error(body, -32009, 3)
    assert error["data"][0]["reason"] == "VERSION_NOT_SUPPORTED"
    assert http.service.calls == []


async def test_version_query_parameter(http: Http) -> None:
    status, body = await http.rpc("ListTasks", {}, path="/a2a?A2A-Version=1.0")
    assert status == 200 and "result" in body
    assert http.service.last[2].version == "1.0"
    status, body = await http.rpc("ListTasks", {}, path="/a2a?A2A-Version=3.1")
    assert body["error"]["code"] == -32009


async def test_version_header_wins_and_patch_is_ignored(http: Http) -> None:
    _, body = await http.rpc(
        "ListTasks", {}, path="/a2a?A2A-Version=9.0", headers={"A2A-Version": "1.0.7"}
    )
    assert "result" in body
    assert http.service.last[2].version == "1.0"


async def test_extensions_are_parsed_and_activated_ones_echoed(http: Http) -> None:
    async with asyncio.timeout(TIMEOUT_S):
        response = await http.client.post(
            "/a2a",
            json={"jsonrpc": "2.0", "id": 1, "method": "ListTasks"},
            headers={
                "A2A-Extensions": "urn:test:echo, urn:test:other",
                "X-A2A-Extensions": "urn:test:legacy",
            },
        )
        await response.read()
    context = http.service.last[2]
    assert context.extensions == {"urn:test:echo", "urn:test:other", "urn:test:legacy"}
    assert response.headers["A2A-Extensions"] == "urn:test:echo"


async def test_no_extension_header_without_activation(http: Http) -> None:
    async with asyncio.timeout(TIMEOUT_S):
        response = await http.client.post(
            "/a2a", json={"jsonrpc": "2.0", "id": 1, "method": "ListTasks"}
        )
        await response.read()
    assert "A2A-Extensions" not in response.headers


async def test_jsonrpc_mounted_at_slash(start_http: Starter) -> None:
    http = await start_http(config=ServerConfig(mounts=Mounts(jsonrpc="/")))
    status, body = await http.rpc("ListTasks", {}, path="/")
    assert status == 200 and "result" in body
