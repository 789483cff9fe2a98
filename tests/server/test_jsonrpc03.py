"""A2A 0.3 JSON-RPC methods on the wire (server/jsonrpc.py + protocol/compat03):
each method, errors in 0.3 codes, the version header rule, SSE shapes, the card."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from a2a_gateway.client import cards as client_cards
from a2a_gateway.protocol import errors
from lf.a2a.v1 import a2a_pb2 as pb
from tests.support.echo import make_error

from .conftest import TIMEOUT_S, Http

CARD_PATH = "/.well-known/agent-card.json"


def message03(text: str, message_id: str = "m-1", **extra: Any) -> dict[str, Any]:
    return {
        "message": {
            "kind": "message",
            "messageId": message_id,
            "role": "user",
            "parts": [{"kind": "text", "text": text}],
        },
        **extra,
    }


def assert_error03(body: Any, code: int, request_id: Any) -> dict[str, Any]:
    assert body["jsonrpc"] == "2.0" and body["id"] == request_id, body
    assert "result" not in body
    error: dict[str, Any] = body["error"]
    assert error["code"] == code, error
    assert isinstance(error["message"], str) and error["message"]
    return error


async def stream(
    http: Http, method: str, params: Any, request_id: Any = 7, headers: dict[str, str] | None = None
) -> tuple[str, str, list[dict[str, Any]]]:
    """POST a streaming call; (content type, raw body, decoded data payloads)."""
    body = {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}
    async with asyncio.timeout(TIMEOUT_S):
        response = await http.client.post("/a2a", json=body, headers=headers)
        async with response:
            raw = (await response.read()).decode()
    content_type = response.headers["Content-Type"]
    events = [
        json.loads(line.removeprefix("data: "))
        for line in raw.splitlines()
        if line.startswith("data: ")
    ]
    return content_type, raw, events


# --- each method -----------------------------------------------------------------------


async def test_message_send_returns_a_bare_task(http: Http) -> None:
    status, body = await http.rpc("message/send", message03("hi"), request_id="s1")
    assert status == 200 and body["id"] == "s1"
    task = body["result"]
    assert task["kind"] == "task" and task["status"] == {"state": "completed"}
    assert task["artifacts"] == [
        {"artifactId": "a-1", "parts": [{"kind": "text", "text": "echo: hi"}]}
    ]
    assert task["history"][0]["role"] == "user" and task["history"][0]["kind"] == "message"
    name, request, context = http.service.last
    assert name == "send_message" and context.version == "0.3"
    assert isinstance(request, pb.SendMessageRequest)
    assert request.message.role == pb.ROLE_USER
    assert not request.configuration.return_immediately  # blocking by default


async def test_message_send_blocking_false_and_a_message_reply(http: Http) -> None:
    params = message03("x", configuration={"blocking": False}, metadata={"reply": True})
    _, body = await http.rpc("message/send", params)
    assert body["result"] == {
        "kind": "message",
        "messageId": "r-1",
        "role": "agent",
        "parts": [{"kind": "text", "text": "hi"}],
    }
    request = http.service.last[1]
    assert isinstance(request, pb.SendMessageRequest)
    assert request.configuration.return_immediately


async def test_tasks_get_and_cancel(http: Http) -> None:
    _, sent = await http.rpc("message/send", message03("hi"))
    task_id = sent["result"]["id"]
    _, got = await http.rpc("tasks/get", {"id": task_id, "historyLength": 1})
    assert got["result"]["kind"] == "task" and got["result"]["id"] == task_id
    _, canceled = await http.rpc("tasks/cancel", {"id": task_id})
    assert canceled["result"]["status"]["state"] == "canceled"


async def test_push_config_crud(http: Http) -> None:
    config = {"id": "cfg", "url": "https://hook.example/a", "token": "t0k"}
    _, created = await http.rpc(
        "tasks/pushNotificationConfig/set", {"taskId": "t-1", "pushNotificationConfig": config}
    )
    assert created["result"] == {"taskId": "t-1", "pushNotificationConfig": config}
    request = http.service.last[1]
    assert isinstance(request, pb.TaskPushNotificationConfig)
    assert (request.task_id, request.id) == ("t-1", "cfg")
    _, got = await http.rpc(
        "tasks/pushNotificationConfig/get", {"id": "t-1", "pushNotificationConfigId": "cfg"}
    )
    assert got["result"]["pushNotificationConfig"]["id"] == "cfg"
    _, listed = await http.rpc("tasks/pushNotificationConfig/list", {"id": "t-1"})
    assert listed["result"] == [created["result"]]
    status, deleted = await http.rpc(
        "tasks/pushNotificationConfig/delete", {"id": "t-1", "pushNotificationConfigId": "cfg"}
    )
    assert status == 200 and "result" in deleted and deleted["result"] is None
    _, listed = await http.rpc("tasks/pushNotificationConfig/list", {"id": "t-1"})
    assert listed["result"] == []
    _, missing = await http.rpc("tasks/pushNotificationConfig/get", {"id": "t-1"})
    assert_error03(missing, -32001, 1)


async def test_authenticated_extended_card_is_a_0_3_card(http: Http) -> None:
    _, body = await http.rpc("agent/getAuthenticatedExtendedCard")
    card = body["result"]
    assert card["url"].endswith("/a2a") and card["preferredTransport"] == "JSONRPC"
    assert card["protocolVersion"] == "0.3.0"
    assert "supportedInterfaces" not in card  # a plain 0.3 card, not the hybrid


# --- errors ----------------------------------------------------------------------------


async def test_unknown_task_is_task_not_found(http: Http) -> None:
    _, body = await http.rpc("tasks/get", {"id": "nope"}, request_id=9)
    error = assert_error03(body, -32001, 9)
    assert error["data"]["reason"] == "TASK_NOT_FOUND" and error["data"]["taskId"] == "nope"


async def test_bad_params_name_the_0_3_field(http: Http) -> None:
    params = message03("x")
    params["message"]["role"] = "ROLE_USER"  # a 1.0 enum in a 0.3 call
    _, body = await http.rpc("message/send", params, request_id="b")
    error = assert_error03(body, -32602, "b")
    assert "params.message.role" in error["message"]
    assert http.service.calls == []


async def test_1_0_only_errors_become_internal_error(http: Http) -> None:
    http.service.failures["m-x"] = make_error(errors.ExtensionSupportRequiredError, "m-x")
    _, body = await http.rpc("message/send", message03("x", "m-x"))
    error = assert_error03(body, -32603, 1)
    assert error["data"]["reason"] == "EXTENSION_SUPPORT_REQUIRED"


async def test_a_0_3_error_keeps_its_code(http: Http) -> None:
    http.service.failures["t-2"] = make_error(errors.TaskNotCancelableError, "t-2")
    _, body = await http.rpc("tasks/cancel", {"id": "t-2"})
    assert_error03(body, -32002, 1)


async def test_tasks_list_calls_list_tasks(http: Http) -> None:
    """Not in the 0.3 spec, but deployed 0.3 peers call it (issue 10 item 12)."""
    http.service.tasks["t-9"] = pb.Task(
        id="t-9", context_id="c-9", status=pb.TaskStatus(state=pb.TASK_STATE_WORKING)
    )
    params = {"contextId": "c-9", "status": "working", "pageSize": 3, "pageToken": "p"}
    _, body = await http.rpc("tasks/list", params, request_id=8)
    assert body["id"] == 8
    assert body["result"] == {
        "tasks": [
            {"kind": "task", "id": "t-9", "contextId": "c-9", "status": {"state": "working"}}
        ],
        "nextPageToken": "",
        "pageSize": 3,
        "totalSize": 1,
    }
    name, request, context = http.service.last
    assert name == "list_tasks" and context.version == "0.3"
    assert request == pb.ListTasksRequest(
        context_id="c-9", status=pb.TASK_STATE_WORKING, page_size=3, page_token="p"
    )


@pytest.mark.server_fault
async def test_service_crash_is_a_plain_internal_error(http: Http) -> None:
    http.service.failures["m-c"] = RuntimeError("secret internal detail")
    _, body = await http.rpc("message/send", message03("x", "m-c"))
    error = assert_error03(body, -32603, 1)
    assert "secret" not in json.dumps(body)
    assert error["message"] == "Internal error"


# --- version header and extensions -------------------------------------------------------


async def test_0_3_method_accepts_no_header_or_0_3(http: Http) -> None:
    for headers in (None, {"A2A-Version": "0.3"}, {"A2A-Version": "0.3.0"}):
        _, body = await http.rpc("tasks/pushNotificationConfig/list", {"id": "t"}, headers=headers)
        assert body.get("result") == [], body


async def test_0_3_method_refuses_a_1_0_header(http: Http) -> None:
    headers = {"A2A-Version": "1.0"}
    _, body = await http.rpc("message/send", message03("x"), request_id=4, headers=headers)
    # The version rule's refusal in the 1.0 vocabulary (0.3 has no code for it).
    assert body["id"] == 4 and body["error"]["code"] == -32009
    assert body["error"]["data"][0]["reason"] == "VERSION_NOT_SUPPORTED"
    # the same rule and words as the 0.3 gRPC service (versioning.negotiate_legacy_version)
    assert body["error"]["message"] == (
        "A2A-Version '1.0' does not match the 0.3 operation 'message/send': "
        "send no A2A-Version, or 0.3 (served: 1.0, 0.3)"
    )
    assert http.service.calls == []


async def test_1_0_method_still_refuses_a_0_3_header(http: Http) -> None:
    _, body = await http.rpc("ListTasks", {}, request_id=3, headers={"A2A-Version": "0.3"})
    assert body["error"]["code"] == -32009 and body["id"] == 3
    assert body["error"]["data"][0]["reason"] == "VERSION_NOT_SUPPORTED"
    _, body = await http.rpc("ListTasks", {}, headers={"A2A-Version": "1.0"})
    assert "result" in body


async def test_0_3_version_in_the_query_is_the_header_s_rule(http: Http) -> None:
    """``?A2A-Version=`` is read like the header (digest §9), so a 0.3 value there is a
    0.3 call, and still refused for a 1.0 method."""
    for value in ("0.3", "0.3.0"):
        path = f"/a2a?A2A-Version={value}"
        _, body = await http.rpc("tasks/pushNotificationConfig/list", {"id": "t"}, path=path)
        assert body.get("result") == [], body
    _, body = await http.rpc("ListTasks", {}, path="/a2a?A2A-Version=0.3")
    assert body["error"]["code"] == -32009 and body["id"] == 1
    _, body = await http.rpc(
        "message/send", message03("x"), request_id=5, path="/a2a?A2A-Version=1.0"
    )
    assert body["id"] == 5 and body["error"]["code"] == -32009  # the 1.0 vocabulary


async def test_legacy_extensions_header_is_read(http: Http) -> None:
    async with asyncio.timeout(TIMEOUT_S):
        response = await http.client.post(
            "/a2a",
            json={"jsonrpc": "2.0", "id": 1, "method": "message/send", "params": message03("x")},
            headers={"X-A2A-Extensions": "urn:test:echo", "A2A-Version": "0.3"},
        )
        async with response:
            body = await response.json()
    assert body["result"]["kind"] == "task"
    assert response.headers["A2A-Extensions"] == "urn:test:echo"
    assert "urn:test:echo" in http.service.last[2].extensions


# --- streams ---------------------------------------------------------------------------


async def test_message_stream_events_are_bare_0_3_objects(http: Http) -> None:
    params = message03("x", metadata={"chunks": 3})
    content_type, raw, events = await stream(http, "message/stream", params, request_id="st")
    assert content_type.startswith("text/event-stream")
    assert "event:" not in raw
    assert all(e["jsonrpc"] == "2.0" and e["id"] == "st" for e in events)
    results = [e["result"] for e in events]
    assert [r["kind"] for r in results] == [
        "task",
        "artifact-update",
        "artifact-update",
        "artifact-update",
        "status-update",
    ]
    assert [r["append"] for r in results[1:4]] == [False, True, True]
    assert results[1]["artifact"]["parts"] == [{"kind": "text", "text": "chunk 0"}]
    assert results[-1]["status"]["state"] == "completed" and results[-1]["final"] is True


async def test_tasks_resubscribe_streams_the_task(http: Http) -> None:
    _, sent = await http.rpc("message/send", message03("hi"))
    task_id = sent["result"]["id"]
    _, _, events = await stream(http, "tasks/resubscribe", {"id": task_id})
    assert [e["result"]["kind"] for e in events] == ["task", "status-update"]
    assert events[0]["result"]["id"] == task_id


async def test_stream_error_before_start_is_plain_json(http: Http) -> None:
    content_type, raw, _ = await stream(http, "tasks/resubscribe", {"id": "nope"}, request_id=5)
    assert content_type.startswith("application/json")
    assert_error03(json.loads(raw), -32001, 5)


async def test_mid_stream_error_is_a_0_3_error_event(http: Http) -> None:
    params = message03("x", metadata={"fail": "TASK_NOT_CANCELABLE"})
    _, _, events = await stream(http, "message/stream", params, request_id=6)
    assert events[0]["result"]["kind"] == "task"
    assert_error03(events[-1], -32002, 6)


async def test_stream_with_bad_params_is_plain_json(http: Http) -> None:
    content_type, raw, _ = await stream(http, "message/stream", {"message": {}}, request_id=8)
    assert content_type.startswith("application/json")
    assert_error03(json.loads(raw), -32602, 8)


# --- the card --------------------------------------------------------------------------


async def test_public_card_is_the_hybrid_with_a_0_3_interface(http: Http) -> None:
    async with asyncio.timeout(TIMEOUT_S):
        response = await http.client.get(CARD_PATH)
        async with response:
            card = await response.json()
    interfaces = card["supportedInterfaces"]
    assert interfaces[0]["protocolVersion"] == "1.0"
    assert interfaces[-3:] == [
        {"url": interfaces[0]["url"], "protocolBinding": "JSONRPC", "protocolVersion": "0.3"},
        {"url": interfaces[1]["url"], "protocolBinding": "HTTP+JSON", "protocolVersion": "0.3"},
        {"url": interfaces[2]["url"], "protocolBinding": "GRPC", "protocolVersion": "0.3"},
    ]
    assert card["url"] == interfaces[0]["url"]
    assert card["preferredTransport"] == "JSONRPC" and card["protocolVersion"] == "0.3.0"
    assert card["supportsAuthenticatedExtendedCard"] is True
    assert card["securitySchemes"]["apiKey"]["type"] == "apiKey"
    assert card["securitySchemes"]["apiKey"]["in"] == "header"
    assert card["securitySchemes"]["apiKey"]["apiKeySecurityScheme"]["location"] == "header"
    assert card["additionalInterfaces"] == [
        {"url": interfaces[1]["url"], "transport": "HTTP+JSON"},
        {"url": interfaces[2]["url"], "transport": "GRPC"},
    ]


async def test_1_0_extended_card_has_no_0_3_keys(http: Http) -> None:
    _, body = await http.rpc("GetExtendedAgentCard", {})
    card = body["result"]
    assert "url" not in card and "preferredTransport" not in card
    assert [i["protocolVersion"] for i in card["supportedInterfaces"]][-2:] == ["0.3", "0.3"]


async def test_our_client_reads_the_hybrid_card_as_the_1_0_card(http: Http) -> None:
    async with asyncio.timeout(TIMEOUT_S):
        response = await http.client.get(CARD_PATH)
        async with response:
            hybrid = await response.json()
    source = http.base + CARD_PATH
    parsed = client_cards.parse_card(hybrid, source=source)
    assert parsed == http.cards.public_card(http.base)
    for transport in ("jsonrpc", "rest", None):
        chosen = client_cards.choose_interface(parsed, transport)
        assert chosen.protocol_version == "1.0"
