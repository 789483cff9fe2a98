"""The README's "Two gateways" walk-through, run as written (:mod:`.walkthrough`):
gateway A (``serve --faux``) in the background, B's ``agents add`` and ``agents list``,
then ``chat --message`` on B, whose model is the scripted OpenAI-compatible server of
the assistant tests (the README's default would be a local Ollama)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ..agent.fake_llm import Calls, Reply, Say
from .walkthrough import ROOT, run_walkthrough, sh_blocks

SECTION = "### Two gateways: one assistant delegating to another"
LLM_KEY = "sk-readme-delegation-3f9a1c7e5b"


def blocks() -> list[str]:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    return sh_blocks(text.split(SECTION, 1)[1].split("\n## ", 1)[0].split("\n### ", 1)[0])


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
    await run_walkthrough(found, tmp_path, script, LLM_KEY)
    # On A the message was a task of caller assistant-b.
    (task_file,) = (tmp_path / "a-ws" / ".a2a" / "tasks").glob("*.json")
    assert "assistant-b" in task_file.read_text()
    assert json.loads((tmp_path / "b-ws" / ".a2a" / "agents.json").read_text())[0]["name"] == (
        "assistant-a"
    )
