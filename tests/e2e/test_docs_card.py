"""docs/card.md run as written: every ``sh`` block in order, in one bash script (the
gateways it starts with ``&`` run in the background until the end), with the scripted
OpenAI-compatible model of the assistant tests standing in for the local Ollama
(through ``A2A_GATEWAY_LLM_BASE_URL``). Only the ports and the program paths change;
every ``# → ...`` line is a claim: each fragment between ``...`` must be in the output."""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

from tests.support.ports import free_ports

from ..agent.fake_llm import FakeLLM, Say
from .doc_scripts import assert_claims, claims_of, run_script

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "card.md"
LLM_KEY = "sk-docs-card-8e2b4f1a6c"
#: The doc's ports, waited for after the block that names them with ``--port``.
PORTS = ("8097", "8098")


def _ready(port: int) -> str:
    """Bash that waits (bounded) until the gateway on ``port`` serves its card."""
    return (
        "for i in $(seq 300); do curl -sf -o /dev/null -m 1 "
        f"http://127.0.0.1:{port}/.well-known/agent-card.json && break; sleep 0.1; done"
    )


async def test_docs_card_runs_as_written(tmp_path: Path) -> None:
    blocks = re.findall(r"```sh\n(.*?)```", DOC.read_text(encoding="utf-8"), flags=re.S)
    assert len(blocks) == 5
    ports = dict(zip(PORTS, (str(p) for p in free_ports(len(PORTS))), strict=True))
    parts = [f"A2A_GATEWAY_DOCS_PY={sys.executable}"]
    claims: list[str] = []
    for block in blocks:
        for doc_port, port in ports.items():
            block = block.replace(doc_port, port)
        block = block.replace(".venv/bin/a2a-gateway", "$A2A_GATEWAY_DOCS_PY -P -m a2a_gateway")
        block = block.replace(".venv/bin/python", "$A2A_GATEWAY_DOCS_PY")
        parts.append(block)
        parts += [_ready(int(port)) for port in re.findall(r"--port (\d+)", block)]
        claims += claims_of(block)
    llm = FakeLLM(lambda body: Say("noted"))
    await llm.start()
    try:
        out = await run_script(parts, tmp_path, llm, LLM_KEY)
    finally:
        await llm.aclose()
    # What the examples leave is under .scratch/ (git-ignored), never beside it.
    assert sorted(os.listdir(tmp_path)) == [".scratch"]
    assert len(claims) == 9
    assert_claims(claims, out)
    assert LLM_KEY not in out
    assert len(llm.requests) == 1  # the payload's turn reached the model
