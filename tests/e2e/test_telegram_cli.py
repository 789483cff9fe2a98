"""``a2a-gateway telegram`` as a real process: python-telegram-bot against the fake Bot
API, the assistant against the scripted model, and (``--a2a``) an inbound A2A caller
whose ``notify_owner`` lands in the owner's chat."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from a2a_gateway.client.pending import PendingRecord, write_pending
from a2a_gateway.local.layout import WorkspaceLayout
from a2a_gateway.settings import load
from a2a_gateway.telegram_cmd import TelegramApp, check
from a2a_gateway.telegram_settings import TelegramSettings
from tests.agent.fake_llm import (
    Calls,
    FakeLLM,
    Reply,
    Say,
    Stall,
    Status,
    tool_results,
    user_texts,
)
from tests.support.ports import free_ports
from tests.support.postgres import fresh_database
from tests.support.processes import GATEWAY
from tests.support.secrets import use_secret
from tests.support.workspace import write_callers
from tests.telegram.conftest import BOT_TOKEN
from tests.telegram.fake_bot_api import FakeBotApi

from .conftest import files_holding, pending_records

OWNER = 111
CALLER_KEY = "k-travel-bot-8d1f6a2c4e"
HASHED_CALLER = "sha256:" + "ab" * 32


def telegram_command(root: Path, api: FakeBotApi, llm: FakeLLM, *extra: str) -> list[str]:
    return [
        *GATEWAY,
        "telegram",
        "--workspaces-root",
        str(root),
        "--allowed-users",
        str(OWNER),
        "--telegram-base-url",
        api.base_url,
        "--llm-model",
        "fake-model",
        "--llm-base-url",
        llm.base_url,
        *extra,
    ]


@contextlib.asynccontextmanager
async def running(command: list[str], log: Path) -> AsyncIterator[asyncio.subprocess.Process]:
    env = {**os.environ, "TELEGRAM_BOT_TOKEN": BOT_TOKEN}
    with log.open("wb") as out:
        process = await asyncio.create_subprocess_exec(
            *command, env=env, stdout=out, stderr=subprocess.STDOUT
        )
        try:
            yield process
        finally:
            if process.returncode is None:
                process.send_signal(signal.SIGTERM)
                try:
                    async with asyncio.timeout(20):
                        await process.wait()
                except TimeoutError:
                    process.kill()
                    await process.wait()


async def a2a_send(port: int, text: str) -> dict[str, Any]:
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "SendMessage",
        "params": {
            "message": {"role": "ROLE_USER", "messageId": f"m-{text}", "parts": [{"text": text}]}
        },
    }
    headers = {"X-API-Key": CALLER_KEY, "A2A-Version": "1.0"}
    async with (
        aiohttp.ClientSession() as session,
        session.post(f"http://127.0.0.1:{port}/a2a", json=body, headers=headers) as response,
    ):
        result: dict[str, Any] = (await response.json())["result"]
        return result


async def wait_http(port: int) -> None:
    url = f"http://127.0.0.1:{port}/.well-known/agent-card.json"
    async with asyncio.timeout(30), aiohttp.ClientSession() as session:
        while True:
            with contextlib.suppress(aiohttp.ClientError):
                async with session.get(url) as response:
                    if response.status == 200:
                        return
            await asyncio.sleep(0.1)


async def test_the_bot_answers_its_owner_and_relays_an_inbound_callers_notice(
    bot_api: FakeBotApi, llm: FakeLLM, tmp_path: Path
) -> None:
    root = tmp_path / "chats"
    a2a_folder = WorkspaceLayout(root / str(OWNER)).state
    a2a_folder.mkdir(parents=True)
    callers = [
        {"name": "travel-bot", "key": CALLER_KEY, "note": "Alice's trip planner"},
        {"name": "hashed-bot", "key": HASHED_CALLER},
    ]
    (a2a_folder / "callers.json").write_text(json.dumps(callers))
    (a2a_folder / "telegram.json").write_text(json.dumps({"time_zone": "Asia/Tokyo"}))
    (a2a_folder / "agents.json").write_text(
        json.dumps(
            [{"name": "helper", "url": "https://helper.example/", "key": "k-helper-3c9e7b1a"}]
        )
    )
    port, _ = free_ports(2)
    command = telegram_command(
        root, bot_api, llm, "--a2a", "--port", str(port), "--grpc-port", "-1"
    )
    llm.script(
        Say(chunks=["Hello", " owner"]),
        Calls([("notify_owner", {"text": "your trip to Lisbon is booked"})]),
        Say("I told the owner."),
    )
    async with running(command, tmp_path / "telegram.log") as process:
        await wait_http(port)
        await bot_api.push_text(OWNER, "hi")
        await bot_api.wait_for(lambda api: api.chat_text(OWNER) == ["Hello owner"], limit_s=30)
        result = await a2a_send(port, "book Lisbon and tell the owner")
        assert result["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
        await bot_api.wait_for(
            lambda api: "travel-bot: your trip to Lisbon is booked" in api.chat_text(OWNER)
        )
        await bot_api.push_text(OWNER, "/a2a")
        await bot_api.wait_for(lambda api: "Callers" in api.chat_text(OWNER)[-1])
        assert process.returncode is None
    assert process.returncode == 0  # SIGTERM is a clean stop
    report = bot_api.chat_text(OWNER)[-1]
    assert "travel-bot (key ...6a2c4e" not in report  # never more than 4 characters
    assert "travel-bot (key ...2c4e, Alice's trip planner)" in report
    assert "hashed-bot (key sha256 hash)" in report
    assert "helper: https://helper.example/ (key ...7b1a)" in report
    assert "TASK_STATE" not in report and ": completed" in report
    for secret in (CALLER_KEY, "k-helper-3c9e7b1a", BOT_TOKEN):
        assert all(secret not in text for text in bot_api.chat_text(OWNER))
    # The owner's turn and the caller's ran in different sessions of the chat's folder:
    # the caller's under the telegram-<chatId> prefix, framed as an external agent.
    owner_turn, inbound_turn = llm.requests[0], llm.requests[1]
    assert user_texts(owner_turn)[-1].endswith("hi")
    assert "travel-bot" in user_texts(inbound_turn)[-1]
    assert "[Your owner's local time: " in user_texts(inbound_turn)[-1]
    assert "(Asia/Tokyo)]" in user_texts(inbound_turn)[-1]  # the chat's own zone (/tz)
    assert "notify_owner" in {t["function"]["name"] for t in inbound_turn["tools"]}
    assert "notify_owner" not in {t["function"]["name"] for t in owner_turn["tools"]}
    assert tool_results(llm.requests[2])
    sessions = sorted(p.name for p in (a2a_folder / "sessions").iterdir())
    assert sessions[0].startswith(f"telegram-{OWNER}-a2a-travel-bot_")
    assert sessions[1] == f"telegram-{OWNER}.jsonl"
    log = (tmp_path / "telegram.log").read_text()
    assert BOT_TOKEN not in log and CALLER_KEY not in log
    assert "Traceback" not in log


async def test_without_a2a_no_port_is_opened(
    bot_api: FakeBotApi, llm: FakeLLM, tmp_path: Path
) -> None:
    port, _ = free_ports(2)
    llm.script(Say("only chat"))
    command = telegram_command(tmp_path / "chats", bot_api, llm, "--port", str(port))
    async with running(command, tmp_path / "telegram.log"):
        await bot_api.push_text(OWNER, "hi")
        await bot_api.wait_for(lambda api: api.chat_text(OWNER) == ["only chat"], limit_s=30)
        with pytest.raises(OSError):
            _, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.close()


@pytest.mark.parametrize(
    ("env", "args", "needle"),
    [
        ({}, ("--allowed-users", "1"), "TELEGRAM_BOT_TOKEN"),
        ({"TELEGRAM_BOT_TOKEN": BOT_TOKEN}, (), "--allowed-users"),
        ({"TELEGRAM_BOT_TOKEN": BOT_TOKEN}, ("--allowed-users", "1,x2"), "not a Telegram user id"),
        (
            {"TELEGRAM_BOT_TOKEN": BOT_TOKEN},
            ("--allowed-users", "1", "--telegram-webhook-url", "http://bot.example/hook"),
            "https",
        ),
        # It was taken, then every follow-up header silently said UTC.
        (
            {"TELEGRAM_BOT_TOKEN": BOT_TOKEN},
            ("--allowed-users", "1", "--time-zone", "Europe/Lisbn"),
            "--time-zone: unknown time zone 'Europe/Lisbn'",
        ),
    ],
)
def test_start_up_mistakes_are_one_line(
    tmp_path: Path, env: dict[str, str], args: tuple[str, ...], needle: str
) -> None:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("TELEGRAM_")}
    command = [
        *GATEWAY, "telegram",
        "--workspaces-root", str(tmp_path), "--llm-model", "m", *args,
    ]  # fmt: skip
    result = subprocess.run(
        command, env={**clean, **env}, capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0], result.stderr
    assert BOT_TOKEN not in result.stderr


def test_telegram_help_says_the_model_is_required(capsys: pytest.CaptureFixture[str]) -> None:
    # serve's text said "required with --llm", a flag the bot does not have.
    from a2a_gateway.cli import main

    with pytest.raises(SystemExit) as ended:
        main(["telegram", "--help"])
    assert ended.value.code == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "--llm-model LLM_MODEL model name (required, unless --llm-demo)" in text
    assert "--llm " not in text and "with --llm)" not in text


@pytest.mark.parametrize("reachable", [True, False])
async def test_a_bot_api_that_refuses_the_token_or_cannot_be_reached_is_one_line(
    bot_api: FakeBotApi, llm: FakeLLM, tmp_path: Path, reachable: bool
) -> None:
    # python-telegram-bot's InvalidToken quotes the token whole: a traceback of it put
    # the token on stderr.
    # (The bot id longer than any port: "4243:" once matched 127.0.0.1:44243: in the text.)
    wrong = "7654321:another-bot-token-9876543210fedcba"
    base = bot_api.base_url if reachable else f"http://127.0.0.1:{free_ports(1)[0]}"
    command = telegram_command(tmp_path, bot_api, llm)
    command[command.index(bot_api.base_url)] = base
    clean = {k: v for k, v in os.environ.items() if not k.startswith("TELEGRAM_")}
    process = await asyncio.create_subprocess_exec(
        *command,
        env={**clean, "TELEGRAM_BOT_TOKEN": wrong},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(process.communicate(), 60)
    text = out.decode() + err.decode()
    assert process.returncode == 2, text
    assert wrong not in text and "7654321:" not in text and "Traceback" not in text
    last = err.decode().strip().splitlines()[-1]
    expected = "rejected the token" if reachable else "cannot reach the Telegram Bot API"
    assert last.startswith("a2a-gateway: ") and expected in last, text


# --- delegation: the owner's assistant hands work to another gateway ------------------

REMOTE_KEY = "k-remote-4b8e2f7a1c9d"


def owner_model(body: dict[str, Any]) -> Reply:
    """The owner's model: delegates on request, then reports what comes back."""
    last = body["messages"][-1]
    if last["role"] == "tool":
        return Say("Handed over.")
    text = last["content"] if isinstance(last["content"], str) else json.dumps(last["content"])
    if "[A2A result from" in text:
        answer = text.rsplit("\n", 1)[-1]
        return Say(f"The remote agent finished: {answer}")
    if "delegate" in text:
        return Calls([("a2a", {"action": "send", "agent": "remote", "message": "hold:2"})])
    return Say("?")


