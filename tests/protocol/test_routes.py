"""HTTP+JSON routes derived from the schema's google.api.http annotations."""

from __future__ import annotations

import urllib.parse
from typing import Any

import pytest

from a2a_gateway.protocol import routes
from a2a_gateway.protocol.errors import InvalidParamsError
from a2a_gateway.protocol.service import SERVICE_DESCRIPTOR

EXPECTED = {
    "SendMessage": ("POST", "/message:send"),
    "SendStreamingMessage": ("POST", "/message:stream"),
    "GetTask": ("GET", "/tasks/{id=*}"),
    "ListTasks": ("GET", "/tasks"),
    "CancelTask": ("POST", "/tasks/{id=*}:cancel"),
    "SubscribeToTask": ("GET", "/tasks/{id=*}:subscribe"),
    "CreateTaskPushNotificationConfig": ("POST", "/tasks/{task_id=*}/pushNotificationConfigs"),
    "GetTaskPushNotificationConfig": ("GET", "/tasks/{task_id=*}/pushNotificationConfigs/{id=*}"),
    "ListTaskPushNotificationConfigs": ("GET", "/tasks/{task_id=*}/pushNotificationConfigs"),
    "DeleteTaskPushNotificationConfig": (
        "DELETE",
        "/tasks/{task_id=*}/pushNotificationConfigs/{id=*}",
    ),
    "GetExtendedAgentCard": ("GET", "/extendedAgentCard"),
}


def test_every_rpc_has_a_primary_and_a_tenant_route() -> None:
    names = {m.name for m in SERVICE_DESCRIPTOR.methods}
    assert set(routes.PRIMARY) == names == set(routes.TENANT) == set(EXPECTED)
    for name, (verb, template) in EXPECTED.items():
        assert (routes.PRIMARY[name].http_method, routes.PRIMARY[name].template) == (verb, template)
        tenant = routes.TENANT[name]
        assert (tenant.http_method, tenant.template) == (verb, "/{tenant}" + template)
        assert tenant.additional and not routes.PRIMARY[name].additional


def test_subscribe_is_served_by_get_and_post() -> None:
    assert routes.match("GET", "/tasks/t1:subscribe").route.rpc == "SubscribeToTask"
    found = routes.match("POST", "/tasks/t1:subscribe")
    assert found.route.rpc == "SubscribeToTask" and found.route.alias
    assert found.route.body == ""


@pytest.mark.parametrize(
    ("verb", "path", "rpc", "params"),
    [
        ("POST", "/message:send", "SendMessage", {}),
        ("POST", "/message:stream", "SendStreamingMessage", {}),
        ("GET", "/tasks/abc", "GetTask", {"id": "abc"}),
        ("GET", "/tasks", "ListTasks", {}),
        ("POST", "/tasks/abc:cancel", "CancelTask", {"id": "abc"}),
        ("GET", "/extendedAgentCard", "GetExtendedAgentCard", {}),
        (
            "DELETE",
            "/tasks/t/pushNotificationConfigs/c",
            "DeleteTaskPushNotificationConfig",
            {"task_id": "t", "id": "c"},
        ),
        ("GET", "/acme/tasks", "ListTasks", {"tenant": "acme"}),
        ("GET", "/acme/tasks/abc", "GetTask", {"tenant": "acme", "id": "abc"}),
        ("POST", "/acme/message:send", "SendMessage", {"tenant": "acme"}),
        (
            "GET",
            "/acme/tasks/t/pushNotificationConfigs/c",
            "GetTaskPushNotificationConfig",
            {"tenant": "acme", "task_id": "t", "id": "c"},
        ),
        # The more literal route wins: "tasks" here is an id, not a tenant.
        ("GET", "/tasks/tasks", "GetTask", {"id": "tasks"}),
        ("GET", "/tasks/x:subscribe", "SubscribeToTask", {"id": "x"}),
    ],
)
def test_match(verb: str, path: str, rpc: str, params: dict[str, str]) -> None:
    found = routes.match(verb, path)
    assert found.route.rpc == rpc
    assert found.path_params == params


def test_encoded_values_are_decoded_after_matching() -> None:
    found = routes.match("GET", "/a%2Fb/tasks/c%2Fd%20e/pushNotificationConfigs/%C3%A9")
    assert found.route.rpc == "GetTaskPushNotificationConfig"
    assert found.path_params == {"tenant": "a/b", "task_id": "c/d e", "id": "é"}


def test_invalid_utf8_in_a_segment_is_invalid_params() -> None:
    with pytest.raises(InvalidParamsError, match="id"):
        routes.match("GET", "/tasks/%FF")


@pytest.mark.parametrize("path", ["/", "", "/nope", "/tasks/a/b/c", "/a/b/tasks", "/v1/tasks/x/y"])
def test_unknown_paths(path: str) -> None:
    with pytest.raises(routes.RouteNotFound):
        routes.match("GET", path)


@pytest.mark.parametrize(
    ("verb", "path", "allowed"),
    [
        ("POST", "/tasks/t", ["GET"]),
        ("GET", "/message:send", ["POST"]),
        ("PUT", "/tasks/t/pushNotificationConfigs/c", ["DELETE", "GET"]),
        ("DELETE", "/tasks/t:subscribe", ["GET", "POST"]),
        ("PATCH", "/tasks/t/pushNotificationConfigs", ["GET", "POST"]),
    ],
)
def test_method_not_allowed(verb: str, path: str, allowed: list[str]) -> None:
    with pytest.raises(routes.MethodNotAllowed) as caught:
        routes.match(verb, path)
    assert caught.value.allowed == allowed


