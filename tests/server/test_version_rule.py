"""One answer per version mistake (issue 10 item 4): the ``A2A-Version`` rule on JSON-RPC,
HTTP+JSON and gRPC, for a 1.0 and a 0.3 operation, as a table of (operation, value).

A refusal is VersionNotSupported in each binding's 1.0 vocabulary (JSON-RPC -32009 with
ErrorInfo, HTTP+JSON google.rpc.Status 400, gRPC FAILED_PRECONDITION with the status
trailer), on 0.3 operations too, listing every version served; the service is never
called. A missing version follows the operation (header-less 1.0 is 1.0)."""

from __future__ import annotations

import ast
import asyncio
import inspect
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import grpc
import pytest

import lf.a2a.v0_3.a2a_pb2 as pb03
import lf.a2a.v1.a2a_pb2 as pb
from a2a_gateway.server import rest
from tests.support.grpc_serving import grpc_serving

from .conftest import TIMEOUT_S, Http, Starter
from .grpc_conftest_helpers import error_info, rich_status

SERVED = "1.0, 0.3"


@dataclass
class Both:
    http: Http
    channel: grpc.aio.Channel


@pytest.fixture
async def both(start_http: Starter) -> AsyncIterator[Both]:
    """One service behind the HTTP app and a gRPC server."""
    http = await start_http()
    async with grpc_serving(http.service) as served:
        yield Both(http, served.channel)


@dataclass(frozen=True)
class Outcome:
    """What one call came to, in binding-neutral terms."""

    ok: bool
    version: str = ""  # the version the service was called with (ok)
    reason: str = ""  # ErrorInfo reason (refused)
    supported: str = ""  # ErrorInfo metadata supportedVersions (refused)
    message: str = ""


def _message03(message_id: str) -> dict[str, Any]:
    return {
        "message": {
            "kind": "message",
            "messageId": message_id,
            "role": "user",
            "parts": [{"kind": "text", "text": "hi"}],
        }
    }


def _message10(message_id: str) -> dict[str, Any]:
    return {"message": {"messageId": message_id, "role": "ROLE_USER", "parts": [{"text": "hi"}]}}


def _served_version(both: Both, before: int) -> str:
    calls = both.http.service.calls
    assert len(calls) == before + 1, "the service was called once"
    return calls[-1][2].version


async def jsonrpc(both: Both, legacy: bool, headers: dict[str, str]) -> Outcome:
    before = len(both.http.service.calls)
    method, params = ("message/send", _message03("m-j")) if legacy else ("SendMessage", {})
    if not legacy:
        params = _message10("m-j")
    status, body = await both.http.rpc(method, params, request_id=7, headers=headers)
    if "result" in body:
        return Outcome(True, version=_served_version(both, before))
    assert len(both.http.service.calls) == before, "a refused call reaches no service"
    error = body["error"]
    assert status == 200 and error["code"] == -32009, body
    info = error["data"][0]
    assert info["@type"] == "type.googleapis.com/google.rpc.ErrorInfo"
    return Outcome(
        False, reason=info["reason"], supported=info["metadata"]["supportedVersions"],
        message=error["message"],
    )  # fmt: skip


async def http_json(both: Both, legacy: bool, headers: dict[str, str]) -> Outcome:
    before = len(both.http.service.calls)
    path = "/a2a/v1/v1/message:send" if legacy else "/a2a/v1/message:send"
    body: dict[str, Any] = (
        {"request": {"messageId": "m-r", "role": "ROLE_USER", "content": [{"text": "hi"}]}}
        if legacy
        else _message10("m-r")
    )
    async with asyncio.timeout(TIMEOUT_S):
        response = await both.http.client.post(path, json=body, headers=headers)
        async with response:
            answer = json.loads(await response.read())
    if response.status == 200:
        return Outcome(True, version=_served_version(both, before))
    assert len(both.http.service.calls) == before, "a refused call reaches no service"
    assert response.status == 400, answer
    error = answer["error"]  # google.rpc.Status, never the 0.3 {type, code, ...} shape
    assert error["code"] == 400 and error["status"] == "FAILED_PRECONDITION", answer
    info = error["details"][0]
    return Outcome(
        False, reason=info["reason"], supported=info["metadata"]["supportedVersions"],
        message=error["message"],
    )  # fmt: skip


