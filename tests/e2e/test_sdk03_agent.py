"""The CLI and proxy mode (real subprocesses) in front of an agent built on the a2a-sdk
0.3.x release itself (``tests/interop/peers/sdk03_server.py``, the session's
``sdk03_agent``), on each of its bindings: 0.3 as deployed agents speak it.

On 0.3 HTTP+JSON and gRPC an absent ``blocking`` is false, so these hold us to sending
``blocking: true`` for a 1.0 (blocking) send; and a 0.3 resubscription sends no opening
task, which a 1.0 SubscribeToTask through the proxy must still start with.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.support.ports import HOST, free_ports
from tests.support.processes import CARD_PATH, GATEWAY, Sdk03Agent, ServerProcess
from tests.support.workspace import write_callers

from .conftest import KEY_ALICE
from .test_cli import cli, summary
from .test_proxy import message, rpc, rpc_stream

TRANSPORTS = ("jsonrpc", "rest", "grpc")
HTTP_TIMEOUT = httpx.Timeout(30.0)


@pytest.mark.parametrize("transport", [None, *TRANSPORTS])
async def test_send_prints_the_answer(sdk03_agent: Sdk03Agent, transport: str | None) -> None:
    forced = ("--transport", transport) if transport else ()
    run = await cli("send", sdk03_agent.base_url, "hi", *forced, key=None)
    assert run.code == 0, run.stderr
    assert run.stdout.startswith("hi\ntask "), run.stdout
    assert summary(run.stdout).split(": ", 1)[1].startswith("completed (context ")


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_send_json_is_the_blocking_answer(sdk03_agent: Sdk03Agent, transport: str) -> None:
    """``--json`` makes one blocking SendMessage (no stream to fall back on)."""
    run = await cli(
        "send", sdk03_agent.base_url, "hi", "--json", "--transport", transport, key=None
    )
    assert run.code == 0, run.stderr
    (reply,) = run.lines()
    assert reply["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
    assert reply["task"]["artifacts"][0]["parts"] == [{"text": "hi"}]


@pytest.fixture(scope="module", params=TRANSPORTS)
def proxy_url(
    request: pytest.FixtureRequest,
    sdk03_agent: Sdk03Agent,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[str]:
    """``serve --upstream`` before the 0.3 SDK agent, forced onto one of its bindings."""
    transport: str = request.param
    root = tmp_path_factory.mktemp(f"proxy-sdk03-{transport}")
    workspace = root / "ws"
    write_callers(workspace, [{"name": "alice", "key": KEY_ALICE}])
    port, grpc_port = free_ports(2)
    base = f"http://{HOST}:{port}"
    command = [*GATEWAY, "serve"]
    command += ["--upstream", sdk03_agent.base_url, "--upstream-transport", transport]
    command += ["--workspace", str(workspace), "--host", HOST, "--port", str(port)]
    command += ["--grpc-port", str(grpc_port)]
    server = ServerProcess(f"proxy-sdk03-{transport}", command, root, base + CARD_PATH, grpc_port)
    with server.running():
        yield base


def test_a_blocking_send_through_the_proxy_is_answered_completed(proxy_url: str) -> None:
    status, reply = rpc(proxy_url, "SendMessage", message("hello 0.3 upstream"))
    assert status == 200, reply
    task: dict[str, Any] = reply["result"]["task"]
    assert task["status"]["state"] == "TASK_STATE_COMPLETED"
    assert task["artifacts"][0]["parts"] == [{"text": "hello 0.3 upstream"}]


def test_subscribe_through_the_proxy_starts_with_the_task(proxy_url: str) -> None:
    held = message("hold:30") | {"configuration": {"returnImmediately": True}}
    _, reply = rpc(proxy_url, "SendMessage", held)
    task_id = reply["result"]["task"]["id"]
    with httpx.Client(timeout=HTTP_TIMEOUT) as client:
        events = rpc_stream(client, proxy_url, "SubscribeToTask", {"id": task_id})
        first = next(events)
        _, canceled = rpc(proxy_url, "CancelTask", {"id": task_id})
        rest = list(events)
    assert first["task"]["id"] == task_id
    assert first["task"]["status"]["state"] in ("TASK_STATE_SUBMITTED", "TASK_STATE_WORKING")
    assert canceled["result"]["status"]["state"] == "TASK_STATE_CANCELED"
    assert rest[-1]["statusUpdate"]["status"]["state"] == "TASK_STATE_CANCELED"