@contextlib.asynccontextmanager
async def remote_gateway(tmp_path: Path) -> AsyncIterator[int]:
    """Gateway A: the faux agent behind a caller key."""
    workspace = tmp_path / "remote"
    write_callers(workspace, [{"name": "assistant-b", "key": REMOTE_KEY}])
    port, grpc_port = free_ports(2)
    command = [
        *GATEWAY, "serve", "--faux",
        "--workspace", str(workspace), "--port", str(port), "--grpc-port", str(grpc_port),
    ]  # fmt: skip
    async with running(command, tmp_path / "remote.log"):
        await wait_http(port)
        yield port


def owner_pending(root: Path) -> list[dict[str, Any]]:
    return pending_records(root / str(OWNER))


async def test_a_delegated_task_comes_back_as_a_follow_up_even_across_a_restart(
    bot_api: FakeBotApi, tmp_path: Path
) -> None:
    root = tmp_path / "chats"
    WorkspaceLayout(root / str(OWNER)).state.mkdir(parents=True)
    llm = FakeLLM(owner_model)
    await llm.start()
    try:
        async with remote_gateway(tmp_path) as remote_port:
            WorkspaceLayout(root / str(OWNER)).agents.write_text(
                json.dumps(
                    [
                        {
                            "name": "remote",
                            "url": f"http://127.0.0.1:{remote_port}/",
                            "key": REMOTE_KEY,
                            "allow_private": True,
                        }
                    ]
                )
            )
            command = telegram_command(root, bot_api, llm, "--a2a-wait", "0")
            # First run: the owner delegates; the task is handed to a watch at once and
            # the bot stops before the remote task ends (hold:2).
            async with running(command, tmp_path / "telegram-1.log"):
                await bot_api.push_text(OWNER, "please delegate this")
                await bot_api.wait_for(lambda api: "Handed over." in api.chat_text(OWNER), 30)
                await bot_api.push_text(OWNER, "/a2a")
                await bot_api.wait_for(lambda api: "Watches:" in api.chat_text(OWNER)[-1])
            report = bot_api.chat_text(OWNER)[-1]
            records = owner_pending(root)
            assert report.startswith("A2A client: on")
            assert f"remote: task {records[0]['taskId']}, running" in report
            assert "remote: http://127.0.0.1" in report and "(key ...1c9d)" in report
            assert len(records) == 1 and records[0]["agent"] == "remote"
            assert records[0]["target"] == f"telegram-{OWNER}"
            handed = [r for r in llm.requests if r["messages"][-1]["role"] == "tool"]
            assert "It is still running" in handed[0]["messages"][-1]["content"]
            # Second run: the watch is re-armed at start-up and its result delivered
            # into the chat's session as a follow-up turn.
            async with running(command, tmp_path / "telegram-2.log"):
                await bot_api.wait_for(
                    lambda api: any("The remote agent finished" in t for t in api.chat_text(OWNER)),
                    30,
                )
                async with asyncio.timeout(10):
                    # Another process writes the file: nothing to wait on but the file.
                    while owner_pending(root):  # noqa: ASYNC110
                        await asyncio.sleep(0.1)
    finally:
        await llm.aclose()
    follow_ups = [
        r for r in llm.requests if "[A2A result from" in json.dumps(r["messages"][-1]["content"])
    ]
    assert len(follow_ups) == 1
    prompt = follow_ups[0]["messages"][-1]["content"]
    assert f'[A2A result from "remote", task {records[0]["taskId"]} (completed)]' in prompt
    assert "[Follow-up, local time" in prompt
    assert f"Context: {records[0]['contextId']}" in prompt
    for log in ("telegram-1.log", "telegram-2.log", "remote.log"):
        text = (tmp_path / log).read_text()
        assert REMOTE_KEY not in text and BOT_TOKEN not in text and "Traceback" not in text


