"""The README's two-gateway walk-through, run as written: gateway A (``serve
--llm-demo``, the block meant for another terminal) in the background, B's ``agents
add`` and ``agents list``, then ``chat --llm-demo --message`` on B: the demo model on B
delegates to A's assistant with the ``a2a`` tool and prints its answer. Only the port
and the program path are changed; every ``# → ...`` line is a claim: each fragment
between ``...`` must appear in the output. (The README runner runs the same blocks
verbatim; this test also checks what A stored.)"""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path

from a2a_gateway.local.layout import WorkspaceLayout
from tests.support.ports import free_ports

from .conftest import run_bash
from .walkthrough import wait_for_card

ROOT = Path(__file__).resolve().parents[2]
SECTION = "### The assistant, and delegation between two gateways"
BACKGROUND = "# In another terminal (port 8099)"


def blocks() -> list[str]:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text.split(SECTION, 1)[1].split("\n## ", 1)[0].split("\n### ", 1)[0]
    return re.findall(r"```sh\n(.*?)```", section, flags=re.S)


async def test_two_gateways_walkthrough_on_the_demo_model(tmp_path: Path) -> None:
    found = blocks()
    assert len(found) == 4 and found[1].startswith(BACKGROUND)
    (port,) = free_ports(1)
    program = f"{sys.executable} -P -m a2a_gateway"
    ready = wait_for_card(port)
    parts = ["trap 'kill $(jobs -p) 2>/dev/null; wait' EXIT", "set -e"]
    claims: list[str] = []
    for block in found:
        block = block.replace("8099", str(port)).replace(".venv/bin/a2a-gateway", program)
        if block.startswith("# In another terminal"):
            parts += [block.rstrip() + " > a.log 2>&1 &", ready]
        else:
            parts.append(block)
        claims += [line.split("# → ", 1)[1] for line in block.splitlines() if "# → " in line]
    env = {k: v for k, v in os.environ.items() if not k.startswith("A2A_GATEWAY_")}
    returncode, out = await run_bash("\n".join(parts), tmp_path, env)
    assert returncode == 0, out[-3000:]
    for claim in claims:
        for fragment in claim.split("..."):
            assert fragment.strip() in out, (fragment, out[-3000:])
    assert "k_b_0123456789abcdef" not in out
    # On A the message was a task of caller assistant-b, answered by A's demo model.
    (task_file,) = WorkspaceLayout(tmp_path / ".scratch" / "a-ws").tasks.rglob("*.json")
    stored = task_file.read_text()
    assert "assistant-b" in stored and "what it can do" in stored
    assert "Traceback" not in (tmp_path / "a.log").read_text()
    # What the examples leave is under .scratch/ (git-ignored); a.log is this test's.
    assert sorted(os.listdir(tmp_path)) == [".scratch", "a.log"]
    agents = json.loads(WorkspaceLayout(tmp_path / ".scratch" / "b-ws").agents.read_text())
    assert agents[0]["name"] == "assistant-a"
