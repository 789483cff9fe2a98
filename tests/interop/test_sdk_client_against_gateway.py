"""The official a2a-sdk client (1.3.0) against the server under test, on every binding.

Each test runs once per transport (JSON-RPC, HTTP+JSON, gRPC); the SDK's ClientFactory is
forced onto that binding, so it must find it in the card. The server is started once per
module (``conftest.interop_server``); which server it is, is decided by
``conftest.SERVER_UNDER_TEST``. Assertions are on what the SDK client surfaced: task
states, artifact texts, event order, and the SDK's own typed error classes.
"""

from __future__ import annotations

import json
import secrets
import uuid
from typing import TYPE_CHECKING

import pytest

from tests.support.secrets import use_secret

if TYPE_CHECKING:  # for annotations only
    from collections.abc import Callable

    from tests.support.processes import JSON, OneShot, SdkClient, SdkPeer

    from .conftest import InteropServer

BINDING = {"jsonrpc": "JSONRPC", "rest": "HTTP+JSON", "grpc": "GRPC"}
SDK_TRANSPORT_CLASS = {
    "jsonrpc": "JsonRpcTransport",
    "rest": "RestTransport",
    "grpc": "GrpcTransport",
}
COMPLETED = "TASK_STATE_COMPLETED"
CANCELED = "TASK_STATE_CANCELED"
TERMINAL = {COMPLETED, CANCELED, "TASK_STATE_FAILED", "TASK_STATE_REJECTED"}


def state_of(event: JSON) -> str | None:
    """The task state an event reports (task snapshot or status update), else None."""
    if "task" in event:
        return str(event["task"]["status"]["state"])
    if "statusUpdate" in event:
        return str(event["statusUpdate"]["status"]["state"])
    return None


def task_id_of(event: JSON) -> str:
    for key, id_key in (("task", "id"), ("statusUpdate", "taskId"), ("artifactUpdate", "taskId")):
        if key in event:
            return str(event[key][id_key])
    raise AssertionError(f"not a task event: {event}")


def texts(parts_holder: JSON) -> list[str]:
    return [part["text"] for part in parts_holder.get("parts", []) if "text" in part]


def completed_task(sdk_client: SdkClient, text: str = "hi") -> JSON:
    task = sdk_client("send", text).result("task")
    assert task["status"]["state"] == COMPLETED, task
    return task


def held_task(sdk_client: SdkClient) -> JSON:
    """A task that stays WORKING for 30 s unless canceled (returned at once)."""
    task = sdk_client("send-immediate", "hold:30").result("task")
    assert task["status"]["state"] not in TERMINAL, task
    return task


# --- card and send --------------------------------------------------------------------


def test_card_selects_the_forced_binding(sdk_client: SdkClient, transport: str) -> None:
    line = sdk_client("card").only
    interface = line["interface"]
    assert interface is not None, f"the card lists no {BINDING[transport]} interface"
    assert interface["protocolBinding"] == BINDING[transport]
    assert interface["protocolVersion"] == "1.0"
    assert line["transport"] == SDK_TRANSPORT_CLASS[transport]
    assert line["card"]["capabilities"]["streaming"] is True
    if transport == "grpc":  # gRPC interface URLs are host:port (digest §16.39)
        assert "://" not in interface["url"]


def test_send_blocks_until_completed(sdk_client: SdkClient, transport: str) -> None:
    text = f"hello over {transport}: ünïcödé ✓"
    task = completed_task(sdk_client, text)
    assert task["id"] and task["contextId"]
    [artifact] = task["artifacts"]
    assert artifact["name"] == "response"
    assert texts(artifact) == [text]


def test_send_message_directive_replies_with_a_message(sdk_client: SdkClient) -> None:
    message = sdk_client("send", "message:hello there").result("message")
    assert message["role"] == "ROLE_AGENT"
    assert texts(message) == ["hello there"]
    assert message["contextId"]


