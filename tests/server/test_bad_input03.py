"""Malformed A2A 0.3 requests on the wire (server/jsonrpc.py, server/rest.py +
protocol/compat03): every 0.3 JSON-RPC method, each field broken, answers
InvalidParams (-32602, HTTP 200) naming the field by its 0.3 path, never reaches the
service, never an internal error or a hang, and never echoes a secret it was sent.
The same for the 0.3 REST bodies (400 ``InvalidParamsError``)."""

from __future__ import annotations

import asyncio
import copy
import json
from collections.abc import Iterator
from typing import Any

import pytest

from a2a_gateway.protocol import compat03

from .conftest import TIMEOUT_S, Http

SECRET = "s3cr3t-t0ken-value"

MESSAGE: dict[str, Any] = {
    "kind": "message",
    "messageId": "m-1",
    "role": "user",
    "contextId": "c-1",
    "referenceTaskIds": ["t-0"],
    "extensions": ["urn:x"],
    "metadata": {"a": 1},
    "parts": [
        {"kind": "text", "text": "x", "metadata": {"a": 1}},
        {"kind": "file", "file": {"bytes": "aGk=", "mimeType": "a/b", "name": "n"}},
        {"kind": "file", "file": {"uri": "https://files.example/u", "name": "n"}},
        {"kind": "data", "data": {"value": [1]}, "metadata": {"data_part_compat": True}},
        {"kind": "data", "data": {"a": 1}},
    ],
}
PUSH: dict[str, Any] = {
    "id": "p-1",
    "url": "https://hook.example/a",
    "token": SECRET,
    "authentication": {"schemes": ["Bearer"], "credentials": SECRET},
}

#: A valid request per 0.3 method: the template every broken one is made from.
VALID: dict[str, dict[str, Any]] = {
    "message/send": {
        "message": MESSAGE,
        "configuration": {
            "acceptedOutputModes": ["text/plain"],
            "historyLength": 2,
            "blocking": True,
            "pushNotificationConfig": PUSH,
        },
        "metadata": {"a": 1},
    },
    "message/stream": {"message": MESSAGE},
    "tasks/get": {"id": "t-1", "historyLength": 2},
    "tasks/cancel": {"id": "t-1", "metadata": {"a": 1}},
    "tasks/resubscribe": {"id": "t-1"},
    "tasks/pushNotificationConfig/set": {"taskId": "t-1", "pushNotificationConfig": PUSH},
    "tasks/pushNotificationConfig/get": {"id": "t-1", "pushNotificationConfigId": "p-1"},
    "tasks/pushNotificationConfig/list": {"id": "t-1"},
    "tasks/pushNotificationConfig/delete": {"id": "t-1", "pushNotificationConfigId": "p-1"},
    "tasks/list": {
        "contextId": "c-1",
        "status": "working",
        "pageSize": 5,
        "pageToken": "",
        "historyLength": 1,
        "statusTimestampAfter": "2026-01-01T00:00:00Z",
        "includeArtifacts": True,
    },
}

