"""The Telegram host end to end: python-telegram-bot against the fake Bot API, turns on
the real assistant runtime against the scripted model."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from a2a_gateway.agent.runtime import Runtime
from a2a_gateway.agent.tools import ToolRegistry
from a2a_gateway.agent.tools.files import workspace_tools
from a2a_gateway.local.layout import WorkspaceLayout
from a2a_gateway.telegram import TelegramConfig, TelegramHost
from a2a_gateway.telegram.host import SECRET_HEADER
from tests.agent.fake_llm import Calls, FakeLLM, Say, Stall, user_texts
from tests.agent.llm_support import make_runtime
from tests.telegram.conftest import BOT_TOKEN
from tests.telegram.fake_bot_api import FakeBotApi

OWNER = 111
STRANGER = 999


@pytest.fixture
async def runtime(llm: FakeLLM) -> AsyncIterator[Runtime]:
    runtime = make_runtime(llm.base_url)
    await runtime.start()
    try:
        yield runtime
    finally:
        await runtime.aclose()


def config(api: FakeBotApi, root: Path, **overrides: Any) -> TelegramConfig:
    values: dict[str, Any] = {
        "token": BOT_TOKEN,
        "allowed_users": frozenset({OWNER}),
        "workspaces_root": root,
        "base_url": api.base_url,
        "poll_timeout_s": 1,
    }
    values.update(overrides)
    return TelegramConfig(**values)


def tools(chat_id: int, workspace: Path) -> ToolRegistry:
    return ToolRegistry(workspace_tools())


@contextlib.asynccontextmanager
async def host(
    api: FakeBotApi, root: Path, runtime: Runtime, **overrides: Any
) -> AsyncIterator[TelegramHost]:
    async with TelegramHost(config(api, root, **overrides), runtime, tools_for=tools) as running:
        yield running


async def test_an_allowed_user_gets_an_answer_and_a_stranger_nothing(
    bot_api: FakeBotApi,
    llm: FakeLLM,
    runtime: Runtime,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    llm.script(Say(chunks=["Hello", ", owner", "!"]))
    caplog.set_level(logging.INFO, "a2a_gateway.telegram")
    async with host(bot_api, tmp_path, runtime):
        await bot_api.push_text(STRANGER, "let me in")
        await bot_api.push_text(STRANGER, "please")
        await bot_api.push_text(OWNER, "hi there")
        await bot_api.wait_for(lambda api: api.chat_text(OWNER) == ["Hello, owner!"])
        await bot_api.wait_for(lambda api: api.sent("sendChatAction", OWNER))
    assert bot_api.sent("sendMessage", STRANGER) == []
    assert bot_api.sent("sendChatAction", STRANGER) == []
    # One turn only (the stranger's messages never reached the model), in the owner's
    # session, with the owner's text and the workspace tools.
    assert len(llm.requests) == 1
    assert user_texts(llm.requests[0])[-1].endswith("hi there")
    assert {t["function"]["name"] for t in llm.requests[0]["tools"]} >= {"read_file", "send_file"}
    assert (WorkspaceLayout(tmp_path / str(OWNER)).sessions / "telegram-111.jsonl").is_file()
    strangers = [r for r in caplog.records if str(STRANGER) in r.getMessage()]
    assert len(strangers) == 1  # one line per user, not per message
    assert bot_api.sent("getMe") and bot_api.sent("deleteWebhook") and bot_api.polls > 0


async def test_a_long_answer_is_split_at_4096_characters(
    bot_api: FakeBotApi, llm: FakeLLM, runtime: Runtime, tmp_path: Path
) -> None:
    words = [f"w{i}" for i in range(3000)]
    text = " ".join(words)
    llm.script(Say(chunks=[text[i : i + 500] for i in range(0, len(text), 500)]))
    async with host(bot_api, tmp_path, runtime):
        await bot_api.push_text(OWNER, "write a lot")
        await bot_api.wait_for(
            lambda api: " ".join(api.chat_text(OWNER)).split() == words, limit_s=15
        )
    shown = bot_api.chat_text(OWNER)
    assert len(shown) >= 3 and all(len(t) <= 4096 for t in shown)


async def test_a_document_is_saved_and_seen_by_the_turn_and_send_file_answers_with_one(
    bot_api: FakeBotApi, llm: FakeLLM, runtime: Runtime, tmp_path: Path
) -> None:
    llm.script(
        Calls([("send_file", {"path": "inbox/telegram/notes.txt"})]),
        Say("Here it is back."),
    )
    async with host(bot_api, tmp_path, runtime):
        await bot_api.push_document(OWNER, "notes.txt", b"remember the milk", caption="keep")
        await bot_api.wait_for(lambda api: api.chat_text(OWNER)[-1:] == ["Here it is back."])
    saved = tmp_path / str(OWNER) / "inbox" / "telegram" / "notes.txt"
    assert saved.read_bytes() == b"remember the milk"
    first = llm.requests[0]
    assert "inbox/telegram/notes.txt" in user_texts(first)[-1]
    assert "keep" in user_texts(first)[-1]
    documents = bot_api.sent("sendDocument", OWNER)
    assert len(documents) == 1 and documents[0].files["document"] == b"remember the milk"


async def test_a_file_over_the_cap_is_refused_without_a_turn(
    bot_api: FakeBotApi, llm: FakeLLM, runtime: Runtime, tmp_path: Path
) -> None:
    async with host(bot_api, tmp_path, runtime, max_file_bytes=10):
        await bot_api.push_document(OWNER, "big.bin", b"x" * 11)
        await bot_api.wait_for(lambda api: api.chat_text(OWNER))
    assert "larger than 10 bytes" in bot_api.chat_text(OWNER)[0]
    assert llm.requests == []
    assert not (tmp_path / str(OWNER) / "inbox" / "telegram" / "big.bin").exists()


async def test_stop_aborts_the_running_turn_and_the_chat_goes_on(
    bot_api: FakeBotApi, llm: FakeLLM, runtime: Runtime, tmp_path: Path
) -> None:
    stall = Stall(first="thinking")
    llm.script(stall, Say("fresh answer"))
    async with host(bot_api, tmp_path, runtime):
        await bot_api.push_text(OWNER, "take your time")
        await bot_api.wait_for(lambda api: api.chat_text(OWNER) == ["thinking"])
        await bot_api.push_text(OWNER, "/stop")
        await bot_api.wait_for(lambda api: "Stopped." in api.chat_text(OWNER))
        async with asyncio.timeout(10):
            await stall.closed.wait()  # the provider's stream was closed
        await bot_api.push_text(OWNER, "again")
        await bot_api.wait_for(lambda api: "fresh answer" in api.chat_text(OWNER))
        await bot_api.push_text(OWNER, "/stop")
        await bot_api.wait_for(lambda api: "Nothing is running." in api.chat_text(OWNER))


async def test_a_follow_up_waits_behind_the_running_turn_with_a_local_time_header(
    bot_api: FakeBotApi, llm: FakeLLM, runtime: Runtime, tmp_path: Path
) -> None:
    stall = Stall(first="working", every=0.05)
    llm.script(stall, Say("noted"))
    when = datetime(2026, 12, 1, 12, 30, tzinfo=UTC)
    cfg = config(bot_api, tmp_path, time_zone="Europe/Lisbon")
    async with TelegramHost(cfg, runtime, tools_for=tools, now=lambda: when) as running:
        await bot_api.push_text(OWNER, "first")
        await bot_api.wait_for(lambda api: api.chat_text(OWNER))
        assert running.follow_up(OWNER, '[A2A result from "x"] done')
        assert not running.follow_up(STRANGER, "not a chat of ours")
        await asyncio.sleep(0.3)
        assert len(llm.requests) == 1  # the follow-up did not start or steer the turn
        await bot_api.push_text(OWNER, "/stop")
        await bot_api.wait_for(lambda api: "noted" in api.chat_text(OWNER))
    follow_up = user_texts(llm.requests[1])[-1]
    assert "[Follow-up, local time 2026-12-01 12:30 (Europe/Lisbon)]" in follow_up
    assert '[A2A result from "x"] done' in follow_up


async def test_start_and_help_explain_the_bot(
    bot_api: FakeBotApi, llm: FakeLLM, runtime: Runtime, tmp_path: Path
) -> None:
    async with host(bot_api, tmp_path, runtime):
        await bot_api.push_text(OWNER, "/start")
        await bot_api.wait_for(lambda api: api.chat_text(OWNER))
    text = bot_api.chat_text(OWNER)[0]
    assert "agents add" in text and "callers add" in text and str(tmp_path / "111") in text
    assert llm.requests == []


def owner_update(update_id: int, text: str) -> dict[str, Any]:
    """An update as Telegram posts it to a webhook: the owner wrote ``text``."""
    return {
        "update_id": update_id,
        "message": {
            "message_id": 5 + update_id,
            "date": 0,
            "text": text,
            "chat": {"id": OWNER, "type": "private"},
            "from": {"id": OWNER, "is_bot": False, "first_name": "o"},
        },
    }


@contextlib.asynccontextmanager
async def webhook_server(running: TelegramHost) -> AsyncIterator[str]:
    """The host's webhook route on a local port; yields its URL."""
    app = web.Application()
    app.router.add_post("/telegram/webhook", running.webhook_route)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        yield f"http://127.0.0.1:{runner.addresses[0][1]}/telegram/webhook"
    finally:
        await runner.cleanup()