def test_send_fail_directive_fails_the_task(sdk_client: SdkClient) -> None:
    task = sdk_client("send", "fail:it broke").result("task")
    assert task["status"]["state"] == "TASK_STATE_FAILED"
    assert texts(task["status"]["message"]) == ["it broke"]


def test_send_immediate_returns_a_live_task(sdk_client: SdkClient) -> None:
    task = held_task(sdk_client)
    assert task["status"]["state"] in {"TASK_STATE_SUBMITTED", "TASK_STATE_WORKING"}
    sdk_client("cancel", task["id"])  # do not leave it running


def test_stream_starts_with_the_task_and_ends_completed(sdk_client: SdkClient) -> None:
    events = sdk_client("stream", "chunks:3").lines
    assert events and "task" in events[0], events
    task_id = events[0]["task"]["id"]
    assert all(task_id_of(event) == task_id for event in events), events
    chunks = [event["artifactUpdate"] for event in events if "artifactUpdate" in event]
    assert [texts(chunk["artifact"]) for chunk in chunks] == [["chunk-0"], ["chunk-1"], ["chunk-2"]]
    assert len({chunk["artifact"]["artifactId"] for chunk in chunks}) == 1
    assert [chunk.get("append", False) for chunk in chunks] == [False, True, True]
    assert chunks[-1].get("lastChunk") is True
    assert state_of(events[-1]) == COMPLETED, events[-1]


# --- task operations ------------------------------------------------------------------


def test_get_returns_the_task(sdk_client: SdkClient) -> None:
    created = completed_task(sdk_client, "remember me")
    task = sdk_client("get", created["id"]).result("task")
    assert task["id"] == created["id"]
    assert task["status"]["state"] == COMPLETED
    assert [texts(a) for a in task["artifacts"]] == [["remember me"]]
    trimmed = sdk_client("get", created["id"], "--history-length", "0").result("task")
    assert "history" not in trimmed  # historyLength 0 means no history (digest §16.8)


def test_list_filters_by_context(sdk_client: SdkClient) -> None:
    created = completed_task(sdk_client)
    listed = sdk_client("list", "--context-id", created["contextId"]).result("listTasks")
    assert [task["id"] for task in listed["tasks"]] == [created["id"]]
    assert "artifacts" not in listed["tasks"][0]  # only with includeArtifacts (§16.11)


def test_cancel_a_held_task(sdk_client: SdkClient) -> None:
    task = held_task(sdk_client)
    canceled = sdk_client("cancel", task["id"]).result("task")
    assert canceled["id"] == task["id"]
    assert canceled["status"]["state"] == CANCELED
    assert sdk_client("get", task["id"]).result("task")["status"]["state"] == CANCELED
    again = sdk_client("cancel", task["id"]).error
    assert again is not None and again["type"] == "TaskNotCancelableError", again


def test_subscribe_starts_with_a_snapshot_and_sees_the_cancel(sdk_client: SdkClient) -> None:
    task = held_task(sdk_client)
    subscription: OneShot = sdk_client.spawn("subscribe", task["id"])
    first = subscription.next_line()
    assert first is not None and "task" in first, (first, subscription.stderr_tail())
    assert first["task"]["id"] == task["id"]
    assert state_of(first) not in TERMINAL
    sdk_client("cancel", task["id"])
    result = subscription.finish()
    assert result.exit_code == 0, (result.lines, subscription.stderr_tail())
    assert result.error is None, result.error
    assert all(task_id_of(event) == task["id"] for event in result.lines)
    assert state_of(result.lines[-1]) == CANCELED, result.lines