KEPT_TEXT = '[A2A result from "remote", task t-1 (completed)]\nContext: c-1\nall done'


def keep_a_result(root: Path) -> None:
    """A finished watch's result kept in the owner chat's pending.json."""
    record = PendingRecord(
        "w-1", f"telegram-{OWNER}", "remote", "t-1", "c-1", None,
        "2026-12-01T12:00:00+00:00", "poll", undelivered=KEPT_TEXT,
    )  # fmt: skip
    write_pending(root / str(OWNER), [record])


async def test_a_result_whose_follow_up_turn_the_stop_cut_short_is_kept(
    bot_api: FakeBotApi, llm: FakeLLM, tmp_path: Path
) -> None:
    # The record of a finished watch went as soon as the follow-up was queued in the
    # chat: a bot stopped before (or while) that turn ran lost the result for good.
    root = tmp_path / "chats"
    text = KEPT_TEXT
    keep_a_result(root)
    endless = Stall(every=0.05)
    llm.script(endless)
    async with running(telegram_command(root, bot_api, llm), tmp_path / "telegram.log"):
        async with asyncio.timeout(30):
            while not llm.requests:  # noqa: ASYNC110 - another process's turn
                await asyncio.sleep(0.05)
        assert "all done" in user_texts(llm.requests[0])[-1]
    await asyncio.wait_for(endless.closed.wait(), 30)  # the turn was cut short
    assert [r["undelivered"] for r in owner_pending(root)] == [text]