async def grpc_call(both: Both, legacy: bool, headers: dict[str, str]) -> Outcome:
    before = len(both.http.service.calls)
    metadata = tuple((k.lower(), v) for k, v in headers.items())
    if legacy:
        path, request, reply = (
            "/a2a.v1.A2AService/SendMessage",
            pb03.SendMessageRequest(
                request=pb03.Message(
                    message_id="m-g", role=pb03.ROLE_USER, content=[pb03.Part(text="hi")]
                )
            ),
            pb03.SendMessageResponse,
        )
    else:
        path, request, reply = (
            "/lf.a2a.v1.A2AService/SendMessage",
            pb.SendMessageRequest(
                message=pb.Message(message_id="m-g", role=pb.ROLE_USER, parts=[pb.Part(text="hi")])
            ),
            pb.SendMessageResponse,
        )
    rpc = both.channel.unary_unary(
        path,
        request_serializer=type(request).SerializeToString,
        response_deserializer=reply.FromString,
    )
    try:
        async with asyncio.timeout(TIMEOUT_S):
            await rpc(request, metadata=metadata)
    except grpc.aio.AioRpcError as failure:
        assert len(both.http.service.calls) == before, "a refused call reaches no service"
        assert failure.code() == grpc.StatusCode.FAILED_PRECONDITION, failure
        status = rich_status(failure)
        details = failure.details() or ""
        assert status.message == details
        info = error_info(status)
        return Outcome(
            False, reason=info.reason, supported=info.metadata["supportedVersions"],
            message=details,
        )  # fmt: skip
    return Outcome(True, version=_served_version(both, before))


BINDINGS = {"jsonrpc": jsonrpc, "http+json": http_json, "grpc": grpc_call}

# (operation, A2A-Version or None) -> the version served, or None for VersionNotSupported.
RULE: list[tuple[str, str | None, str | None]] = [
    ("1.0", None, "1.0"),  # deliberate: a header-less 1.0 name or route is 1.0
    ("1.0", "1.0", "1.0"),
    ("1.0", "1.0.3", "1.0"),
    ("1.0", "0.3", None),
    ("1.0", "0.3.0", None),
    ("1.0", "2.0", None),
    ("1.0", "banana", None),
    ("0.3", None, "0.3"),  # 0.3 clients send no version
    ("0.3", "0.3", "0.3"),
    ("0.3", "0.3.2", "0.3"),
    ("0.3", "1.0", None),
    ("0.3", "1.0.0", None),
    ("0.3", "2.0", None),
    ("0.3", "0.2", None),
]


@pytest.mark.parametrize(("operation", "value", "served"), RULE)
async def test_one_answer_per_version_mistake_on_every_binding(
    both: Both, operation: str, value: str | None, served: str | None
) -> None:
    headers = {} if value is None else {"A2A-Version": value}
    outcomes = {
        name: await call(both, operation == "0.3", headers) for name, call in BINDINGS.items()
    }
    for name, outcome in outcomes.items():
        if served is not None:
            assert outcome == Outcome(True, version=served), name
            continue
        assert not outcome.ok, name
        assert outcome.reason == "VERSION_NOT_SUPPORTED", name
        assert outcome.supported == SERVED, name  # every version served, on every binding
        assert f"A2A-Version {value!r}" in outcome.message and SERVED in outcome.message, name
    if served is None:
        # The same words everywhere, up to the binding's name of the 0.3 operation.
        words = {
            o.message.replace("'a2a.v1.A2AService/SendMessage'", "'message/send'")
            for o in outcomes.values()
        }
        assert len(words) == 1, words


async def test_the_version_in_the_query_is_judged_alike(both: Both) -> None:
    """``?A2A-Version=`` is read like the header on both HTTP bindings."""
    _, body = await both.http.rpc("message/send", _message03("m-q"), path="/a2a?A2A-Version=1.0")
    assert body["error"]["code"] == -32009 and body["id"] == 1
    async with asyncio.timeout(TIMEOUT_S):
        response = await both.http.client.get("/a2a/v1/v1/tasks/t-1?A2A-Version=1.0")
        async with response:
            answer = await response.json()
    assert response.status == 400
    assert answer["error"]["details"][0]["reason"] == "VERSION_NOT_SUPPORTED"


def test_the_http_json_binding_does_not_import_the_json_rpc_binding() -> None:
    tree = ast.parse(inspect.getsource(rest))
    imported = {
        node.module or "" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
    } | {
        alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.Import)
        for alias in node.names
    }
    assert not any(name.endswith("jsonrpc") for name in imported), imported
