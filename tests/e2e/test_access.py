"""Callers, keys and cards across JSON-RPC, HTTP+JSON and gRPC on a whole gateway.

Two workspaces: ``team`` (alice, bob, a card.json) and ``solo`` (carol, a PERSONA.md,
and a caller that must sign). Every rule runs on all three bindings.
"""

from __future__ import annotations

import json
import logging
import re
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import grpc
import pytest
from google.protobuf import json_format, message_factory

from a2a_gateway.local import signing
from a2a_gateway.local.layout import WorkspaceLayout
from a2a_gateway.protocol import codec, routes
from a2a_gateway.protocol.service import SERVICE_DESCRIPTOR
from a2a_gateway.serve import Gateway
from a2a_gateway.server.auth import WorkspaceCallers
from a2a_gateway.server.limits import RateLimits
from a2a_gateway.settings import resolve

from .conftest import (
    BINDINGS,
    Driver,
    WireError,
    _grpc_error,
    _jsonrpc_error,
    _status_error,
    as_bearer,
)

KEY_ALICE = "access-alice-2b7e151628ae"
KEY_BOB = "access-bob-d2a6abf71588"
KEY_CAROL = "access-carol-09cf4f3c762e"
KEY_SIGNER = "access-signer-5d3b1a2c4e6f"
SIGNING_SECRET = "access-signing-secret-8c9d0e1f2a3b"
TEAM_CARD = {
    "name": "Team card",
    "description": "What team callers see.",
    "skills": [{"id": "team", "name": "Team", "description": "Team work.", "tags": ["team"]}],
}
UNAUTHENTICATED = ("UNAUTHENTICATED", {401, -32000, grpc.StatusCode.UNAUTHENTICATED})


@dataclass
class Site:
    team: Path
    solo: Path
    gateway: Gateway

    def callers(self, workspace: Path) -> Path:
        return WorkspaceLayout(workspace).callers


def write_json(path: Path, value: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(value))


def send(text: str, **message: Any) -> dict[str, Any]:
    return {
        "message": {
            "role": "ROLE_USER",
            "messageId": str(uuid.uuid4()),
            "parts": [{"text": text}],
            **message,
        }
    }


async def expect(coro: Any, reason: str, codes: set[Any] | None = None) -> WireError:
    with pytest.raises(WireError) as caught:
        await coro
    assert caught.value.reason == reason, caught.value
    if codes is not None:
        assert caught.value.code in codes, caught.value
    return caught.value


async def start_site(tmp_path: Path, limits: RateLimits | None = None) -> Site:
    team, solo = tmp_path / "team", tmp_path / "solo"
    write_json(
        WorkspaceLayout(team).callers,
        [{"name": "alice", "key": KEY_ALICE}, {"name": "bob", "key": KEY_BOB}],
    )
    write_json(WorkspaceLayout(team).card, TEAM_CARD)
    write_json(
        WorkspaceLayout(solo).callers,
        [
            {"name": "carol", "key": KEY_CAROL},
            {"name": "signer", "key": KEY_SIGNER, "signing_secret": SIGNING_SECRET},
        ],
    )
    (solo / "PERSONA.md").write_text("\n# Solo agent for carol\n\nMore text.\n")
    settings = resolve(
        {
            "workspace": [str(team), str(solo)],
            "port": 0,
            "grpc_port": 0,
            "faux": True,
            "keepalive": 0.2,
        },
        environ={},
    )
    gateway = Gateway(settings)
    if limits is not None:
        # serve.py does not pass config.rate_limits to the authenticator yet.
        gateway.authenticator = WorkspaceCallers(gateway.config.workspaces, limits=limits)
    await gateway.start()
    return Site(team, solo, gateway)


@pytest.fixture
async def site(tmp_path: Path) -> AsyncIterator[Site]:
    site = await start_site(tmp_path)
    try:
        yield site
    finally:
        await site.gateway.stop()


