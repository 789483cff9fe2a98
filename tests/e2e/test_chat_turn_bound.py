"""``chat``: every turn is bounded by ``--turn-timeout``. A model that streams forever
(a chunk every 50 ms: never silent, so the provider's own silence bound never fires) is
stopped at the bound, the turn reported failed, and whoever waited on the prompt (the
owner's line, ``--message``, a watch's delivery) gets its answer; the next prompt runs."""

from __future__ import annotations

import asyncio
import io
from pathlib import Path

import pytest

from a2a_gateway.agent.tools import ToolRegistry
from a2a_gateway.chat import SCOPE, ChatHost

from ..agent.fake_llm import FakeLLM, Say, Stall
from ..agent.llm_support import llm, make_runtime
from .test_delegation_e2e import CHAT_BOUND_S, chat_message

__all__ = ["llm"]  # the scripted model, a fixture

BOUND_S = 0.5
FAILED = f"[failed: the turn took longer than {BOUND_S:g} s]"


async def test_a_turn_over_the_bound_is_stopped_and_the_next_prompt_runs(
    llm: FakeLLM, workspace: Path
) -> None:
    runtime = make_runtime(llm.base_url)
    out = io.StringIO()
    host = ChatHost(runtime, workspace, ToolRegistry(), out, turn_timeout_s=BOUND_S)
    endless, endless_again = Stall(every=0.05), Stall(every=0.05)
    llm.script(endless, Say("the second answer"), endless_again)
    await runtime.start()
    worker = asyncio.get_running_loop().create_task(host.serve())
    try:
        async with asyncio.timeout(CHAT_BOUND_S):
            assert await host.ask("talk forever") is False
            await endless.closed.wait()  # the model's stream was closed, not left running
            assert out.getvalue().endswith(f"\n{FAILED}\n")
            # A quick answer needs no race with half a second on a loaded machine: the
            # bound is read as each prompt starts, so this one gets a generous one.
            host.turn_timeout_s = CHAT_BOUND_S
            assert await host.ask("and now?") is True
            host.turn_timeout_s = BOUND_S
            assert out.getvalue().endswith("the second answer\n")
            # A watch's delivery whose turn runs over fails, so its record is kept.
            with pytest.raises(RuntimeError, match="follow-up turn failed"):
                await host.deliver(SCOPE, '[A2A result from "x", task t (completed)]')
            await endless_again.closed.wait()
            assert out.getvalue().endswith(f"\n{FAILED}\n")
    finally:
        worker.cancel()
        with pytest.raises(asyncio.CancelledError):
            await worker
        await runtime.aclose()


async def test_chat_message_over_the_bound_exits_1(llm: FakeLLM, tmp_path: Path) -> None:
    endless = Stall(every=0.05)
    llm.script(endless)
    code, out, err = await chat_message(
        llm, tmp_path, "talk forever", "--turn-timeout", str(BOUND_S)
    )
    assert code == 1, err[-3000:]
    assert out.endswith(f"\n{FAILED}\n")
    assert f"chat turn stopped after {BOUND_S:g} s" in err
    await asyncio.wait_for(endless.closed.wait(), CHAT_BOUND_S)
