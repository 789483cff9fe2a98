"""A2A 0.3 HTTP+JSON on the wire (server/rest.py + protocol/compat03): the ``/v1``
paths below the REST mount, 0.3 ProtoJSON bodies, errors, the version rule, SSE."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from a2a_gateway.protocol import errors
from lf.a2a.v1 import a2a_pb2 as pb
from tests.support.echo import make_error

from .conftest import TIMEOUT_S, Http

BASE = "/a2a/v1/v1"  # the default REST mount, then the 0.3 prefix


async def call(
    http: Http,
    method: str,
    path: str,
    body: Any = None,
    headers: dict[str, str] | None = None,
) -> tuple[int, Any, Any]:
    """(status, decoded body or None, headers) of one request."""
    async with asyncio.timeout(TIMEOUT_S):
        response = await http.client.request(method, BASE + path, json=body, headers=headers)
        async with response:
            raw = await response.read()
    return response.status, json.loads(raw) if raw else None, response.headers


async def sse(http: Http, method: str, path: str, body: Any = None) -> tuple[str, list[Any]]:
    async with asyncio.timeout(TIMEOUT_S):
        response = await http.client.request(method, BASE + path, json=body)
        async with response:
            raw = (await response.read()).decode()
    events = [json.loads(x[6:]) for x in raw.splitlines() if x.startswith("data: ")]
    return response.headers["Content-Type"], events


def send_body(text: str, message_id: str = "m-1", **extra: Any) -> dict[str, Any]:
    """A 0.3 REST SendMessageRequest as the SDK's 0.3 client sends it (snake_case)."""
    return {
        "request": {"message_id": message_id, "role": "ROLE_USER", "content": [{"text": text}]},
        **extra,
    }


def last_request(http: Http) -> Any:
    return http.service.last[1]


async def test_send_returns_a_0_3_task(http: Http) -> None:
    status, body, _ = await call(http, "POST", "/message:send", send_body("hi"))
    assert status == 200
    task = body["task"]
    assert task["status"] == {"state": "TASK_STATE_COMPLETED"}
    assert task["artifacts"] == [{"artifactId": "a-1", "parts": [{"text": "echo: hi"}]}]
    assert task["history"][0] == {
        "messageId": "m-1",
        "role": "ROLE_USER",
        "content": [{"text": "hi"}],
    }
    name, request, context = http.service.last
    assert name == "send_message" and context.version == "0.3"
    # blocking is a proto3 bool on 0.3 REST: no configuration at all is non-blocking too
    assert request.configuration.return_immediately


async def test_blocking_is_a_proto3_bool_in_a_configuration(http: Http) -> None:
    await call(http, "POST", "/message:send", send_body("x", configuration={}))
    assert last_request(http).configuration.return_immediately
    await call(http, "POST", "/message:send", send_body("x", configuration={"blocking": True}))
    assert not last_request(http).configuration.return_immediately


async def test_file_data_parts_and_inline_push(http: Http) -> None:
    body = {
        "message": {
            "messageId": "m-2",
            "role": "ROLE_USER",
            "content": [
                {"text": "see"},
                {"file": {"fileWithBytes": "aGk=", "mimeType": "text/plain", "name": "a.txt"}},
                {"file": {"fileWithUri": "https://x.example/f"}},
                {"data": {"data": {"k": 1}}},
            ],
        },
        "configuration": {
            "blocking": True,
            "pushNotification": {
                "url": "https://hook.example",
                "authentication": {"schemes": ["Bearer"]},
            },
        },
    }
    status, _, _ = await call(http, "POST", "/message:send", body)
    assert status == 200
    request = last_request(http)
    assert isinstance(request, pb.SendMessageRequest)
    parts = request.message.parts
    assert (parts[1].raw, parts[1].media_type, parts[1].filename) == (b"hi", "text/plain", "a.txt")
    assert parts[2].url == "https://x.example/f"
    assert parts[3].data.struct_value.fields["k"].number_value == 1
    push = request.configuration.task_push_notification_config
    assert (push.url, push.authentication.scheme) == ("https://hook.example", "Bearer")


async def test_message_reply(http: Http) -> None:
    _, body, _ = await call(http, "POST", "/message:send", send_body("x", metadata={"reply": 1}))
    assert body == {
        "message": {"messageId": "r-1", "role": "ROLE_AGENT", "content": [{"text": "hi"}]}
    }


