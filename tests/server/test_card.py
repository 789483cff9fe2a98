"""The public card (content, interface URLs, ETag/304) and the extended card."""

from __future__ import annotations

import asyncio
import json
import logging
from pathlib import Path
from typing import Any

import pytest
from google.protobuf import json_format

from a2a_gateway.local.layout import WorkspaceLayout
from a2a_gateway.protocol import codec
from a2a_gateway.protocol.context import ANONYMOUS, CallContext, Caller
from a2a_gateway.server.auth import WorkspaceCallers
from a2a_gateway.server.card import CardProvider
from a2a_gateway.server.config import CardConfig, Mounts, ServerConfig
from lf.a2a.v1 import a2a_pb2 as pb

from .conftest import KEY, TIMEOUT_S, Http, Starter

CARD_PATH = "/.well-known/agent-card.json"


async def get_card(http: Http, headers: dict[str, str] | None = None) -> tuple[int, Any, Any]:
    async with asyncio.timeout(TIMEOUT_S):
        response = await http.client.get(CARD_PATH, headers=headers)
        async with response:
            raw = await response.read()
    body = json.loads(raw) if raw else None
    return response.status, body, response.headers


def interfaces(card: dict[str, Any]) -> list[tuple[str, str, str]]:
    return [
        (i["protocolBinding"], i["url"], i["protocolVersion"]) for i in card["supportedInterfaces"]
    ]


# --- content -----------------------------------------------------------------------------


async def test_public_card_content(start_http: Starter) -> None:
    config = ServerConfig(
        card=CardConfig(
            name="Test agent",
            description="Answers tests.",
            version="2.3.4",
            provider_organization="Example Org",
            provider_url="https://example.org",
            documentation_url="https://example.org/docs",
        )
    )
    http = await start_http(config=config)
    status, card, headers = await get_card(http)
    assert status == 200
    assert headers["Content-Type"] == "application/json"
    assert card["name"] == "Test agent"
    assert card["description"] == "Answers tests."
    assert card["version"] == "2.3.4"
    assert card["provider"] == {"url": "https://example.org", "organization": "Example Org"}
    assert card["documentationUrl"] == "https://example.org/docs"
    assert card["capabilities"] == {
        "streaming": True,
        "pushNotifications": False,
        "extendedAgentCard": True,
    }
    assert card["defaultInputModes"][0] == "text/plain"
    assert card["defaultOutputModes"][0] == "text/plain"
    assert [s["id"] for s in card["skills"]] == ["chat"]
    assert card["securitySchemes"]["apiKey"]["apiKeySecurityScheme"] == {
        "description": "The caller's API key.",
        "location": "header",
        "name": "X-API-Key",
    }
    assert card["securitySchemes"]["bearer"]["httpAuthSecurityScheme"]["scheme"] == "Bearer"
    assert card["securityRequirements"] == [
        {"schemes": {"apiKey": {}}},
        {"schemes": {"bearer": {}}},
    ]
    # The card is valid A2A 1.0 once the 0.3 keys of the hybrid card (which 1.0 clients
    # ignore) are skipped: it parses, with every REQUIRED field present.
    codec.validate(json_format.ParseDict(card, pb.AgentCard(), ignore_unknown_fields=True))
    assert card["protocolVersion"] == "0.3.0" and card["url"].endswith("/a2a")


async def test_anonymous_access_lists_schemes_but_no_requirement(start_http: Starter) -> None:
    http = await start_http(config=ServerConfig(allow_anonymous=True))
    _, card, _ = await get_card(http)
    assert set(card["securitySchemes"]) == {"apiKey", "bearer"}
    assert "securityRequirements" not in card


def test_push_capability_flag() -> None:
    card = CardProvider(ServerConfig(), push_notifications=True).public_card("https://a.example")
    assert card.capabilities.push_notifications is True
    assert card.capabilities.HasField("push_notifications")


