"""The cards' ``iconUrl``: a workspace's icon.png (or ``--card-icon FILE``) served as a
square 256 px PNG at ``<JSON-RPC mount>/icon.png``, named on the public and the extended
card; a changed or removed file shows without a restart."""

from __future__ import annotations

import io
import json
import os
from pathlib import Path
from typing import Any

import aiohttp
import grpc
import pytest
from PIL import Image

from a2a_gateway.serve import Gateway
from a2a_gateway.settings import resolve
from a2a_gateway.startup import StartupError

from .conftest import KEY_ALICE, Driver, running_gateway

RED = (255, 0, 0, 255)
BLUE = (0, 0, 255, 255)
CLEAR = (0, 0, 0, 0)


def _image(path: Path, size: tuple[int, int], colour: tuple[int, int, int], fmt: str) -> None:
    Image.new("RGB", size, colour).save(path, fmt)


async def _get(http: aiohttp.ClientSession, url: str, **headers: str) -> tuple[int, Any, bytes]:
    async with http.get(url, headers=headers) as response:
        return response.status, response.headers, await response.read()


async def _card(http: aiohttp.ClientSession, base: str) -> dict[str, Any]:
    url = f"{base}/.well-known/agent-card.json"
    status, _, body = await _get(http, url, **{"A2A-Version": "1.0"})
    assert status == 200
    card: dict[str, Any] = json.loads(body)
    return card


def _decoded(png: bytes) -> Image.Image:
    image = Image.open(io.BytesIO(png))
    assert image.format == "PNG"
    return image


async def test_the_workspace_icon_is_squared_named_and_followed(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    _image(workspace / "icon.png", (300, 120), (255, 0, 0), "PNG")  # wide: padded
    async with (
        running_gateway(tmp_path) as gateway,
        aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as http,
        grpc.aio.insecure_channel(f"127.0.0.1:{gateway.grpc_port}") as channel,
    ):
        base = f"http://127.0.0.1:{gateway.http_port}"
        card = await _card(http, base)
        assert card["iconUrl"] == f"{base}/a2a/icon.png"
        extended = await Driver("jsonrpc", http, base, channel).call("GetExtendedAgentCard", {})
        assert extended["iconUrl"] == card["iconUrl"]

        status, headers, png = await _get(http, card["iconUrl"])
        assert status == 200 and headers["Content-Type"] == "image/png"
        image = _decoded(png)
        assert image.size == (256, 256)
        rgba = image.convert("RGBA")
        assert rgba.getpixel((128, 128)) == RED
        assert rgba.getpixel((128, 2)) == CLEAR  # 300x120 fits as 256x102, centred
        status, _, _ = await _get(http, card["iconUrl"], **{"If-None-Match": headers["ETag"]})
        assert status == 304

        # A new file (another size and format under the same name) shows at once.
        _image(workspace / "icon.png", (40, 40), (0, 0, 255), "JPEG")
        os.utime(workspace / "icon.png", ns=(1, 1))  # another stat, whatever the clock
        card = await _card(http, base)
        status, _, png = await _get(http, card["iconUrl"])
        image = _decoded(png).convert("RGBA")
        assert image.size == (256, 256)
        red, _green, blue, alpha = image.getpixel((128, 128))
        assert blue > 200 and red < 50 and alpha == 255  # upscaled JPEG: near blue

        (workspace / "icon.png").unlink()
        assert "iconUrl" not in await _card(http, base)
        status, _, _ = await _get(http, f"{base}/a2a/icon.png")
        assert status == 404


async def test_card_icon_setting_and_a_file_that_is_no_image(tmp_path: Path) -> None:
    icon = tmp_path / "logo.jpg"
    _image(icon, (256, 256), (0, 0, 255), "JPEG")
    async with (
        running_gateway(tmp_path, card_icon=str(icon), jsonrpc_path="/") as gateway,
        aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as http,
    ):
        base = f"http://127.0.0.1:{gateway.http_port}"
        card = await _card(http, base)
        assert card["iconUrl"] == f"{base}/icon.png"  # JSON-RPC at the root
        status, _, png = await _get(http, card["iconUrl"], **{"X-API-Key": KEY_ALICE})
        assert status == 200 and _decoded(png).size == (256, 256)

        icon.write_bytes(b"not an image at all")
        os.utime(icon, ns=(2, 2))
        assert "iconUrl" not in await _card(http, base)
        status, _, _ = await _get(http, f"{base}/icon.png")
        assert status == 404


async def test_a_card_icon_that_cannot_be_used_stops_the_start(tmp_path: Path) -> None:
    missing = tmp_path / "no-such-logo.png"
    settings = {"port": 0, "grpc_port": -1, "faux": True, "card_icon": str(missing)}
    gateway = Gateway(resolve(settings, environ={}))
    try:
        with pytest.raises(StartupError, match=r"--card-icon .*no-such-logo\.png: not found"):
            await gateway.start()
    finally:
        await gateway.stop()
