"""Interop fixtures: a real server subprocess, and the official SDK's client as a driver
(the launchers are in :mod:`tests.support.processes`).

Which server the SDK client is tested against is decided in ONE place,
:data:`SERVER_UNDER_TEST` (override with ``A2A_INTEROP_SERVER=gateway|sdk``):

- ``gateway``: ours, ``python -P -m a2a_gateway serve --faux …`` (:func:`gateway_command`);
- ``sdk``: the official SDK's echo server (``peers/sdk_server.py``), a stand-in with the
  same directives and the same caller rules (no key = anonymous, a wrong key = 401,
  tasks scoped per caller), to tell a gateway bug from a test bug.

A server is started once per module, and one ``sdk_client.py --stdin`` process runs every
driver command of the module; a server that printed a traceback fails the module at
teardown.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

from a2a_gateway.local.layout import WorkspaceLayout
from tests.support.idp import AUDIENCE as OIDC_AUDIENCE
from tests.support.idp import IdentityProvider, provider_in_thread
from tests.support.ports import HOST, free_ports
from tests.support.processes import (
    CARD_PATH,
    TRANSPORTS,
    DriverProcess,
    SdkClient,
    SdkPeer,
    ServerProcess,
    gateway_command,
    require_peer_venv,
    sdk_server_command,
)
from tests.support.workspace import write_callers

#: The server under test: "gateway" (ours) or "sdk" (the official SDK standing in).
SERVER_UNDER_TEST = os.environ.get("A2A_INTEROP_SERVER", "gateway")


@dataclass(frozen=True)
class InteropServer:
    """What the tests know about the running server under test."""

    kind: str  # "gateway" | "sdk"
    base_url: str
    card_url: str
    api_key: str  # the registered caller's key
    workspace: Path | None  # ours only
    extended_card_name: str | None  # ours only: the name card.json gives the extended card
    idp: IdentityProvider | None = None  # ours only: its tokens for sub "sdk-oidc" are a caller


EXTENDED_CARD_JSON = {
    "name": "Interop extended card",
    "description": "What keyed callers see.",
}


@pytest.fixture(scope="module")
def interop_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[InteropServer]:
    """The server under test (see :data:`SERVER_UNDER_TEST`), started once per module."""
    require_peer_venv()
    port, grpc_port = free_ports(2)
    logs = tmp_path_factory.mktemp("interop-logs")
    # A leading "-" on purpose: 1 random key in 64 has one, and a driver given it as
    # "--api-key KEY" took it for an option (hence "--api-key=KEY" everywhere).
    key = "-" + secrets.token_urlsafe(24)
    base_url = f"http://{HOST}:{port}"
    workspace: Path | None = None
    extended_name: str | None = None
    idp: IdentityProvider | None = None
    stack = contextlib.ExitStack()
    if SERVER_UNDER_TEST == "gateway":
        workspace = tmp_path_factory.mktemp("workspace")
        state = WorkspaceLayout(workspace).state
        state.mkdir()
        idp = stack.enter_context(provider_in_thread())
        oidc = {
            "issuer": idp.issuer,
            "audience": OIDC_AUDIENCE,
            "sub": "sdk-oidc",
            "allow_private": True,  # the test identity provider is on 127.0.0.1
        }
        callers = [{"name": "sdk", "key": key}, {"name": "sdk-oidc", "jwt": oidc}]
        write_callers(workspace, callers)
        (state / "card.json").write_text(json.dumps(EXTENDED_CARD_JSON))
        extended_name = str(EXTENDED_CARD_JSON["name"])
        command = gateway_command(workspace, port, grpc_port)
    elif SERVER_UNDER_TEST == "sdk":
        command = sdk_server_command(port, grpc_port, api_key=key, allow_anonymous=True)
    else:
        pytest.fail(f"A2A_INTEROP_SERVER must be gateway or sdk, not {SERVER_UNDER_TEST!r}")
    server = ServerProcess(
        SERVER_UNDER_TEST,
        command,
        logs,
        base_url + CARD_PATH,
        grpc_port=grpc_port,
        strict_shutdown=SERVER_UNDER_TEST == "gateway",
    )
    with stack, server.running():
        yield InteropServer(
            SERVER_UNDER_TEST, base_url, base_url + CARD_PATH, key, workspace, extended_name, idp
        )


@pytest.fixture
def start_sdk_server(tmp_path: Path) -> Iterator[Callable[..., SdkPeer]]:
    """Start extra SDK echo servers (options as :func:`sdk_server_command`); stopped, and
    checked for tracebacks, at teardown."""
    require_peer_venv()
    started: list[ServerProcess] = []

    def start(
        *,
        transports: Sequence[str] = TRANSPORTS,
        api_key: str | None = None,
        allow_anonymous: bool = False,
        push: bool = False,
    ) -> SdkPeer:
        port, grpc_port = free_ports(2)
        base_url = f"http://{HOST}:{port}"
        command = sdk_server_command(
            port,
            grpc_port,
            transports=transports,
            api_key=api_key,
            allow_anonymous=allow_anonymous,
            push=push,
        )
        server = ServerProcess(
            f"sdk-server-{len(started)}",
            command,
            tmp_path,
            base_url + CARD_PATH,
            grpc_port=grpc_port if "grpc" in transports else None,
            strict_shutdown=False,
        )
        started.append(server)
        server.start()
        return SdkPeer(base_url, base_url + CARD_PATH, grpc_port, api_key)

    yield start
    complaints = [c for c in (server.stop() for server in started) if c]
    if complaints:
        pytest.fail("\n".join(complaints))


@pytest.fixture(scope="module")
def sdk_driver(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DriverProcess]:
    require_peer_venv()
    driver = DriverProcess(tmp_path_factory.mktemp("sdk-client"))
    try:
        yield driver
    finally:
        driver.close()


@pytest.fixture
def make_sdk_client(
    sdk_driver: DriverProcess, tmp_path: Path
) -> Iterator[Callable[..., SdkClient]]:
    """``make_sdk_client(card_url, transport)``: the SDK client for any other server."""
    made: list[SdkClient] = []

    def make(card_url: str, transport: str) -> SdkClient:
        client = SdkClient(sdk_driver, card_url, transport, tmp_path)
        made.append(client)
        return client

    yield make
    for client in made:
        client.close()


@pytest.fixture(params=TRANSPORTS)
def transport(request: pytest.FixtureRequest) -> str:
    value: str = request.param
    return value


@pytest.fixture
def sdk_client(
    sdk_driver: DriverProcess,
    interop_server: InteropServer,
    transport: str,
    tmp_path: Path,
) -> Iterator[SdkClient]:
    """The SDK client on ``transport`` (each test runs once per transport)."""
    client = SdkClient(sdk_driver, interop_server.card_url, transport, tmp_path)
    try:
        yield client
    finally:
        client.close()