async def test_webhook_mode_checks_the_secret_token(
    bot_api: FakeBotApi, llm: FakeLLM, runtime: Runtime, tmp_path: Path
) -> None:
    llm.script(Say("via webhook"))
    cfg = config(bot_api, tmp_path, webhook_url="https://bot.example/telegram/webhook")
    async with (
        TelegramHost(cfg, runtime, tools_for=tools) as running,
        webhook_server(running) as url,
    ):
        assert bot_api.webhook is not None
        assert bot_api.webhook["url"] == "https://bot.example/telegram/webhook"
        secret = bot_api.webhook["secret_token"]
        update = owner_update(1, "hello")
        async with aiohttp.ClientSession() as session:
            for headers in ({}, {SECRET_HEADER: "wrong"}):
                async with session.post(url, json=update, headers=headers) as response:
                    assert response.status == 403
            for bad in (b"[1, 2]", b'"x"', b"{not json", b'{"update_id": 1, "message": 5}',
                        b'{"update_id": 1, "message": {"chat": 3}}'):  # fmt: skip
                headers = {SECRET_HEADER: secret, "Content-Type": "application/json"}
                async with session.post(url, data=bad, headers=headers) as response:
                    assert response.status == 400, bad
            await asyncio.sleep(0.2)
            assert llm.requests == []
            async with session.post(url, json=update, headers={SECRET_HEADER: secret}) as r:
                assert r.status == 200
            await bot_api.wait_for(lambda api: api.chat_text(OWNER) == ["via webhook"])
    assert bot_api.polls == 0  # no polling in webhook mode


