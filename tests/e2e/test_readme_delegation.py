"""The README's "Two gateways" walk-through, run as written: gateway A (``serve
--faux``) in the background, B's ``agents add`` and ``agents list``, then ``chat
--message`` on B, whose model is the scripted OpenAI-compatible server of the assistant
tests (given through ``A2A_GATEWAY_LLM_BASE_URL``, as the README's default would be a
local Ollama). Only the port and the program path are changed; every ``# → ...`` line is
a claim: each fragment between ``...`` must appear in the output."""

from __future__ import annotations

import asyncio
import json
import os
import re
import sys
from pathlib import Path
from typing import Any

from ..agent.fake_llm import Calls, FakeLLM, Reply, Say
from ..interop.conftest import free_ports

ROOT = Path(__file__).resolve().parents[2]
SECTION = "### Two gateways: one assistant delegating to another"
LLM_KEY = "sk-readme-delegation-3f9a1c7e5b"


def blocks() -> list[str]:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text.split(SECTION, 1)[1].split("\n## ", 1)[0].split("\n### ", 1)[0]
    return re.findall(r"```sh\n(.*?)```", section, flags=re.S)


def script(body: dict[str, Any]) -> Reply:
    """agents, then send, then the send's result as the answer."""
    results = [m["content"] for m in body["messages"] if m["role"] == "tool"]
    if not results:
        return Calls([("a2a", {"action": "agents"})])
    if len(results) == 1:
        assert "assistant-a" in results[0]
        return Calls(
            [("a2a", {"action": "send", "agent": "assistant-a", "message": "What can you do?"})]
        )
    return Say(results[-1])


async def test_two_gateways_walkthrough(tmp_path: Path) -> None:
    found = blocks()
    assert len(found) == 3
    (port,) = free_ports(1)
    program = f"{sys.executable} -P -m a2a_gateway"
    ready = (
        "for i in $(seq 150); do "
        f'{sys.executable} -c "import urllib.request as u; '
        f"u.urlopen('http://127.0.0.1:{port}/.well-known/agent-card.json', timeout=1)\" "
        "2>/dev/null && break; sleep 0.2; done"
    )
    parts = ["trap 'kill $(jobs -p) 2>/dev/null; wait' EXIT", "set -e"]
    claims: list[str] = []
    for index, block in enumerate(found):
        block = block.replace("8099", str(port)).replace(".venv/bin/a2a-gateway", program)
        parts.append(block)
        if index == 0:
            parts.append(ready)
        claims += [line.split("# → ", 1)[1] for line in block.splitlines() if "# → " in line]
    llm = FakeLLM(script)
    await llm.start()
    try:
        env = {k: v for k, v in os.environ.items() if not k.startswith("A2A_GATEWAY_")}
        env.update({"A2A_GATEWAY_LLM_BASE_URL": llm.base_url, "A2A_GATEWAY_LLM_API_KEY": LLM_KEY})
        process = await asyncio.create_subprocess_exec(
            "bash",
            "-c",
            "\n".join(parts),
            cwd=tmp_path,
            env=env,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
        )
        out_b, _ = await asyncio.wait_for(process.communicate(), 120)
    finally:
        await llm.aclose()
    out = out_b.decode()
    assert process.returncode == 0, out[-3000:]
    for claim in claims:
        for fragment in claim.split("..."):
            assert fragment.strip() in out, (fragment, out[-3000:])
    assert "k_b_0123456789abcdef" not in out and LLM_KEY not in out
    # On A the message was a task of caller assistant-b.
    (task_file,) = (tmp_path / "a-ws" / ".a2a" / "tasks").glob("*.json")
    assert "assistant-b" in task_file.read_text()
    assert json.loads((tmp_path / "b-ws" / ".a2a" / "agents.json").read_text())[0]["name"] == (
        "assistant-a"
    )
