"""``a2a-gateway send`` (a real subprocess) against an agent that speaks only A2A 0.3: the
official SDK started with ``--only-0.3`` (it refuses any call announcing A2A 1.x)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from ..interop.conftest import (
    CARD_PATH,
    HOST,
    ServerProcess,
    free_ports,
    require_peer_venv,
    sdk_server_command,
)
from .test_cli import cli, summary

PEER_KEY = "legacy-peer-key-2b7e41c9d0"


@pytest.fixture(scope="module")
def legacy_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    require_peer_venv()
    (port,) = free_ports(1)
    base = f"http://{HOST}:{port}"
    command = sdk_server_command(port, 0, transports=("jsonrpc", "rest"), api_key=PEER_KEY)
    server = ServerProcess(
        "sdk-peer-0.3-cli",
        [*command, "--only-0.3"],
        tmp_path_factory.mktemp("sdk-peer-03-cli"),
        base + CARD_PATH,
        grpc_port=None,
        strict_shutdown=False,
    )
    with server.running():
        yield base


@pytest.mark.parametrize("transport", [None, "rest"])
async def test_send_to_a_0_3_agent(legacy_url: str, transport: str | None) -> None:
    forced = ("--transport", transport) if transport else ()
    run = await cli("send", legacy_url, "hi", *forced, key=PEER_KEY)
    assert run.code == 0, run.stderr
    assert run.stdout.startswith("hi\ntask ")
    assert summary(run.stdout).split(": ", 1)[1].startswith("completed (context ")
    assert PEER_KEY not in run.stdout + run.stderr


async def test_list_is_refused_naming_the_version(legacy_url: str) -> None:
    run = await cli("list", legacy_url, key=PEER_KEY)
    assert run.code == 1, run.stderr
    assert "ListTasks does not exist in A2A 0.3" in run.stderr