async def test_a_result_whose_follow_up_turn_failed_is_kept(
    bot_api: FakeBotApi, llm: FakeLLM, tmp_path: Path
) -> None:
    # The owner never sees a delivered result itself, only the model's answer to it: a
    # turn that failed (the provider down) lost the result when its record went.
    # In-process, so the end of the delivery can be waited for (quiesce).
    root = tmp_path / "chats"
    keep_a_result(root)
    llm.script(Status(401))  # (a 400 to a streamed request with tools is asked again whole)
    flags = {
        "workspaces_root": str(root),
        "allowed_users": str(OWNER),
        "telegram_base_url": bot_api.base_url,
        "llm_model": "fake-model",
        "llm_base_url": llm.base_url,
    }
    settings = load(TelegramSettings, flags, environ={})
    app = TelegramApp(settings, check(settings, {"TELEGRAM_BOT_TOKEN": BOT_TOKEN}))
    await app.start()
    try:
        await bot_api.wait_for(
            lambda api: any("Sorry, that did not work" in t for t in api.chat_text(OWNER)), 30
        )
        await app.watches.quiesce(root / str(OWNER), bound=30)
        assert "all done" in user_texts(llm.requests[0])[-1]
        assert [r["undelivered"] for r in owner_pending(root)] == [KEPT_TEXT]
    finally:
        await app.stop()


