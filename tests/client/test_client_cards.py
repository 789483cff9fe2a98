"""Card resolution (well-known path, ``.json`` URLs, 0.3-style cards), interface choice,
credentials from the card, the extended card and its fallback."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import httpx
import pytest
from aiohttp import web

import lf.a2a.v1.a2a_pb2 as pb
from a2a_gateway.client import (
    AuthRejected,
    CardError,
    ClientAuth,
    Credentials,
    Redactor,
    card_url,
    choose_interface,
    connect,
    credentials_for,
    parse_card,
    resolve_card,
)
from a2a_gateway.client.grpc_transport import grpc_target

from .client_support import serving, text_request

BOUND_S = 10.0
KEY = "card-key-99aa88bb77cc"


def card_dict(base: str, **extra: Any) -> dict[str, Any]:
    card: dict[str, Any] = {
        "name": "scripted",
        "description": "a scripted agent",
        "version": "1.0.0",
        "capabilities": {"streaming": True},
        "defaultInputModes": ["text/plain"],
        "defaultOutputModes": ["text/plain"],
        "skills": [{"id": "s", "name": "S", "description": "d", "tags": ["t"]}],
        "supportedInterfaces": [
            {"url": base + "/rpc", "protocolBinding": "JSONRPC", "protocolVersion": "1.0"}
        ],
    }
    card.update(extra)
    return card


TASK = {"id": "t-1", "contextId": "c-1", "status": {"state": "TASK_STATE_COMPLETED"}}


class CardPeer:
    """Serves a card (at the well-known path and /cards/agent.json) and a JSON-RPC
    endpoint that answers GetExtendedAgentCard with ``extended`` (or an error)."""

    def __init__(self) -> None:
        self.card: dict[str, Any] = {}
        self.extended: dict[str, Any] | None = None
        self.card_status = 200
        self.rpc_headers: list[dict[str, str]] = []

    async def get_card(self, request: web.Request) -> web.Response:
        if self.card_status != 200:
            return web.Response(status=self.card_status, text="no")
        return web.json_response(self.card)

    async def rpc(self, request: web.Request) -> web.Response:
        self.rpc_headers.append({k.lower(): v for k, v in request.headers.items()})
        body = await request.json()
        if body["method"] == "GetExtendedAgentCard":
            if self.extended is None:
                error = {"code": -32007, "message": "Extended agent card is not configured"}
                return web.json_response({"jsonrpc": "2.0", "id": body["id"], "error": error})
            return web.json_response({"jsonrpc": "2.0", "id": body["id"], "result": self.extended})
        return web.json_response({"jsonrpc": "2.0", "id": body["id"], "result": {"task": TASK}})

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/.well-known/agent-card.json", self.get_card)
        app.router.add_get("/cards/agent.json", self.get_card)
        app.router.add_post("/rpc", self.rpc)
        return app


# --- where the card is ------------------------------------------------------------------


def test_card_url() -> None:
    assert card_url("https://a.example") == "https://a.example/.well-known/agent-card.json"
    assert card_url("https://a.example/x/") == "https://a.example/x/.well-known/agent-card.json"
    assert card_url("https://a.example/c/card.JSON") == "https://a.example/c/card.JSON"


async def test_connect_via_well_known_and_via_json_url() -> None:
    peer = CardPeer()
    async with serving(peer.app()) as base, asyncio.timeout(BOUND_S):
        peer.card = card_dict(base)
        for url in (base, base + "/cards/agent.json"):
            async with await connect(url) as service:
                assert service.card.name == "scripted"
                assert service.binding == "JSONRPC"
                reply = await service.send_message(text_request("hi"))
                assert reply.task.id == "t-1"


@pytest.mark.parametrize(("status", "error"), [(404, CardError), (401, AuthRejected)])
async def test_card_http_errors(status: int, error: type[Exception]) -> None:
    peer = CardPeer()
    peer.card_status = status
    async with serving(peer.app()) as base, asyncio.timeout(BOUND_S):
        with pytest.raises(error, match=str(base)):
            await connect(base)


async def test_card_that_is_not_json_is_a_card_error() -> None:
    async def handler(request: web.Request) -> web.Response:
        return web.Response(text="<html>hello</html>", content_type="text/html")

    app = web.Application()
    app.router.add_get("/.well-known/agent-card.json", handler)
    async with serving(app) as base, asyncio.timeout(BOUND_S):
        with pytest.raises(Exception, match="invalid agent card") as caught:
            await connect(base)
    assert caught.value.spec.reason == "INVALID_AGENT_RESPONSE"  # type: ignore[attr-defined]


# --- 0.3-style and hybrid cards ---------------------------------------------------------


def legacy_card(version: str | None = "1.0") -> dict[str, Any]:
    card: dict[str, Any] = {
        "name": "legacy",
        "description": "0.3-shaped",
        "version": "2",
        "url": "https://agent.example/a2a",
        "preferredTransport": "GRPC",
        "additionalInterfaces": [
            {"url": "https://agent.example/a2a", "transport": "GRPC"},
            {"url": "https://agent.example/rest", "transport": "HTTP+JSON"},
        ],
        "supportsAuthenticatedExtendedCard": True,
        "securitySchemes": {"key": {"type": "apiKey", "in": "header", "name": "X-Custom-Key"}},
        "security": [{"key": []}],
        "capabilities": {"streaming": True, "stateTransitionHistory": True},
        "defaultInputModes": ["text/plain"],
        "defaultOutputModes": ["text/plain"],
        "skills": [],
        "kind": "agent-card",
    }
    if version is not None:
        card["protocolVersion"] = version
    return card


def test_legacy_card_is_understood() -> None:
    card = parse_card(legacy_card("1.0.0"), source="https://agent.example/card.json")
    assert [(i.protocol_binding, i.url, i.protocol_version) for i in card.supported_interfaces] == [
        ("GRPC", "https://agent.example/a2a", "1.0"),
        ("HTTP+JSON", "https://agent.example/rest", "1.0"),
    ]
    assert card.capabilities.extended_agent_card
    assert card.security_schemes["key"].api_key_security_scheme.name == "X-Custom-Key"
    assert card.security_requirements[0].schemes["key"].list == []
    assert choose_interface(card).protocol_binding == "GRPC"  # the card's order
    assert choose_interface(card, "rest").url == "https://agent.example/rest"
    creds = credentials_for(card, KEY)
    assert creds == Credentials("X-Custom-Key", KEY)


def test_legacy_card_of_a_03_agent_is_called_over_0_3() -> None:
    card = parse_card(legacy_card(None), source="https://agent.example/card.json")
    assert {i.protocol_version for i in card.supported_interfaces} == {"0.3"}
    chosen = choose_interface(card)  # 0.3 gRPC comes after HTTP+JSON: its HTTP+JSON interface
    assert (chosen.protocol_binding, chosen.protocol_version) == ("HTTP+JSON", "0.3")
    forced = choose_interface(card, "grpc")  # unless forced
    assert (forced.protocol_binding, forced.protocol_version) == ("GRPC", "0.3")


def test_hybrid_card_prefers_10_keys() -> None:
    value = card_dict("https://agent.example")
    value.update(
        {
            "url": "https://agent.example/legacy",
            "preferredTransport": "JSONRPC",
            "protocolVersion": "0.3.0",
            "securitySchemes": {
                "bearer": {
                    "httpAuthSecurityScheme": {"scheme": "Bearer"},
                    "type": "http",
                    "scheme": "bearer",
                }
            },
        }
    )
    card = parse_card(value, source="https://agent.example/.well-known/agent-card.json")
    assert [i.url for i in card.supported_interfaces] == ["https://agent.example/rpc"]
    assert credentials_for(card, KEY) == Credentials("Authorization", f"Bearer {KEY}")


def test_relative_interface_urls_resolve_against_the_card() -> None:
    value = card_dict("")
    value["supportedInterfaces"] = [
        {"url": "/a2a", "protocolBinding": "JSONRPC", "protocolVersion": "1.0"},
        {"url": "grpc.example:443", "protocolBinding": "GRPC", "protocolVersion": "1.0"},
    ]
    card = parse_card(value, source="https://agent.example/.well-known/agent-card.json")
    assert [i.url for i in card.supported_interfaces] == [
        "https://agent.example/a2a",
        "grpc.example:443",
    ]


def test_interface_choice_follows_card_order_and_forced_transport() -> None:
    card = pb.AgentCard(
        name="n",
        supported_interfaces=[
            pb.AgentInterface(
                url="https://x/old", protocol_binding="JSONRPC", protocol_version="0.3"
            ),
            pb.AgentInterface(url="x:50051", protocol_binding="GRPC", protocol_version="1.0"),
            pb.AgentInterface(
                url="https://x/rest", protocol_binding="HTTP+JSON", protocol_version="1.0"
            ),
            pb.AgentInterface(
                url="https://x/custom", protocol_binding="urn:custom", protocol_version="1.0"
            ),
        ],
    )
    assert choose_interface(card).url == "x:50051"
    assert choose_interface(card, "REST").url == "https://x/rest"
    # no 1.x JSON-RPC interface: the 0.3 one is the fallback
    assert choose_interface(card, "jsonrpc").url == "https://x/old"
    with pytest.raises(ValueError, match="unknown transport"):
        choose_interface(card, "carrier-pigeon")


def test_unparseable_card_is_a_card_error() -> None:
    with pytest.raises(CardError, match="invalid"):
        parse_card({"name": ["not", "a", "string"]}, source="https://x/card.json")
    with pytest.raises(CardError, match="not a JSON object"):
        parse_card([1, 2], source="https://x/card.json")


# --- credentials ------------------------------------------------------------------------


def scheme(**kind: Any) -> pb.SecurityScheme:
    return pb.SecurityScheme(**kind)


def test_credentials_from_card_schemes() -> None:
    bearer = scheme(http_auth_security_scheme=pb.HTTPAuthSecurityScheme(scheme="bearer"))
    api_key = scheme(api_key_security_scheme=pb.APIKeySecurityScheme(location="header", name="X-K"))
    cookie = scheme(api_key_security_scheme=pb.APIKeySecurityScheme(location="cookie", name="sid"))
    nameless = scheme(api_key_security_scheme=pb.APIKeySecurityScheme(location="header"))

    def card(**schemes: pb.SecurityScheme) -> pb.AgentCard:
        value = pb.AgentCard()
        for name, item in schemes.items():
            value.security_schemes[name].CopyFrom(item)
        return value

    assert credentials_for(card(a=bearer, b=bearer), KEY) == Credentials(
        "Authorization", f"Bearer {KEY}"
    )
    assert credentials_for(card(a=bearer, b=api_key), KEY) == Credentials("X-K", KEY)
    assert credentials_for(card(a=cookie), KEY) == Credentials("Cookie", f"sid={KEY}")
    assert credentials_for(card(a=nameless), KEY) == Credentials("X-API-Key", KEY)
    assert credentials_for(card(), KEY) == Credentials("X-API-Key", KEY)
    assert credentials_for(card(a=bearer), None) is None
    assert KEY not in repr(credentials_for(card(), KEY))


# --- the extended card ------------------------------------------------------------------


async def test_extended_card_is_used_with_a_key() -> None:
    peer = CardPeer()
    async with serving(peer.app()) as base, asyncio.timeout(BOUND_S):
        peer.card = card_dict(base, capabilities={"extendedAgentCard": True})
        peer.extended = card_dict(base, name="scripted (extended)")
        async with await connect(base, key=KEY) as service:
            assert service.card.name == "scripted (extended)"
        assert peer.rpc_headers[-1]["x-api-key"] == KEY
        assert (await resolve_card(base, key=KEY)).name == "scripted (extended)"
        assert (await resolve_card(base)).name == "scripted"
        # Without a key the extended card is never asked for.
        calls = len(peer.rpc_headers)
        async with await connect(base) as service:
            assert service.card.name == "scripted"
        assert len(peer.rpc_headers) == calls


async def test_extended_card_failure_keeps_public_card(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    peer = CardPeer()
    async with serving(peer.app()) as base, asyncio.timeout(BOUND_S):
        peer.card = card_dict(base, capabilities={"extendedAgentCard": True})
        async with await connect(base, key=KEY) as service:
            assert service.card.name == "scripted"
    assert "ExtendedAgentCardNotConfiguredError" in caplog.text
    assert KEY not in caplog.text


# --- small pieces -----------------------------------------------------------------------


def test_grpc_target() -> None:
    assert grpc_target("127.0.0.1:50051") == ("127.0.0.1:50051", False)
    assert grpc_target("grpc.example.com:443") == ("grpc.example.com:443", True)
    assert grpc_target("grpc.example.com") == ("grpc.example.com:443", True)
    assert grpc_target("grpcs://g.example:8443") == ("g.example:8443", True)
    assert grpc_target("http://g.example:8080/") == ("g.example:8080", False)
    assert grpc_target("[::1]:50051") == ("[::1]:50051", False)


def test_redactor() -> None:
    redact = Redactor([KEY, "k", None, ""])
    assert redact(f"key={KEY}; task k") == "key=[redacted]; task [redacted]"
    assert redact("a task about kites") == "a task about kites"  # short keys: whole words only


@pytest.mark.parametrize(
    ("token_url", "allowed"),
    [
        ("https://auth.example/token", True),
        ("http://127.0.0.1:9/token", True),  # the agent's own host
        ("http://auth.example/token", False),  # elsewhere, in the clear
        ("ftp://127.0.0.1/token", False),
    ],
)
async def test_our_client_secret_goes_only_where_a_card_may_send_it(
    token_url: str, allowed: bool
) -> None:
    card = pb.AgentCard(
        supported_interfaces=[pb.AgentInterface(url="http://127.0.0.1:8/a2a")],
        security_schemes={
            "oauth2": pb.SecurityScheme(
                oauth2_security_scheme=pb.OAuth2SecurityScheme(
                    flows=pb.OAuthFlows(
                        client_credentials=pb.ClientCredentialsOAuthFlow(token_url=token_url)
                    )
                )
            )
        },
    )
    auth = ClientAuth(client_id="me", client_secret="cards-may-not-take-this-secret")
    async with httpx.AsyncClient() as http:
        if allowed:
            found = credentials_for(card, None, auth=auth, http=http)
            assert found is not None and found.source is not None
        else:
            with pytest.raises(AuthRejected, match="neither https nor on the agent's host"):
                credentials_for(card, None, auth=auth, http=http)
        # Named by the owner, any URL is taken: the choice is theirs.
        owned = ClientAuth(client_id="me", client_secret="x" * 12, token_url=token_url)
        assert credentials_for(card, None, auth=owned, http=http) is not None