def test_multi_turn_ask_then_answer(sdk_client: SdkClient) -> None:
    first, second = (line["task"] for line in sdk_client("multi-turn", "your name?", "Ada").lines)
    assert first["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
    assert texts(first["status"]["message"]) == ["your name?"]
    assert second["id"] == first["id"]
    assert second["contextId"] == first["contextId"]
    assert second["status"]["state"] == COMPLETED
    assert [texts(a) for a in second["artifacts"]] == [["Ada"]]


# --- errors as the SDK types them -----------------------------------------------------


PUSH_TOKEN = f"interop-push-{secrets.token_urlsafe(12)}"
use_secret(PUSH_TOKEN)


def test_push_config_crud(sdk_client: SdkClient, interop_server: InteropServer) -> None:
    if interop_server.kind != "gateway":
        pytest.skip("the SDK stand-in is started without --push (and echoes tokens back)")
    assert sdk_client("card").only["card"]["capabilities"]["pushNotifications"] is True
    task_id = completed_task(sdk_client)["id"]
    hook = "https://example.com/hook"  # a finished task: nothing is delivered to it
    created = sdk_client(
        "push-create", task_id, hook, "--config-id", "cfg-1", "--token", PUSH_TOKEN
    ).result("pushConfig")
    assert created == {"id": "cfg-1", "taskId": task_id, "url": hook}  # no token back
    assert sdk_client("push-get", task_id, "cfg-1").result("pushConfig") == created
    assert sdk_client("push-list", task_id).result("pushConfigs") == {"configs": [created]}
    for _ in range(2):  # idempotent
        assert sdk_client("push-delete", task_id, "cfg-1").only == {"deleted": True}
    gone = sdk_client("push-get", task_id, "cfg-1").error
    assert gone is not None and gone["type"] == "TaskNotFoundError", gone
    refused = sdk_client("push-create", task_id, "http://example.com/hook").error
    assert refused is not None and refused["code"] == -32602, refused  # https only
    generated = sdk_client("push-create", task_id, hook).result("pushConfig")
    assert generated["id"] and generated["taskId"] == task_id


@pytest.mark.parametrize("operation", ["get", "cancel", "subscribe"])
def test_unknown_task_is_task_not_found(sdk_client: SdkClient, operation: str) -> None:
    result = sdk_client(operation, str(uuid.uuid4()))
    assert result.error is not None, result.lines
    assert result.error["type"] == "TaskNotFoundError", result.error
    assert result.error["code"] == -32001


# --- authenticated callers ------------------------------------------------------------

AUTH_HEADERS = ["x-api-key", "bearer"]


@pytest.mark.parametrize("auth_header", AUTH_HEADERS)
def test_keyed_caller_owns_its_tasks(
    sdk_client: SdkClient, interop_server: InteropServer, auth_header: str
) -> None:
    keyed = sdk_client.keyed(interop_server.api_key, auth_header)
    task = completed_task(keyed, "for the key holder")
    assert keyed("get", task["id"]).result("task")["id"] == task["id"]
    anonymous = sdk_client("get", task["id"]).error
    assert anonymous is not None and anonymous["type"] == "TaskNotFoundError", anonymous
    listed = sdk_client("list", "--context-id", task["contextId"]).result("listTasks")
    assert listed.get("tasks", []) == []


@pytest.mark.parametrize("auth_header", AUTH_HEADERS)
def test_extended_card_with_a_key(
    sdk_client: SdkClient, interop_server: InteropServer, transport: str, auth_header: str
) -> None:
    public = sdk_client("card").only["card"]
    # Otherwise the SDK would return the public card without asking the server.
    assert public["capabilities"].get("extendedAgentCard") is True
    result = sdk_client.keyed(interop_server.api_key, auth_header)("extended-card")
    extended = result.result("extendedCard")
    assert BINDING[transport] in {i["protocolBinding"] for i in extended["supportedInterfaces"]}
    assert interop_server.api_key not in json.dumps(result.lines)
    if interop_server.kind == "gateway":  # the workspace's .a2a/card.json overlays it
        assert extended["name"] == interop_server.extended_card_name
    else:  # the SDK stand-in lists one more skill there
        assert "extended-echo" in {skill["id"] for skill in extended["skills"]}


@pytest.mark.parametrize("auth_header", AUTH_HEADERS)
def test_a_wrong_key_is_refused_without_echoing_it(
    sdk_client: SdkClient, interop_server: InteropServer, auth_header: str
) -> None:
    wrong = f"wrong-{secrets.token_urlsafe(16)}"
    result = sdk_client.keyed(wrong, auth_header)("send", "hi")
    # The SDK has no typed authentication error: a 401 / UNAUTHENTICATED is its
    # generic A2AClientError, whatever the binding.
    assert result.error is not None, result.lines
    assert result.error["type"] == "A2AClientError", result.error
    output = json.dumps(result.lines)
    assert wrong not in output
    assert interop_server.api_key not in output


def test_a_bearer_token_of_an_oidc_issuer_is_its_caller(
    sdk_client: SdkClient, interop_server: InteropServer
) -> None:
    idp = interop_server.idp
    if idp is None:
        pytest.skip("OIDC callers are the gateway's (the SDK stand-in has keys only)")
    token = idp.token("sdk-oidc")
    oidc = sdk_client.keyed(token, "bearer")
    task = completed_task(oidc, "for the token holder")
    assert oidc("get", task["id"]).result("task")["id"] == task["id"]
    other = sdk_client.keyed(interop_server.api_key, "bearer")("get", task["id"]).error
    assert other is not None and other["type"] == "TaskNotFoundError", other
    expired = sdk_client.keyed(idp.token("sdk-oidc", lifetime_s=-600), "bearer")("send", "hi")
    assert expired.error is not None and expired.error["type"] == "A2AClientError"
    assert token not in json.dumps(expired.lines)


# --- the SDK peer itself --------------------------------------------------------------


def test_sdk_server_serves_only_the_transports_asked_for(
    start_sdk_server: Callable[..., SdkPeer], make_sdk_client: Callable[..., SdkClient]
) -> None:
    """peers/sdk_server.py --transports grpc: the card lists only GRPC, and it works."""
    peer = start_sdk_server(transports=["grpc"])
    grpc_client = make_sdk_client(peer.card_url, "grpc")
    card = grpc_client("card").only["card"]
    assert [i["protocolBinding"] for i in card["supportedInterfaces"]] == ["GRPC"]
    assert texts(completed_task(grpc_client, "grpc only")["artifacts"][0]) == ["grpc only"]
    refused = make_sdk_client(peer.card_url, "jsonrpc")("card")
    assert refused.error is not None, refused.lines
    assert refused.error["type"] == "ValueError"  # the SDK's "no compatible transports"


def test_driver_push_config_crud_against_the_sdk_push_peer(
    start_sdk_server: Callable[..., SdkPeer], make_sdk_client: Callable[..., SdkClient]
) -> None:
    """The driver's push scenarios against the SDK's own push peer (sdk --push): the
    reference behaviour test_push_config_crud is compared with (the SDK returns the token;
    the gateway never does)."""
    peer = start_sdk_server(push=True)
    for transport in ("jsonrpc", "rest", "grpc"):
        client = make_sdk_client(peer.card_url, transport)
        task_id = completed_task(client)["id"]
        hook = "https://push.example/hook"
        created = client("push-create", task_id, hook, "--config-id", "c1", "--token", "t0k")
        assert created.result("pushConfig") == {
            "id": "c1",
            "taskId": task_id,
            "url": hook,
            "token": "t0k",
        }
        assert client("push-get", task_id, "c1").result("pushConfig")["url"] == hook
        listed = client("push-list", task_id).result("pushConfigs")
        assert [c["id"] for c in listed["configs"]] == ["c1"]
        assert client("push-delete", task_id, "c1").only == {"deleted": True}
        gone = client("push-get", task_id, "c1").error
        assert gone is not None and gone["type"] == "TaskNotFoundError", gone
