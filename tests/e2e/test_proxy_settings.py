"""Proxy mode's upstream settings: ``--upstream-transport``, ``--upstream-timeout`` and
``--upstream-idle-timeout``, with our own gateway (faux agent) as the upstream.

A forced binding is proven by the wire, not by the proxy's word: the upstream's card is
republished with every other binding's interface pointing at a port that refuses
connections, and listed first. A proxy that used anything but the forced binding could
not answer at all (the control case shows it).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import subprocess
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from a2a_gateway.protocol import sse
from a2a_gateway.proxy import UPSTREAM_CARD, UPSTREAM_TIMEOUT
from a2a_gateway.serve import Gateway
from a2a_gateway.settings import resolve
from tests.support.ports import held_port
from tests.support.processes import GATEWAY

ROOT = Path(__file__).resolve().parents[2]
HOST = "127.0.0.1"
VERSION = {"A2A-Version": "1.0"}
CLIENT_TIMEOUT = aiohttp.ClientTimeout(total=30)
BOUND = 20  # seconds: no test here waits longer for anything
#: Card binding names for the setting's values.
CARD_BINDING = {"jsonrpc": "JSONRPC", "rest": "HTTP+JSON", "grpc": "GRPC"}

Start = Callable[..., Awaitable[Gateway]]


# --- fixtures -----------------------------------------------------------------------------


@pytest.fixture
async def start() -> AsyncIterator[Start]:
    """Starts in-process gateways (upstreams and proxies); stops them all at the end."""
    started: list[Gateway] = []

    async def run(**flags: Any) -> Gateway:
        settings = resolve({"port": 0, "grpc_port": -1, **flags}, environ={})
        gateway = Gateway(settings)
        started.append(gateway)
        await gateway.start()
        return gateway

    yield run
    for gateway in reversed(started):  # proxies before their upstreams
        await gateway.stop()


async def start_upstream(start: Start, *, grpc: bool = True) -> Gateway:
    # No SSE keep-alives within a test's time: a held stream is really silent.
    return await start(faux=True, grpc_port=0 if grpc else -1, keepalive=600.0)


@pytest.fixture
def dead_port() -> Iterator[int]:
    """A port bound but not listening: connections to it are refused, and it is not
    handed to anyone else while the test runs."""
    with held_port() as port:
        yield port


@pytest.fixture
async def card_host() -> AsyncIterator[Callable[[dict[str, Any]], Awaitable[str]]]:
    """Serves a given card at ``/card.json``; returns its URL (a proxy's ``--upstream``)."""
    servers: list[TestServer] = []

    async def host(card: dict[str, Any]) -> str:
        async def serve_card(_: web.Request) -> web.Response:
            return web.json_response(card)

        app = web.Application()
        app.router.add_get("/card.json", serve_card)
        server = TestServer(app, host=HOST)
        servers.append(server)
        await server.start_server()
        return f"http://{HOST}:{server.port}/card.json"

    yield host
    for server in servers:
        await server.close()


def base_url(gateway: Gateway) -> str:
    return f"http://{HOST}:{gateway.http_port}"


async def fetch_card(gateway: Gateway) -> dict[str, Any]:
    async with (
        aiohttp.ClientSession(timeout=CLIENT_TIMEOUT) as http,
        http.get(base_url(gateway) + "/.well-known/agent-card.json") as response,
    ):
        card: dict[str, Any] = await response.json()
        return card


def only_binding_alive(card: dict[str, Any], binding: str, dead_port: int) -> dict[str, Any]:
    """``card`` with every interface but ``binding``'s pointing at ``dead_port``, and
    ``binding``'s listed last (so the default choice is a dead one)."""
    dead = {
        "JSONRPC": f"http://{HOST}:{dead_port}/a2a",
        "HTTP+JSON": f"http://{HOST}:{dead_port}/a2a/v1",
        "GRPC": f"{HOST}:{dead_port}",
    }
    interfaces = []
    for interface in card["supportedInterfaces"]:
        name = interface["protocolBinding"]
        interfaces.append(interface if name == binding else {**interface, "url": dead[name]})
    interfaces.sort(key=lambda i: i["protocolBinding"] == binding)
    return {**card, "supportedInterfaces": interfaces}


# --- raw JSON-RPC to the proxy --------------------------------------------------------------


def message(text: str) -> dict[str, Any]:
    return {"message": {"messageId": f"m-{text}", "role": "ROLE_USER", "parts": [{"text": text}]}}


def reason(error: dict[str, Any]) -> str:
    info = [d for d in error.get("data", []) if d.get("@type", "").endswith("ErrorInfo")]
    return str(info[0]["reason"]) if info else ""


async def call(gateway: Gateway, method: str, params: dict[str, Any]) -> dict[str, Any]:
    body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
    async with (
        asyncio.timeout(BOUND),
        aiohttp.ClientSession(timeout=CLIENT_TIMEOUT) as http,
        http.post(base_url(gateway) + "/a2a", json=body, headers=VERSION) as response,
    ):
        assert response.status == 200
        envelope: dict[str, Any] = await response.json()
        return envelope


async def stream(gateway: Gateway, method: str, params: dict[str, Any]) -> list[dict[str, Any]]:
    """Every envelope of a JSON-RPC SSE stream (results, then an error if one ends it)."""
    body = {"jsonrpc": "2.0", "id": 7, "method": method, "params": params}
    envelopes: list[dict[str, Any]] = []
    async with (
        asyncio.timeout(BOUND),
        aiohttp.ClientSession(timeout=CLIENT_TIMEOUT) as http,
        http.post(base_url(gateway) + "/a2a", json=body, headers=VERSION) as response,
    ):
        assert response.content_type == sse.CONTENT_TYPE, await response.text()
        decoder = sse.Decoder()
        async for chunk in response.content.iter_any():
            envelopes += [json.loads(event.data) for event in decoder.feed(chunk)]
    return envelopes


# --- --upstream-transport -------------------------------------------------------------------


@pytest.mark.parametrize("transport", ["jsonrpc", "rest", "grpc"])
async def test_forced_binding_is_the_one_used(
    transport: str,
    start: Start,
    card_host: Callable[[dict[str, Any]], Awaitable[str]],
    dead_port: int,
) -> None:
    upstream = await start_upstream(start)
    card = only_binding_alive(await fetch_card(upstream), CARD_BINDING[transport], dead_port)
    url = await card_host(card)

    proxy = await start(upstream=url, upstream_transport=transport, upstream_timeout=10.0)
    reply = await call(proxy, "SendMessage", message("over one binding"))
    task = reply["result"]["task"]
    assert task["status"]["state"] == "TASK_STATE_COMPLETED"
    assert task["artifacts"][0]["parts"] == [{"text": "over one binding"}]
    envelopes = await stream(proxy, "SendStreamingMessage", message("chunks:2"))
    assert all("error" not in e for e in envelopes), envelopes
    assert envelopes[-1]["result"]["statusUpdate"]["status"]["state"] == "TASK_STATE_COMPLETED"

    # Control: the same card without forcing picks the first interface, a dead one.
    auto = await start(upstream=url)
    refused = await call(auto, "SendMessage", message("first listed"))
    assert reason(refused["error"]) == "UNAVAILABLE"


async def test_forced_binding_the_upstream_lacks(
    start: Start, caplog: pytest.LogCaptureFixture
) -> None:
    upstream = await start_upstream(start, grpc=False)  # its card: JSON-RPC and HTTP+JSON
    with caplog.at_level(logging.WARNING, logger="a2a_gateway.proxy"):
        proxy = await start(upstream=base_url(upstream), upstream_transport="grpc")
    # Not fatal at start-up, as for every card problem (the upstream may change):
    # the operator's log says what the card offers, each call answers Unavailable.
    problems = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert any(
        "--upstream-transport grpc" in p and "it offers: JSONRPC 1.0, HTTP+JSON 1.0" in p
        for p in problems
    ), problems
    reply = await call(proxy, "SendMessage", message("over grpc please"))
    assert reply["error"]["code"] == -32603
    assert reason(reply["error"]) == "UNAVAILABLE"
    assert reply["error"]["message"] == UPSTREAM_CARD
    assert str(upstream.http_port) not in json.dumps(reply)


# --- --upstream-timeout and --upstream-idle-timeout -----------------------------------------


@pytest.mark.parametrize("transport", ["jsonrpc", "rest", "grpc"])
async def test_slow_upstream_is_deadline_exceeded(transport: str, start: Start) -> None:
    upstream = await start_upstream(start)
    # 2 s: a quick call must get through within the bound even on a loaded machine.
    proxy = await start(
        upstream=base_url(upstream), upstream_transport=transport, upstream_timeout=2.0
    )
    # Answered within BOUND, long before the 30 s hold ends: the bound was applied.
    reply = await call(proxy, "SendMessage", message("hold:30"))
    if transport == "grpc" and "result" in reply:
        # gRPC carries the bound to the upstream as the call's deadline, and our
        # gateway answers a blocking send a margin before it with the task as it is
        # then (the usual outcome); a machine stalled past the margin lets the proxy's
        # own timer win. Either shows the bound; only a task still working is right.
        assert reply["result"]["task"]["status"]["state"] == "TASK_STATE_WORKING"
    else:
        assert reply["error"]["code"] == -32603
        assert reason(reply["error"]) == "DEADLINE_EXCEEDED"
        assert reply["error"]["message"] == UPSTREAM_TIMEOUT
    # A quick call within the same bound still goes through.
    quick = await call(proxy, "SendMessage", message("quick"))
    assert quick["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED"


@pytest.mark.parametrize("transport", ["jsonrpc", "rest", "grpc"])
async def test_silent_upstream_stream_ends_with_deadline_exceeded(
    transport: str, start: Start
) -> None:
    upstream = await start_upstream(start)
    proxy = await start(
        upstream=base_url(upstream),
        upstream_transport=transport,
        upstream_timeout=10.0,  # the stream opens at once; only the silence is too long
        upstream_idle_timeout=0.5,
    )
    envelopes = await stream(proxy, "SendStreamingMessage", message("hold:30"))
    results, last = envelopes[:-1], envelopes[-1]
    assert results and all("result" in e for e in results), envelopes
    assert results[0]["result"]["task"]["status"]["state"] in (
        "TASK_STATE_SUBMITTED",
        "TASK_STATE_WORKING",
    )
    assert last["error"]["code"] == -32603
    assert reason(last["error"]) == "DEADLINE_EXCEEDED"
    assert last["error"]["message"] == UPSTREAM_TIMEOUT


# --- start-up -------------------------------------------------------------------------------


def run_serve(*argv: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("A2A_GATEWAY_")}
    return subprocess.run(
        [*GATEWAY, "serve", *argv],
        cwd=ROOT,
        env={**environ, **(env or {})},
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )


@pytest.mark.parametrize(
    ("argv", "env", "needle"),
    [
        (
            ["--upstream-timeout", "0"],
            {},
            "--upstream-timeout: upstream_timeout must be more than 0",
        ),
        (
            [],
            {"A2A_GATEWAY_UPSTREAM_TRANSPORT": "soap"},
            "A2A_GATEWAY_UPSTREAM_TRANSPORT: upstream_transport must be one of: auto,",
        ),
    ],
)
def test_bad_values_refused_at_start_up(argv: list[str], env: dict[str, str], needle: str) -> None:
    run = run_serve("--upstream", f"http://{HOST}:9", "--port", "0", *argv, env=env)
    assert run.returncode == 2, run.stderr
    assert needle in run.stderr


async def test_upstream_settings_without_upstream_are_ignored_with_a_warning(
    start: Start, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="a2a_gateway.serve"):
        gateway = await start(faux=True, upstream_timeout=5.0, upstream_transport="grpc")
    warnings = [r.getMessage() for r in caplog.records if r.name == "a2a_gateway.serve"]
    assert "ignoring upstream_transport, upstream_timeout: they only apply with --upstream" in (
        warnings
    )
    reply = await call(gateway, "SendMessage", message("still served"))
    assert reply["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
