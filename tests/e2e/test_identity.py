"""Callers who prove who they are with a JWT of an OIDC issuer or HTTP Basic, on a
whole gateway (faux agent, file store) over JSON-RPC, HTTP+JSON and gRPC, with a real
identity provider of our own on 127.0.0.1.

One workspace: alice (tokens of the provider with ``sub`` alice), bob (Basic), carol (a
key), dave (opaque tokens the provider's introspection endpoint knows as client dave).
Each reaches only its own tasks; every bad credential is UNAUTHENTICATED and stores
nothing.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import shlex
import sys
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import grpc
import pytest

from a2a_gateway.client import AuthRejected, ClientAuth, connect, user_message
from a2a_gateway.client.agents_file import parse_agents
from a2a_gateway.client.guarded_http import open_agent
from a2a_gateway.local.layout import WorkspaceLayout
from a2a_gateway.serve import Gateway
from a2a_gateway.server.identity import hash_password
from a2a_gateway.settings import resolve
from lf.a2a.v1 import a2a_pb2 as pb
from tests.support.idp import (
    AUDIENCE,
    IdentityProvider,
    hs256_with_public_key,
    running_provider,
    unsigned_token,
)
from tests.support.secrets import use_secret
from tests.support.workspace import write_callers

from .conftest import BINDINGS, Driver, WireError, as_bearer

KEY_CAROL = "identity-carol-5e1d0c3b2a19"
PASSWORD = "identity-bob-password-7c6b5a"
INTROSPECTION_SECRET = "identity-gateway-introspects-3b2a1f"
UNAUTHENTICATED = {401, -32000, grpc.StatusCode.UNAUTHENTICATED}
BINDING_NAMES = {"jsonrpc": "JSONRPC", "rest": "HTTP+JSON", "grpc": "GRPC"}


@dataclass
class Site:
    gateway: Gateway
    idp: IdentityProvider

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.gateway.http_port}"


@pytest.fixture
async def site(tmp_path: Path) -> AsyncIterator[Site]:
    use_secret(PASSWORD, KEY_CAROL, INTROSPECTION_SECRET)
    async with running_provider() as idp:
        idp.introspectors["gateway"] = INTROSPECTION_SECRET
        workspace = tmp_path / "ws"
        WorkspaceLayout(workspace).state.mkdir(parents=True)
        callers = [
            {"name": "alice", "jwt": {"issuer": idp.issuer, "audience": AUDIENCE, "sub": "alice"}},
            {
                "name": "bob",
                "basic": {"username": "bob", "password_hash": hash_password(PASSWORD, log2_n=10)},
            },
            {"name": "carol", "key": KEY_CAROL},
            {"name": "dave", "introspection": {"client_id": "dave"}},
        ]
        write_callers(workspace, callers)
        settings = {
            "workspace": [str(workspace)],
            "port": 0,
            "grpc_port": 0,
            "faux": True,
            "allow_private_urls": True,  # the provider is on 127.0.0.1 over http
            "introspection_url": idp.issuer + "/introspect",
            "introspection_client_id": "gateway",
            "introspection_client_secret": INTROSPECTION_SECRET,
            "oauth2_token_url": idp.issuer + "/token",
            "introspection_cache": 0,  # every call asks: a revoked token is refused at once
        }
        gateway = Gateway(resolve(settings, environ={}))
        await gateway.start()
        try:
            yield Site(gateway, idp)
        finally:
            await gateway.stop()


@pytest.fixture(params=BINDINGS)
async def driver(request: pytest.FixtureRequest, site: Site) -> AsyncIterator[Driver]:
    async with (
        aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as http,
        grpc.aio.insecure_channel(f"127.0.0.1:{site.gateway.grpc_port}") as channel,
    ):
        yield Driver(request.param, http, site.base, channel, KEY_CAROL)


def basic(username: str, password: str) -> dict[str, str]:
    pair = base64.b64encode(f"{username}:{password}".encode()).decode()
    return {"Authorization": f"Basic {pair}"}


def send(text: str) -> dict[str, Any]:
    message = {"role": "ROLE_USER", "messageId": str(uuid.uuid4()), "parts": [{"text": text}]}
    return {"message": message}


async def task_ids(driver: Driver) -> set[str]:
    return {task["id"] for task in (await driver.call("ListTasks", {})).get("tasks", [])}


async def test_each_scheme_reaches_only_its_callers_tasks(driver: Driver, site: Site) -> None:
    alice = as_bearer(driver, {"Authorization": f"Bearer {site.idp.token('alice')}"})
    bob = as_bearer(driver, basic("bob", PASSWORD))
    task = (await alice.call("SendMessage", send("hi")))["task"]
    assert task["status"]["state"] == "TASK_STATE_COMPLETED"
    assert await task_ids(alice) == {task["id"]}
    assert await task_ids(bob) == set()
    assert await task_ids(driver) == set()  # carol's key
    bobs = (await bob.call("SendMessage", send("hi")))["task"]
    assert await task_ids(bob) == {bobs["id"]}
    assert await task_ids(alice) == {task["id"]}
    dave = as_bearer(driver, {"Authorization": f"Bearer {site.idp.opaque_token('dave')}"})
    daves = (await dave.call("SendMessage", send("hi")))["task"]
    assert await task_ids(dave) == {daves["id"]}


async def test_every_bad_credential_is_unauthenticated_and_stores_nothing(
    driver: Driver, site: Site
) -> None:
    idp = site.idp
    stranger = IdentityProvider()  # its keys were never published by our provider
    stranger.issuer = idp.issuer
    revoked = idp.opaque_token("dave")
    idp.revoke(revoked)
    bad: dict[str, dict[str, str]] = {
        "expired": {"Authorization": f"Bearer {idp.token(lifetime_s=-600)}"},
        "not yet valid": {"Authorization": f"Bearer {idp.token(not_before_s=600)}"},
        "wrong issuer": {"Authorization": f"Bearer {idp.token(issuer='https://x.example')}"},
        "wrong audience": {"Authorization": f"Bearer {idp.token(audience='other')}"},
        "unknown kid": {"Authorization": f"Bearer {stranger.token()}"},
        "wrong subject": {"Authorization": f"Bearer {idp.token('mallory')}"},
        "alg none": {"Authorization": f"Bearer {unsigned_token(idp)}"},
        "HS256 with the public key": {"Authorization": f"Bearer {hs256_with_public_key(idp)}"},
        "wrong password": basic("bob", "not-the-password"),
        "inactive opaque token": {"Authorization": f"Bearer {revoked}"},
        "opaque token of another client": {
            "Authorization": f"Bearer {idp.opaque_token('mallory')}"
        },
        "unknown user": basic("mallory", PASSWORD),
    }
    for case, headers in bad.items():
        with pytest.raises(WireError) as caught:
            await as_bearer(driver, headers).call("SendMessage", send("must not be stored"))
        assert caught.value.reason == "UNAUTHENTICATED", case
        assert caught.value.code in UNAUTHENTICATED, case
        assert PASSWORD not in caught.value.message
    alice = as_bearer(driver, {"Authorization": f"Bearer {idp.token('alice')}"})
    bob = as_bearer(driver, basic("bob", PASSWORD))
    assert await task_ids(alice) == set() and await task_ids(bob) == set()
    assert await task_ids(driver) == set()


@pytest.mark.parametrize("path", ["/a2a", "/a2a/v1/tasks"])
async def test_a_refusal_names_the_scheme_in_its_challenge(site: Site, path: str) -> None:
    cases = [
        ({}, 'Bearer realm="a2a", Basic realm="a2a", charset="UTF-8"'),
        (
            {"Authorization": f"Bearer {site.idp.token(lifetime_s=-600)}"},
            'Bearer realm="a2a", error="invalid_token", error_description="The token has expired"',
        ),
        (basic("bob", "wrong"), 'Basic realm="a2a", charset="UTF-8"'),
        ({"X-API-Key": "identity-nobody-000000"}, 'Bearer realm="a2a", Basic realm="a2a"'),
    ]
    body = {"jsonrpc": "2.0", "id": 1, "method": "ListTasks", "params": {}}
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as http:
        for headers, challenge in cases:
            method = "POST" if path == "/a2a" else "GET"
            kwargs: dict[str, Any] = {"json": body} if method == "POST" else {}
            async with http.request(
                method, site.base + path, headers={**headers, "A2A-Version": "1.0"}, **kwargs
            ) as response:
                assert response.status == 401
                assert response.headers["WWW-Authenticate"].startswith(challenge), headers


async def test_the_card_lists_the_schemes_in_use_and_no_credential(site: Site) -> None:
    async with (
        aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as http,
        http.get(site.base + "/.well-known/agent-card.json") as response,
    ):
        card = await response.json()
    schemes = card["securitySchemes"]
    assert schemes["oidc"]["openIdConnectSecurityScheme"]["openIdConnectUrl"] == (
        site.idp.issuer + "/.well-known/openid-configuration"
    )
    assert schemes["basic"]["httpAuthSecurityScheme"]["scheme"] == "Basic"
    assert schemes["apiKey"]["apiKeySecurityScheme"]["name"] == "X-API-Key"
    flow = schemes["oauth2"]["oauth2SecurityScheme"]["flows"]["clientCredentials"]
    assert flow["tokenUrl"] == site.idp.issuer + "/token"
    assert sorted(schemes) == ["apiKey", "basic", "bearer", "oauth2", "oidc"]
    assert [list(r["schemes"]) for r in card["securityRequirements"]] == [
        ["apiKey"],
        ["bearer"],
        ["oidc"],
        ["oauth2"],
        ["basic"],
    ]
    text = json.dumps(card)
    assert KEY_CAROL not in text and "scrypt$" not in text and PASSWORD not in text
    assert INTROSPECTION_SECRET not in text


# --- our client, asked by the card for each scheme -------------------------------------

CLIENT_SECRET = "identity-dave-client-secret-0e9d8c"


@pytest.mark.parametrize("transport", BINDINGS)
async def test_our_client_obtains_what_the_card_asks_for(
    site: Site, transport: str, tmp_path: Path
) -> None:
    use_secret(CLIENT_SECRET)
    site.idp.clients["dave"] = CLIENT_SECRET
    token_file = tmp_path / "token"
    token_file.write_text(site.idp.token("alice") + "\n")
    command = shlex.join([sys.executable, "-c", f"print(open({str(token_file)!r}).read())"])
    owners = {
        "dave": ClientAuth(client_id="dave", client_secret=CLIENT_SECRET),  # card's token URL
        "bob": ClientAuth(basic_user="bob", basic_password=PASSWORD),
        "alice": ClientAuth(token_command=command),
    }
    for owner, auth in owners.items():
        async with await connect(site.base, auth=auth, transport=transport, timeout=20) as agent:
            answer = await agent.send_message(pb.SendMessageRequest(message=user_message("hi")))
            listed = await agent.list_tasks(pb.ListTasksRequest())
            assert [task.id for task in listed.tasks] == [answer.task.id], owner
            if owner == "dave":  # a revoked token: the 401 fetches a new one, once
                requests = site.idp.token_requests
                site.idp.revoke(agent.transport.credentials.source.current)  # type: ignore[union-attr]
                assert len((await agent.list_tasks(pb.ListTasksRequest())).tasks) == 1
                assert site.idp.token_requests == requests + 1
    wrong = ClientAuth(client_id="dave", client_secret="not-the-secret-000")
    with pytest.raises(AuthRejected, match=r"no token from 127\.0\.0\.1: it answered 401"):
        async with await connect(site.base, auth=wrong, transport=transport, timeout=20) as agent:
            await agent.list_tasks(pb.ListTasksRequest())


async def test_the_cli_takes_credentials_from_flags_and_the_environment(
    site: Site, tmp_path: Path
) -> None:
    """Each scheme once, each on another transport (the library runs the full matrix)."""
    use_secret(CLIENT_SECRET)
    site.idp.clients["dave"] = CLIENT_SECRET
    token_file = tmp_path / "token"
    token_file.write_text(site.idp.token("alice") + "\n")
    command = shlex.join([sys.executable, "-c", f"print(open({str(token_file)!r}).read())"])
    runs = [
        ("jsonrpc", ["--client-id", "dave"], {"A2A_GATEWAY_CLIENT_SECRET": CLIENT_SECRET}),
        ("rest", ["--basic-user", "bob"], {"A2A_GATEWAY_PASSWORD": PASSWORD}),
        ("grpc", ["--token-command", command], {}),
    ]
    for transport, flags, env in runs:
        process = await asyncio.create_subprocess_exec(
            *(sys.executable, "-P", "-m", "a2a_gateway", "send", site.base, "hello", "--json"),
            *("--transport", transport, *flags),
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env={**os.environ, **env},
        )
        out, err = await asyncio.wait_for(process.communicate(), 60)
        assert process.returncode == 0, (transport, err.decode())
        answer = json.loads(out.decode().splitlines()[-1])
        assert answer["task"]["status"]["state"] == "TASK_STATE_COMPLETED", transport
        assert CLIENT_SECRET not in out.decode() + err.decode()
        assert PASSWORD not in out.decode() + err.decode()


@pytest.mark.parametrize("transport", BINDINGS)
async def test_agents_json_entries_carry_credentials_for_the_a2a_tool(
    site: Site, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, transport: str
) -> None:
    use_secret(CLIENT_SECRET)
    site.idp.clients["dave"] = CLIENT_SECRET
    monkeypatch.setenv("IDENTITY_TEST_DAVE_SECRET", CLIENT_SECRET)
    entries: list[dict[str, Any]] = [
        {
            "name": "as-bob",
            "url": site.base,
            "basic_user": "bob",
            "basic_password": PASSWORD,
            "transport": transport,
        },
        {
            "name": "as-dave",
            "url": site.base,
            "client_id": "dave",
            "client_secret_env": "IDENTITY_TEST_DAVE_SECRET",
            "transport": transport,
        },
        {"name": "two-ways", "url": site.base, "key": KEY_CAROL, "basic_user": "bob"},
        {"name": "no-secret", "url": site.base, "client_id": "dave"},
        {
            "name": "unsure",
            "url": site.base,
            "client_id": "dave",
            "token_command": "true",
            "client_secret": "x",
        },
    ]
    agents = parse_agents(entries, tmp_path / "agents.json")
    assert sorted(agents.agents) == ["as-bob", "as-dave"]
    assert [reason.split(": ", 1)[1] for reason in agents.skipped] == [
        "a key and basic_user are two ways in; keep one",
        "client_id needs client_secret (or client_secret_env naming a set variable)",
        "name one of basic_user, client_id and token_command",
    ]
    for name, owner in (("as-bob", "bob"), ("as-dave", "dave")):
        async with await open_agent(agents.agents[name], allow_private_urls=True) as agent:
            assert agent.interface.protocol_binding == BINDING_NAMES[transport]
            reply = await agent.send_message(pb.SendMessageRequest(message=user_message(owner)))
            listed = await agent.list_tasks(pb.ListTasksRequest())
            assert [task.id for task in listed.tasks] == [reply.task.id]
    assert PASSWORD not in repr(agents) and CLIENT_SECRET not in repr(agents)


@pytest.mark.parametrize(
    ("owner", "upstream"),
    [
        ("bob", {"upstream_basic_user": "bob", "upstream_password": PASSWORD}),
        ("dave", {"upstream_client_id": "dave", "upstream_client_secret": CLIENT_SECRET}),
    ],
)
async def test_proxy_mode_proves_who_it_is_to_its_upstream(
    site: Site, owner: str, upstream: dict[str, str]
) -> None:
    use_secret(CLIENT_SECRET)
    site.idp.clients["dave"] = CLIENT_SECRET
    settings = {"upstream": site.base, "port": 0, "grpc_port": -1, "allow_private_urls": True}
    proxy = Gateway(resolve({**settings, **upstream}, environ={}))
    await proxy.start()
    try:
        async with await connect(f"http://127.0.0.1:{proxy.http_port}", timeout=20) as agent:
            reply = await agent.send_message(pb.SendMessageRequest(message=user_message("hi")))
            assert reply.task.status.state == pb.TASK_STATE_COMPLETED
    finally:
        await proxy.stop()
    auth = (
        ClientAuth(basic_user="bob", basic_password=PASSWORD)
        if owner == "bob"
        else ClientAuth(client_id="dave", client_secret=CLIENT_SECRET)
    )
    async with await connect(site.base, auth=auth, timeout=20) as upstream_owner:
        listed = await upstream_owner.list_tasks(pb.ListTasksRequest())
    assert len(listed.tasks) == 1  # the proxy's call landed in the owner's tasks upstream
