"""A card for each reader (issue 10 item 15) and a public card with nothing private
(item 11): pure 1.0 or hybrid by A2A-Version and --card-format, Last-Modified and
revalidation, declared extensions, and where name, description and skills come from."""

from __future__ import annotations

import asyncio
import email.utils
import json
from pathlib import Path
from typing import Any

import pytest

from a2a_gateway.agent.base import AgentProfile
from a2a_gateway.local.layout import WorkspaceLayout
from a2a_gateway.protocol import codec
from a2a_gateway.protocol.context import CallContext, Caller
from a2a_gateway.server.card import CardProvider
from a2a_gateway.server.config import CardConfig, ServerConfig
from lf.a2a.v1 import a2a_pb2 as pb

from .conftest import TIMEOUT_S, Http, Starter

CARD_PATH = "/.well-known/agent-card.json"
#: Keys only the 0.3 card has, at the top level and inside a security scheme.
TOP_LEVEL_03 = {
    "url",
    "preferredTransport",
    "protocolVersion",
    "additionalInterfaces",
    "supportsAuthenticatedExtendedCard",
    "security",
}
SCHEME_03 = {"type", "in", "scheme", "name", "description"}  # flat: outside any wrapper


async def fetch(
    http: Http, headers: dict[str, str] | None = None, query: str = ""
) -> tuple[int, bytes, Any]:
    async with asyncio.timeout(TIMEOUT_S):
        response = await http.client.get(CARD_PATH + query, headers=headers)
        async with response:
            return response.status, await response.read(), response.headers


def is_pure(card: dict[str, Any]) -> bool:
    """No 0.3 key at the top level, none inside a security scheme."""
    if TOP_LEVEL_03 & set(card):
        return False
    return all(not (SCHEME_03 & set(s)) for s in card.get("securitySchemes", {}).values())


def is_hybrid(card: dict[str, Any]) -> bool:
    schemes = card["securitySchemes"]
    return (
        card["protocolVersion"] == "0.3.0"
        and card["preferredTransport"] == "JSONRPC"
        and schemes["apiKey"]["type"] == "apiKey"
        and schemes["apiKey"]["apiKeySecurityScheme"]["name"] == "X-API-Key"
    )


# (--card-format, A2A-Version header or None, query string) -> pure 1.0 card?
READERS: list[tuple[str, str | None, str, bool]] = [
    ("auto", None, "", False),  # 0.3 clients send no version: the hybrid
    ("auto", "1.0", "", True),
    ("auto", " 1.0 ", "", True),
    ("auto", "1.0.3", "", True),
    ("auto", "1", "", True),
    ("auto", "1.1", "", True),  # any 1.x
    ("auto", "0.3", "", False),
    ("auto", "0.3.0", "", False),
    ("auto", "2.0", "", False),
    ("auto", "banana", "", False),
    ("auto", "", "", False),
    ("auto", None, "?A2A-Version=1.0", True),  # the query, as everywhere
    ("auto", None, "?a2a-version=1.0", True),
    ("1.0", None, "", True),
    ("1.0", "0.3", "", True),
    ("hybrid", "1.0", "", False),
    ("hybrid", None, "", False),
]


@pytest.mark.parametrize(("fmt", "version", "query", "pure"), READERS)
async def test_a_card_for_each_reader(
    start_http: Starter, fmt: str, version: str | None, query: str, pure: bool
) -> None:
    http = await start_http(config=ServerConfig(card=CardConfig(format=fmt)))
    headers = {} if version is None else {"A2A-Version": version}
    status, body, response_headers = await fetch(http, headers, query)
    assert status == 200
    card = json.loads(body)
    if pure:
        assert is_pure(card), card
        # exactly the 1.0 ProtoJSON of the card, nothing merged in
        base = f"http://127.0.0.1:{http.client.port}"
        assert card == codec.to_dict(http.cards.public_card(base))
    else:
        assert is_hybrid(card), card
    assert ("Vary" in response_headers) == (fmt == "auto")
    if fmt == "auto":
        assert response_headers["Vary"] == "A2A-Version"


async def test_the_two_shapes_have_their_own_etags(http: Http) -> None:
    _, hybrid, first = await fetch(http)
    _, pure, second = await fetch(http, {"A2A-Version": "1.0"})
    assert hybrid != pure and first["ETag"] != second["ETag"]
    status, _, _ = await fetch(http, {"A2A-Version": "1.0", "If-None-Match": second["ETag"]})
    assert status == 304
    status, _, _ = await fetch(http, {"If-None-Match": second["ETag"]})  # the hybrid's differs
    assert status == 200


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def _date(seconds: float) -> str:
    return email.utils.formatdate(seconds, usegmt=True)


T0 = 1_780_000_000.0

# (request headers, expected status) against a card first served at T0
REVALIDATION: list[tuple[dict[str, str], int]] = [
    ({}, 200),
    ({"If-Modified-Since": _date(T0)}, 304),
    ({"If-Modified-Since": _date(T0 + 60)}, 304),
    ({"If-Modified-Since": _date(T0 - 1)}, 200),
    ({"If-Modified-Since": "yesterday"}, 200),  # unreadable: ignored
    ({"If-Modified-Since": "Mon, 32 Foo 2026 99:99:99 GMT"}, 200),
    ({"If-Modified-Since": _date(T0 + 60), "If-None-Match": '"other"'}, 200),  # ETag first
    ({"If-Modified-Since": _date(T0 - 60), "If-None-Match": "*"}, 304),
]


