"""``serve --tls-cert --tls-key --tls-client-ca`` on a whole gateway: HTTPS and gRPC over
TLS with real certificates made at test time, client certificates mapped to callers
(by fingerprint and by SAN), and a certificate of another CA refused at the handshake.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import ssl
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import grpc
import pytest

from a2a_gateway.client import ClientAuth, connect, user_message
from a2a_gateway.client.agents_file import parse_agents
from a2a_gateway.client.guarded_http import open_agent
from a2a_gateway.local.layout import WorkspaceLayout
from a2a_gateway.serve import Gateway
from a2a_gateway.server.identity import hash_password
from a2a_gateway.settings import resolve
from lf.a2a.v1 import a2a_pb2 as pb
from tests.support.certs import Authority, Issued
from tests.support.secrets import use_secret
from tests.support.workspace import write_callers

from .conftest import BINDINGS, Driver, WireError, as_bearer

KEY_CAROL = "tls-carol-key-6d5c4b3a2918"
PASSWORD = "tls-bob-password-1f2e3d4c"


@dataclass
class Site:
    gateway: Gateway
    ca: Authority
    robot: Issued
    scanner: Issued
    intruder: Issued
    stranger: Issued  # of our CA, but no caller's

    @property
    def base(self) -> str:
        return f"https://127.0.0.1:{self.gateway.http_port}"


@pytest.fixture
async def site(tmp_path: Path) -> AsyncIterator[Site]:
    use_secret(KEY_CAROL, PASSWORD)
    ca, other = Authority(tmp_path, "ours"), Authority(tmp_path, "theirs")
    server = ca.issue("gateway", server=True)
    robot, scanner = ca.issue("robot"), ca.issue("scanner", san="scanner.example")
    intruder = other.issue("robot")
    workspace = tmp_path / "ws"
    WorkspaceLayout(workspace).state.mkdir(parents=True)
    fingerprint = ":".join(f"{b:02X}" for b in hashlib.sha256(robot.der).digest())
    callers = [
        {"name": "robot", "mtls": {"sha256": fingerprint}},
        {"name": "scanner", "mtls": {"san": "scanner.example"}},
        {"name": "carol", "key": KEY_CAROL},
        {
            "name": "bob",
            "basic": {"username": "bob", "password_hash": hash_password(PASSWORD, log2_n=10)},
        },
    ]
    write_callers(workspace, callers)
    settings = {
        "workspace": [str(workspace)],
        "port": 0,
        "grpc_port": 0,
        "faux": True,
        "tls_cert": str(server.cert),
        "tls_key": str(server.key),
        "tls_client_ca": str(ca.cert),
    }
    gateway = Gateway(resolve(settings, environ={}))
    await gateway.start()
    try:
        yield Site(gateway, ca, robot, scanner, intruder, ca.issue("stranger"))
    finally:
        await gateway.stop()


def client_context(ca: Authority, certificate: Issued | None) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=ca.cert)
    if certificate is not None:
        context.load_cert_chain(certificate.cert, certificate.key)
    return context


@contextlib.asynccontextmanager
async def driving(
    site: Site, binding: str, certificate: Issued | None, key: str = ""
) -> AsyncIterator[Driver]:
    """A driver over TLS presenting ``certificate`` (and ``key``, when given)."""
    connector = aiohttp.TCPConnector(ssl=client_context(site.ca, certificate))
    credentials = grpc.ssl_channel_credentials(
        root_certificates=site.ca.cert.read_bytes(),
        private_key=certificate.key_pem if certificate else None,
        certificate_chain=certificate.cert_pem if certificate else None,
    )
    target = f"127.0.0.1:{site.gateway.grpc_port}"
    async with (
        aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=30)) as http,
        grpc.aio.secure_channel(target, credentials) as channel,
    ):
        yield Driver(binding, http, site.base, channel, key)


def send(text: str) -> dict[str, Any]:
    message = {"role": "ROLE_USER", "messageId": str(uuid.uuid4()), "parts": [{"text": text}]}
    return {"message": message}


async def task_ids(driver: Driver) -> set[str]:
    return {task["id"] for task in (await driver.call("ListTasks", {})).get("tasks", [])}


@pytest.mark.parametrize("binding", BINDINGS)
async def test_client_certificates_are_callers_over_tls(site: Site, binding: str) -> None:
    async with (
        driving(site, binding, site.robot) as robot,
        driving(site, binding, site.scanner) as scanner,
        # gRPC asks every client for a certificate; HTTP lets key callers come without.
        driving(site, binding, site.robot if binding == "grpc" else None, KEY_CAROL) as carol,
    ):
        task = (await robot.call("SendMessage", send("hi")))["task"]
        assert task["status"]["state"] == "TASK_STATE_COMPLETED"
        assert await task_ids(robot) == {task["id"]}
        assert await task_ids(scanner) == set()
        assert await task_ids(carol) == set()  # the key wins over the certificate
        pair = base64.b64encode(f"bob:{PASSWORD}".encode()).decode()
        bob = as_bearer(carol, {"Authorization": f"Basic {pair}"})
        assert await task_ids(bob) == set()  # Basic is allowed: the password is inside TLS
    async with driving(site, binding, site.stranger) as stranger:
        with pytest.raises(WireError) as caught:
            await stranger.call("ListTasks", {})
        assert caught.value.reason == "UNAUTHENTICATED"
        assert caught.value.code in {401, -32000, grpc.StatusCode.UNAUTHENTICATED}


@pytest.mark.parametrize("binding", BINDINGS)
async def test_a_certificate_of_another_ca_is_refused_at_the_handshake(
    site: Site, binding: str
) -> None:
    async with driving(site, binding, site.intruder) as intruder:
        expected: tuple[type[BaseException], ...] = (aiohttp.ClientError, ssl.SSLError)
        if binding == "grpc":
            expected = (WireError,)  # the driver's form of the channel's UNAVAILABLE
        with pytest.raises(expected) as caught:
            await intruder.call("SendMessage", send("must not be stored"))
        if isinstance(caught.value, WireError):
            assert caught.value.code == grpc.StatusCode.UNAVAILABLE
    async with driving(site, binding, site.robot) as robot:
        assert await task_ids(robot) == set()


async def test_the_card_over_tls_lists_https_and_mutual_tls(site: Site) -> None:
    async with (
        aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(ssl=client_context(site.ca, None))
        ) as http,
        http.get(site.base + "/.well-known/agent-card.json") as response,
    ):
        card = await response.json()
    urls = [i["url"] for i in card["supportedInterfaces"] if i["protocolBinding"] != "GRPC"]
    assert urls and all(url.startswith("https://127.0.0.1:") for url in urls)
    assert "mtlsSecurityScheme" in card["securitySchemes"]["mtls"]
    assert sorted(card["securitySchemes"]) == ["apiKey", "basic", "bearer", "mtls"]


@pytest.mark.parametrize("transport", BINDINGS)
async def test_our_client_presents_a_client_certificate(site: Site, transport: str) -> None:
    auth = ClientAuth(
        client_cert=str(site.robot.cert), client_key=str(site.robot.key), ca_cert=str(site.ca.cert)
    )
    async with await connect(site.base, auth=auth, transport=transport, timeout=20) as agent:
        assert agent.interface.url.startswith("grpcs://" if transport == "grpc" else "https://")
        reply = await agent.send_message(pb.SendMessageRequest(message=user_message("hi")))
        listed = await agent.list_tasks(pb.ListTasksRequest())
        assert [task.id for task in listed.tasks] == [reply.task.id]
    async with driving(site, transport, site.robot) as robot:
        assert await task_ids(robot) == {reply.task.id}  # the same caller: robot


@pytest.mark.parametrize("transport", BINDINGS)
async def test_the_a2a_tool_presents_the_certificate_agents_json_names(
    site: Site, tmp_path: Path, transport: str
) -> None:
    entry = {
        "name": "robot-side",
        "url": site.base,
        "transport": transport,
        "client_cert": str(site.robot.cert),
        "client_key": str(site.robot.key),
        "ca_cert": str(site.ca.cert),
    }
    agents = parse_agents([entry], tmp_path / "agents.json")
    async with await open_agent(agents.agents["robot-side"], allow_private_urls=True) as agent:
        assert agent.transport.binding == {"jsonrpc": "JSONRPC", "rest": "HTTP+JSON"}.get(
            transport, "GRPC"
        )
        reply = await agent.send_message(pb.SendMessageRequest(message=user_message("hi")))
    async with driving(site, "jsonrpc", site.robot) as robot:
        assert await task_ids(robot) == {reply.task.id}
