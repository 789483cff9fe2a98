"""agents.json: every rule of the reader, the guarded client, and the card listing."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from a2a_gateway.client import Unreachable
from a2a_gateway.client.agents_file import AgentEntry, key_hint, read_agents
from a2a_gateway.client.directory import (
    CARD_FETCHES_AT_ONCE,
    describe,
    fetch_agent_card,
    fetch_agent_cards,
)
from a2a_gateway.client.guarded_http import open_agent
from a2a_gateway.local.layout import WorkspaceLayout
from a2a_gateway.local.redaction import redact

from .delegation_support import REMOTE_KEY, base_url, faux_gateway, write_agents


def test_missing_file_is_no_agents(tmp_path: Path) -> None:
    agents = read_agents(tmp_path)
    assert agents.agents == {} and agents.error is None and agents.notes() == []


@pytest.mark.parametrize("text", ["{not json", '{"name": "a"}', '"x"', "[1,", "null"])
def test_malformed_or_not_an_array_is_no_agents_and_says_so(tmp_path: Path, text: str) -> None:
    write_agents(tmp_path, text)
    agents = read_agents(tmp_path)
    assert agents.agents == {}
    assert agents.error is not None and "could not be read" in agents.error


def test_fifo_is_not_read(tmp_path: Path) -> None:
    path = WorkspaceLayout(tmp_path).agents
    path.parent.mkdir()
    os.mkfifo(path)
    agents = read_agents(tmp_path)  # would block forever if opened for a blocking read
    assert agents.agents == {} and agents.error is not None


def test_bad_entries_are_skipped_and_the_others_work(tmp_path: Path) -> None:
    secret = "k-secret-in-a-bad-entry-0042"
    write_agents(
        tmp_path,
        [
            {"name": "good", "url": "https://good.example/", "key": "k_good_0123456789"},
            {"name": "Bad_Name", "url": "https://x.example/"},
            {"name": "a" * 41, "url": "https://x.example/"},
            {"name": "no-url"},
            {"name": "ftp", "url": "ftp://x.example/"},
            {"name": "relative", "url": "/agent"},
            {"name": "userinfo", "url": "https://user:pw@x.example/"},
            {"name": "empty-key", "url": "https://x.example/", "key": ""},
            {"name": "num-key", "url": "https://x.example/", "key": 42},
            {"name": "flag", "url": "https://x.example/", "allow_private": "yes"},
            {"name": "good", "url": "https://dup.example/", "key": secret},
            "not an object",
            {"name": "card", "url": "https://c.example/agent.json", "description": " Cards "},
        ],
    )
    agents = read_agents(tmp_path)
    assert agents.names == ["good", "card"]
    assert agents.agents["good"].url == "https://good.example/"
    assert agents.agents["card"].is_card_url and not agents.agents["good"].is_card_url
    assert agents.agents["card"].description == "Cards"
    assert len(agents.skipped) == 11
    notes = "\n".join(agents.notes())
    assert all(line.startswith("skipped: ") for line in agents.notes())
    assert "duplicate name" in notes and "(flag)" in notes and "(userinfo)" in notes
    assert secret not in notes and "k_good_0123456789" not in notes
    assert secret not in repr(agents) and "k_good" not in repr(agents.agents["good"])


def test_every_read_registers_the_keys_for_log_redaction(tmp_path: Path) -> None:
    good, skipped, later = "k-registered-good-7a1b", "k-registered-skipped-8c2d", "k-later-9e3f"
    write_agents(
        tmp_path,
        [
            {"name": "good", "url": "https://a.example/", "key": good},
            {"name": "BAD NAME", "url": "https://b.example/", "key": skipped},
        ],
    )
    read_agents(tmp_path)
    assert redact(f"{good} {skipped}") == "*** ***"
    # An edit (a new key) is registered by the next read.
    write_agents(tmp_path, [{"name": "good", "url": "https://a.example/", "key": later}])
    assert redact(later) == later
    read_agents(tmp_path)
    assert redact(later) == "***"


def test_key_hint_shows_last_four_of_long_keys_only() -> None:
    assert key_hint("k_b_0123456789abcdef") == "...cdef"
    assert key_hint("short-k1") == "(hidden: shorter than 12)"
    assert key_hint(None) == "(none)"


async def test_loopback_needs_allow_private(tmp_path: Path) -> None:
    async with faux_gateway(tmp_path / "a") as gateway:
        entry = AgentEntry("assistant-a", base_url(gateway), REMOTE_KEY)
        with pytest.raises(Unreachable) as refused:
            await open_agent(entry)
        assert "loopback" in refused.value.message and REMOTE_KEY not in refused.value.message
        # Per entry, or for every entry (--allow-private-urls).
        for service in (
            await open_agent(AgentEntry("assistant-a", entry.url, REMOTE_KEY, allow_private=True)),
            await open_agent(entry, allow_private_urls=True),
        ):
            async with service:
                assert service.card.name == "a2a-gateway agent"


async def test_card_url_entry_and_listing(tmp_path: Path) -> None:
    async with faux_gateway(tmp_path / "a") as gateway:
        card_url = base_url(gateway) + "/.well-known/agent-card.json"
        entry = AgentEntry("a", card_url, REMOTE_KEY, "Does echo", allow_private=True)
        result = await fetch_agent_card(entry, allow_private_urls=False)
        text = describe(result)
        assert text.startswith("- a: Does echo\n")
        assert "card name: a2a-gateway agent; streaming: yes; push: yes" in text
        refused = describe(
            await fetch_agent_card(AgentEntry("b", card_url), allow_private_urls=False)
        )
        assert refused.startswith("- b: unreachable (") and "loopback" in refused


async def test_redirects_are_not_followed(tmp_path: Path) -> None:
    from aiohttp import web

    from .client_support import serving

    async def moved(request: web.Request) -> web.Response:
        raise web.HTTPFound("http://127.0.0.1:1/.well-known/agent-card.json")

    app = web.Application()
    app.router.add_get("/.well-known/agent-card.json", moved)
    async with serving(app) as url:
        result = await fetch_agent_card(
            AgentEntry("r", url, allow_private=True), allow_private_urls=False
        )
    assert result.card is None and "302" in (result.problem or "")


async def test_a_long_agents_file_is_fetched_a_bounded_number_at_a_time() -> None:
    import asyncio

    from aiohttp import web

    from .client_support import serving

    in_flight = 0
    most = 0

    async def card(request: web.Request) -> web.Response:
        nonlocal in_flight, most
        in_flight += 1
        most = max(most, in_flight)
        try:
            await asyncio.sleep(0.2)  # held, so the fetches overlap
        finally:
            in_flight -= 1
        raise web.HTTPNotFound()

    app = web.Application()
    app.router.add_get("/.well-known/agent-card.json", card)
    async with serving(app) as url:
        entries = [AgentEntry(f"a{n}", url, allow_private=True) for n in range(40)]
        results = await fetch_agent_cards(entries, allow_private_urls=False)
    assert [r.entry.name for r in results] == [e.name for e in entries]
    assert all(r.card is None for r in results)
    assert 1 < most <= CARD_FETCHES_AT_ONCE