#: (method, field path, bad value, field the error must name): one per kind of mistake.
TABLE: list[tuple[str, tuple[Any, ...], Any, str]] = [
    ("message/send", ("message",), None, "params.message"),
    ("message/send", ("message",), [], "params.message"),
    ("message/send", ("message", "role"), "ROLE_USER", "params.message.role"),
    ("message/send", ("message", "messageId"), 7, "params.message.messageId"),
    ("message/send", ("message", "contextId"), {}, "params.message.contextId"),
    ("message/send", ("message", "referenceTaskIds"), "t-0", "params.message.referenceTaskIds"),
    ("message/send", ("message", "extensions"), [1], "params.message.extensions"),
    ("message/send", ("message", "metadata"), "x", "params.message.metadata"),
    ("message/send", ("message", "parts"), [], "params.message.parts"),
    ("message/send", ("message", "parts", 0, "kind"), "image", "params.message.parts[0].kind"),
    ("message/send", ("message", "parts", 0, "text"), 1, "params.message.parts[0].text"),
    ("message/send", ("message", "parts", 0, "metadata"), 1, "params.message.parts[0].metadata"),
    ("message/send", ("message", "parts", 1, "file"), "f", "params.message.parts[1].file"),
    (
        "message/send",
        ("message", "parts", 1, "file", "bytes"),
        "%%",
        "params.message.parts[1].file.bytes",
    ),
    (
        "message/send",
        ("message", "parts", 1, "file", "mimeType"),
        3,
        "params.message.parts[1].file.mimeType",
    ),
    (
        "message/send",
        ("message", "parts", 2, "file", "uri"),
        3,
        "params.message.parts[2].file.uri",
    ),
    ("message/send", ("message", "parts", 3, "data"), {}, "params.message.parts[3].data.value"),
    ("message/send", ("message", "parts", 4, "data"), [1], "params.message.parts[4].data"),
    ("message/send", ("configuration",), 1, "params.configuration"),
    (
        "message/send",
        ("configuration", "acceptedOutputModes"),
        "text/plain",
        "params.configuration.acceptedOutputModes",
    ),
    ("message/send", ("configuration", "blocking"), "no", "params.configuration.blocking"),
    (
        "message/send",
        ("configuration", "historyLength"),
        -1,
        "params.configuration.historyLength",
    ),
    (
        "message/send",
        ("configuration", "historyLength"),
        1.5,
        "params.configuration.historyLength",
    ),
    (
        "message/send",
        ("configuration", "pushNotificationConfig", "url"),
        None,
        "params.configuration.pushNotificationConfig.url",
    ),
    (
        "message/send",
        ("configuration", "pushNotificationConfig", "authentication", "schemes"),
        "Bearer",
        "params.configuration.pushNotificationConfig.authentication.schemes",
    ),
    ("message/send", ("metadata",), [1], "params.metadata"),
    ("message/stream", ("message", "role"), None, "params.message.role"),
    ("tasks/get", ("id",), None, "params.id"),
    ("tasks/get", ("id",), 5, "params.id"),
    ("tasks/get", ("historyLength",), "2", "params.historyLength"),
    ("tasks/cancel", ("id",), "", "params.id"),
    ("tasks/cancel", ("metadata",), "m", "params.metadata"),
    ("tasks/resubscribe", ("id",), [], "params.id"),
    ("tasks/pushNotificationConfig/set", ("taskId",), None, "params.taskId"),
    (
        "tasks/pushNotificationConfig/set",
        ("pushNotificationConfig",),
        None,
        "params.pushNotificationConfig",
    ),
    (
        "tasks/pushNotificationConfig/set",
        ("pushNotificationConfig", "token"),
        5,
        "params.pushNotificationConfig.token",
    ),
    (
        "tasks/pushNotificationConfig/set",
        ("pushNotificationConfig", "authentication", "credentials"),
        ["x"],
        "params.pushNotificationConfig.authentication.credentials",
    ),
    ("tasks/pushNotificationConfig/get", ("id",), None, "params.id"),
    (
        "tasks/pushNotificationConfig/get",
        ("pushNotificationConfigId",),
        1,
        "params.pushNotificationConfigId",
    ),
    ("tasks/pushNotificationConfig/list", ("id",), 1, "params.id"),
    ("tasks/pushNotificationConfig/delete", ("id",), None, "params.id"),
    ("tasks/list", ("contextId",), 1, "params.contextId"),
    ("tasks/list", ("status",), "TASK_STATE_DONE", "params.status"),
    ("tasks/list", ("pageSize",), 1.5, "params.pageSize"),
    ("tasks/list", ("pageSize",), True, "params.pageSize"),
    ("tasks/list", ("pageToken",), [], "params.pageToken"),
    ("tasks/list", ("historyLength",), "1", "params.historyLength"),
    ("tasks/list", ("statusTimestampAfter",), "2026-13-01", "params.statusTimestampAfter"),
    ("tasks/list", ("includeArtifacts",), 1, "params.includeArtifacts"),
]


def broken(method: str, path: tuple[Any, ...], value: Any) -> dict[str, Any]:
    params = copy.deepcopy(VALID[method])
    holder: Any = params
    for key in path[:-1]:
        holder = holder[key]
    if value is None and isinstance(holder, dict):
        holder.pop(path[-1], None)
    else:
        holder[path[-1]] = value
    return params


async def post(http: Http, method: str, params: Any) -> tuple[int, str, Any]:
    body = {"jsonrpc": "2.0", "id": "bad", "method": method, "params": params}
    async with asyncio.timeout(TIMEOUT_S):
        response = await http.client.post("/a2a", json=body)
        async with response:
            raw = await response.read()
    return response.status, response.headers["Content-Type"], json.loads(raw)