async def start_a2a_bot(
    root: Path,
    bot_api: FakeBotApi,
    llm: FakeLLM,
    replies: tuple[Reply, ...] = (Say("booked"),),
    **flags: Any,
) -> TelegramApp:
    """The bot with ``--a2a`` in-process, its owner's chat taking calls from travel-bot
    (CALLER_KEY); the model's ``replies`` (it says "booked" once)."""
    WorkspaceLayout(root / str(OWNER)).state.mkdir(parents=True)
    write_callers(root / str(OWNER), [{"name": "travel-bot", "key": CALLER_KEY}])
    llm.script(*replies)
    values: dict[str, Any] = {
        "workspaces_root": str(root),
        "allowed_users": str(OWNER),
        "telegram_base_url": bot_api.base_url,
        "llm_model": "fake-model",
        "llm_base_url": llm.base_url,
        "a2a": True,
        "port": 0,
        "grpc_port": -1,
        **flags,
    }
    settings = load(TelegramSettings, values, environ={})
    app = TelegramApp(settings, check(settings, {"TELEGRAM_BOT_TOKEN": BOT_TOKEN}))
    await app.start()
    return app


async def a2a_get_task(port: int, task_id: str) -> dict[str, Any]:
    body = {"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": task_id}}
    headers = {"X-API-Key": CALLER_KEY, "A2A-Version": "1.0"}
    async with (
        aiohttp.ClientSession() as session,
        session.post(f"http://127.0.0.1:{port}/a2a", json=body, headers=headers) as response,
    ):
        result: dict[str, Any] = (await response.json())["result"]
        return result


async def test_a_callers_secret_question_is_answered_in_the_owners_chat(
    bot_api: FakeBotApi, llm: FakeLLM, tmp_path: Path
) -> None:
    # The owner's reply to the bot's question is the value: the model gets it, the
    # reply is deleted, and neither the caller nor any file sees it.
    secret = "tok-telegram-8e3a51c0b7"
    use_secret(secret)
    root = tmp_path / "chats"
    ask = {"question": "Your API token?", "secret": True}
    replies = (Calls([("request_input", ask)]), Say("Connected."))
    app = await start_a2a_bot(root, bot_api, llm, replies)
    try:
        assert app.http_port is not None
        task = (await a2a_send(app.http_port, "connect it"))["task"]
        assert task["status"]["state"] == "TASK_STATE_AUTH_REQUIRED"

        def question(api: FakeBotApi) -> list[Any]:
            sent = api.sent("sendMessage", OWNER)
            return [c for c in sent if "asks for a secret" in c.params["text"]]

        await bot_api.wait_for(question)
        (asked,) = question(bot_api)
        assert "travel-bot asks for a secret: Your API token?" in asked.params["text"]
        reply_id = await bot_api.push_reply(OWNER, secret, reply_to=asked.params["_message_id"])
        await bot_api.wait_for(lambda api: api.sent("deleteMessage", OWNER))
        assert bot_api.sent("deleteMessage", OWNER)[0].params["message_id"] == reply_id
        async with asyncio.timeout(30):
            while task["status"]["state"] != "TASK_STATE_COMPLETED":
                await asyncio.sleep(0.05)
                task = await a2a_get_task(app.http_port, task["id"])
        await bot_api.wait_for(
            lambda api: "the value went to your assistant" in "".join(api.chat_text(OWNER))
        )
        # A late reply to the same question is deleted too, and taken by no one.
        late_id = await bot_api.push_reply(
            OWNER, "late-" + secret, reply_to=asked.params["_message_id"]
        )
        await bot_api.wait_for(lambda api: len(api.sent("deleteMessage", OWNER)) == 2)
        assert bot_api.sent("deleteMessage", OWNER)[1].params["message_id"] == late_id
        await bot_api.wait_for(lambda api: "no longer waiting" in api.chat_text(OWNER)[-1])
    finally:
        await app.stop()
    assert len(llm.requests) == 2  # the reply ran no turn of the owner's own session
    assert tool_results(llm.requests[1])[0].endswith(secret)
    assert secret not in json.dumps(task)
    shown = [c.params for c in bot_api.calls if c.method != "deleteMessage"]
    assert secret not in json.dumps(shown)
    assert files_holding(root, secret) == []