async def test_get_and_cancel(http: Http) -> None:
    _, sent, _ = await call(http, "POST", "/message:send", send_body("hi"))
    task_id = sent["task"]["id"]
    status, got, _ = await call(http, "GET", f"/tasks/{task_id}?historyLength=1")
    assert status == 200 and got["id"] == task_id
    assert last_request(http).history_length == 1
    status, canceled, _ = await call(http, "POST", f"/tasks/{task_id}:cancel")
    assert status == 200 and canceled["status"]["state"] == "TASK_STATE_CANCELLED"


async def test_push_config_crud(http: Http) -> None:
    create = {
        "parent": "tasks/t-1",
        "config_id": "cfg",
        "config": {
            "name": "tasks/t-1/pushNotificationConfigs/cfg",
            "push_notification_config": {"id": "cfg", "url": "https://hook.example/a"},
        },
    }
    expected = {
        "name": "tasks/t-1/pushNotificationConfigs/cfg",
        "pushNotificationConfig": {"url": "https://hook.example/a", "id": "cfg"},
    }
    status, created, _ = await call(http, "POST", "/tasks/t-1/pushNotificationConfigs", create)
    assert (status, created) == (200, expected)
    _, got, _ = await call(http, "GET", "/tasks/t-1/pushNotificationConfigs/cfg")
    assert got == expected
    _, listed, _ = await call(http, "GET", "/tasks/t-1/pushNotificationConfigs")
    assert listed == {"configs": [expected]}
    status, deleted, _ = await call(http, "DELETE", "/tasks/t-1/pushNotificationConfigs/cfg")
    assert (status, deleted) == (200, {})
    status, gone, _ = await call(http, "GET", "/tasks/t-1/pushNotificationConfigs/cfg")
    assert status == 404 and gone["type"] == "TaskNotFoundError" and gone["code"] == -32001


async def test_the_js_sdk_push_config_body_is_accepted(http: Http) -> None:
    """@a2a-js/sdk 0.3's REST client POSTs the bare TaskPushNotificationConfig (ts-proto
    JSON: default values left out), not the SDK's CreateTaskPushNotificationConfigRequest."""
    js_bodies = [
        {
            "name": "tasks/t-1/pushNotificationConfigs/js-1",
            "pushNotificationConfig": {"id": "js-1", "url": "https://hook.example/js"},
        },
        {  # no id in the config: the name's last segment is the id
            "name": "tasks/t-1/pushNotificationConfigs/js-2",
            "pushNotificationConfig": {"url": "https://hook.example/js", "token": "tok-js"},
        },
    ]
    for config_id, body in zip(("js-1", "js-2"), js_bodies, strict=True):
        status, created, _ = await call(http, "POST", "/tasks/t-1/pushNotificationConfigs", body)
        assert status == 200, created
        assert created["name"] == f"tasks/t-1/pushNotificationConfigs/{config_id}"
        assert created["pushNotificationConfig"]["id"] == config_id
    stored = last_request(http)
    assert (stored.task_id, stored.id, stored.token) == ("t-1", "js-2", "tok-js")


async def test_extended_card_is_a_0_3_card(http: Http) -> None:
    status, card, _ = await call(http, "GET", "/card")
    assert status == 200 and card["protocolVersion"] == "0.3.0"
    assert card["additionalInterfaces"][0]["transport"] == "HTTP+JSON"


async def test_stream_events_are_0_3_stream_responses(http: Http) -> None:
    body = send_body("x", metadata={"chunks": 2})
    content_type, events = await sse(http, "POST", "/message:stream", body)
    assert content_type.startswith("text/event-stream")
    assert [next(iter(e)) for e in events] == [
        "task",
        "artifactUpdate",
        "artifactUpdate",
        "statusUpdate",
    ]
    assert events[1]["artifactUpdate"]["artifact"]["parts"] == [{"text": "chunk 0"}]
    assert events[2]["artifactUpdate"]["append"] is True
    final = events[-1]["statusUpdate"]
    assert final["status"]["state"] == "TASK_STATE_COMPLETED" and final["final"] is True


