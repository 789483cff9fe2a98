"""Client test fixtures: the official a2a-sdk server and our own gateway, as subprocesses.

The delegation tests' ``remote`` (a faux gateway in-process) and ``calls_remote`` (the
suite's ``workspace``, its agents.json listing ``remote`` as ``assistant-a``) are here too.

Started with the suite's launchers (``tests/support/processes.py``): the SDK lives in
``.venv-peer`` and is never imported here (``peers/sdk_server.py`` runs as a subprocess);
our gateway runs as ``python -P -m a2a_gateway serve --faux`` with one caller key.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from a2a_gateway.local.layout import WorkspaceLayout
from a2a_gateway.serve import Gateway
from tests.support.ports import free_ports
from tests.support.processes import (
    CARD_PATH,
    ServerProcess,
    gateway_command,
    require_peer_venv,
    sdk_server_command,
)
from tests.support.workspace import write_callers

from .client_support import HOST, OWN_KEY, PEER_KEY, Peer
from .delegation_support import faux_gateway, workspace_calling


@pytest.fixture(scope="session")
def sdk_peer(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Peer]:
    """The official SDK serving the echo agent on all three bindings, key required."""
    require_peer_venv()
    port, grpc_port = free_ports(2)
    base = f"http://{HOST}:{port}"
    server = ServerProcess(
        "sdk-peer",
        sdk_server_command(port, grpc_port, api_key=PEER_KEY, push=True),
        tmp_path_factory.mktemp("sdk-peer"),
        base + CARD_PATH,
        grpc_port=grpc_port,
        strict_shutdown=False,
    )
    with server.running():
        yield Peer(url=base, key=PEER_KEY)


@pytest.fixture(scope="session")
def own_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Peer]:
    """Our own gateway (``a2a-gateway serve --faux``) with one caller, all bindings."""
    workspace = tmp_path_factory.mktemp("own-gateway")
    WorkspaceLayout(workspace).state.mkdir()
    callers = [{"name": "tester", "key": OWN_KEY}]
    write_callers(workspace, callers)
    port, grpc_port = free_ports(2)
    # Interop's command without --allow-anonymous: these tests check that a key is needed.
    command = [
        arg for arg in gateway_command(workspace, port, grpc_port) if arg != "--allow-anonymous"
    ]
    base = f"http://{HOST}:{port}"
    server = ServerProcess(
        "own-gateway",
        [*command, "--store", "memory"],
        workspace,
        base + CARD_PATH,
        grpc_port=grpc_port,
    )
    with server.running():
        yield Peer(url=base, key=OWN_KEY)


@pytest.fixture
async def remote(tmp_path: Path) -> AsyncIterator[Gateway]:
    async with faux_gateway(tmp_path / "a") as gateway:
        yield gateway


@pytest.fixture
def calls_remote(request: pytest.FixtureRequest, workspace: Path, remote: Gateway) -> Path:
    """Makes the suite's ``workspace`` assistant B: its agents.json lists ``remote`` as
    ``assistant-a`` (with the members of the test module's ``REMOTE_ENTRY``, if any).
    Tests take it with ``@pytest.mark.usefixtures("calls_remote")``."""
    return workspace_calling(workspace, remote, **getattr(request.module, "REMOTE_ENTRY", {}))
