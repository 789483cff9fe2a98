"""Running documentation's ``sh`` blocks as written: one bash script (``set -e``; the
gateways a block starts with ``&`` are killed at the end), run with the scripted model's
URL and key in the environment, and its ``# → ...`` claims checked (every fragment
between ``...`` must be in the output)."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

from ..agent.fake_llm import FakeLLM

PRELUDE = ["trap 'kill $(jobs -p) 2>/dev/null; wait' EXIT", "set -e"]
SCRIPT_TIMEOUT_S = 120.0


def claims_of(block: str) -> list[str]:
    """The ``# → ...`` claims of a block."""
    return [line.split("# → ", 1)[1] for line in block.splitlines() if "# → " in line]


async def run_script(parts: list[str], cwd: Path, llm: FakeLLM, llm_key: str) -> str:
    """Run :data:`PRELUDE` and ``parts`` in bash in ``cwd``, the ``A2A_GATEWAY_*``
    environment replaced by the scripted model's URL and ``llm_key``; the output (stdout
    and stderr), asserting the script exited 0."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("A2A_GATEWAY_")}
    env.update({"A2A_GATEWAY_LLM_BASE_URL": llm.base_url, "A2A_GATEWAY_LLM_API_KEY": llm_key})
    process = await asyncio.create_subprocess_exec(
        "bash",
        "-c",
        "\n".join(PRELUDE + parts),
        cwd=cwd,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    out_b, _ = await asyncio.wait_for(process.communicate(), SCRIPT_TIMEOUT_S)
    out = out_b.decode()
    assert process.returncode == 0, out[-3000:]
    return out


def assert_claims(claims: list[str], out: str) -> None:
    for claim in claims:
        for fragment in claim.split("..."):
            assert fragment.strip() in out, (fragment, out[-3000:])
