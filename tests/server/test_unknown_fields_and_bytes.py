"""Unknown fields are ignored and ``bytes`` are strict base64, the same on every HTTP
binding (JSON-RPC and HTTP+JSON, 1.0 and 0.3): a request with an unknown field
anywhere reaches the service exactly as the request without it; a ``bytes`` value with
a character outside the base64 alphabet is InvalidParams naming the field and never
reaches the service."""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Callable
from typing import Any

import pytest
from google.protobuf import message

from .conftest import TIMEOUT_S, Http

V1 = {"A2A-Version": "1.0"}


async def _post(http: Http, path: str, body: Any, headers: dict[str, str]) -> tuple[int, Any]:
    async with asyncio.timeout(TIMEOUT_S):
        response = await http.client.post(path, json=body, headers=headers)
        async with response:
            return response.status, await response.json(content_type=None)


async def jsonrpc(http: Http, method: str, params: Any) -> tuple[int, Any]:
    body = {"jsonrpc": "2.0", "id": "u", "method": method, "params": params}
    return await _post(http, "/a2a", body, V1)


async def jsonrpc03(http: Http, method: str, params: Any) -> tuple[int, Any]:
    body = {"jsonrpc": "2.0", "id": "u", "method": method, "params": params}
    return await _post(http, "/a2a", body, {})


def _error(binding: str, status: int, body: Any) -> dict[str, Any]:
    """The error object of an InvalidParams answer on ``binding``."""
    if binding.startswith("jsonrpc"):
        assert status == 200, body
        assert body["error"]["code"] == -32602, body
        return {"message": body["error"]["message"]}
    assert status == 400, body
    if binding == "rest":
        assert body["error"]["status"] == "INVALID_ARGUMENT", body
        return {"message": body["error"]["message"]}
    assert body["code"] == -32602, body
    return {"message": body["message"]}


# --- 1.0 ------------------------------------------------------------------------------

MESSAGE: dict[str, Any] = {
    "messageId": "m-1",
    "role": "ROLE_USER",
    "parts": [{"text": "hi"}, {"raw": "aGk=", "filename": "a.txt"}],
}

#: (JSON-RPC method, REST method and path, params with unknown keys, the same without)
UNKNOWN_10: list[tuple[str, str, str, dict[str, Any], dict[str, Any]]] = [
    (
        "SendMessage",
        "POST",
        "/message:send",
        {"message": MESSAGE, "x-top": 1},
        {"message": MESSAGE},
    ),
    (
        "SendMessage",
        "POST",
        "/message:send",
        {
            "message": {
                **MESSAGE,
                "kind": "message",
                "parts": [{"text": "hi", "kind": "text"}, {"raw": "aGk=", "z": {"a": [1]}}],
            },
            "configuration": {
                "historyLength": 1,
                "later": True,
                "taskPushNotificationConfig": {
                    "url": "https://hook.example/p",
                    "ttl": 9,
                    "authentication": {"scheme": "Bearer", "realm": "r"},
                },
            },
        },
        {
            "message": {**MESSAGE, "parts": [{"text": "hi"}, {"raw": "aGk="}]},
            "configuration": {
                "historyLength": 1,
                "taskPushNotificationConfig": {
                    "url": "https://hook.example/p",
                    "authentication": {"scheme": "Bearer"},
                },
            },
        },
    ),
    (
        "CreateTaskPushNotificationConfig",
        "POST",
        "/tasks/t-1/pushNotificationConfigs",
        {"taskId": "t-1", "url": "https://hook.example/p", "extra": {"x": 1}},
        {"taskId": "t-1", "url": "https://hook.example/p"},
    ),
    ("CancelTask", "POST", "/tasks/t-1:cancel", {"id": "t-1", "why": "x"}, {"id": "t-1"}),
]


def _rest_body(path: str, params: dict[str, Any]) -> dict[str, Any]:
    body = dict(params)
    if "/tasks/t-1" in path:  # the id rides on the path
        body.pop("taskId", None)
        body.pop("id", None)
    return body


@pytest.mark.parametrize(("method", "verb", "path", "value", "without"), UNKNOWN_10)
async def test_unknown_fields_are_ignored_on_both_1_0_bindings(
    http: Http,
    method: str,
    verb: str,
    path: str,
    value: dict[str, Any],
    without: dict[str, Any],
) -> None:
    received: list[message.Message] = []
    sends: list[Callable[[dict[str, Any]], Any]] = [
        lambda params: jsonrpc(http, method, params),
        lambda params: _post(http, "/a2a/v1" + path, _rest_body(path, params), V1),
    ]
    for send in sends:
        for params in (value, without):
            before = len(http.service.calls)
            await send(copy.deepcopy(params))
            assert len(http.service.calls) == before + 1, params
            received.append(http.service.last[1])
    assert received[0] == received[1] == received[2] == received[3]


async def test_unknown_query_parameters_are_ignored(http: Http) -> None:
    async with asyncio.timeout(TIMEOUT_S):
        for query in ("pageSize=3&sortBy=name", "pageSize=3"):
            response = await http.client.get(f"/a2a/v1/tasks?{query}", headers=V1)
            async with response:
                assert response.status == 200, await response.text()
    assert http.service.calls[0][1] == http.service.calls[1][1]
    assert http.service.calls[0][1].page_size == 3  # type: ignore[attr-defined]


