"""JSON-RPC answers in JSON-RPC, with the request's id (issue 10, item 5).

Every error found once the envelope has been read echoes the request's ``id`` (of every
JSON type an id may have), version and Content-Type refusals included, on 1.0 and 0.3
methods alike; only what is decided before the body is read (authentication, rate
limits) answers ``"id": null``.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from a2a_gateway.protocol import errors
from a2a_gateway.server.auth import AllowAnonymous, WorkspaceCallers
from a2a_gateway.server.config import ServerConfig
from a2a_gateway.server.limits import RateLimits

from .conftest import KEY, TIMEOUT_S, Http, Starter

MESSAGE_03 = {
    "message": {"kind": "message", "messageId": "m", "role": "user", "parts": [{"kind": "text"}]}
}

#: name -> (envelope without id, extra headers, expected JSON-RPC code)
AFTER_THE_ENVELOPE: dict[str, tuple[dict[str, Any], dict[str, str], int]] = {
    "unknown method": ({"method": "NoSuchMethod"}, {}, -32601),
    "params not an object": ({"method": "GetTask", "params": [1]}, {}, -32600),
    "jsonrpc 1.0": ({"jsonrpc": "1.0", "method": "GetTask"}, {}, -32600),
    "no method": ({"params": {}}, {}, -32600),
    "invalid params (1.0)": ({"method": "GetTask", "params": {"id": 5}}, {}, -32602),
    "unknown task (service error)": ({"method": "GetTask", "params": {"id": "nope"}}, {}, -32001),
    "stream refused before its first event": (
        {"method": "SubscribeToTask", "params": {"id": "nope"}},
        {},
        -32001,
    ),
    "invalid params (0.3)": ({"method": "message/send", "params": MESSAGE_03}, {}, -32602),
    "unsupported version, 1.0 method": (
        {"method": "ListTasks", "params": {}},
        {"A2A-Version": "2.0"},
        -32009,
    ),
    "0.3 version, 1.0 method": (
        {"method": "ListTasks", "params": {}},
        {"A2A-Version": "0.3"},
        -32009,
    ),
    "1.0 version, 0.3 method": (
        {"method": "message/send", "params": MESSAGE_03},
        {"A2A-Version": "1.0"},
        -32009,
    ),
    "unsupported version, 0.3 method": (
        {"method": "tasks/get", "params": {"id": "t"}},
        {"A2A-Version": "9.9"},
        -32009,
    ),
    "version in the query": (
        {"method": "ListTasks", "params": {}},
        {"?": "A2A-Version=7.0"},
        -32009,
    ),
    "Content-Type not JSON": (
        {"method": "ListTasks", "params": {}},
        {"Content-Type": "text/plain"},
        -32600,
    ),
    "charset not UTF-8": (
        {"method": "ListTasks", "params": {}},
        {"Content-Type": "application/json; charset=latin-1"},
        -32600,
    ),
}

IDS: list[Any] = ["req-7", 7, 0, -3, 2.5, ""]


async def _post(http: Http, envelope: dict[str, Any], headers: dict[str, str]) -> tuple[int, Any]:
    headers = dict(headers)
    path = "/a2a"
    query = headers.pop("?", None)
    if query is not None:
        path += "?" + query
    headers.setdefault("Content-Type", "application/json")
    body = json.dumps({"jsonrpc": "2.0", **envelope}).encode()
    async with asyncio.timeout(TIMEOUT_S):
        response = await http.client.post(path, data=body, headers=headers)
        async with response:
            return response.status, await response.json(content_type=None)


@pytest.mark.parametrize("request_id", IDS, ids=repr)
async def test_errors_after_the_envelope_echo_the_id(http: Http, request_id: Any) -> None:
    failures = []
    for name, (envelope, headers, code) in AFTER_THE_ENVELOPE.items():
        status, answer = await _post(http, {**envelope, "id": request_id}, headers)
        error = answer.get("error") or {}
        got = (status, answer.get("id"), type(answer.get("id")), error.get("code"))
        if got != (200, request_id, type(request_id), code):
            failures.append(f"{name}: {got} {answer}")
    assert not failures, "\n".join(failures)


async def test_a_request_without_an_id_is_answered_with_null(http: Http) -> None:
    for name, (envelope, headers, code) in AFTER_THE_ENVELOPE.items():
        status, answer = await _post(http, envelope, headers)
        assert (status, answer["id"], answer["error"]["code"]) == (200, None, code), name


async def test_the_version_refusal_is_one_answer_whatever_else_is_wrong(http: Http) -> None:
    """A refused version wins over what the body would have said, and still echoes."""
    envelope = {"id": 9, "method": "NoSuchMethod", "params": {"x": 1}}
    _, answer = await _post(http, envelope, {"A2A-Version": "3.0"})
    assert answer["id"] == 9 and answer["error"]["code"] == -32009
    assert answer["error"]["data"][0]["reason"] == "VERSION_NOT_SUPPORTED"


@pytest.mark.parametrize(
    ("headers", "status"),
    [
        ({}, 401),  # no key
        ({"X-API-Key": "wrong-key-123456"}, 401),
        ({"Authorization": "Basic eDp5"}, 401),
    ],
)
async def test_authentication_is_answered_before_the_body_so_id_is_null(
    start_http: Starter, keyed_workspace: Any, headers: dict[str, str], status: int
) -> None:
    http = await start_http(
        config=ServerConfig(workspaces=[keyed_workspace]),
        authenticator=WorkspaceCallers([keyed_workspace]),
    )
    got, answer = await _post(http, {"id": 5, "method": "ListTasks"}, headers)
    assert got == status
    assert answer["id"] is None
    assert answer["error"]["code"] == errors.UnauthenticatedError.spec.jsonrpc_code
    got, answer = await _post(http, {"id": 5, "method": "ListTasks"}, {"X-API-Key": KEY})
    assert got == 200 and answer["id"] == 5 and "result" in answer


async def test_rate_limited_before_the_body_so_id_is_null(start_http: Starter) -> None:
    limits = RateLimits(per_ip_per_minute=1)
    http = await start_http(authenticator=AllowAnonymous(limits=limits))
    statuses = []
    for request_id in (1, 2):
        status, answer = await _post(http, {"id": request_id, "method": "ListTasks"}, {})
        statuses.append((status, answer["id"]))
    assert statuses == [(200, 1), (429, None)]