def test_provider_needs_both_fields() -> None:
    config = ServerConfig(card=CardConfig(provider_organization="Only org"))
    card = CardProvider(config).public_card("https://a.example")
    assert not card.HasField("provider")


async def test_public_description_never_reads_persona(start_http: Starter, tmp_path: Path) -> None:
    """PERSONA.md feeds only the extended card (issue 10 item 11)."""
    workspace = tmp_path / "ws"
    workspace.mkdir()
    http = await start_http(config=ServerConfig(workspaces=[workspace]))
    (workspace / "PERSONA.md").write_text("\n\n   \n# Helps Eugene plan his week.\nMore text.\n")
    _, card, _ = await get_card(http)
    assert card["description"] == "A conversational agent reachable over the A2A protocol."
    extended = http.cards.extended_card(caller_in(workspace))
    assert extended.description == "Helps Eugene plan his week."


async def test_persona_beats_the_configured_description_on_the_extended_card(
    start_http: Starter, tmp_path: Path
) -> None:
    (tmp_path / "PERSONA.md").write_text("From persona\n")
    config = ServerConfig(workspaces=[tmp_path], card=CardConfig(description="From config"))
    http = await start_http(config=config)
    _, card, _ = await get_card(http)
    assert card["description"] == "From config"
    assert http.cards.extended_card(caller_in(tmp_path)).description == "From persona"
    other = tmp_path / "other"  # a workspace without a PERSONA.md: the configured one
    other.mkdir()
    assert http.cards.extended_card(caller_in(other)).description == "From config"


# --- interface URLs --------------------------------------------------------------------------


async def test_interfaces_from_the_request(http: Http) -> None:
    _, card, _ = await get_card(http)
    port = http.client.port
    assert interfaces(card) == [
        ("JSONRPC", f"http://127.0.0.1:{port}/a2a", "1.0"),
        ("HTTP+JSON", f"http://127.0.0.1:{port}/a2a/v1", "1.0"),
        ("GRPC", "127.0.0.1:8081", "1.0"),
        ("JSONRPC", f"http://127.0.0.1:{port}/a2a", "0.3"),
        ("HTTP+JSON", f"http://127.0.0.1:{port}/a2a/v1", "0.3"),
        ("GRPC", "127.0.0.1:8081", "0.3"),
    ]
    # The hybrid card's 0.3 keys: JSON-RPC first, the other 0.3 interfaces after it.
    assert (card["url"], card["preferredTransport"]) == (f"http://127.0.0.1:{port}/a2a", "JSONRPC")
    assert card["additionalInterfaces"] == [
        {"url": f"http://127.0.0.1:{port}/a2a/v1", "transport": "HTTP+JSON"},
        {"url": "127.0.0.1:8081", "transport": "GRPC"},
    ]


async def test_interfaces_follow_the_host_header(http: Http) -> None:
    _, card, _ = await get_card(http, headers={"Host": "agent.local:9000"})
    assert interfaces(card)[0][1] == "http://agent.local:9000/a2a"
    assert interfaces(card)[2][1] == "agent.local:8081"


async def test_each_host_gets_its_own_card_however_many_ask(http: Http) -> None:
    """Encoded cards are reused per card, never across hosts (and 40 hosts overflow
    the few kept: the first one asked again is encoded again, still right)."""
    etags: dict[str, str] = {}
    for n in [*range(40), 0, 1]:
        host = f"host-{n}.example:9000"
        status, card, headers = await get_card(http, headers={"Host": host})
        assert status == 200
        assert {url for _, url, _ in interfaces(card)} >= {f"http://{host}/a2a"}
        assert card["url"] == f"http://{host}/a2a"
        assert etags.setdefault(host, headers["ETag"]) == headers["ETag"]
    assert len(set(etags.values())) == 40


async def test_forwarded_headers_are_ignored(http: Http) -> None:
    _, card, _ = await get_card(
        http, headers={"X-Forwarded-Host": "evil.example", "X-Forwarded-Proto": "https"}
    )
    urls = " ".join(url for _, url, _ in interfaces(card))
    assert "evil.example" not in urls and "https" not in urls


