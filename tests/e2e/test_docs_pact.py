"""docs/pact.md's walk-through, run as written: its stand-in personal agent, ``serve
--faux`` in the background, and the curl calls. Only the port and the program paths are
changed; every ``# → ...`` line is a claim: each fragment between ``...`` must appear in
the output."""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path

from a2a_gateway.local.layout import WorkspaceLayout
from tests.support.ports import free_ports

from .conftest import run_bash

ROOT = Path(__file__).resolve().parents[2]
SECTION = "## Walk-through"
DELEGATED = "## Delegated walk-through"
DOC_PORT = "8095"
DOC_GATEWAY_PORT, DOC_API_PORT = "8096", "8097"


def blocks(section_title: str = SECTION) -> list[str]:
    text = (ROOT / "docs" / "pact.md").read_text(encoding="utf-8")
    section = text.split(section_title, 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```sh\n(.*?)```", section, flags=re.S)


def wait_for_port(port: int) -> str:
    return (
        "for i in $(seq 150); do "
        f'"$PYTHON" -c "import socket; socket.create_connection((\'127.0.0.1\', {port}), 1)" '
        "2>/dev/null && break; sleep 0.2; done"
    )


def background_logs(folder: Path) -> list[Path]:
    return sorted(folder.glob("background-*"))


async def test_the_delegated_walkthrough(tmp_path: Path) -> None:
    """The personal agent of the first walk-through, then the Delegated one as written
    (its company, its host with the demo model, curl as the agent and the browser)."""
    found = blocks(DELEGATED)
    assert len(found) == 5
    gateway_port, api_port = free_ports(2)
    parts = ["trap 'kill $(jobs -p) 2>/dev/null; wait' EXIT", "set -e"]
    claims: list[str] = []
    for index, block in enumerate([blocks()[0], *found]):
        block = (
            block.replace(DOC_GATEWAY_PORT, str(gateway_port))
            .replace(DOC_API_PORT, str(api_port))
            .replace(".venv/bin/python", '"$PYTHON"')
        )
        background = re.match(r"# In another terminal \(port (\d+)\)", block)
        if background:
            parts += [f"( {block.strip()} ) > background-{index}.log 2>&1 &"]
            parts.append(wait_for_port(int(background.group(1))))
        else:
            parts.append(block)
        claims += [line.split("# → ", 1)[1] for line in block.splitlines() if "# → " in line]
    env = {k: v for k, v in os.environ.items() if not k.startswith("A2A_GATEWAY_")}
    env["PYTHON"] = sys.executable
    returncode, out = await run_bash("\n".join(parts), tmp_path, env)
    logs = "".join(p.read_text(errors="replace") for p in background_logs(tmp_path))
    assert returncode == 0, (out[-3000:], logs[-3000:])
    for claim in claims:
        for fragment in claim.split("..."):
            assert fragment.strip() in out, (fragment, out[-3000:])
    assert "Traceback" not in logs


async def test_the_pact_walkthrough(tmp_path: Path) -> None:
    found = blocks()
    assert len(found) == 4
    (port,) = free_ports(1)
    ready = (
        "for i in $(seq 150); do "
        f'{sys.executable} -c "import urllib.request as u; '
        f"u.urlopen('http://127.0.0.1:{port}/a2a/pact/.well-known/agent-card.json', timeout=1)\" "
        "2>/dev/null && break; sleep 0.2; done"
    )
    parts = ["trap 'kill $(jobs -p) 2>/dev/null; wait' EXIT", "set -e"]
    claims: list[str] = []
    for block in found:
        block = (
            block.replace(DOC_PORT, str(port))
            .replace(".venv/bin/python", "$PYTHON")
            .replace(".venv/bin/a2a-gateway", "$PYTHON -P -m a2a_gateway")
        )
        if block.startswith("# In another terminal"):
            parts += [f"( {block.strip()} ) > gateway.log 2>&1 &", ready]
        else:
            parts.append(block)
        claims += [line.split("# → ", 1)[1] for line in block.splitlines() if "# → " in line]
    env = {k: v for k, v in os.environ.items() if not k.startswith("A2A_GATEWAY_")}
    env["PYTHON"] = sys.executable
    returncode, out = await run_bash("\n".join(parts), tmp_path, env)
    log = (tmp_path / "gateway.log").read_text(errors="replace")
    assert returncode == 0, (out[-3000:], log[-3000:])
    for claim in claims:
        for fragment in claim.split("..."):
            assert fragment.strip() in out, (fragment, out[-3000:])
    # The retry got the same reply: one task for alice's m-1, one for m-2, one for m-4.
    answers = [json.loads(line) for line in out.splitlines() if line.startswith('{"jsonrpc"')]
    assert answers[0] == answers[1]
    assert (
        len(list(WorkspaceLayout(tmp_path / ".scratch" / "pact-ws").tasks.glob("**/*.json"))) == 3
    )
    assert "Traceback" not in log
    # What the examples leave is under .scratch/ (git-ignored); gateway.log is this test's.
    assert sorted(os.listdir(tmp_path)) == [".scratch", "gateway.log"]