# --- request_dict -----------------------------------------------------------------------------


def request(verb: str, path: str, query: str = "", body: Any = None) -> dict[str, Any]:
    found = routes.match(verb, path)
    return routes.request_dict(found, urllib.parse.parse_qsl(query, keep_blank_values=True), body)


def test_body_and_path_merge() -> None:
    assert request("POST", "/acme/tasks/t1:cancel", body={"metadata": {"a": 1}}) == {
        "metadata": {"a": 1},
        "tenant": "acme",
        "id": "t1",
    }


def test_an_empty_body_is_an_empty_request() -> None:
    assert request("POST", "/tasks/t1:cancel") == {"id": "t1"}


def test_path_agrees_with_body_in_either_spelling() -> None:
    assert request("POST", "/tasks/t1/pushNotificationConfigs", body={"task_id": "t1"}) == {
        "taskId": "t1"
    }
    assert request("POST", "/tasks/t1/pushNotificationConfigs", body={"taskId": ""}) == {
        "taskId": "t1"
    }


@pytest.mark.parametrize("key", ["tenant", "taskId", "task_id"])
def test_body_contradicting_the_path_is_refused(key: str) -> None:
    body = {key: "other"}
    with pytest.raises(InvalidParamsError, match="differs"):
        request("POST", "/acme/tasks/t1/pushNotificationConfigs", body=body)


def test_non_object_body_is_refused() -> None:
    with pytest.raises(InvalidParamsError, match="object"):
        request("POST", "/message:send", body=[1])


def test_empty_path_segment_is_refused() -> None:
    found = routes.Match(routes.PRIMARY["GetTask"], {"id": ""})
    with pytest.raises(InvalidParamsError, match="id"):
        routes.request_dict(found, [], None)


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("includeArtifacts=true", {"includeArtifacts": True}),
        ("include_artifacts=false", {"includeArtifacts": False}),
        ("pageSize=5", {"pageSize": "5"}),
        ("status=TASK_STATE_WORKING", {"status": "TASK_STATE_WORKING"}),
        ("status=2", {"status": 2}),
        ("status=-1", {"status": -1}),
        # Not integers: left as names for the strict parser to refuse (never a 500).
        ("status=--5", {"status": "--5"}),
        ("status=%C2%B2", {"status": "\u00b2"}),
        ("contextId=a,b", {"contextId": "a,b"}),
        (
            "statusTimestampAfter=2025-01-01T00:00:00Z",
            {"statusTimestampAfter": "2025-01-01T00:00:00Z"},
        ),
        ("A2A-Version=1.0&a2a-version=1.0", {}),
        ("nope=1&pageSize=2&sort.by=x", {"pageSize": "2"}),  # unknown fields are ignored
    ],
)
def test_query_values(query: str, expected: dict[str, Any]) -> None:
    assert request("GET", "/tasks", query) == expected


@pytest.mark.parametrize(
    ("query", "needle"),
    [
        ("includeArtifacts=1", "includeArtifacts"),
        ("includeArtifacts=True", "includeArtifacts"),
        ("pageSize=1&pageSize=2", "more than once"),
    ],
)
def test_bad_query(query: str, needle: str) -> None:
    with pytest.raises(InvalidParamsError, match=needle):
        request("GET", "/tasks", query)


def test_query_is_ignored_on_body_routes() -> None:
    assert request("POST", "/message:send", "anything=1", {"message": {}}) == {"message": {}}


def test_path_wins_over_query_for_the_same_field() -> None:
    with pytest.raises(InvalidParamsError, match="differs"):
        request("GET", "/tasks/t1", "id=t2")
    assert request("GET", "/tasks/t1", "id=t1") == {"id": "t1"}


# --- client side: Route.build ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("rpc", "payload"),
    [
        ("GetTask", {"id": "a/b c", "historyLength": 3}),
        ("ListTasks", {"pageSize": 10, "includeArtifacts": False, "contextId": "c"}),
        ("CancelTask", {"id": "t", "metadata": {"k": "v"}}),
        ("DeleteTaskPushNotificationConfig", {"taskId": "t/1", "id": "c?x"}),
        ("SendMessage", {"message": {"messageId": "m"}}),
    ],
)
def test_build_then_match_round_trips(rpc: str, payload: dict[str, Any]) -> None:
    route = routes.PRIMARY[rpc]
    path, query, body = route.build(payload)
    found = routes.match(route.http_method, path)
    assert found.route.rpc == rpc
    rebuilt = routes.request_dict(found, query, body)
    # Query values come back as strings (ProtoJSON accepts "3" for an int32).
    expected = {
        k: (str(v) if isinstance(v, int) and not isinstance(v, bool) else v)
        for k, v in payload.items()
    }
    assert rebuilt == expected


def test_build_tenant_route() -> None:
    path, query, body = routes.TENANT["GetTask"].build({"tenant": "t 1", "id": "x"})
    assert (path, query, body) == ("/t%201/tasks/x", [], None)


def test_build_requires_path_fields() -> None:
    with pytest.raises(InvalidParamsError, match="id"):
        routes.PRIMARY["GetTask"].build({})


def test_build_refuses_nested_query_values() -> None:
    with pytest.raises(InvalidParamsError):
        routes.PRIMARY["ListTasks"].build({"statusTimestampAfter": {"seconds": 1}})
