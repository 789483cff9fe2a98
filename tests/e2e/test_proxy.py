"""Proxy mode: the official a2a-sdk server offering ONLY gRPC, behind our gateway started as
``a2a-gateway serve --upstream URL --upstream-key K`` (a real subprocess), driven by raw
JSON-RPC over HTTP and by the SDK's own client over HTTP+JSON; plus in-process gateways
for the failure modes (upstream refusing our key, upstream down, a proxy loop)."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import httpx
import pytest

from a2a_gateway.protocol import sse
from a2a_gateway.serve import Gateway
from a2a_gateway.settings import resolve
from tests.support.ports import HOST, free_ports
from tests.support.processes import (
    CARD_PATH,
    GATEWAY,
    SdkClient,
    ServerProcess,
    proxy_running,
    require_peer_venv,
    sdk_server_command,
)

from ..interop.conftest import make_sdk_client, sdk_driver  # noqa: F401 (fixtures)
from .conftest import KEY_ALICE, KEY_BOB

ROOT = Path(__file__).resolve().parents[2]
UPSTREAM_KEY = "upstream-key-93a1c0d4e8f2"
UPSTREAM_NAME = "a2a-sdk echo peer"
HTTP_TIMEOUT = httpx.Timeout(30.0)
ASYNC_TIMEOUT = aiohttp.ClientTimeout(total=30)
VERSION = {"A2A-Version": "1.0"}


@dataclass(frozen=True)
class Upstream:
    base_url: str
    grpc_port: int


@dataclass(frozen=True)
class Proxy:
    base_url: str
    server: ServerProcess

    @property
    def card_url(self) -> str:
        return self.base_url + "/.well-known/agent-card.json"


@pytest.fixture(scope="module")
def upstream(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Upstream]:
    """The SDK echo server serving gRPC only (its card is HTTP), key required."""
    require_peer_venv()
    port, grpc_port = free_ports(2)
    base_url = f"http://{HOST}:{port}"
    server = ServerProcess(
        "sdk-upstream",
        sdk_server_command(port, grpc_port, transports=("grpc",), api_key=UPSTREAM_KEY),
        tmp_path_factory.mktemp("upstream"),
        base_url + "/.well-known/agent-card.json",
        grpc_port=grpc_port,
        strict_shutdown=False,
    )
    with server.running():
        yield Upstream(base_url, grpc_port)


@pytest.fixture(scope="module")
def proxy(upstream: Upstream, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Proxy]:
    """``a2a-gateway serve --upstream`` with callers alice and bob."""
    callers = [{"name": "alice", "key": KEY_ALICE}, {"name": "bob", "key": KEY_BOB}]
    root = tmp_path_factory.mktemp("proxy")
    with proxy_running(root, upstream.base_url, UPSTREAM_KEY, callers, binding="GRPC") as server:
        yield Proxy(server.card_url.removesuffix(CARD_PATH), server)


# --- raw JSON-RPC over HTTP ---------------------------------------------------------------


def _headers(key: str | None) -> dict[str, str]:
    return {**VERSION, **({"X-API-Key": key} if key else {})}


def rpc(base_url: str, method: str, params: dict[str, Any], key: str | None = KEY_ALICE) -> Any:
    body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
    response = httpx.post(f"{base_url}/a2a", json=body, headers=_headers(key), timeout=HTTP_TIMEOUT)
    assert response.headers["content-type"].startswith("application/json"), response.text
    return response.status_code, response.json()


def rpc_stream(
    client: httpx.Client, base_url: str, method: str, params: dict[str, Any]
) -> Iterator[dict[str, Any]]:
    """The ``result`` of each SSE event, as it arrives."""
    body = {"jsonrpc": "2.0", "id": 7, "method": method, "params": params}
    with client.stream("POST", f"{base_url}/a2a", json=body, headers=_headers(KEY_ALICE)) as r:
        assert r.headers["content-type"].startswith(sse.CONTENT_TYPE), r.read()
        decoder = sse.Decoder()
        for chunk in r.iter_bytes():
            for event in decoder.feed(chunk):
                envelope = json.loads(event.data)
                assert envelope["id"] == 7
                assert "error" not in envelope, envelope
                yield envelope["result"]


def message(text: str, **extra: Any) -> dict[str, Any]:
    return {
        "message": {
            "messageId": f"m-{text}-{id(extra)}",
            "role": "ROLE_USER",
            "parts": [{"text": text}],
            **extra,
        }
    }


def reason(error: dict[str, Any]) -> str:
    info = [d for d in error.get("data", []) if d.get("@type", "").endswith("ErrorInfo")]
    return str(info[0]["reason"]) if info else ""


def test_card_shows_upstream_identity_with_our_interfaces(proxy: Proxy, upstream: Upstream) -> None:
    card = httpx.get(proxy.card_url, timeout=HTTP_TIMEOUT).json()
    assert card["name"] == UPSTREAM_NAME
    assert card["description"].startswith("The official a2a-sdk")
    assert [s["id"] for s in card["skills"]] == ["echo"]
    assert card["capabilities"]["streaming"] is True
    interfaces = [(i["protocolBinding"], i["url"]) for i in card["supportedInterfaces"]]
    assert interfaces[:2] == [
        ("JSONRPC", f"{proxy.base_url}/a2a"),
        ("HTTP+JSON", f"{proxy.base_url}/a2a/v1"),
    ]
    assert interfaces[2][0] == "GRPC"
    assert str(upstream.grpc_port) not in json.dumps(card)  # the upstream stays hidden
    assert card["securitySchemes"]["apiKey"]["apiKeySecurityScheme"]["name"] == "X-API-Key"


def test_extended_card_is_the_upstreams_with_our_interfaces(proxy: Proxy) -> None:
    status, reply = rpc(proxy.base_url, "GetExtendedAgentCard", {})
    assert status == 200, reply
    card = reply["result"]
    assert card["name"] == UPSTREAM_NAME
    assert [s["id"] for s in card["skills"]] == ["echo", "extended-echo"]
    assert card["supportedInterfaces"][0]["url"] == f"{proxy.base_url}/a2a"
    public = httpx.get(proxy.card_url, timeout=HTTP_TIMEOUT).json()
    assert [s["id"] for s in public["skills"]] == ["echo"]  # extended skills stay private


def test_jsonrpc_send_and_stream_through_grpc_upstream(proxy: Proxy) -> None:
    status, reply = rpc(proxy.base_url, "SendMessage", message("hello proxy"))
    assert status == 200
    task = reply["result"]["task"]
    assert task["status"]["state"] == "TASK_STATE_COMPLETED"
    assert task["artifacts"][0]["parts"] == [{"text": "hello proxy"}]

    with httpx.Client(timeout=HTTP_TIMEOUT) as client:
        events = list(
            rpc_stream(client, proxy.base_url, "SendStreamingMessage", message("chunks:3"))
        )
    assert next(iter(events[0])) == "task"
    chunks = [e["artifactUpdate"] for e in events if "artifactUpdate" in e]
    assert [c["artifact"]["parts"][0]["text"] for c in chunks] == ["chunk-0", "chunk-1", "chunk-2"]
    assert [c.get("append", False) for c in chunks] == [False, True, True]
    assert chunks[-1]["lastChunk"] is True
    assert events[-1]["statusUpdate"]["status"]["state"] == "TASK_STATE_COMPLETED"


def test_streams_pass_through_without_buffering(proxy: Proxy) -> None:
    _, created = rpc(
        proxy.base_url,
        "SendMessage",
        {**message("hold:30"), "configuration": {"returnImmediately": True}},
    )
    task_id = created["result"]["task"]["id"]
    with httpx.Client(timeout=HTTP_TIMEOUT) as client:
        events = rpc_stream(client, proxy.base_url, "SubscribeToTask", {"id": task_id})
        # The snapshot arrives while the upstream task still holds for 30 s.
        first = next(events)
        assert first["task"]["id"] == task_id
        assert first["task"]["status"]["state"] == "TASK_STATE_WORKING"
        _, canceled = rpc(proxy.base_url, "CancelTask", {"id": task_id})
        assert canceled["result"]["status"]["state"] == "TASK_STATE_CANCELED"
        rest = list(events)
    states = [e["statusUpdate"]["status"]["state"] for e in rest if "statusUpdate" in e]
    assert states[-1] == "TASK_STATE_CANCELED"


def test_our_callers_authenticate_and_tasks_stay_theirs(proxy: Proxy) -> None:
    response = httpx.post(
        f"{proxy.base_url}/a2a",
        json={"jsonrpc": "2.0", "id": 1, "method": "ListTasks", "params": {}},
        headers=VERSION,
        timeout=HTTP_TIMEOUT,
    )
    assert response.status_code == 401  # our own authentication, as without a proxy

    _, created = rpc(proxy.base_url, "SendMessage", message("alice's secret plan"))
    task_id = created["result"]["task"]["id"]
    _, bobs_get = rpc(proxy.base_url, "GetTask", {"id": task_id}, key=KEY_BOB)
    assert bobs_get["error"]["code"] == -32001
    assert reason(bobs_get["error"]) == "TASK_NOT_FOUND"
    _, bobs_cancel = rpc(proxy.base_url, "CancelTask", {"id": task_id}, key=KEY_BOB)
    assert bobs_cancel["error"]["code"] == -32001
    _, bobs_list = rpc(proxy.base_url, "ListTasks", {}, key=KEY_BOB)
    assert task_id not in {t["id"] for t in bobs_list["result"]["tasks"]}
    _, alices_list = rpc(proxy.base_url, "ListTasks", {})
    assert task_id in {t["id"] for t in alices_list["result"]["tasks"]}


def test_upstream_errors_come_back_typed(proxy: Proxy) -> None:
    _, missing = rpc(proxy.base_url, "GetTask", {"id": "no-such-task"})
    assert missing["error"]["code"] == -32001
    _, done = rpc(proxy.base_url, "SendMessage", message("done soon"))
    task_id = done["result"]["task"]["id"]
    _, again = rpc(proxy.base_url, "CancelTask", {"id": task_id})
    assert again["error"]["code"] == -32002
    assert reason(again["error"]) == "TASK_NOT_CANCELABLE"


# --- the SDK client over HTTP+JSON ----------------------------------------------------------


def test_sdk_client_over_http_json(
    proxy: Proxy,
    make_sdk_client: Callable[..., SdkClient],  # noqa: F811 (the fixture)
) -> None:
    client = make_sdk_client(proxy.card_url, "rest").keyed(KEY_ALICE)
    card = client("card").only
    assert card["interface"]["protocolBinding"] == "HTTP+JSON"
    assert card["card"]["name"] == UPSTREAM_NAME

    task = client("send", "via rest").result("task")
    assert task["status"]["state"] == "TASK_STATE_COMPLETED"
    assert task["artifacts"][0]["parts"] == [{"text": "via rest"}]

    events = client("stream", "chunks:2").lines
    assert next(iter(events[0])) == "task"
    texts = [
        e["artifactUpdate"]["artifact"]["parts"][0]["text"] for e in events if "artifactUpdate" in e
    ]
    assert texts == ["chunk-0", "chunk-1"]
    assert events[-1]["statusUpdate"]["status"]["state"] == "TASK_STATE_COMPLETED"

    got = client("get", task["id"]).result("task")
    assert got["id"] == task["id"]
    listed = client("list").result("listTasks")
    assert task["id"] in {t["id"] for t in listed["tasks"]}
    refused = client("cancel", task["id"]).error
    assert refused is not None and refused["code"] == -32002


def test_our_cli_over_grpc_through_the_proxy(proxy: Proxy) -> None:
    """gRPC in, gRPC out: our CLI streams from the proxy's gRPC binding."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("A2A_GATEWAY_")}
    env["A2A_GATEWAY_KEY"] = KEY_ALICE
    argv = ["send", proxy.base_url, "chunks:3", "--stream", "--transport", "grpc"]
    run = subprocess.run(
        [*GATEWAY, *argv],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert run.returncode == 0, run.stderr
    text, last = run.stdout.rstrip("\n").rsplit("\n", 1)
    assert text == "chunk-0chunk-1chunk-2"
    assert last.startswith("task ") and ": completed (context " in last


# --- failure modes, in-process ---------------------------------------------------------------


@pytest.fixture
async def make_proxy() -> AsyncIterator[Callable[..., Any]]:
    started: list[Gateway] = []

    async def start(upstream_url: str, upstream_key: str = "", port: int = 0) -> Gateway:
        settings = resolve(
            {
                "upstream": upstream_url,
                "upstream_key": upstream_key,
                "allow_anonymous": True,
                "port": port,
                "grpc_port": -1,
            },
            environ={},
        )
        gateway = Gateway(settings)
        started.append(gateway)
        await gateway.start()
        return gateway

    yield start
    for gateway in started:
        await gateway.stop()


async def _call(gateway: Gateway, method: str, params: dict[str, Any]) -> tuple[int, Any]:
    base = f"http://127.0.0.1:{gateway.http_port}"
    body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
    async with (
        aiohttp.ClientSession(timeout=ASYNC_TIMEOUT) as http,
        http.post(f"{base}/a2a", json=body, headers=VERSION) as response,
    ):
        return response.status, await response.json()


async def _rest_get(gateway: Gateway, path: str) -> tuple[int, Any]:
    async with (
        aiohttp.ClientSession(timeout=ASYNC_TIMEOUT) as http,
        http.get(f"http://127.0.0.1:{gateway.http_port}/a2a/v1{path}", headers=VERSION) as r,
    ):
        return r.status, await r.json(content_type=None)


async def test_upstream_refusing_our_key_is_not_a_401(
    upstream: Upstream, make_proxy: Callable[..., Any]
) -> None:
    gateway = await make_proxy(upstream.base_url, "not-the-upstream-key")
    status, reply = await _call(gateway, "SendMessage", message("hi"))
    assert status == 200
    assert reply["error"]["code"] == -32603
    assert reason(reply["error"]) == "INTERNAL_ERROR"
    assert "refused this gateway's credentials" in reply["error"]["message"]
    rest_status, rest_reply = await _rest_get(gateway, "/tasks")
    assert rest_status == 500
    assert "not-the-upstream-key" not in json.dumps(reply) + json.dumps(rest_reply)


async def test_upstream_down_is_unavailable_without_revealing_it(
    make_proxy: Callable[..., Any],
) -> None:
    (port,) = free_ports(1)  # nothing listens there
    gateway = await make_proxy(f"http://127.0.0.1:{port}", "some-upstream-key")
    async with (
        aiohttp.ClientSession(timeout=ASYNC_TIMEOUT) as http,
        http.get(f"http://127.0.0.1:{gateway.http_port}/.well-known/agent-card.json") as r,
    ):
        card = await r.json()
    assert card["name"] == "a2a-gateway agent"  # ours, until the upstream is reached
    status, reply = await _call(gateway, "ListTasks", {})  # GetTask: nobody's task
    assert status == 200
    assert reason(reply["error"]) == "UNAVAILABLE"
    assert reply["error"]["message"] == "the upstream agent is unreachable"
    assert str(port) not in json.dumps(reply)


async def test_a_proxy_loop_fails_fast(make_proxy: Callable[..., Any]) -> None:
    (port,) = free_ports(1)
    gateway = await make_proxy(f"http://127.0.0.1:{port}", port=port)  # its own upstream
    status, reply = await _call(gateway, "SendMessage", message("round and round"))
    assert status == 200
    assert reply["error"]["code"] == -32603
    assert "too many gateways" in reply["error"]["message"]
