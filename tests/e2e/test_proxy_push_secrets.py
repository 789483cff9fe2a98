"""Push configs through the proxy. It never hands a push config's token or credentials
back to our caller, whatever the upstream answers: the a2a-sdk (and other peers) return
the stored config whole, while our own engine answers only its public part
(``public_push``). And it judges webhook URLs with our outbound guard before the
upstream (which delivers from its own network, and may check nothing) sees them.

The upstream here is a small JSON-RPC peer on a real port that answers like the SDK:
the config it was given, secrets included. Calls reach the proxy over JSON-RPC and
HTTP+JSON."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from a2a_gateway.serve import Gateway
from a2a_gateway.settings import resolve

TIMEOUT = aiohttp.ClientTimeout(total=30)
VERSION = {"A2A-Version": "1.0"}
TOKEN = "push-token-5f1e9a7c3b"
CREDENTIALS = "push-credentials-8d2c4e6a"
CONFIGS: web.AppKey[dict[str, Any]] = web.AppKey("configs")
CALLS: web.AppKey[list[str]] = web.AppKey("calls")
TASK = {
    "id": "task-1",
    "contextId": "context-1",
    "status": {"state": "TASK_STATE_COMPLETED", "timestamp": "2026-01-01T00:00:00.000Z"},
}


async def _upstream_rpc(request: web.Request) -> web.Response:
    body = await request.json()
    method, params = body["method"], body.get("params") or {}
    configs = request.app[CONFIGS]
    request.app[CALLS].append(method)
    result: Any
    if method == "SendMessage":
        result = {"task": TASK}
    elif method == "CreateTaskPushNotificationConfig":
        configs[params["id"]] = params  # stored and answered whole, as the SDK does
        result = params
    elif method == "GetTaskPushNotificationConfig":
        result = configs[params["id"]]
    elif method == "ListTaskPushNotificationConfigs":
        result = {"configs": list(configs.values())}
    else:
        return web.json_response(
            {"jsonrpc": "2.0", "id": body["id"], "error": {"code": -32601, "message": method}}
        )
    return web.json_response({"jsonrpc": "2.0", "id": body["id"], "result": result})


@pytest.fixture
def upstream_app() -> web.Application:
    app = web.Application()
    app[CONFIGS] = {}
    app[CALLS] = []
    return app


@pytest.fixture
async def upstream_url(upstream_app: web.Application) -> AsyncIterator[str]:
    """An upstream that answers push configs with their secrets."""
    app = upstream_app
    runner = web.AppRunner(app)
    app.router.add_post("/rpc", _upstream_rpc)

    async def card(request: web.Request) -> web.Response:
        base = f"http://127.0.0.1:{request.url.port}"
        return web.json_response(
            {
                "name": "secret-echoing peer",
                "description": "answers push configs whole",
                "version": "1.0.0",
                "supportedInterfaces": [
                    {"url": f"{base}/rpc", "protocolBinding": "JSONRPC", "protocolVersion": "1.0"}
                ],
                "capabilities": {"pushNotifications": True},
                "defaultInputModes": ["text/plain"],
                "defaultOutputModes": ["text/plain"],
                "skills": [{"id": "echo", "name": "echo", "description": "echo", "tags": ["x"]}],
            }
        )

    app.router.add_get("/.well-known/agent-card.json", card)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        await runner.cleanup()


@pytest.fixture
async def proxy(upstream_url: str) -> AsyncIterator[Gateway]:
    settings = resolve(
        {"upstream": upstream_url, "allow_anonymous": True, "port": 0, "grpc_port": -1},
        environ={},
    )
    gateway = Gateway(settings)
    await gateway.start()
    try:
        yield gateway
    finally:
        await gateway.stop()


async def _rpc(gateway: Gateway, method: str, params: dict[str, Any]) -> Any:
    body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
    async with (
        aiohttp.ClientSession(timeout=TIMEOUT) as http,
        http.post(f"http://127.0.0.1:{gateway.http_port}/a2a", json=body, headers=VERSION) as r,
    ):
        assert r.status == 200
        reply = await r.json()
    assert "error" not in reply, reply
    return reply["result"]


async def _rest_get(gateway: Gateway, path: str) -> Any:
    url = f"http://127.0.0.1:{gateway.http_port}/a2a/v1{path}"
    async with (
        aiohttp.ClientSession(timeout=TIMEOUT) as http,
        http.get(url, headers=VERSION) as r,
    ):
        assert r.status == 200, await r.text()
        return await r.json(content_type=None)


async def test_push_config_secrets_from_the_upstream_are_not_answered(proxy: Gateway) -> None:
    message = {"messageId": "m-1", "role": "ROLE_USER", "parts": [{"text": "hi"}]}
    sent = await _rpc(proxy, "SendMessage", {"message": message})
    assert sent["task"]["id"] == "task-1"  # now the anonymous caller's task
    config = {
        "taskId": "task-1",
        "id": "hook-1",
        "url": "https://hooks.example.com/a2a",
        "token": TOKEN,
        "authentication": {"scheme": "Bearer", "credentials": CREDENTIALS},
    }
    public = {
        "taskId": "task-1",
        "id": "hook-1",
        "url": "https://hooks.example.com/a2a",
        "authentication": {"scheme": "Bearer"},
    }
    ids = {"taskId": "task-1", "id": "hook-1"}
    answers = {
        "create": await _rpc(proxy, "CreateTaskPushNotificationConfig", config),
        "get": await _rpc(proxy, "GetTaskPushNotificationConfig", ids),
        "list": await _rpc(proxy, "ListTaskPushNotificationConfigs", {"taskId": "task-1"}),
        "rest get": await _rest_get(proxy, "/tasks/task-1/pushNotificationConfigs/hook-1"),
        "rest list": await _rest_get(proxy, "/tasks/task-1/pushNotificationConfigs"),
    }
    for name, answer in answers.items():
        shown = json.dumps(answer)
        assert TOKEN not in shown, name
        assert CREDENTIALS not in shown, name
    assert answers["create"] == public
    assert answers["get"] == public
    assert answers["rest get"] == public
    assert answers["list"]["configs"] == [public]
    assert answers["rest list"]["configs"] == [public]


def _field(reply: Any) -> str:
    (violations,) = [d for d in reply["error"]["data"] if d["@type"].endswith("BadRequest")]
    (violation,) = violations["fieldViolations"]
    return str(violation["field"])


async def _rpc_error(gateway: Gateway, method: str, params: dict[str, Any]) -> Any:
    body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
    async with (
        aiohttp.ClientSession(timeout=TIMEOUT) as http,
        http.post(f"http://127.0.0.1:{gateway.http_port}/a2a", json=body, headers=VERSION) as r,
    ):
        assert r.status == 200
        return await r.json()


@pytest.mark.parametrize(
    "url",
    [
        "https://127.0.0.1/hook",  # loopback
        "https://[::ffff:169.254.169.254]/latest",  # cloud metadata, IPv4-mapped
        "https://localhost/hook",  # a name resolving to loopback
        "http://hooks.example.com/a2a",  # http needs --allow-private-urls
    ],
)
async def test_forbidden_webhooks_are_refused_before_the_upstream_sees_them(
    proxy: Gateway, upstream_app: web.Application, url: str
) -> None:
    message = {"messageId": "m-1", "role": "ROLE_USER", "parts": [{"text": "hi"}]}
    await _rpc(proxy, "SendMessage", {"message": message})  # the caller's task-1
    calls_before = list(upstream_app[CALLS])

    reply = await _rpc_error(
        proxy, "CreateTaskPushNotificationConfig", {"taskId": "task-1", "id": "h", "url": url}
    )
    assert reply["error"]["code"] == -32602
    assert _field(reply) == "url"

    inline = {"taskPushNotificationConfig": {"url": url}}
    for method in ("SendMessage", "SendStreamingMessage"):
        again = {**message, "messageId": f"m-{method}"}
        reply = await _rpc_error(proxy, method, {"message": again, "configuration": inline})
        assert reply["error"]["code"] == -32602
        assert _field(reply) == "configuration.taskPushNotificationConfig.url"

    assert upstream_app[CALLS] == calls_before  # nothing was forwarded
    assert upstream_app[CONFIGS] == {}
