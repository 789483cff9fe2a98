from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from tests.agent.llm_support import llm  # noqa: F401 (the scripted model, a fixture)
from tests.telegram.fake_bot_api import FakeBotApi, fake_bot_api

BOT_TOKEN = "4242:test-bot-token-0123456789abcdef"


@pytest.fixture
async def bot_api() -> AsyncIterator[FakeBotApi]:
    async with fake_bot_api(BOT_TOKEN) as api:
        yield api
