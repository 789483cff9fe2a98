"""``a2a-gateway agents add|list|remove``: the key from the environment (never a flag),
atomic edits, and a listing that fetches cards and shows at most 4 characters of a key."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path

import pytest

from a2a_gateway.cli import main
from a2a_gateway.local.layout import WorkspaceLayout

from ..client.delegation_support import REMOTE_KEY, base_url, faux_gateway


def agents_of(workspace: Path) -> list[dict[str, object]]:
    data = json.loads(WorkspaceLayout(workspace).agents.read_text())
    assert isinstance(data, list)
    return data


def test_add_and_remove(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("A2A_GATEWAY_AGENT_KEY", REMOTE_KEY)
    ws = str(tmp_path)
    assert (
        main(
            [
                "agents",
                "add",
                "travel-bot",
                "https://travel.example/",
                "--workspace",
                ws,
                "--description",
                "Plans trips",
            ]
        )
        == 0
    )
    monkeypatch.delenv("A2A_GATEWAY_AGENT_KEY")
    # No key in the environment and no terminal: no key (and no prompt).
    assert (
        main(
            [
                "agents",
                "add",
                "other",
                "https://o.example/a.json",
                "--workspace",
                ws,
                "--allow-private",
            ]
        )
        == 0
    )
    out, _ = capsys.readouterr()
    assert REMOTE_KEY not in out
    assert agents_of(tmp_path) == [
        {
            "name": "travel-bot",
            "url": "https://travel.example/",
            "key": REMOTE_KEY,
            "description": "Plans trips",
        },
        {"name": "other", "url": "https://o.example/a.json", "allow_private": True},
    ]
    assert main(["agents", "add", "other", "https://x.example/", "--workspace", ws]) == 1
    assert main(["agents", "add", "Bad", "https://x.example/", "--workspace", ws]) == 1
    assert main(["agents", "add", "ok", "ftp://x.example/", "--workspace", ws]) == 1
    _, err = capsys.readouterr()
    assert "already exists" in err and "[a-z0-9-]" in err and "http(s)" in err
    assert main(["agents", "remove", "travel-bot", "--workspace", ws]) == 0
    assert main(["agents", "remove", "travel-bot", "--workspace", ws]) == 1
    assert [a["name"] for a in agents_of(tmp_path)] == ["other"]
    assert not [p for p in WorkspaceLayout(tmp_path).state.iterdir() if p.name.endswith(".tmp")]


def test_no_key_flag_exists(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["agents", "add", "a", "https://a.example/", "--workspace", str(tmp_path)]
    assert main([*argv, "--key", REMOTE_KEY]) == 2  # a usage mistake, in one line
    _, err = capsys.readouterr()
    assert "unrecognized arguments: --key" in err
    assert REMOTE_KEY not in err  # the refused key is not echoed back
    assert not WorkspaceLayout(tmp_path).agents.exists()


def test_malformed_file_is_left_alone(tmp_path: Path) -> None:
    path = WorkspaceLayout(tmp_path).agents
    path.parent.mkdir()
    path.write_text("{broken")
    assert main(["agents", "add", "a", "https://a.example/", "--workspace", str(tmp_path)]) == 1
    assert path.read_text() == "{broken"


async def test_list_fetches_cards_in_a_subprocess(tmp_path: Path) -> None:
    async with faux_gateway(tmp_path / "a") as gateway:
        ws = tmp_path / "b"
        WorkspaceLayout(ws).state.mkdir(parents=True)
        WorkspaceLayout(ws).agents.write_text(
            json.dumps(
                [
                    {
                        "name": "assistant-a",
                        "url": base_url(gateway),
                        "key": REMOTE_KEY,
                        "allow_private": True,
                    },
                    {"name": "guarded", "url": base_url(gateway)},
                    {"name": "BAD"},
                ]
            )
        )
        env = {k: v for k, v in os.environ.items() if not k.startswith("A2A_GATEWAY_")}
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-P",
            "-m",
            "a2a_gateway",
            "agents",
            "list",
            "--workspace",
            str(ws),
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=env,
        )
        out_b, err_b = await asyncio.wait_for(process.communicate(), 60)
    out, err = out_b.decode(), err_b.decode()
    assert process.returncode == 0, err
    assert f"assistant-a  {base_url(gateway)}  key ...cdef" in out
    assert "reachable: yes; card name: a2a-gateway agent" in out
    assert "skills: " in out
    assert "guarded" in out and "reachable: no (" in out and "loopback" in out
    assert "skipped: entry 3" in err
    assert REMOTE_KEY not in out + err
