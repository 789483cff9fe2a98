"""First host tests with a scripted stand-in for the runtime (replaced by the real
runtime in test_host.py once it lands)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

from a2a_gateway.agent.base import Signal
from a2a_gateway.telegram import (
    OwnerPrompt,
    TelegramConfig,
    TelegramHost,
    TextDelta,
    TurnEnd,
    TurnEvent,
)
from tests.telegram.conftest import BOT_TOKEN
from tests.telegram.fake_bot_api import FakeBotApi

OWNER = 111


class Echo:
    def __init__(self) -> None:
        self.prompts: list[OwnerPrompt] = []

    async def run(self, prompt: OwnerPrompt, cancelled: Signal) -> AsyncIterator[TurnEvent]:
        self.prompts.append(prompt)
        if prompt.text.startswith("long"):
            text = "word " * 2000
        elif prompt.text.startswith("hold"):
            await asyncio.sleep(30)
            text = "late"
        else:
            text = f"echo: {prompt.text}"
        yield TextDelta(text[: len(text) // 2])
        yield TextDelta(text[len(text) // 2 :])
        yield TurnEnd(text)

    async def aclose(self) -> None:
        pass


async def test_owner_gets_answer_stranger_gets_nothing(bot_api: FakeBotApi, tmp_path: Path) -> None:
    turns = Echo()
    config = TelegramConfig(
        token=BOT_TOKEN,
        allowed_users=frozenset({OWNER}),
        workspaces_root=tmp_path,
        base_url=bot_api.base_url,
        poll_timeout_s=1,
    )
    async with TelegramHost(config, turns):
        await bot_api.push_text(999, "hello from a stranger")
        await bot_api.push_text(OWNER, "hi there")
        await bot_api.wait_for(lambda api: api.chat_text(OWNER) == ["echo: hi there"])
        await bot_api.push_text(OWNER, "long please")
        await bot_api.wait_for(lambda api: len(api.chat_text(OWNER)) >= 4)
    assert bot_api.sent("sendMessage", 999) == []
    assert [p.text for p in turns.prompts] == ["hi there", "long please"]
    shown = bot_api.chat_text(OWNER)
    assert all(len(t) <= 4096 for t in shown)
    assert " ".join(shown[1:]).split() == ["word"] * 2000
    assert (tmp_path / str(OWNER)).is_dir()