BAD_BASE64 = ["!!!", "aGk!!!", "aG k=", "aGk=\n", "a", "aGk==", "+_8=", "aG-k!!", "_!!!", "é"]


@pytest.mark.parametrize("text", BAD_BASE64)
async def test_bad_base64_is_invalid_params_on_both_1_0_bindings(http: Http, text: str) -> None:
    params = {"message": {**MESSAGE, "parts": [{"text": "a"}, {"raw": text}]}}
    answers = {
        "jsonrpc": await jsonrpc(http, "SendMessage", params),
        "rest": await _post(http, "/a2a/v1/message:send", params, V1),
    }
    for binding, (status, body) in answers.items():
        error = _error(binding, status, body)
        assert error["message"].startswith("message.parts[1].raw: must be base64"), body
    assert http.service.calls == []


@pytest.mark.parametrize(("text", "content"), [("aGk", b"hi"), ("-_8", b"\xfb\xff")])
async def test_unpadded_and_url_safe_base64_are_accepted(
    http: Http, text: str, content: bytes
) -> None:
    params = {"message": {**MESSAGE, "parts": [{"raw": text}]}}
    await jsonrpc(http, "SendMessage", params)
    await _post(http, "/a2a/v1/message:send", params, V1)
    raws = [request.message.parts[0].raw for _, request, _ in http.service.calls]  # type: ignore[attr-defined]
    assert raws == [content, content]


# --- 0.3 ------------------------------------------------------------------------------

MESSAGE03: dict[str, Any] = {
    "kind": "message",
    "messageId": "m-1",
    "role": "user",
    "parts": [
        {"kind": "text", "text": "hi"},
        {"kind": "file", "file": {"bytes": "aGk=", "name": "a.txt"}},
    ],
}


def _file_bytes(value: str) -> dict[str, Any]:
    return {**MESSAGE03, "parts": [{"kind": "file", "file": {"bytes": value, "name": "a"}}]}


UNKNOWN_03: list[tuple[str, dict[str, Any], dict[str, Any]]] = [
    ("message/send", {"message": MESSAGE03, "x-top": 1}, {"message": MESSAGE03}),
    (
        "message/send",
        {
            "message": {
                **MESSAGE03,
                "x": 1,
                "parts": [
                    {"kind": "text", "text": "hi", "y": 2},
                    {"kind": "file", "file": {"bytes": "aGk=", "name": "a.txt", "z": 3}},
                ],
            },
            "configuration": {
                "blocking": True,
                "later": 1,
                "pushNotificationConfig": {"url": "https://hook.example/p", "ttl": 5},
            },
        },
        {
            "message": MESSAGE03,
            "configuration": {
                "blocking": True,
                "pushNotificationConfig": {"url": "https://hook.example/p"},
            },
        },
    ),
    ("tasks/get", {"id": "t-1", "x": 1}, {"id": "t-1"}),
    ("tasks/cancel", {"id": "t-1", "x": 1}, {"id": "t-1"}),
]


@pytest.mark.parametrize(("method", "value", "without"), UNKNOWN_03)
async def test_unknown_fields_are_ignored_on_0_3_jsonrpc(
    http: Http, method: str, value: dict[str, Any], without: dict[str, Any]
) -> None:
    for params in (value, without):
        await jsonrpc03(http, method, copy.deepcopy(params))
    assert len(http.service.calls) == 2
    assert http.service.calls[0][1] == http.service.calls[1][1]


async def test_unknown_fields_are_ignored_on_0_3_rest(http: Http) -> None:
    message = {"messageId": "m-1", "role": "ROLE_USER", "content": [{"text": "hi"}]}
    with_unknown = {
        "message": {**message, "x": 1, "content": [{"text": "hi", "y": 2}]},
        "configuration": {"blocking": True, "z": 3},
        "w": 4,
    }
    for body in (with_unknown, {"message": message, "configuration": {"blocking": True}}):
        status, answer = await _post(http, "/a2a/v1/v1/message:send", body, {})
        assert status == 200, answer
    assert http.service.calls[0][1] == http.service.calls[1][1]


@pytest.mark.parametrize("text", BAD_BASE64)
async def test_bad_base64_is_invalid_params_on_0_3(http: Http, text: str) -> None:
    status, body = await jsonrpc03(http, "message/send", {"message": _file_bytes(text)})
    error = _error("jsonrpc03", status, body)
    assert error["message"].startswith("params.message.parts[0].file.bytes"), body
    rest = {
        "message": {
            "messageId": "m-1",
            "role": "ROLE_USER",
            "content": [{"file": {"fileWithBytes": text, "name": "a"}}],
        }
    }
    status, body = await _post(http, "/a2a/v1/v1/message:send", rest, {})
    error = _error("rest03", status, body)
    assert error["message"].startswith("params.message.parts[0].file.bytes"), body
    assert http.service.calls == []


@pytest.mark.parametrize(("method", "headers"), [("SendMessage", V1), ("message/send", {})])
async def test_unknown_envelope_members_are_ignored(
    http: Http, method: str, headers: dict[str, str]
) -> None:
    params = {"message": MESSAGE} if method == "SendMessage" else {"message": MESSAGE03}
    body = {"jsonrpc": "2.0", "id": "e", "method": method, "params": params, "trace": {"x": 1}}
    status, answer = await _post(http, "/a2a", body, headers)
    assert status == 200 and "result" in answer, answer
    assert answer["id"] == "e"
