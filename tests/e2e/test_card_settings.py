"""The public card's settings through ``serve`` (issue 10 items 11 and 15): each works as a
flag, an ``A2A_GATEWAY_*`` variable and a TOML key; an ``--agent`` describes itself
through ``Agent.profile``; an ``--exec`` deployment through the settings; mistakes
stop the start-up in one line."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from a2a_gateway.protocol.resume import RESUME_EXTENSION
from a2a_gateway.serve import Gateway
from a2a_gateway.server.card import RESUME_DESCRIPTION
from a2a_gateway.settings import resolve
from tests.support.processes import run_gateway

from .test_startup import _one_line_exit_2

SKILLS = [{"id": "plan", "name": "Plan", "description": "Plans weeks.", "tags": ["calendar"]}]
EXTENSIONS = [{"uri": "https://ext.example/v1", "description": "Traces.", "required": True}]


def _write(tmp_path: Path) -> Path:
    skills = tmp_path / "skills.json"
    skills.write_text(json.dumps(SKILLS))
    return skills


@asynccontextmanager
async def serving(settings: Any) -> AsyncIterator[Gateway]:
    gateway = Gateway(settings)
    await gateway.start()
    try:
        yield gateway
    finally:
        await gateway.stop()


async def public_card(gateway: Gateway, version: str | None = None) -> dict[str, Any]:
    url = f"http://127.0.0.1:{gateway.http_port}/.well-known/agent-card.json"
    headers = {"A2A-Version": version} if version else {}
    async with (
        aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as http,
        http.get(url, headers=headers) as response,
    ):
        assert response.status == 200
        card: dict[str, Any] = await response.json(content_type=None)
        return card


def _toml(value: Any) -> str:
    return json.dumps(value)  # a JSON string or boolean is a TOML one too


@pytest.mark.parametrize("source", ["flag", "env", "toml"])
async def test_card_settings_from_every_source(tmp_path: Path, source: str) -> None:
    values = {
        "card_name": "Trip planner",
        "card_description": "Plans trips.",
        "card_skills": str(_write(tmp_path)),
        "card_extensions": json.dumps(EXTENSIONS),
        "card_format": "1.0",
    }
    base = {"port": 0, "grpc_port": -1, "faux": True}
    flags: dict[str, Any] = dict(base)
    environ: dict[str, str] = {}
    config_file = None
    if source == "flag":
        flags |= values
    elif source == "env":
        environ = {f"A2A_GATEWAY_{k.upper()}": v for k, v in values.items()}
    else:
        config_file = tmp_path / "gateway.toml"
        lines = [f"{k} = {_toml(v)}" for k, v in values.items()]
        config_file.write_text("[serve]\n" + "\n".join(lines) + "\n")
    settings = resolve(flags, environ=environ, config_file=config_file)
    async with serving(settings) as gateway:
        card = await public_card(gateway)  # no version header, yet pure: --card-format 1.0
    assert (card["name"], card["description"]) == ("Trip planner", "Plans trips.")
    assert [s["id"] for s in card["skills"]] == ["plan"]
    # The operator's extensions, then ours: this gateway's streams resume.
    resumable = {"uri": RESUME_EXTENSION, "description": RESUME_DESCRIPTION}
    assert card["capabilities"]["extensions"] == [*EXTENSIONS, resumable]
    assert "protocolVersion" not in card and "url" not in card


PROFILED = """
from a2a_gateway.agent.base import Agent, AgentProfile, Completed
from lf.a2a.v1 import a2a_pb2 as pb


class Profiled(Agent):
    def profile(self):
        return AgentProfile(
            name="Weather bot",
            description="Tells the weather.",
            skills=(pb.AgentSkill(id="weather", name="Weather", description="Forecasts.",
                                  tags=["weather"]),),
        )

    async def run(self, turn):
        yield Completed("sunny")


class Failing(Agent):
    def profile(self):
        raise RuntimeError("secret-detail")

    async def run(self, turn):
        yield Completed("x")
"""


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        ({}, ("Weather bot", "Tells the weather.", ["weather"])),
        ({"card_name": "Renamed"}, ("Renamed", "Tells the weather.", ["weather"])),
        ({"card_description": "Set."}, ("Weather bot", "Set.", ["weather"])),
    ],
)
async def test_an_agent_describes_itself(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    extra: dict[str, str],
    expected: tuple[str, str, list[str]],
) -> None:
    (tmp_path / "profiled_agent_mod.py").write_text(PROFILED)
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    flags = {"port": 0, "grpc_port": -1, "agent": "profiled_agent_mod:Profiled", **extra}
    async with serving(resolve(flags, environ={})) as gateway:
        for version in (None, "1.0"):
            card = await public_card(gateway, version)
            got = (card["name"], card["description"], [s["id"] for s in card["skills"]])
            assert got == expected


async def test_an_exec_deployment_describes_itself_with_settings(tmp_path: Path) -> None:
    flags = {
        "port": 0,
        "grpc_port": -1,
        "exec": "cat",
        "card_name": "Echo",
        "card_description": "Says it back.",
        "card_skills": str(_write(tmp_path)),
    }
    async with serving(resolve(flags, environ={})) as gateway:
        card = await public_card(gateway)
    assert (card["name"], card["description"]) == ("Echo", "Says it back.")
    assert [s["id"] for s in card["skills"]] == ["plan"]


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (("--card-skills", "none.json"), "--card-skills: cannot read none.json"),
        (("--card-skills", "bad.json"), "--card-skills: bad.json is not valid JSON"),
        (("--card-skills", "empty.json"), "--card-skills: empty.json: skills must be"),
        (("--card-skills", "typo.json"), "--card-skills: typo.json: skills[0]"),
        (("--card-extensions", "{"), "--card-extensions must be a JSON array"),
        (("--card-extensions", '[{"required": true}]'), "--card-extensions [0].uri is required"),
        (("--card-extensions", '[{"uri": "u", "x": 1}]'), "--card-extensions [0]"),
        (("--card-format", "0.3"), "card_format must be one of: auto, 1.0, hybrid"),
        (("--agent", "profiled_agent_mod:Failing"), "the agent's profile() failed: RuntimeError"),
    ],
)
def test_card_setting_mistakes_stop_the_start_up(
    tmp_path: Path, args: tuple[str, ...], needle: str
) -> None:
    (tmp_path / "bad.json").write_text("[")
    (tmp_path / "empty.json").write_text("[]")
    (tmp_path / "typo.json").write_text(json.dumps([{**SKILLS[0], "nmae": "x"}]))
    (tmp_path / "profiled_agent_mod.py").write_text(PROFILED)
    result = run_gateway("serve", *args, "--port", "0", "--grpc-port", "-1", cwd=tmp_path)
    _one_line_exit_2(result, needle)
    assert "secret-detail" not in result.stderr