async def test_a_garbage_host_header_falls_back_to_the_bind_address(start_http: Starter) -> None:
    http = await start_http(config=ServerConfig(host="0.0.0.0", port=8123))
    _, card, _ = await get_card(http, headers={"Host": "bad host/<x>"})
    assert interfaces(card)[0][1] == "http://127.0.0.1:8123/a2a"


async def test_interfaces_from_public_url(start_http: Starter) -> None:
    config = ServerConfig(public_url="https://agent.example.com/base/", grpc_port=9443)
    http = await start_http(config=config)
    _, card, _ = await get_card(http)
    assert interfaces(card) == [
        ("JSONRPC", "https://agent.example.com/base/a2a", "1.0"),
        ("HTTP+JSON", "https://agent.example.com/base/a2a/v1", "1.0"),
        ("GRPC", "agent.example.com:9443", "1.0"),
        ("JSONRPC", "https://agent.example.com/base/a2a", "0.3"),
        ("HTTP+JSON", "https://agent.example.com/base/a2a/v1", "0.3"),
        ("GRPC", "agent.example.com:9443", "0.3"),
    ]


async def test_grpc_public_address_and_no_grpc(start_http: Starter) -> None:
    http = await start_http(config=ServerConfig(grpc_public_address="grpc.example.com:443"))
    _, card, _ = await get_card(http)
    assert interfaces(card)[2] == ("GRPC", "grpc.example.com:443", "1.0")
    http = await start_http(config=ServerConfig(grpc_port=None))
    _, card, _ = await get_card(http)
    assert [b for b, _, _ in interfaces(card)] == ["JSONRPC", "HTTP+JSON", "JSONRPC", "HTTP+JSON"]


async def test_interfaces_for_root_mounts(start_http: Starter) -> None:
    config = ServerConfig(public_url="https://a.example", mounts=Mounts(jsonrpc="/", rest=""))
    http = await start_http(config=config)
    _, card, _ = await get_card(http)
    assert interfaces(card)[:2] == [
        ("JSONRPC", "https://a.example/", "1.0"),
        ("HTTP+JSON", "https://a.example", "1.0"),
    ]


def test_ipv6_hosts_are_bracketed() -> None:
    provider = CardProvider(ServerConfig(host="::1", port=8080, grpc_port=8081))
    card = provider.public_card()
    assert card.supported_interfaces[0].url == "http://[::1]:8080/a2a"
    assert card.supported_interfaces[2].url == "[::1]:8081"


# --- caching -----------------------------------------------------------------------------------


async def test_etag_and_cache_control(start_http: Starter) -> None:
    http = await start_http(config=ServerConfig(card_max_age_s=123))
    status, _, headers = await get_card(http)
    etag = headers["ETag"]
    assert status == 200
    assert etag.startswith('"') and etag.endswith('"') and len(etag) > 10
    assert headers["Cache-Control"] == "public, max-age=123"
    _, _, again = await get_card(http)
    assert again["ETag"] == etag  # same bytes, same tag
    for header in (etag, f"W/{etag}", f'"nope", {etag}', "*", f' "x" ,W/{etag} '):
        status, body, headers = await get_card(http, headers={"If-None-Match": header})
        assert status == 304, header
        assert body is None
        assert headers["ETag"] == etag
        assert headers["Cache-Control"] == "public, max-age=123"
    status, body, _ = await get_card(http, headers={"If-None-Match": '"other"'})
    assert status == 200 and body["name"]


async def test_etag_changes_when_the_card_does(start_http: Starter, tmp_path: Path) -> None:
    http = await start_http(config=ServerConfig(workspaces=[tmp_path]))
    _, _, first = await get_card(http)
    http.config.card.description = "A new description"
    status, card, second = await get_card(http, headers={"If-None-Match": first["ETag"]})
    assert status == 200
    assert card["description"] == "A new description"
    assert second["ETag"] != first["ETag"]


