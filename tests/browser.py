"""A real headless browser for tests: Debian's Chromium, driven over the Chrome DevTools
protocol (its websocket, with aiohttp; no browser is ever downloaded).

``make test`` installs the ``chromium`` package when it is missing (``make chromium``).
The browser runs with a fresh profile in a temporary folder, no network services of its
own (no sync, updates or background fetches) and no sandbox (tests run as root in CI);
every wait is bounded.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import shutil
import tempfile
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp

CANDIDATES = ("chromium", "chromium-browser")
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
    "--remote-debugging-port=0",
    "--remote-debugging-address=127.0.0.1",
)
START_TIMEOUT_S = 30.0
STEP_TIMEOUT_S = 15.0


def chromium_path() -> str:
    for name in CANDIDATES:
        found = shutil.which(name)
        if found:
            return found
    raise RuntimeError("Chromium is not installed: run `make chromium` (Debian's package)")


class BrowserError(Exception):
    """The page did not do what the test expected (a JS exception, a timeout)."""


class Page:
    """One tab, over its DevTools websocket."""

    def __init__(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        self.ws = ws
        self._ids = itertools.count(1)

    async def command(self, method: str, **params: Any) -> dict[str, Any]:
        """Send one command and return its result (events in between are dropped)."""
        ident = next(self._ids)
        await self.ws.send_json({"id": ident, "method": method, "params": params})
        async with asyncio.timeout(STEP_TIMEOUT_S):
            while True:
                message = await self.ws.receive()
                if message.type != aiohttp.WSMsgType.TEXT:
                    raise BrowserError(f"the DevTools connection ended ({message.type.name})")
                data = json.loads(message.data)
                if data.get("id") == ident:
                    if "error" in data:
                        raise BrowserError(f"{method}: {data['error'].get('message')}")
                    return dict(data.get("result", {}))

    async def evaluate(self, expression: str) -> Any:
        """The value of a JavaScript expression in the page."""
        result = await self.command(
            "Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True
        )
        if "exceptionDetails" in result:
            raise BrowserError(
                f"the page's script failed: {result['exceptionDetails'].get('text')}"
            )
        return result.get("result", {}).get("value")

    async def goto(self, url: str) -> None:
        await self.command("Page.navigate", url=url)
        await self.wait_for("location.href !== 'about:blank' && document.readyState === 'complete'")

    async def wait_for(self, condition: str, timeout_s: float = STEP_TIMEOUT_S) -> None:
        """Until ``condition`` (a JS expression) is true in the (possibly new) page."""
        try:
            async with asyncio.timeout(timeout_s):
                while True:
                    with contextlib.suppress(BrowserError):  # a page being replaced
                        if await self.evaluate(f"Boolean({condition})"):
                            return
                    await asyncio.sleep(0.05)
        except TimeoutError:
            where = await self.evaluate("location.href")
            raise BrowserError(f"waited in vain for {condition} (at {where})") from None

    async def click(self, selector: str) -> None:
        found = await self.evaluate(
            f"(() => {{ const e = document.querySelector({json.dumps(selector)});"
            " if (!e) return false; e.click(); return true; })()"
        )
        if not found:
            raise BrowserError(f"no element {selector} on {await self.evaluate('location.href')}")

    async def text(self, selector: str = "body") -> str:
        return str(await self.evaluate(f"document.querySelector({json.dumps(selector)}).innerText"))

    async def url(self) -> str:
        return str(await self.evaluate("location.href"))


@asynccontextmanager
async def chromium() -> AsyncIterator[Page]:
    """A headless Chromium with one blank tab; closed (and its profile removed) after."""
    profile = Path(tempfile.mkdtemp(prefix="a2a-chromium-"))
    process = await asyncio.create_subprocess_exec(
        chromium_path(),
        *FLAGS,
        f"--user-data-dir={profile}",
        "about:blank",
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL,
    )
    try:
        port = await _devtools_port(profile, process)
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as http:
            async with http.get(f"http://127.0.0.1:{port}/json/list") as got:
                targets = await got.json()
            page = next(t for t in targets if t.get("type") == "page")
            async with http.ws_connect(page["webSocketDebuggerUrl"], max_msg_size=0) as ws:
                yield Page(ws)
    finally:
        if process.returncode is None:
            process.terminate()
            try:
                async with asyncio.timeout(10):
                    await process.wait()
            except TimeoutError:
                process.kill()
                await process.wait()
        shutil.rmtree(profile, ignore_errors=True)


async def _devtools_port(profile: Path, process: asyncio.subprocess.Process) -> int:
    """The port Chromium chose (it writes DevToolsActivePort in its profile)."""
    marker = profile / "DevToolsActivePort"
    async with asyncio.timeout(START_TIMEOUT_S):
        while True:
            if process.returncode is not None:
                raise BrowserError(f"Chromium exited with status {process.returncode}")
            with contextlib.suppress(OSError, ValueError, IndexError):
                return int(marker.read_text().splitlines()[0])
            await asyncio.sleep(0.05)


__all__ = ["BrowserError", "Page", "chromium", "chromium_path"]
