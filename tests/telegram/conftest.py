from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from tests.conftest import use_secret
from tests.telegram.fake_bot_api import FakeBotApi

BOT_TOKEN = "4242:test-bot-token-0123456789abcdef"


@pytest.fixture
async def bot_api() -> AsyncIterator[FakeBotApi]:
    use_secret(BOT_TOKEN)  # the suite's log scan fails if the token is ever logged
    api = FakeBotApi(BOT_TOKEN)
    await api.start()
    try:
        yield api
    finally:
        await api.stop()
