"""``callers publish`` / ``callers unpublish`` against a running gateway, no restart:
while the workspace is unpublished its public card answers 404 and every call 401 on
every binding; published again, both are served."""

from __future__ import annotations

import json
from pathlib import Path

import aiohttp
import pytest
from PIL import Image

from a2a_gateway.cli import main
from a2a_gateway.local.layout import WorkspaceLayout
from a2a_gateway.serve import Gateway

from .conftest import KEY_ALICE, Driver, WireError
from .test_scenarios import COMPLETED, send


def _cli(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    assert main(list(argv)) == 0
    out: str = capsys.readouterr().out
    return out


async def _card_status(driver: Driver) -> int:
    async with driver.http.get(f"{driver.base}/.well-known/agent-card.json") as response:
        await response.read()
        return response.status


async def test_unpublished_is_404_and_401_until_published_again(
    driver: Driver, gateway: Gateway, capsys: pytest.CaptureFixture[str]
) -> None:
    workspace = gateway.config.workspaces[0]
    card_file = WorkspaceLayout(workspace).card
    card_file.write_text(json.dumps({"name": "Trip planner"}))
    assert await _card_status(driver) == 200

    out = _cli(capsys, "callers", "unpublish", "--workspace", str(workspace))
    assert "published=false" in out
    assert json.loads(card_file.read_text()) == {"name": "Trip planner", "published": False}
    assert await _card_status(driver) == 404
    for rpc, request in (("SendMessage", send("hello")), ("ListTasks", {})):
        with pytest.raises(WireError) as caught:
            await driver.call(rpc, request)
        assert caught.value.reason == "UNAUTHENTICATED", caught.value
        assert "not published" in caught.value.message
    with pytest.raises(WireError) as caught:
        await driver.stream("SendStreamingMessage", send("hello"))
    assert caught.value.reason == "UNAUTHENTICATED"

    _cli(capsys, "callers", "publish", "--workspace", str(workspace))
    assert await _card_status(driver) == 200
    task = (await driver.call("SendMessage", send("hello")))["task"]
    assert task["status"]["state"] == COMPLETED
    listed = await driver.call("ListTasks", {})
    assert [t["id"] for t in listed["tasks"]] == [task["id"]]  # nothing ran while refused


async def test_unpublished_http_answers_carry_the_statuses(
    gateway: Gateway, capsys: pytest.CaptureFixture[str]
) -> None:
    workspace = gateway.config.workspaces[0]
    Image.new("RGB", (8, 8)).save(workspace / "icon.png", "PNG")
    base = f"http://127.0.0.1:{gateway.http_port}"
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as http:
        async with http.get(f"{base}/a2a/icon.png") as got:
            assert got.status == 200
        _cli(capsys, "callers", "unpublish", "--workspace", str(workspace))
        async with http.get(f"{base}/a2a/icon.png") as got:
            assert got.status == 404
        async with http.get(f"{base}/a2a/v1/tasks", headers={"X-API-Key": KEY_ALICE}) as got:
            assert got.status == 401
            assert got.headers["WWW-Authenticate"].startswith("Bearer")
        body = {"jsonrpc": "2.0", "id": 1, "method": "ListTasks", "params": {}}
        async with http.post(f"{base}/a2a", json=body, headers={"X-API-Key": KEY_ALICE}) as got:
            assert got.status == 401
        async with http.get(f"{base}/.well-known/agent-card.json") as got:
            assert got.status == 404


def test_publish_refuses_a_card_file_that_is_not_an_object(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    card_file = WorkspaceLayout(tmp_path).card
    card_file.parent.mkdir()
    card_file.write_text("[1]")
    assert main(["callers", "unpublish", "--workspace", str(tmp_path)]) == 1
    assert "not a JSON object" in capsys.readouterr().err
    assert card_file.read_text() == "[1]"