async def test_tz_sets_the_chats_own_time_zone_for_follow_ups(
    bot_api: FakeBotApi, llm: FakeLLM, runtime: Runtime, tmp_path: Path
) -> None:
    llm.script(Say("ok"))
    when = datetime(2026, 12, 1, 12, 30, tzinfo=UTC)
    cfg = config(bot_api, tmp_path, time_zone="UTC")
    async with TelegramHost(cfg, runtime, tools_for=tools, now=lambda: when) as running:
        for command in ("/tz Mars/Olympus", "/tz Asia/Tokyo", "/tz"):
            await bot_api.push_text(OWNER, command)
        await bot_api.wait_for(lambda api: len(api.chat_text(OWNER)) == 3)
        assert running.follow_up(OWNER, "result")
        await bot_api.wait_for(lambda api: "ok" in api.chat_text(OWNER))
    unknown, chosen, shown = bot_api.chat_text(OWNER)[:3]
    assert "Unknown time zone 'Mars/Olympus'" in unknown
    assert chosen == "Time zone set to Asia/Tokyo." and shown.startswith("Time zone: Asia/Tokyo.")
    assert "local time 2026-12-01 21:30 (Asia/Tokyo)" in user_texts(llm.requests[0])[-1]
    saved = json.loads(WorkspaceLayout(tmp_path / str(OWNER)).telegram_settings.read_text())
    assert saved == {"time_zone": "Asia/Tokyo"}