@pytest.mark.parametrize("store", ["memory", "postgres"])
async def test_a2a_lists_a_callers_tasks_from_the_task_store(
    bot_api: FakeBotApi, llm: FakeLLM, tmp_path: Path, request: pytest.FixtureRequest, store: str
) -> None:
    # /a2a read the callers' tasks from task files: with --store postgres or memory it
    # listed none. In-process, one A2A side on the store.
    root = tmp_path / "chats"
    flags: dict[str, Any] = {"store": store}
    if store == "postgres":
        flags["database_url"] = await fresh_database(request.getfixturevalue("postgres"))
        flags["database_pool_size"] = 2
    app = await start_a2a_bot(root, bot_api, llm, **flags)
    try:
        assert app.http_port is not None
        task = (await a2a_send(app.http_port, "book Lisbon"))["task"]
        assert task["status"]["state"] == "TASK_STATE_COMPLETED"
        await bot_api.push_text(OWNER, "/a2a")
        await bot_api.wait_for(lambda api: "Callers" in "".join(api.chat_text(OWNER)))
    finally:
        await app.stop()
    report = bot_api.chat_text(OWNER)[-1]
    assert f"    task {task['id']}: completed" in report.splitlines()
    assert not list(WorkspaceLayout(root / str(OWNER)).state.glob("tasks/*.json"))  # not from files


async def test_the_bot_runs_on_the_demo_model(bot_api: FakeBotApi, tmp_path: Path) -> None:
    # --llm-demo instead of --llm-model: no model server at all.
    flags = {
        "workspaces_root": str(tmp_path / "chats"),
        "allowed_users": str(OWNER),
        "telegram_base_url": bot_api.base_url,
        "llm_demo": True,
    }
    settings = load(TelegramSettings, flags, environ={})
    app = TelegramApp(settings, check(settings, {"TELEGRAM_BOT_TOKEN": BOT_TOKEN}))
    await app.start()
    try:
        await bot_api.push_text(OWNER, "hello bot")
        await bot_api.wait_for(lambda api: "You said: hello bot" in api.chat_text(OWNER), 30)
        # The owner's chat has no request_input: the question comes as the answer.
        await bot_api.push_text(OWNER, "ask me which colour")
        await bot_api.wait_for(lambda api: api.chat_text(OWNER)[-1:] == ["which colour?"], 30)
    finally:
        await app.stop()


async def test_a2a_with_metrics_reports_the_watches_and_the_tasks(
    bot_api: FakeBotApi, llm: FakeLLM, tmp_path: Path
) -> None:
    # --a2a --metrics: the bot's watch registry reports to its gateway's metrics.
    from tests.server.test_metrics import parse, value

    app = await start_a2a_bot(tmp_path / "chats", bot_api, llm, metrics=True, store="memory")
    try:
        assert app.http_port is not None and app.gateway is not None
        assert app.watches.meter is getattr(app.gateway.metrics, "watches", None)
        task = (await a2a_send(app.http_port, "book Lisbon"))["task"]
        assert task["status"]["state"] == "TASK_STATE_COMPLETED"
        async with (
            aiohttp.ClientSession() as session,
            asyncio.timeout(10),
            session.get(f"http://127.0.0.1:{app.http_port}/metrics") as response,
        ):
            assert response.status == 200
            samples = parse(await response.text())
    finally:
        await app.stop()
    for mode in ("push", "subscribe", "poll"):
        assert ("a2a_watches_pending", frozenset({("mode", mode)})) in samples
    assert value(samples, "a2a_tasks", state="TASK_STATE_COMPLETED") == 1
