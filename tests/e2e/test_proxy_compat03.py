"""Proxy mode in front of an agent that speaks only A2A 0.3: ``a2a-gateway serve
--upstream URL`` (a real subprocess) before the official SDK started with ``--only-0.3``
(it refuses any call announcing A2A 1.x), reached over JSON-RPC, or with
``--upstream-transport grpc`` before the SDK offering only its 0.3 gRPC service; each
test runs once per upstream binding. 1.0 callers get 1.0 answers."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.ports import HOST, free_ports
from tests.support.processes import (
    CARD_PATH,
    ServerProcess,
    proxy_running,
    require_peer_venv,
    sdk_server_command,
)

from .conftest import KEY_ALICE, LEGACY_PEER_KEY
from .test_proxy import message, rpc, rpc_stream

UPSTREAM_KEY = "legacy-upstream-key-6c2f0a9e17"
HTTP_TIMEOUT = httpx.Timeout(30.0)


@contextlib.contextmanager
def _proxy(root: Path, upstream: str, key: str, transport: str) -> Iterator[str]:
    """Our gateway proxying ``upstream`` over ``transport`` (forced when not JSON-RPC);
    its base URL."""
    with proxy_running(
        root,
        upstream,
        key,
        [{"name": "alice", "key": KEY_ALICE}],
        binding=transport.upper(),
        upstream_transport=None if transport == "jsonrpc" else transport,
        name="proxy-03" if transport == "jsonrpc" else f"proxy-03-{transport}",
    ) as server:
        yield server.card_url.removesuffix(CARD_PATH)


@pytest.fixture(scope="module", params=["jsonrpc", "grpc"])
def proxy_url(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    """The proxy before a 0.3-only upstream: the session's JSON-RPC + REST SDK agent
    (``jsonrpc``), or (``grpc``) the SDK offering only its 0.3 gRPC service
    (``--only-0.3 --grpc-0.3``, no HTTP binding), key required."""
    root = tmp_path_factory.mktemp(f"proxy-03-{request.param}")
    if request.param == "jsonrpc":
        legacy_sdk_url: str = request.getfixturevalue("legacy_sdk_url")
        with _proxy(root, legacy_sdk_url, LEGACY_PEER_KEY, "jsonrpc") as base:
            yield base
        return
    require_peer_venv()
    up_port, up_grpc_port = free_ports(2)
    up_base = f"http://{HOST}:{up_port}"
    command = sdk_server_command(up_port, up_grpc_port, transports=("grpc",), api_key=UPSTREAM_KEY)
    upstream = ServerProcess(
        "sdk-upstream-0.3-grpc",
        [*command, "--only-0.3", "--grpc-0.3"],
        root,
        up_base + CARD_PATH,
        grpc_port=up_grpc_port,
        strict_shutdown=False,
    )
    with upstream.running(), _proxy(root, up_base, UPSTREAM_KEY, "grpc") as base:
        yield base


def test_1_0_send_message_through_a_0_3_upstream(proxy_url: str) -> None:
    status, reply = rpc(proxy_url, "SendMessage", message("hello legacy"))
    assert status == 200, reply
    task: dict[str, Any] = reply["result"]["task"]
    assert task["status"]["state"] == "TASK_STATE_COMPLETED"
    assert task["artifacts"][0]["parts"] == [{"text": "hello legacy"}]
    _, got = rpc(proxy_url, "GetTask", {"id": task["id"]})
    assert got["result"]["id"] == task["id"]


def test_1_0_stream_through_a_0_3_upstream(proxy_url: str) -> None:
    with httpx.Client(timeout=HTTP_TIMEOUT) as client:
        events = list(rpc_stream(client, proxy_url, "SendStreamingMessage", message("chunks:3")))
    assert next(iter(events[0])) == "task"
    chunks = [e["artifactUpdate"] for e in events if "artifactUpdate" in e]
    assert [c["artifact"]["parts"][0]["text"] for c in chunks] == ["chunk-0", "chunk-1", "chunk-2"]
    assert chunks[-1]["lastChunk"] is True
    assert events[-1]["statusUpdate"]["status"]["state"] == "TASK_STATE_COMPLETED"
    assert all("final" not in e.get("statusUpdate", {}) for e in events)  # no 0.3 keys leak


def test_list_tasks_has_no_0_3_counterpart(proxy_url: str) -> None:
    _, reply = rpc(proxy_url, "ListTasks", {})
    assert reply["error"]["code"] == -32004, reply