async def drivers_for(site: Site, binding: str) -> AsyncIterator[Driver]:
    gateway = site.gateway
    async with (
        aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as http,
        grpc.aio.insecure_channel(f"127.0.0.1:{gateway.grpc_port}") as channel,
    ):
        yield Driver(binding, http, f"http://127.0.0.1:{gateway.http_port}", channel, KEY_ALICE)


@pytest.fixture(params=BINDINGS)
async def driver(request: pytest.FixtureRequest, site: Site) -> AsyncIterator[Driver]:
    async for driver in drivers_for(site, request.param):
        yield driver


# --- authentication -------------------------------------------------------------------------


async def test_both_header_styles_authenticate(driver: Driver) -> None:
    assert "tasks" in await driver.call("ListTasks", {})
    assert "tasks" in await as_bearer(driver).call("ListTasks", {})


@pytest.mark.parametrize(
    "headers",
    [
        {},
        {"X-API-Key": ""},
        {"X-API-Key": "access-nobody-000000000000"},
        {"X-API-Key": KEY_ALICE, "Authorization": f"Bearer {KEY_BOB}"},
        {"Authorization": f"Basic {KEY_ALICE}"},
        {"Authorization": KEY_ALICE},
    ],
)
async def test_bad_credentials_are_unauthenticated(driver: Driver, headers: dict[str, str]) -> None:
    error = await expect(as_bearer(driver, headers).call("ListTasks", {}), *UNAUTHENTICATED)
    assert KEY_ALICE not in error.message and KEY_BOB not in error.message


async def test_an_edit_to_callers_json_applies_to_the_next_request(
    driver: Driver, site: Site
) -> None:
    await driver.call("ListTasks", {})
    new_key = "access-alice-rotated-7f6e5d4c"
    write_json(
        site.callers(site.team),
        [{"name": "alice", "key": new_key}, {"name": "bob", "key": KEY_BOB}],
    )
    await expect(driver.call("ListTasks", {}), *UNAUTHENTICATED)
    driver.key = new_key
    await driver.call("ListTasks", {})
    site.callers(site.team).write_text("{broken")
    await expect(driver.call("ListTasks", {}), *UNAUTHENTICATED)


async def test_a_key_in_two_workspaces_is_refused(
    driver: Driver, site: Site, caplog: pytest.LogCaptureFixture
) -> None:
    driver.key = KEY_CAROL
    await driver.call("ListTasks", {})
    write_json(
        site.callers(site.team),
        [{"name": "alice", "key": KEY_ALICE}, {"name": "copy", "key": KEY_CAROL}],
    )
    with caplog.at_level(logging.WARNING, logger="a2a_gateway.server.auth"):
        await expect(driver.call("ListTasks", {}), *UNAUTHENTICATED)
    warnings = [r.getMessage() for r in caplog.records if "matches 2 callers" in r.getMessage()]
    assert warnings and f"carol@{site.solo}" in warnings[0] and f"copy@{site.team}" in warnings[0]
    assert KEY_CAROL not in caplog.text
    driver.key = KEY_ALICE
    await driver.call("ListTasks", {})  # the others are unaffected


# --- isolation ------------------------------------------------------------------------------