def test_every_template_is_valid() -> None:
    for method, params in VALID.items():
        compat03.METHODS[method].parse(params)


@pytest.mark.parametrize(
    ("method", "path", "value", "field"), TABLE, ids=[f"{m}:{f}" for m, _, _, f in TABLE]
)
async def test_bad_field_is_invalid_params_naming_it(
    http: Http, method: str, path: tuple[Any, ...], value: Any, field: str
) -> None:
    status, content_type, body = await post(http, method, broken(method, path, value))
    assert status == 200 and content_type.startswith("application/json"), body
    assert body["id"] == "bad" and "result" not in body
    error = body["error"]
    assert error["code"] == -32602, error
    assert error["message"].startswith(field), error
    assert [v["field"] for v in error["data"]["fieldViolations"]] == [field]
    assert SECRET not in json.dumps(body)
    assert http.service.calls == []


_WRONG: tuple[Any, ...] = (None, 0, -1, 2.5, True, "", "x", [], [1], {}, {"k": 1}, 2**70)


def _mutations() -> Iterator[tuple[str, tuple[Any, ...], Any]]:
    def paths(value: Any, prefix: tuple[Any, ...]) -> Iterator[tuple[Any, ...]]:
        items: Any = ()
        if isinstance(value, dict):
            items = value.items()
        elif isinstance(value, list):
            items = enumerate(value)
        for key, inner in items:
            yield (*prefix, key)
            yield from paths(inner, (*prefix, key))

    for method, params in VALID.items():
        for path in paths(params, ()):
            for wrong in _WRONG:
                yield method, path, wrong


async def test_no_malformed_field_is_an_internal_error_or_leaks_a_secret(http: Http) -> None:
    """Every field of every method set to every wrong JSON type: the answer is a result
    or a 0.3 client error (never -32603), and never contains a sent secret."""
    seen = 0
    for method, path, wrong in _mutations():
        params = broken(method, path, wrong)
        if method == "message/stream":
            continue  # its valid answers are streams; the same parser as message/send
        status, _, body = await post(http, method, params)
        assert status == 200, (method, path, wrong, body)
        assert body.get("error", {}).get("code") != -32603, (method, path, wrong, body)
        assert SECRET not in json.dumps(body.get("error", {})), (method, path, wrong)
        seen += 1
    assert seen > 300


REST_SEND: dict[str, Any] = {
    "message": {
        "messageId": "m-1",
        "role": "ROLE_USER",
        "content": [{"text": "x"}, {"file": {"fileWithUri": "https://f.example/a"}}],
    },
    "configuration": {"blocking": True, "pushNotification": PUSH},
}


@pytest.mark.parametrize(
    ("path", "value", "field"),
    [
        (("message",), None, "params.message"),
        (("message", "role"), "agent-ish", "params.message.role"),
        (("message", "content"), [], "params.message.parts"),
        (("message", "content", 0, "text"), 5, "params.message.parts[0].text"),
        (("message", "content", 1, "file"), {}, "params.message.parts[1].file"),
        (("configuration", "historyLength"), -3, "params.configuration.historyLength"),
        (("configuration", "blocking"), "yes", "params.configuration.blocking"),
        (
            ("configuration", "acceptedOutputModes"),
            "a/b",
            "params.configuration.acceptedOutputModes",
        ),
        (("metadata",), [1], "params.metadata"),
        (
            ("configuration", "pushNotification", "url"),
            None,
            "params.configuration.pushNotificationConfig.url",
        ),
    ],
)
async def test_bad_rest_body_is_invalid_params(
    http: Http, path: tuple[Any, ...], value: Any, field: str
) -> None:
    body = copy.deepcopy(REST_SEND)
    holder: Any = body
    for key in path[:-1]:
        holder = holder[key]
    if value is None:
        holder.pop(path[-1])
    else:
        holder[path[-1]] = value
    async with asyncio.timeout(TIMEOUT_S):
        response = await http.client.post("/a2a/v1/v1/message:send", json=body)
        async with response:
            answer = await response.json()
    assert response.status == 400, answer
    assert answer["type"] == "InvalidParamsError" and answer["code"] == -32602
    assert answer["message"].startswith(field), answer
    assert SECRET not in json.dumps(answer)
    assert http.service.calls == []