@pytest.mark.parametrize(("headers", "status"), REVALIDATION)
async def test_last_modified_and_revalidation(
    start_http: Starter, headers: dict[str, str], status: int
) -> None:
    http = await start_http()
    clock = Clock(T0 + 0.7)
    http.cards.clock = clock
    _, _, first = await fetch(http)
    assert first["Last-Modified"] == _date(T0)
    clock.now += 3600  # the same card later: still first served at T0
    got, body, again = await fetch(http, headers)
    assert got == status
    assert again["Last-Modified"] == _date(T0) and again["ETag"] == first["ETag"]
    assert (body == b"") == (status == 304)


async def test_a_changed_card_gets_a_new_last_modified(start_http: Starter) -> None:
    http = await start_http()
    clock = Clock(T0)
    http.cards.clock = clock
    _, _, first = await fetch(http)
    clock.now = T0 + 120
    http.config.card.name = "Renamed"
    status, _, second = await fetch(http, {"If-Modified-Since": first["Last-Modified"]})
    assert status == 200 and second["Last-Modified"] == _date(T0 + 120)


EXTENSIONS = [
    pb.AgentExtension(uri="https://ext.example/sign/v1", description="Signs.", required=True),
    pb.AgentExtension(uri="urn:example:trace"),
]


async def test_extensions_are_declared_in_both_shapes(start_http: Starter) -> None:
    http = await start_http(config=ServerConfig(card=CardConfig(extensions=list(EXTENSIONS))))
    _, body, _ = await fetch(http, {"A2A-Version": "1.0"})
    assert json.loads(body)["capabilities"]["extensions"] == [
        {"uri": "https://ext.example/sign/v1", "description": "Signs.", "required": True},
        {"uri": "urn:example:trace"},
    ]
    _, body, _ = await fetch(http)
    assert json.loads(body)["capabilities"]["extensions"] == [
        {"uri": "https://ext.example/sign/v1", "description": "Signs.", "required": True},
        {"uri": "urn:example:trace", "required": False},  # 0.3 always wrote required
    ]


# --- where the public card's identity comes from (item 11) ----------------------------

PROFILE = AgentProfile(
    name="Shouter",
    description="Shouts back.",
    skills=(pb.AgentSkill(id="shout", name="Shout", description="Shouts.", tags=["fun"]),),
)
SKILL = pb.AgentSkill(id="plan", name="Plan", description="Plans.", tags=["calendar"])

# (settings, agent profile) -> (name, description, skill ids)
IDENTITY: list[tuple[CardConfig, AgentProfile | None, tuple[str, str, list[str]]]] = [
    (
        CardConfig(),
        None,
        ("a2a-gateway agent", "A conversational agent reachable over the A2A protocol.", ["chat"]),
    ),
    (CardConfig(), PROFILE, ("Shouter", "Shouts back.", ["shout"])),
    (CardConfig(name="Set"), PROFILE, ("Set", "Shouts back.", ["shout"])),
    (CardConfig(description="Set."), PROFILE, ("Shouter", "Set.", ["shout"])),
    (CardConfig(skills=[SKILL]), PROFILE, ("Shouter", "Shouts back.", ["plan"])),
    (CardConfig(name="N", description="D.", skills=[SKILL]), None, ("N", "D.", ["plan"])),
    (
        CardConfig(),
        AgentProfile(name="Only a name"),
        ("Only a name", "A conversational agent reachable over the A2A protocol.", ["chat"]),
    ),
]


@pytest.mark.parametrize(("settings", "profile", "expected"), IDENTITY)
def test_public_identity_settings_then_agent_then_defaults(
    settings: CardConfig, profile: AgentProfile | None, expected: tuple[str, str, list[str]]
) -> None:
    provider = CardProvider(ServerConfig(card=settings))
    provider.profile = profile
    card = provider.public_card()
    assert (card.name, card.description, [s.id for s in card.skills]) == expected


PRIVATE = "PRIVATE-persona-line-7c1e"
PRIVATE_CARD = "PRIVATE-card-json-name-4b2d"


async def test_public_card_shows_nothing_of_the_workspaces(
    start_http: Starter, tmp_path: Path
) -> None:
    workspaces = [tmp_path / "a", tmp_path / "b"]
    for workspace in workspaces:
        WorkspaceLayout(workspace).state.mkdir(parents=True)
        (workspace / "PERSONA.md").write_text(f"# {PRIVATE}\n")
        WorkspaceLayout(workspace).card.write_text(
            json.dumps({"name": PRIVATE_CARD, "description": PRIVATE})
        )
    http = await start_http(config=ServerConfig(workspaces=workspaces))
    for headers in ({}, {"A2A-Version": "1.0"}, {"A2A-Version": "0.3"}):
        _, body, _ = await fetch(http, headers)
        assert PRIVATE.encode() not in body and PRIVATE_CARD.encode() not in body
    # ...while each caller's extended card has them
    extended = http.cards.extended_card(
        CallContext(caller=Caller(name="alice", workspace=str(workspaces[0])))
    )
    assert (extended.name, extended.description) == (PRIVATE_CARD, PRIVATE)