async def test_head_request(http: Http) -> None:
    async with asyncio.timeout(TIMEOUT_S):
        response = await http.client.head(CARD_PATH)
        await response.read()
    assert response.status == 200 and response.headers["ETag"]


# --- extended card ------------------------------------------------------------------------------


def caller_in(workspace: Path) -> CallContext:
    return CallContext(caller=Caller(name="alice", workspace=str(workspace)))


def write_card(workspace: Path, content: Any) -> Path:
    path = WorkspaceLayout(workspace).card
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(content if isinstance(content, str) else json.dumps(content))
    return path


SKILL = {"id": "plan", "name": "Planning", "description": "Plans weeks.", "tags": ["calendar"]}


def test_extended_card_overlays_card_json(tmp_path: Path) -> None:
    write_card(tmp_path, {"name": "Eugene's assistant", "description": "Plans.", "skills": [SKILL]})
    provider = CardProvider(ServerConfig(public_url="https://a.example"))
    card = provider.extended_card(caller_in(tmp_path))
    assert card.name == "Eugene's assistant"
    assert card.description == "Plans."
    assert [s.id for s in card.skills] == ["plan"]
    assert card.supported_interfaces[0].url == "https://a.example/a2a"
    assert card.capabilities.extended_agent_card


def test_extended_card_partial_overlay_and_persona(tmp_path: Path) -> None:
    (tmp_path / "PERSONA.md").write_text("Caller persona line\n")
    write_card(tmp_path, {"name": "Only a name"})
    card = CardProvider(ServerConfig()).extended_card(caller_in(tmp_path))
    assert card.name == "Only a name"
    assert card.description == "Caller persona line"
    assert [s.id for s in card.skills] == ["chat"]


def test_extended_card_without_workspace_is_the_public_card() -> None:
    provider = CardProvider(ServerConfig(public_url="https://a.example"))
    extended = provider.extended_card(CallContext(caller=ANONYMOUS))
    assert extended == provider.public_card()


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        ("{not json", "not valid JSON"),
        ("[1, 2]", "not a JSON object"),
        ({"name": ""}, "name"),
        ({"name": 5}, "name"),
        ({"nmae": "typo"}, "unknown key"),
        ({"skills": []}, "skills"),
        ({"skills": [{"id": "x"}]}, "skills[0]"),
        ({"skills": [{**SKILL, "bogus": 1}]}, "skills[0]"),
    ],
)
def test_malformed_card_json_falls_back_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, content: Any, reason: str
) -> None:
    path = write_card(tmp_path, content)
    provider = CardProvider(ServerConfig(public_url="https://a.example"))
    with caplog.at_level(logging.WARNING, logger="a2a_gateway.server.card"):
        card = provider.extended_card(caller_in(tmp_path))
    assert card == provider.public_card()
    messages = [r.getMessage() for r in caplog.records]
    assert any(str(path) in m and reason in m for m in messages), messages


async def test_extended_card_over_both_bindings(start_http: Starter, keyed_workspace: Path) -> None:
    write_card(keyed_workspace, {"name": "Alice's view", "skills": [SKILL]})
    config = ServerConfig(workspaces=[keyed_workspace])
    http = await start_http(config=config, authenticator=WorkspaceCallers([keyed_workspace]))
    status, body = await http.rpc("GetExtendedAgentCard", headers={"X-API-Key": KEY})
    assert status == 200
    card = body["result"]
    assert card["name"] == "Alice's view"
    assert card["supportedInterfaces"][0]["url"] == f"http://127.0.0.1:{http.client.port}/a2a"
    async with asyncio.timeout(TIMEOUT_S):
        response = await http.client.get(
            "/a2a/v1/extendedAgentCard", headers={"Authorization": f"Bearer {KEY}"}
        )
        rest_card = await response.json(content_type=None)
    assert rest_card == card
    # The public card stays generic.
    _, public, _ = await get_card(http)
    assert public["name"] == "a2a-gateway agent"
    status, _ = await http.rpc("GetExtendedAgentCard")
    assert status == 401