async def test_subscribe_by_get_and_post(http: Http) -> None:
    _, sent, _ = await call(http, "POST", "/message:send", send_body("hi"))
    task_id = sent["task"]["id"]
    for verb in ("GET", "POST"):
        _, events = await sse(http, verb, f"/tasks/{task_id}:subscribe")
        assert [next(iter(e)) for e in events] == ["task", "statusUpdate"]


# --- errors and the version rule ---------------------------------------------------------


async def test_unknown_task(http: Http) -> None:
    status, body, _ = await call(http, "GET", "/tasks/nope")
    assert status == 404
    assert body["type"] == "TaskNotFoundError" and body["code"] == -32001
    assert body["data"]["taskId"] == "nope"


async def test_bad_body_names_the_field(http: Http) -> None:
    body = {"request": {"message_id": "m", "role": "ROLE_USER", "content": []}}
    status, error, _ = await call(http, "POST", "/message:send", body)
    assert status == 400 and error["type"] == "InvalidParamsError"
    assert "parts" in error["message"]
    assert http.service.calls == []


async def test_wrong_method_is_405_with_allow(http: Http) -> None:
    status, body, headers = await call(http, "PUT", "/message:send", {})
    assert status == 405 and headers["Allow"] == "POST"
    assert body["type"] == "MethodNotAllowedError"


async def test_stream_error_before_start_is_plain_json(http: Http) -> None:
    async with asyncio.timeout(TIMEOUT_S):
        response = await http.client.post(BASE + "/tasks/nope:subscribe")
        async with response:
            body = await response.json()
    assert response.status == 404 and body["type"] == "TaskNotFoundError"


async def test_1_0_only_error_keeps_its_name(http: Http) -> None:
    http.service.failures["m-x"] = make_error(errors.VersionNotSupportedError, "m-x")
    status, body, _ = await call(http, "POST", "/message:send", send_body("x", "m-x"))
    assert status == 400
    assert body["type"] == "VersionNotSupportedError" and body["code"] == -32603


async def test_version_rule(http: Http) -> None:
    for value in ("0.3", "0.3.2"):
        status, _, _ = await call(
            http, "GET", "/tasks/t/pushNotificationConfigs", headers={"A2A-Version": value}
        )
        assert status == 200
    status, body, _ = await call(
        http, "GET", "/tasks/t/pushNotificationConfigs", headers={"A2A-Version": "1.0"}
    )
    # the version rule's refusal in the 1.0 shape (0.3 has none for it)
    assert status == 400 and body["error"]["details"][0]["reason"] == "VERSION_NOT_SUPPORTED"
    # a 1.0 path never takes 0.3
    async with asyncio.timeout(TIMEOUT_S):
        response = await http.client.get("/a2a/v1/tasks", headers={"A2A-Version": "0.3"})
        async with response:
            body = await response.json()
    assert response.status == 400
    assert body["error"]["details"][0]["reason"] == "VERSION_NOT_SUPPORTED"


async def test_version_rule_in_the_query(http: Http) -> None:
    status, body, _ = await call(http, "GET", "/tasks/t/pushNotificationConfigs?A2A-Version=0.3")
    assert status == 200, body
    status, body, _ = await call(http, "GET", "/tasks/a%2Fb?historyLength=1&A2A-Version=0.3")
    assert status == 404 and body["data"]["taskId"] == "a/b", body  # the path kept as sent
    status, body, _ = await call(http, "GET", "/tasks/t/pushNotificationConfigs?A2A-Version=1.0")
    assert status == 400 and body["error"]["details"][0]["reason"] == "VERSION_NOT_SUPPORTED"
    async with asyncio.timeout(TIMEOUT_S):
        response = await http.client.get("/a2a/v1/tasks?A2A-Version=0.3")
        async with response:
            body = await response.json()
    assert response.status == 400
    assert body["error"]["details"][0]["reason"] == "VERSION_NOT_SUPPORTED"


async def test_1_0_paths_are_untouched(http: Http) -> None:
    async with asyncio.timeout(TIMEOUT_S):
        response = await http.client.get("/a2a/v1/tasks", headers={"A2A-Version": "1.0"})
        async with response:
            body = await response.json()
    assert response.status == 200 and "tasks" in body
    # an unknown /v1 path is not a 0.3 route: the 1.0 router answers (tenant "v1")
    status, body, _ = await call(http, "GET", "/nothing/here")
    assert status == 404 and "error" in body
