"""Run a document's delegation walk-through as written: its ``sh`` blocks in one bash,
gateway A (the first block, ``serve --faux ... &``) waited for, ``chat`` on B given the
scripted OpenAI-compatible model (``A2A_GATEWAY_LLM_BASE_URL``). Only the port (8099)
and the program path change; every ``# → ...`` line is a claim: each fragment between
``...`` must appear in the output."""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.support.ports import free_ports

from ..agent.fake_llm import FakeLLM, Reply
from .conftest import run_bash

ROOT = Path(__file__).resolve().parents[2]
DOC_PORT = "8099"


def sh_blocks(text: str) -> list[str]:
    return re.findall(r"```sh\n(.*?)```", text, flags=re.S)


def wait_for_card(port: int) -> str:
    """A bash line that waits (bounded: 30 s) until a gateway on ``port`` serves its card."""
    return (
        "for i in $(seq 150); do "
        f'{sys.executable} -c "import urllib.request as u; '
        f"u.urlopen('http://127.0.0.1:{port}/.well-known/agent-card.json', timeout=1)\" "
        "2>/dev/null && break; sleep 0.2; done"
    )


async def run_walkthrough(
    found: list[str], folder: Path, script: Callable[[dict[str, Any]], Reply], llm_key: str
) -> str:
    """Run ``found`` in ``folder``; the output (every claim and exit 0 asserted)."""
    (port,) = free_ports(1)
    program = f"{sys.executable} -P -m a2a_gateway"
    ready = wait_for_card(port)
    parts = ["trap 'kill $(jobs -p) 2>/dev/null; wait' EXIT", "set -e"]
    claims: list[str] = []
    for index, block in enumerate(found):
        block = block.replace(DOC_PORT, str(port)).replace(".venv/bin/a2a-gateway", program)
        parts.append(block)
        if index == 0:
            parts.append(ready)
        claims += [line.split("# → ", 1)[1] for line in block.splitlines() if "# → " in line]
    llm = FakeLLM(script)
    await llm.start()
    try:
        env = {k: v for k, v in os.environ.items() if not k.startswith("A2A_GATEWAY_")}
        env.update({"A2A_GATEWAY_LLM_BASE_URL": llm.base_url, "A2A_GATEWAY_LLM_API_KEY": llm_key})
        returncode, out = await run_bash("\n".join(parts), folder, env)
    finally:
        await llm.aclose()
    assert returncode == 0, out[-3000:]
    for claim in claims:
        for fragment in claim.split("..."):
            assert fragment.strip() in out, (fragment, out[-3000:])
    assert "k_b_0123456789abcdef" not in out and llm_key not in out
    return out
