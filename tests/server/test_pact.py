"""PACT Identity end to end: personal agents' tokens from our own identity provider, the
PACT URL on both HTTP bindings over the real task engine and workspace store, its card,
and the ordinary URL beside it."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from a2a_gateway.agent.base import Output, Turn
from a2a_gateway.agent.faux import FauxAgent
from a2a_gateway.agent.prompt import framing_header
from a2a_gateway.local.layout import WorkspaceLayout
from a2a_gateway.protocol.context import Caller, OnBehalf
from a2a_gateway.server.auth import CALLERS_FILE, WorkspaceCallers
from a2a_gateway.server.card import CardProvider
from a2a_gateway.server.config import ServerConfig
from a2a_gateway.server.engine import TaskEngine
from a2a_gateway.server.file_store import WorkspaceTaskStores
from a2a_gateway.server.http_app import build_http_app
from a2a_gateway.server.identity import JwtVerifier, TokenRefused
from a2a_gateway.server.outbound import OutboundClient
from a2a_gateway.server.pact import (
    PACT_FILE,
    PACT_PROFILE_URI,
    PactAuthenticator,
    PactMount,
    PactService,
    ReplayGuard,
)
from a2a_gateway.server.pact.config import parse_pact
from lf.a2a.v1 import a2a_pb2 as pb
from tests.support.clocks import FakeClock
from tests.support.idp import (
    IdentityProvider,
    hs256_with_public_key,
    running_provider,
    unsigned_token,
)

from .conftest import GatewayTestServer

AUDIENCE = "acme-support"
KEY = "k-pact-ordinary-5c1e7a"
PACT = "/a2a/pact"
BINDINGS = ("JSONRPC", "HTTP+JSON")


class CountingAgent(FauxAgent):
    """The faux agent, counting its runs and keeping who each was for."""

    def __init__(self) -> None:
        self.runs = 0
        self.replies = 0
        self.callers: list[Caller] = []

    async def reply(self, turn: Turn) -> pb.Message | None:
        self.replies += 1
        return await super().reply(turn)

    async def run(self, turn: Turn) -> AsyncIterator[Output]:
        self.runs += 1
        self.callers.append(turn.caller)
        async for output in super().run(turn):
            yield output


def send_request(text: str, message_id: str = "m-1", context_id: str = "") -> dict[str, Any]:
    """A SendMessageRequest as ProtoJSON (a new conversation without ``context_id``)."""
    message: dict[str, Any] = {
        "messageId": message_id,
        "role": "ROLE_USER",
        "parts": [{"text": text}],
    }
    if context_id:
        message["contextId"] = context_id
    return {"message": message}


@dataclass
class Stack:
    """One gateway (engine, workspace store, both URLs) serving ``workspace``."""

    session: aiohttp.ClientSession
    base: str
    agent: CountingAgent
    workspace: Path
    stop: Callable[[], Awaitable[None]]

    async def send(
        self,
        binding: str,
        token: str | None,
        text: str = "hello",
        *,
        message_id: str = "m-1",
        context_id: str = "",
        path: str = PACT,
        **extra: Any,
    ) -> tuple[int, dict[str, Any], Any]:
        """SendMessage; (HTTP status, headers, the result or the error object)."""
        params = {**send_request(text, message_id, context_id), **extra}
        return await self.call(binding, token, "SendMessage", params, path)

    async def call(
        self, binding: str, token: str | None, method: str, params: Any, path: str = PACT
    ) -> tuple[int, dict[str, Any], Any]:
        headers = {"Authorization": f"Bearer {token}"} if token is not None else {}
        if binding == "JSONRPC":
            body = {"jsonrpc": "2.0", "id": 7, "method": method, "params": params}
            async with self.session.post(self.base + path, json=body, headers=headers) as got:
                answer = await got.json(content_type=None)
                outcome = answer.get("result", answer.get("error"))
                return got.status, dict(got.headers), outcome
        verb, route = REST_ROUTES[method]
        kwargs: dict[str, Any] = {"headers": headers}
        if verb == "POST":
            kwargs["json"] = params
        async with self.session.request(verb, self.base + path + route, **kwargs) as got:
            answer = await got.json(content_type=None)
            return got.status, dict(got.headers), answer.get("error", answer)

    def task_files(self) -> list[Path]:
        return sorted(WorkspaceLayout(self.workspace).tasks.glob("**/*.json"))


REST_ROUTES = {
    "SendMessage": ("POST", "/message:send"),
    "SendStreamingMessage": ("POST", "/message:stream"),
    "GetTask": ("GET", "/tasks/t-1"),
    "ListTasks": ("GET", "/tasks"),
    "CancelTask": ("POST", "/tasks/t-1:cancel"),
    "SubscribeToTask": ("GET", "/tasks/t-1:subscribe"),
    "CreateTaskPushNotificationConfig": ("POST", "/tasks/t-1/pushNotificationConfigs"),
}

Start = Callable[[], Awaitable[Stack]]


def write_json(path: Path, data: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data))


@pytest.fixture
async def idp() -> AsyncIterator[IdentityProvider]:
    async with running_provider() as provider:
        provider.rotate("ES256", keep_old=False)
        yield provider


@pytest.fixture
async def other_idp() -> AsyncIterator[IdentityProvider]:
    async with running_provider() as provider:
        yield provider


@pytest.fixture
async def start(
    tmp_path: Path, idp: IdentityProvider, other_idp: IdentityProvider
) -> AsyncIterator[Start]:
    """Start a gateway on ``tmp_path`` (again: a restart over the same files). The
    workspace lists ``idp`` as a personal agent and ``other_idp`` as a disabled one,
    and one ordinary key caller."""
    write_json(tmp_path / CALLERS_FILE, [{"name": "ordinary", "key": KEY}])
    write_json(
        tmp_path / PACT_FILE,
        {
            "audience": AUDIENCE,
            "personalAgents": [idp.personal_agent(), other_idp.personal_agent(enabled=False)],
        },
    )
    cleanups: list[Callable[[], Awaitable[None]]] = []

    async def starter() -> Stack:
        config = ServerConfig(port=0, grpc_port=None, workspaces=[tmp_path])
        agent = CountingAgent()
        engine = TaskEngine(agent, WorkspaceTaskStores(tmp_path))
        verifier = JwtVerifier(OutboundClient(timeout_s=2), leeway_s=5)
        pact = PactMount(PactService(engine), PactAuthenticator([tmp_path], verifier))
        authenticator = WorkspaceCallers([tmp_path])
        app = build_http_app(engine, config, authenticator, CardProvider(config), pact=pact)
        server = GatewayTestServer(app, host="127.0.0.1", port=0)
        await server.start_server()
        session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10))

        async def stop() -> None:
            if session.closed:
                return
            await session.close()
            await server.close()
            await engine.aclose()
            await pact.authenticator.aclose()

        cleanups.append(stop)
        return Stack(session, str(server.make_url("")).rstrip("/"), agent, tmp_path, stop)

    yield starter
    for stop in reversed(cleanups):
        await stop()


def reply_text(message: dict[str, Any]) -> str:
    return "".join(part.get("text", "") for part in message["parts"])


@pytest.mark.parametrize("binding", BINDINGS)
async def test_a_users_message_gets_the_reply_as_a_message_and_a_retry_the_same(
    binding: str, start: Start, idp: IdentityProvider
) -> None:
    stack = await start()
    status, _, result = await stack.send(binding, idp.token("alice", audience=AUDIENCE))
    assert status == 200, result
    assert set(result) == {"message"}  # a Message, no task
    reply = result["message"]
    assert reply["role"] == "ROLE_AGENT" and reply_text(reply) == "hello"
    assert reply["contextId"] and "taskId" not in reply
    assert stack.agent.runs == 1
    (caller,) = stack.agent.callers
    assert caller.on_behalf == OnBehalf(agent=idp.issuer, user="alice")
    assert caller.name.startswith("pact.") and caller.workspace == str(stack.workspace)

    # The same message again, under a new token (each jti is good once): the same
    # reply, and the agent does not run again.
    again = await stack.send(binding, idp.token("alice", audience=AUDIENCE))
    assert again[0] == 200 and again[2] == result
    assert stack.agent.runs == 1
    # The same messageId from another user is that user's own message.
    bob = await stack.send(binding, idp.token("bob", audience=AUDIENCE))
    assert bob[0] == 200 and bob[2]["message"]["contextId"] != reply["contextId"]
    assert stack.agent.runs == 2


async def test_the_stored_reply_survives_a_restart(start: Start, idp: IdentityProvider) -> None:
    first = await start()
    status, _, result = await first.send("JSONRPC", idp.token("alice", audience=AUDIENCE))
    assert status == 200
    await first.stop()
    second = await start()  # a new engine and PACT service over the same workspace files
    again = await second.send("HTTP+JSON", idp.token("alice", audience=AUDIENCE))
    assert again[0] == 200 and again[2] == result
    assert second.agent.runs == 0
    # The conversation is still alice's (and only hers) after the restart.
    context_id = result["message"]["contextId"]
    for user, code in (("alice", None), ("bob", -32602)):
        got = await second.send(
            "JSONRPC",
            idp.token(user, audience=AUDIENCE),
            "on",
            message_id="m-2",
            context_id=context_id,
        )
        assert got[0] == 200 and got[2].get("code") == code, got
    assert second.agent.runs == 1


@pytest.mark.parametrize("binding", BINDINGS)
async def test_each_bad_token_is_401_and_stores_nothing(
    binding: str, start: Start, idp: IdentityProvider, other_idp: IdentityProvider
) -> None:
    stack = await start()
    used = idp.token("alice", audience=AUDIENCE)
    assert (await stack.send(binding, used, message_id="m-used"))[0] == 200
    files, fetches = stack.task_files(), idp.jwks_fetches
    assert len(files) == 1
    bad: dict[str, tuple[str | None, str]] = {
        "no token": (None, "token is required"),
        "wrong issuer": (
            idp.token("alice", audience=AUDIENCE, issuer="https://elsewhere.example"),
            "issuer is not accepted",
        ),
        "disabled issuer": (other_idp.token("alice", audience=AUDIENCE), "issuer is not accepted"),
        "wrong audience": (idp.token("alice", audience="someone-else"), "audience"),
        "expired": (idp.token("alice", audience=AUDIENCE, lifetime_s=-30), "has expired"),
        "too long-lived": (idp.token("alice", audience=AUDIENCE, lifetime_s=301), "longer than"),
        "replayed jti": (used, "already used"),
        "alg none": (unsigned_token(idp), "algorithm none is not allowed"),
        "HS256 with the public key": (hs256_with_public_key(idp), "HS256 is not allowed"),
        "unknown kid": (
            idp.token("alice", audience=AUDIENCE, header={"kid": "nobody"}),
            "key id is not one of",
        ),
        "no jti": (idp.token("alice", audience=AUDIENCE, jti=None), "no jti"),
        "no sub": (idp.token("", audience=AUDIENCE), "no sub"),
        "no iat": (idp.token("alice", audience=AUDIENCE, iat=None), "no iat"),
        "iat NaN": (idp.token("alice", audience=AUDIENCE, iat=float("nan")), "iat claim is not"),
        "exp NaN": (idp.token("alice", audience=AUDIENCE, exp=float("nan")), "no exp"),
        "not a JWT": ("a.b.c", "not valid base64url JSON"),
    }
    for case, (token, words) in bad.items():
        status, headers, error = await stack.send(binding, token, message_id=f"m-{case}")
        assert status == 401, case
        assert headers["WWW-Authenticate"].startswith("Bearer realm="), case
        assert words in error["message"], (case, error["message"])
    assert stack.task_files() == files and stack.agent.runs == 1
    # The unknown kid cost one JWKS fetch at most; nothing was fetched for the others.
    assert idp.jwks_fetches - fetches <= 1 and other_idp.jwks_fetches == 0


@pytest.mark.parametrize("binding", BINDINGS)
async def test_a_context_continues_for_its_own_user_only(
    binding: str, start: Start, idp: IdentityProvider
) -> None:
    stack = await start()
    _, _, first = await stack.send(binding, idp.token("alice", audience=AUDIENCE))
    context_id = first["message"]["contextId"]
    status, _, second = await stack.send(
        binding,
        idp.token("alice", audience=AUDIENCE),
        "again",
        message_id="m-2",
        context_id=context_id,
    )
    assert status == 200 and second["message"]["contextId"] == context_id
    assert reply_text(second["message"]) == "again"
    files = stack.task_files()
    refusals = []
    for context in (context_id, "no-such-context"):
        status, _, error = await stack.send(
            binding, idp.token("bob", audience=AUDIENCE), "hi", message_id="m-3", context_id=context
        )
        assert status == (200 if binding == "JSONRPC" else 400)
        refusals.append(error)
    # Another user's conversation and one that does not exist: the same answer.
    assert refusals[0] == refusals[1]
    assert "message.contextId" in refusals[0]["message"]
    assert stack.task_files() == files and stack.agent.runs == 2


@pytest.mark.parametrize("binding", BINDINGS)
async def test_tasks_streaming_and_push_are_unsupported(
    binding: str, start: Start, idp: IdentityProvider
) -> None:
    stack = await start()
    push = {"taskId": "t-1", "url": "https://example.com/hook"}
    calls: dict[str, Any] = {
        "SendStreamingMessage": {
            "message": {"messageId": "s-1", "role": "ROLE_USER", "parts": [{"text": "x"}]}
        },
        "GetTask": {"id": "t-1"},
        "ListTasks": {},
        "CancelTask": {"id": "t-1"},
        "SubscribeToTask": {"id": "t-1"},
        "CreateTaskPushNotificationConfig": push,
    }
    for method, params in calls.items():
        status, _, error = await stack.call(
            binding, idp.token("alice", audience=AUDIENCE), method, params
        )
        if binding == "JSONRPC":
            assert error["code"] == -32004, (method, error)
        else:
            assert (status, error["status"]) == (400, "FAILED_PRECONDITION"), (method, error)
        assert "PACT" in error["message"]
    for extra in (
        {"configuration": {"returnImmediately": True}},
        {"configuration": {"taskPushNotificationConfig": {"url": "https://example.com/h"}}},
    ):
        status, _, error = await stack.send(binding, idp.token("alice", audience=AUDIENCE), **extra)
        assert "PACT" in error["message"], extra
    assert stack.agent.runs == 0 and stack.task_files() == []


async def test_the_ordinary_url_keeps_its_own_callers(start: Start, idp: IdentityProvider) -> None:
    stack = await start()
    status, _, result = await stack.send("JSONRPC", KEY, path="/a2a")
    assert status == 200 and result["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
    status, _, result = await stack.send("HTTP+JSON", KEY, path="/a2a/v1", message_id="m-2")
    assert status == 200 and result["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
    assert stack.agent.callers[0] == Caller("ordinary", str(stack.workspace))
    # Neither URL takes the other's credentials.
    token = idp.token("alice", audience=AUDIENCE)
    assert (await stack.send("JSONRPC", token, path="/a2a", message_id="m-3"))[0] == 401
    assert (await stack.send("JSONRPC", KEY, message_id="m-4"))[0] == 401
    assert stack.agent.runs == 2


async def test_the_pact_card(start: Start) -> None:
    stack = await start()
    async with stack.session.get(stack.base + PACT + "/.well-known/agent-card.json") as got:
        assert got.status == 200
        card = await got.json()
    urls = {(i["url"], i["protocolBinding"]) for i in card["supportedInterfaces"]}
    assert urls == {(stack.base + PACT, "JSONRPC"), (stack.base + PACT, "HTTP+JSON")}
    capabilities = card["capabilities"]
    assert not capabilities.get("streaming") and not capabilities.get("pushNotifications")
    assert not capabilities.get("extendedAgentCard")
    (extension,) = [e for e in capabilities["extensions"] if e["uri"] == PACT_PROFILE_URI]
    assert extension["required"] is True and extension["params"]["tasks"] is False
    assert card["securitySchemes"] == {
        "platformJwt": {
            "httpAuthSecurityScheme": {
                "scheme": "Bearer",
                "bearerFormat": "JWT",
                "description": "A JWT its personal agent signs for the user (sub).",
            }
        }
    }
    assert card["securityRequirements"] == [{"schemes": {"platformJwt": {}}}]
    # The public card still describes the ordinary URL.
    async with stack.session.get(stack.base + "/.well-known/agent-card.json") as got:
        public = await got.json()
    assert stack.base + "/a2a" in {i["url"] for i in public["supportedInterfaces"]}
    assert "platformJwt" not in public.get("securitySchemes", {})


# --- pact.json, inline keys, the replay guard ---------------------------------------------


async def test_inline_keys_fetch_nothing_and_a_bad_file_refuses_all(
    tmp_path: Path, idp: IdentityProvider, caplog: pytest.LogCaptureFixture
) -> None:
    jwks = idp.public_jwks()
    write_json(
        tmp_path / PACT_FILE,
        {"audience": AUDIENCE, "personalAgents": [{"issuer": idp.issuer, "jwks": jwks}]},
    )
    async with OutboundClient(timeout_s=2) as outbound:
        pact = PactAuthenticator([tmp_path], JwtVerifier(outbound, leeway_s=5))
        token = idp.token("alice", audience=AUDIENCE)
        identity = await pact.identify(
            lambda name: f"Bearer {token}" if name == "Authorization" else None
        )
        assert identity.caller.on_behalf == OnBehalf(idp.issuer, "alice")
        assert idp.jwks_fetches == 0
        (tmp_path / PACT_FILE).write_text('{"audience": "acme-support", "personalAgent": []}')
        token = idp.token("alice", audience=AUDIENCE)
        with caplog.at_level(logging.WARNING), pytest.raises(TokenRefused):
            await pact.identify(lambda name: f"Bearer {token}" if name == "Authorization" else None)
    assert any(
        str(tmp_path / PACT_FILE) in r.getMessage() and "'personalAgent'" in r.getMessage()
        for r in caplog.records
    )


def test_pact_file_entries_are_checked_one_by_one() -> None:
    private = {"kty": "EC", "crv": "P-256", "x": "x", "y": "y", "d": "secret-part"}
    config, warnings = parse_pact(
        {
            "audience": AUDIENCE,
            "personalAgents": [
                {"issuer": "https://pa.example", "jwksUri": "https://pa.example/jwks"},
                {"issuer": "https://pb.example", "jwksUri": "http://pb.example/jwks"},
                {"issuer": "https://pc.example", "jwks": {"keys": [private]}},
                {"issuer": "https://pa.example", "jwksUri": "https://pa.example/other"},
                {"issuer": "https://pd.example"},
                {"issuer": "https://pe.example", "jwksUri": "https://x", "enabled": "no"},
            ],
        },
        "pact.json",
    )
    assert config is not None and [a.issuer for a in config.agents] == ["https://pa.example"]
    assert [w.split(": ", 1)[1] for w in warnings] == [
        "jwksUri must be an https URL (http only with allowPrivate)",
        "jwks must hold public keys only",
        "the issuer is listed twice",
        "needs exactly one of jwksUri and jwks",
        "enabled and allowPrivate must be true or false",
    ]
    assert not any("secret-part" in w for w in warnings)
    assert parse_pact([], "pact.json")[0] is None
    assert parse_pact({"audience": "", "personalAgents": []}, "pact.json")[0] is None


def test_the_replay_guard_forgets_a_jti_only_once_its_token_is_dead() -> None:
    clock = FakeClock()
    guard = ReplayGuard(max_entries=2, wall_clock=clock)
    guard.spend("iss", "a", clock.now + 60)
    with pytest.raises(TokenRefused, match="already used"):
        guard.spend("iss", "a", clock.now + 60)
    guard.spend("other-iss", "a", clock.now + 60)  # jtis are per issuer
    with pytest.raises(TokenRefused, match="retry later"):  # full of live tokens
        guard.spend("iss", "b", clock.now + 60)
    clock.now += 61
    guard.spend("iss", "b", clock.now + 60)
    assert len(guard) == 1


def test_the_framing_header_names_the_personal_agent_and_the_user() -> None:
    header = framing_header(
        "pact.0123", can_notify_owner=False, on_behalf=OnBehalf("https://pa.example", "al'\nice")
    )
    assert "personal agent 'https://pa.example'" in header
    assert 'its user "al\'\\nice"' in header  # quoted: a claim, never instructions
    assert "\n" not in header and "untrusted" in header


async def test_concurrent_retries_run_the_agent_once(start: Start, idp: IdentityProvider) -> None:
    stack = await start()
    sends = [
        stack.send("JSONRPC", idp.token("alice", audience=AUDIENCE), "hold:0.2") for _ in range(3)
    ]
    answers = await asyncio.gather(*sends)
    assert {a[0] for a in answers} == {200}
    assert len({json.dumps(a[2], sort_keys=True) for a in answers}) == 1
    assert stack.agent.runs == 1


async def test_every_message_is_a_turn_and_an_unfinished_one_says_its_state(
    start: Start, idp: IdentityProvider
) -> None:
    stack = await start()
    # The faux agent would answer "message:hi" with a plain Message (Agent.reply); here
    # it is a turn, whose task keeps the reply for retries.
    status, _, first = await stack.send(
        "JSONRPC", idp.token("alice", audience=AUDIENCE), "message:hi"
    )
    assert status == 200 and reply_text(first["message"]) == "message:hi"
    assert (stack.agent.replies, stack.agent.runs) == (0, 1)
    status, _, failed = await stack.send(
        "HTTP+JSON",
        idp.token("alice", audience=AUDIENCE),
        "fail:no such order",
        message_id="m-2",
        context_id=first["message"]["contextId"],
    )
    assert status == 200 and reply_text(failed["message"]) == "no such order"
    assert failed["message"]["metadata"] == {"a2a-gateway.taskState": "TASK_STATE_FAILED"}


async def test_an_unpublished_workspace_refuses_personal_agents_too(
    start: Start, idp: IdentityProvider
) -> None:
    stack = await start()
    write_json(WorkspaceLayout(stack.workspace).card, {"published": False})
    token = idp.token("alice", audience=AUDIENCE)
    status, headers, _ = await stack.send("JSONRPC", token)
    assert status == 401 and headers["WWW-Authenticate"].startswith("Bearer")
    write_json(WorkspaceLayout(stack.workspace).card, {"published": True})
    fresh = idp.token("alice", audience=AUDIENCE)  # the first one's jti was never spent
    assert (await stack.send("JSONRPC", fresh, message_id="m-2"))[0] == 200
    assert stack.agent.runs == 1