async def test_failing_edits_do_not_end_the_turn_or_the_chat(
    bot_api: FakeBotApi, llm: FakeLLM, runtime: Runtime, tmp_path: Path
) -> None:
    bot_api.failing.add("editMessageText")
    llm.script(Say(chunks=["first", " part"]), Say("second answer"))
    async with host(bot_api, tmp_path, runtime) as running:
        await bot_api.push_text(OWNER, "one")
        await bot_api.push_text(OWNER, "two")
        await bot_api.wait_for(lambda api: "second answer" in api.chat_text(OWNER))
        await running.wait_idle(OWNER)
    # The first answer shows what its first send carried; the edits that failed did not
    # stop the turn (the model was asked both times) nor the next one.
    assert bot_api.chat_text(OWNER)[0] == "first"
    assert len(llm.requests) == 2


async def test_a_turn_over_the_bound_is_stopped_and_the_chat_goes_on(
    bot_api: FakeBotApi, llm: FakeLLM, runtime: Runtime, tmp_path: Path
) -> None:
    # A model that streams forever (never silent: the provider's own bound never fires)
    # held the chat, and every follow-up queued behind it, until the owner sent /stop.
    endless = Stall(first="working", every=0.05)
    llm.script(endless, Say("fresh answer"))
    async with host(bot_api, tmp_path, runtime, turn_timeout_s=0.5) as running:
        await bot_api.push_text(OWNER, "talk forever")
        stopped = "Sorry, that took longer than 0.5 s, so I stopped it."
        await bot_api.wait_for(lambda api: stopped in api.chat_text(OWNER))
        async with asyncio.timeout(10):
            await endless.closed.wait()  # the provider's stream was closed
        # A quick answer needs no race with half a second on a loaded machine: the bound
        # is read as each turn starts, so this one gets a generous one.
        running.config = dataclasses.replace(running.config, turn_timeout_s=60)
        await bot_api.push_text(OWNER, "again")
        await bot_api.wait_for(lambda api: "fresh answer" in api.chat_text(OWNER))
        await running.wait_idle(OWNER)


@pytest.mark.parametrize("mode", ["polling", "webhook"])
async def test_a_bot_api_outage_is_one_warning_and_the_bot_answers_after_it(
    bot_api: FakeBotApi,
    llm: FakeLLM,
    runtime: Runtime,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    mode: str,
) -> None:
    # python-telegram-bot's own handlers logged an 80-line traceback for every failed
    # poll: about 18 of them in a 10-second outage. (The outage here ends once the
    # library has retried a few times: the behaviour, not its length, is the point.)
    # In webhook mode "two" is a turn whose answer cannot be delivered.
    lost = [Say("lost")] if mode == "webhook" else []
    llm.script(Say("before"), *lost, Say("after"))
    caplog.set_level(logging.INFO)
    webhook = "https://bot.example/telegram/webhook" if mode == "webhook" else ""
    cfg = config(bot_api, tmp_path, webhook_url=webhook)
    async with (
        TelegramHost(cfg, runtime, tools_for=tools) as running,
        webhook_server(running) as url,
        aiohttp.ClientSession() as session,
    ):
        updates = iter(range(1, 100))

        async def owner_says(text: str) -> None:
            if mode == "polling":
                await bot_api.push_text(OWNER, text)
                return
            secret = {SECRET_HEADER: running.webhook_secret}
            async with session.post(url, json=owner_update(next(updates), text), headers=secret):
                pass

        await owner_says("one")
        await bot_api.wait_for(lambda api: "before" in api.chat_text(OWNER))
        await running.wait_idle(OWNER)
        await bot_api.stop()
        if mode == "webhook":  # nothing polls: the host's own answers fail
            await owner_says("/help")
            await owner_says("two")
        async with asyncio.timeout(60):
            while running.health.failures < 3:  # noqa: ASYNC110 - the library's retries
                await asyncio.sleep(0.05)
        assert running.health.down
        await bot_api.start()
        await owner_says("three")
        await bot_api.wait_for(lambda api: "after" in api.chat_text(OWNER), limit_s=60)
    assert running.health.outages == 1
    loud = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert [r.getMessage().split(" (")[0] for r in loud] == [
        f"cannot reach the Telegram Bot API at {bot_api.base_url}"
    ]
    assert not [r for r in caplog.records if r.exc_info or r.exc_text]
    assert any("answers again" in r.getMessage() for r in caplog.records)
