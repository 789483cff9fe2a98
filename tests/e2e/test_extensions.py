"""The card's extensions, enforced and echoed the same on every binding (digest §9):
a call that does not name a ``required: true`` extension is ExtensionSupportRequired
(-32008; HTTP 400, gRPC FAILED_PRECONDITION, ``EXTENSION_SUPPORT_REQUIRED``) and
changes nothing; a call that names it gets the activated ones (ours only) echoed in
``A2A-Extensions``. The cards stay open: a client learns there what to name."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import grpc
import pytest

from a2a_gateway.protocol.resume import RESUME_EXTENSION

from .conftest import BINDINGS, KEY_ALICE, Driver, WireError, running_gateway
from .test_scenarios import COMPLETED, send

REQUIRED = "https://ext.example/trace/v1"
OPTIONAL = "https://ext.example/lang/v1"
EXTENSIONS = [
    {"uri": REQUIRED, "description": "Traces.", "required": True},
    {"uri": OPTIONAL, "description": "Language hints."},
]
#: The refusal's code on each binding: JSON-RPC code, HTTP status, gRPC status.
REFUSAL_CODES = {"jsonrpc": -32008, "rest": 400, "grpc": grpc.StatusCode.FAILED_PRECONDITION}


@pytest.fixture(params=BINDINGS)
async def ext_driver(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Driver]:
    async with (
        running_gateway(tmp_path, card_extensions=json.dumps(EXTENSIONS)) as gateway,
        aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as http,
        grpc.aio.insecure_channel(f"127.0.0.1:{gateway.grpc_port}") as channel,
    ):
        yield Driver(request.param, http, f"http://127.0.0.1:{gateway.http_port}", channel)


async def _refused(driver: Driver, rpc: str, request: dict[str, object], stream: bool) -> None:
    with pytest.raises(WireError) as caught:
        if stream:
            await driver.stream(rpc, request)
        else:
            await driver.call(rpc, request)
    assert caught.value.reason == "EXTENSION_SUPPORT_REQUIRED", caught.value
    assert caught.value.code == REFUSAL_CODES[driver.binding]
    assert REQUIRED in caught.value.message


async def test_a_required_extension_not_named_is_refused(ext_driver: Driver) -> None:
    driver = ext_driver
    driver.extensions = OPTIONAL  # another declared one does not stand in for it
    await _refused(driver, "SendMessage", send("hello"), stream=False)
    await _refused(driver, "SendStreamingMessage", send("hello"), stream=True)
    await _refused(driver, "ListTasks", {}, stream=False)
    await _refused(driver, "GetTask", {"id": "any"}, stream=False)
    await _refused(driver, "SubscribeToTask", {"id": "any"}, stream=True)
    # Nothing ran: with the extension named, the caller has no task.
    driver.extensions = REQUIRED
    listed = await driver.call("ListTasks", {})
    assert listed.get("tasks", []) == []
    # The extended card stays open: it is where a client reads what to name.
    driver.extensions = ""
    card = await driver.call("GetExtendedAgentCard", {})
    # The owner's two, then ours (resumable streams: docs/streams.md).
    uris = [e["uri"] for e in card["capabilities"]["extensions"]]
    assert uris == [REQUIRED, OPTIONAL, RESUME_EXTENSION]


async def test_activated_extensions_are_echoed(ext_driver: Driver) -> None:
    driver = ext_driver
    driver.extensions = f"{REQUIRED}, urn:not-ours, {OPTIONAL}"
    task = (await driver.call("SendMessage", send("hello")))["task"]
    assert task["status"]["state"] == COMPLETED
    assert driver.echoed == f"{OPTIONAL}, {REQUIRED}"  # ours only, never urn:not-ours
    events = await driver.stream("SendStreamingMessage", send("chunks:2"))
    assert events[-1]["statusUpdate"]["status"]["state"] == COMPLETED
    assert driver.echoed == f"{OPTIONAL}, {REQUIRED}"
    driver.extensions = REQUIRED
    await driver.call("GetTask", {"id": task["id"]})
    assert driver.echoed == REQUIRED


async def test_the_public_card_stays_open(tmp_path: Path) -> None:
    async with (
        running_gateway(tmp_path, card_extensions=json.dumps(EXTENSIONS)) as gateway,
        aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as http,
        http.get(f"http://127.0.0.1:{gateway.http_port}/.well-known/agent-card.json") as response,
    ):
        assert response.status == 200
        card = await response.json()
    assert card["capabilities"]["extensions"][0] == EXTENSIONS[0]


async def test_a_0_3_caller_is_held_to_the_same_rule(tmp_path: Path) -> None:
    # 0.3 has no -32008: its JSON-RPC answers A2A errors as -32603 with the reason in
    # data (as the SDK's 0.3 path does); the 0.3 header name activates as well.
    message = {"role": "user", "messageId": "m-03", "kind": "message"}
    message["parts"] = [{"kind": "text", "text": "hello"}]
    body = {"jsonrpc": "2.0", "id": 1, "method": "message/send", "params": {"message": message}}
    async with (
        running_gateway(tmp_path, card_extensions=json.dumps(EXTENSIONS)) as gateway,
        aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as http,
    ):
        url = f"http://127.0.0.1:{gateway.http_port}/a2a"
        answers = []
        for extra in ({}, {"X-A2A-Extensions": REQUIRED}):
            headers = {"X-API-Key": KEY_ALICE, **extra}
            async with http.post(url, json=body, headers=headers) as response:
                answers.append((response.headers.get("A2A-Extensions"), await response.json()))
    (no_echo, refused), (echoed, answered) = answers
    assert refused["error"]["code"] == -32603 and no_echo is None
    assert refused["error"]["data"]["reason"] == "EXTENSION_SUPPORT_REQUIRED"
    assert answered["result"]["status"]["state"] == "completed" and echoed == REQUIRED
