"""The owner's one-time secret links (``serve``'s secret asker), on a real aiohttp server
and the injectable clock: a link works once, expires, and never shows the value."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web

from a2a_gateway.agent.tools.interaction import OWNER_INBOX, SecretQuestion
from a2a_gateway.server.secret_links import NOT_VALID, SecretLinks
from tests.support.clocks import FakeClock
from tests.support.secrets import use_secret

VALUE = "s3cr3t-link-value-9d2e71"


class Links:
    def __init__(self, links: SecretLinks, http: aiohttp.ClientSession, base: str) -> None:
        self.links = links
        self.http = http
        self.base = base

    async def ask(
        self, workspace: Path, wait_s: float = 600.0
    ) -> tuple[asyncio.Task[str | None], str]:
        """Start a question; its waiting task and the link the owner got."""
        question = SecretQuestion(workspace, "travel-bot", "Your <b>API</b> key?", wait_s)
        inbox = workspace / OWNER_INBOX
        before = len(inbox.read_text().splitlines()) if inbox.exists() else 0
        asking = asyncio.create_task(self.links.ask_secret(question))
        async with asyncio.timeout(10):
            # The inbox line is written off the event loop: nothing to wait on but it.
            while not inbox.exists() or len(inbox.read_text().splitlines()) == before:  # noqa: ASYNC110
                await asyncio.sleep(0.01)
        line = inbox.read_text().splitlines()[-1]
        return asking, json.loads(line)["url"]

    async def get(self, url: str) -> tuple[int, str]:
        async with self.http.get(url) as response:
            return response.status, await response.text()

    async def post(self, url: str, **form: str) -> tuple[int, str]:
        async with self.http.post(url, data=form) as response:
            return response.status, await response.text()


@pytest.fixture
async def links() -> AsyncIterator[Links]:
    holder: dict[str, str] = {}
    made = SecretLinks("/a2a", lambda: holder["base"], clock=FakeClock())
    app = web.Application()
    made.mount(app)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    holder["base"] = f"http://127.0.0.1:{runner.addresses[0][1]}"
    try:
        async with aiohttp.ClientSession() as http:
            yield Links(made, http, holder["base"])
    finally:
        made.close()
        await runner.cleanup()


async def test_a_link_takes_the_value_once(links: Links, tmp_path: Path) -> None:
    use_secret(VALUE)
    asking, url = await links.ask(tmp_path)
    assert re.fullmatch(re.escape(links.base) + r"/a2a/secrets/[A-Za-z0-9_-]{43}", url)
    entry = json.loads((tmp_path / OWNER_INBOX).read_text())
    assert entry["caller"] == "travel-bot" and "Your <b>API</b> key?" in entry["text"]
    status, page = await links.get(url)
    assert status == 200
    assert "Your &lt;b&gt;API&lt;/b&gt; key?" in page and 'type="password"' in page
    assert (await links.post(url, value=VALUE))[0] == 200
    assert await asyncio.wait_for(asking, 10) == VALUE
    # Used: the same page as for a link that never existed, and nothing taken.
    unknown = await links.get(url + "x")
    assert await links.post(url, value="again-0123") == (404, unknown[1])
    status, page = await links.get(url)
    assert status == 404 and NOT_VALID in page
    assert len(links.links) == 0
    assert VALUE not in (tmp_path / OWNER_INBOX).read_text()


async def test_an_expired_link_is_refused_and_ends_the_wait(links: Links, tmp_path: Path) -> None:
    asking, url = await links.ask(tmp_path, wait_s=600)
    clock = links.links.clock
    assert isinstance(clock, FakeClock)
    clock.now += 599
    assert (await links.get(url))[0] == 200
    clock.now += 1
    status, page = await links.post(url, value="too-late-value")
    assert status == 404 and NOT_VALID in page
    assert await asyncio.wait_for(asking, 10) is None  # the turn goes on at once


async def test_decline_and_bad_forms(links: Links, tmp_path: Path) -> None:
    asking, url = await links.ask(tmp_path)
    assert (await links.post(url, value="  "))[0] == 400  # empty: the link still works
    assert (await links.post(url, value="x" * 9000))[0] == 413
    assert (await links.get(url))[0] == 200
    assert (await links.post(url, decline="1"))[0] == 200
    assert await asyncio.wait_for(asking, 10) is None
    assert (await links.get(url))[0] == 404