async def test_another_callers_task_is_not_found_on_every_operation(driver: Driver) -> None:
    done = (await driver.call("SendMessage", send("mine")))["task"]
    waiting = (await driver.call("SendMessage", send("ask:which city?")))["task"]
    assert waiting["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
    for stranger in (KEY_BOB, KEY_CAROL):  # same workspace, then another one
        driver.key = stranger
        for task in (done, waiting):
            for rpc, request in operations(task["id"]).items():
                unknown = await failure(driver, rpc, operations(str(uuid.uuid4()))[rpc])
                other = await failure(driver, rpc, request)
                # Indistinguishable from a task that does not exist.
                assert (other.reason, other.code) == (unknown.reason, unknown.code), rpc
                if not rpc.endswith("PushNotificationConfig") and "Configs" not in rpc:
                    assert other.reason == "TASK_NOT_FOUND", rpc
        listed = await driver.call("ListTasks", {})
        assert listed["tasks"] == [] and listed["totalSize"] == 0
        by_context = await driver.call("ListTasks", {"contextId": done["contextId"]})
        assert by_context["tasks"] == []
    driver.key = KEY_ALICE
    listed = await driver.call("ListTasks", {})
    assert {t["id"] for t in listed["tasks"]} == {done["id"], waiting["id"]}
    answered = (await driver.call("SendMessage", send("Paris", taskId=waiting["id"])))["task"]
    assert answered["status"]["state"] == "TASK_STATE_COMPLETED"


def operations(task_id: str) -> dict[str, dict[str, Any]]:
    return {
        "GetTask": {"id": task_id},
        "CancelTask": {"id": task_id},
        "SubscribeToTask": {"id": task_id},
        "SendMessage": send("hijack", taskId=task_id),
        "SendStreamingMessage": send("hijack", taskId=task_id),
        "CreateTaskPushNotificationConfig": {"taskId": task_id, "url": "https://example.com/h"},
        "GetTaskPushNotificationConfig": {"taskId": task_id, "id": task_id},
        "ListTaskPushNotificationConfigs": {"taskId": task_id},
        "DeleteTaskPushNotificationConfig": {"taskId": task_id, "id": task_id},
    }


async def failure(driver: Driver, rpc: str, request: dict[str, Any]) -> WireError:
    with pytest.raises(WireError) as caught:
        if SERVICE_DESCRIPTOR.methods_by_name[rpc].server_streaming:
            await driver.stream(rpc, request)
        else:
            await driver.call(rpc, request)
    return caught.value


# --- cards ----------------------------------------------------------------------------------


async def test_extended_card_comes_from_the_callers_workspace(driver: Driver) -> None:
    team = await driver.call("GetExtendedAgentCard", {})
    assert team["name"] == "Team card" and [s["id"] for s in team["skills"]] == ["team"]
    driver.key = KEY_CAROL
    solo = await driver.call("GetExtendedAgentCard", {})
    assert solo["name"] != "Team card"
    assert solo["description"] == "Solo agent for carol"  # first line of its PERSONA.md
    assert {i["protocolBinding"] for i in solo["supportedInterfaces"]} == {
        "JSONRPC",
        "HTTP+JSON",
        "GRPC",
    }
    driver.key = ""
    await expect(driver.call("GetExtendedAgentCard", {}), *UNAUTHENTICATED)


async def test_malformed_card_json_falls_back_with_a_warning(
    driver: Driver, site: Site, caplog: pytest.LogCaptureFixture
) -> None:
    path = WorkspaceLayout(site.team).card
    path.write_text('{"name": 5}')
    with caplog.at_level(logging.WARNING, logger="a2a_gateway.server.card"):
        card = await driver.call("GetExtendedAgentCard", {})
    assert card["name"] == "a2a-gateway agent"  # the public card's (no --card-name here)
    assert any(str(path) in r.getMessage() for r in caplog.records)


async def test_public_card_declares_both_schemes(site: Site) -> None:
    url = f"http://127.0.0.1:{site.gateway.http_port}/.well-known/agent-card.json"
    async with (
        aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as http,
        http.get(url) as response,
    ):
        card = await response.json()
    assert card["securitySchemes"]["apiKey"]["apiKeySecurityScheme"]["name"] == "X-API-Key"
    assert card["securitySchemes"]["bearer"]["httpAuthSecurityScheme"]["scheme"] == "Bearer"
    assert [list(r["schemes"]) for r in card["securityRequirements"]] == [["apiKey"], ["bearer"]]
    text = json.dumps(card)
    for secret in (KEY_ALICE, KEY_CAROL, KEY_SIGNER, SIGNING_SECRET):
        assert secret not in text


# --- rate limits ----------------------------------------------------------------------------


@pytest.mark.parametrize("binding", BINDINGS)
async def test_rate_limit_is_429_on_every_binding(tmp_path: Path, binding: str) -> None:
    site = await start_site(tmp_path, RateLimits(per_caller_per_minute=3))
    try:
        async for driver in drivers_for(site, binding):
            for _ in range(3):
                await driver.call("ListTasks", {})
            error = await expect(
                driver.call("ListTasks", {}),
                "RATE_LIMITED",
                {429, -32101, grpc.StatusCode.RESOURCE_EXHAUSTED},
            )
            assert re.search(r"retry in ([1-9]|1[0-9]|20) s", error.message), error.message
            driver.key = KEY_BOB  # another caller has its own budget
            await driver.call("ListTasks", {})
    finally:
        await site.gateway.stop()


# --- signing --------------------------------------------------------------------------------


async def signed(
    driver: Driver, rpc: str, request: dict[str, Any], *, body_for_signature: bytes | None = None,
    timestamp: int | None = None
) -> dict[str, Any]:  # fmt: skip
    """One call as the signing caller: the signature covers the exact bytes sent."""
    headers = {"X-API-Key": KEY_SIGNER, "A2A-Version": "1.0"}
    if driver.binding == "grpc":
        method = SERVICE_DESCRIPTOR.methods_by_name[rpc]
        request_cls = message_factory.GetMessageClass(method.input_type)
        response_cls = message_factory.GetMessageClass(method.output_type)
        body = json_format.ParseDict(request, request_cls()).SerializeToString()
        sig = signing.signature_header(
            SIGNING_SECRET, body if body_for_signature is None else body_for_signature,
            timestamp=timestamp,
        )  # fmt: skip
        metadata = (*((k.lower(), v) for k, v in headers.items()), ("x-a2a-signature", sig))
        call = driver.channel.unary_unary(
            f"/{SERVICE_DESCRIPTOR.full_name}/{rpc}", lambda b: b, response_cls.FromString
        )
        try:
            return codec.to_dict(await call(body, metadata=metadata, timeout=30))
        except grpc.aio.AioRpcError as exc:
            raise _grpc_error(exc) from None
    if driver.binding == "jsonrpc":
        url = f"{driver.base}/a2a"
        method_name = "POST"
        query: dict[str, str] = {}
        payload: Any = {"jsonrpc": "2.0", "id": 1, "method": rpc, "params": request}
    else:
        path, query, payload = routes.PRIMARY[rpc].build(request)
        url = f"{driver.base}/a2a/v1{path}"
        method_name = routes.PRIMARY[rpc].http_method
    data = json.dumps(payload).encode() if payload is not None else b""
    sig = signing.signature_header(
        SIGNING_SECRET, data if body_for_signature is None else body_for_signature,
        timestamp=timestamp,
    )  # fmt: skip
    headers = {**headers, "X-A2A-Signature": sig, "Content-Type": "application/json"}
    async with driver.http.request(
        method_name, url, params=query, data=data or None, headers=headers
    ) as response:
        answer = await response.json(content_type=None)
    if driver.binding == "jsonrpc":
        if "error" in answer:
            raise _jsonrpc_error(answer["error"])
        return dict(answer["result"])
    if response.status != 200:
        raise _status_error(answer["error"], response.status)
    return dict(answer)


async def test_a_signing_caller_must_sign_every_request(driver: Driver) -> None:
    driver.key = KEY_SIGNER
    error = await expect(driver.call("ListTasks", {}), *UNAUTHENTICATED)
    assert "X-A2A-Signature is required" in error.message
    task = (await signed(driver, "SendMessage", send("signed hello")))["task"]
    assert task["status"]["state"] == "TASK_STATE_COMPLETED"
    got = await signed(driver, "GetTask", {"id": task["id"]})
    assert got["id"] == task["id"]
    error = await expect(
        signed(driver, "SendMessage", send("x"), body_for_signature=b"another body"),
        *UNAUTHENTICATED,
    )
    assert "does not match" in error.message
    stale = int(time.time()) - signing.TOLERANCE_S - 60
    error = await expect(
        signed(driver, "GetTask", {"id": task["id"]}, timestamp=stale), *UNAUTHENTICATED
    )
    assert "minutes away" in error.message
    listed = await signed(driver, "ListTasks", {})
    assert [t["id"] for t in listed["tasks"]] == [task["id"]]
