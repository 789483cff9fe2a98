"""docs/delegation.md run as written (:mod:`.walkthrough`): gateway A (``serve --faux``),
B's ``agents add``, then one ``chat --message`` per example, whose scripted model does
what the prompt says: ``Call a2a with {json}``, then ``call it with action=wait`` for
the task the first call named, or ``answer it with data {json}``; it ends with the tool
results as its answer."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from a2a_gateway.local.layout import WorkspaceLayout

from ..agent.fake_llm import Calls, Reply, Say
from .walkthrough import ROOT, run_walkthrough, sh_blocks

LLM_KEY = "sk-docs-delegation-8d2e6a0f4c"
CALL = "Call a2a with "
WAIT = "then call it with action=wait"
ANSWER = "then answer it with data "


def script(body: dict[str, Any]) -> Reply:
    messages = body["messages"]
    start = max(i for i, m in enumerate(messages) if m["role"] == "user")
    prompt = messages[start]["content"] or ""
    results = [m["content"] for m in messages[start + 1 :] if m["role"] == "tool"]
    if CALL not in prompt:
        return Say("ok")
    decoder = json.JSONDecoder()
    arguments, end = decoder.raw_decode(prompt, prompt.index(CALL) + len(CALL))
    if not results:
        return Calls([("a2a", arguments)])
    rest = prompt[end:]
    if len(results) == 1 and (WAIT in rest or ANSWER in rest):
        then = {"agent": arguments["agent"], "taskId": results[0].split()[3]}
        if WAIT in rest:
            return Calls([("a2a", {"action": "wait", **then})])
        data, _ = decoder.raw_decode(rest, rest.index(ANSWER) + len(ANSWER))
        return Calls([("a2a", {"action": "send", **then, "data": data})])
    return Say("\n".join(results))


async def test_delegation_doc_examples(tmp_path: Path) -> None:
    found = sh_blocks((ROOT / "docs" / "delegation.md").read_text(encoding="utf-8"))
    assert len(found) == 5
    out = await run_walkthrough(found, tmp_path, script, LLM_KEY)
    # What the examples leave is under .scratch/ (git-ignored), never beside it.
    assert sorted(os.listdir(tmp_path)) == [".scratch"]
    assert 'Result (matches resultSchema):\n{"city":"Lisbon"}' in out
    # The background task was waited for: nothing is left for a watch to deliver.
    assert not WorkspaceLayout(tmp_path / ".scratch" / "b-ws").pending.exists()
