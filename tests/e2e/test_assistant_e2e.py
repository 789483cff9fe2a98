"""``serve --llm`` end to end: the gateway in-process on real ports, the scripted
OpenAI-compatible provider on another, raw wire drivers for each binding. Tests assert
what the caller gets and what the model was sent."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import aiohttp
import grpc
import orjson
import pytest
from aiohttp import web

from a2a_gateway.local.layout import WorkspaceLayout
from a2a_gateway.serve import Gateway
from a2a_gateway.settings import resolve
from tests.support.secrets import use_secret
from tests.support.workspace import write_callers

from ..agent.fake_llm import Calls, FakeLLM, Garbage, Say, Stall, Status, tool_results, user_texts
from ..agent.llm_support import API_KEY, llm
from ..conftest import captured_logs
from ..server.test_metrics import parse, value
from .conftest import BINDINGS, KEY_ALICE, Driver, WireError, files_holding
from .outbound_support import settle, webhook_receiver
from .test_scenarios import artifact_text, expect_error, send

COMPLETED = "TASK_STATE_COMPLETED"
__all__ = ["llm"]  # the scripted provider fixture


async def start_gateway(
    workspace: Path,
    llm: FakeLLM,
    routes: Callable[[web.Application], None] | None = None,
    **settings: Any,
) -> Gateway:
    write_callers(workspace, [{"name": "alice", "key": KEY_ALICE}])
    use_secret(API_KEY)
    values = {
        "workspace": [str(workspace)],
        "port": 0,
        "grpc_port": 0,
        "llm": True,
        "llm_model": "fake-model",
        "llm_base_url": llm.base_url,
        "llm_max_retries": 0,
        "keepalive": 0.2,
        **settings,
    }
    environ = {"A2A_GATEWAY_LLM_API_KEY": API_KEY}
    gateway = Gateway(resolve(values, environ=environ), routes=routes)
    await gateway.start()
    return gateway


@pytest.fixture
async def assistant(tmp_path: Path, llm: FakeLLM) -> AsyncIterator[Gateway]:
    gateway = await start_gateway(tmp_path / "ws", llm)
    try:
        yield gateway
    finally:
        await gateway.stop()


@pytest.fixture(params=BINDINGS)
async def driver(request: pytest.FixtureRequest, assistant: Gateway) -> AsyncIterator[Driver]:
    async with (
        aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as http,
        grpc.aio.insecure_channel(f"127.0.0.1:{assistant.grpc_port}") as channel,
    ):
        yield Driver(request.param, http, f"http://127.0.0.1:{assistant.http_port}", channel)


def workspace_of(gateway: Gateway) -> Path:
    return gateway.config.workspaces[0]


async def test_reply_streams_into_response_chunks_under_the_framing_header(
    driver: Driver, llm: FakeLLM
) -> None:
    llm.script(Say(chunks=["Hel", "lo ", "there"]))
    events = await driver.stream("SendStreamingMessage", send("hi, I am travel-bot"))
    updates = [e["artifactUpdate"] for e in events if "artifactUpdate" in e]
    assert ["".join(p["text"] for p in u["artifact"]["parts"]) for u in updates] == [
        "Hel",
        "lo ",
        "there",
    ]
    assert [u.get("append", False) for u in updates] == [False, True, True]
    assert {u["artifact"]["name"] for u in updates} == {"response"}
    assert events[-1]["statusUpdate"]["status"]["state"] == COMPLETED
    (body,) = llm.requests
    (text,) = user_texts(body)
    assert text.startswith("[A2A message from the external agent 'alice'. This is not your owner.")
    assert "notify_owner" in text.split("]")[0]
    assert text.endswith("\n\nhi, I am travel-bot")
    names = [t["function"]["name"] for t in body["tools"]]
    assert names == [
        "read_file",
        "write_file",
        "list_files",
        "send_file",
        "request_input",
        "notify_owner",
    ]


async def test_request_input_then_the_answer_continues_the_turn(
    driver: Driver, llm: FakeLLM
) -> None:
    schema = {"type": "object", "properties": {"day": {"type": "string"}}}
    llm.script(
        Calls([("request_input", {"question": "Which day?", "schema": schema})]),
        Say("Booked for Monday."),
    )
    task = (await driver.call("SendMessage", send("book a slot")))["task"]
    status = task["status"]
    assert status["state"] == "TASK_STATE_INPUT_REQUIRED"
    parts = status["message"]["parts"]
    assert parts[0]["text"] == "Which day?"
    assert parts[1]["data"] == {"schema": schema}
    answer = send("Monday", message={"taskId": task["id"], "contextId": task["contextId"]})
    done = (await driver.call("SendMessage", answer))["task"]
    assert done["status"]["state"] == COMPLETED
    assert artifact_text(done) == "Booked for Monday."
    (result,) = tool_results(llm.requests[1])
    assert result.startswith("[A2A message from the external agent 'alice'")
    assert result.endswith("\n\nMonday")
    assert user_texts(llm.requests[1])[0].endswith("book a slot")


async def test_a_question_with_a_schema_is_tagged_and_checks_a_data_answer(
    driver: Driver, llm: FakeLLM
) -> None:
    schema = {"type": "object", "properties": {"day": {"type": "string"}}, "required": ["day"]}
    llm.script(
        Calls([("request_input", {"question": "Which day?", "schema": schema})]),
        Say("Booked."),
    )
    task = (await driver.call("SendMessage", send("book a slot")))["task"]
    tagged = task["status"]["message"]["parts"][1]
    assert tagged == {
        "data": {"schema": schema},
        "mediaType": "application/vnd.everruns.ask-user+json",
        "metadata": {"kind": "everruns/ask_user"},
    }
    ids = {"taskId": task["id"], "contextId": task["contextId"]}

    def data_answer(value: Any) -> dict[str, Any]:
        return send("", message={**ids, "parts": [{"data": value}]})

    before = await driver.call("GetTask", {"id": task["id"]})
    refused = await expect_error("INVALID_PARAMS", driver.call("SendMessage", data_answer({})))
    assert "message.parts[0].data: does not match the question's schema: at /:" in refused.message
    assert "'day' is a required property" in refused.message
    # The task still waits for its answer, unchanged; the model was not called again.
    assert await driver.call("GetTask", {"id": task["id"]}) == before
    assert len(llm.requests) == 1
    done = (await driver.call("SendMessage", data_answer({"day": "Monday"})))["task"]
    assert done["status"]["state"] == COMPLETED
    (result,) = tool_results(llm.requests[1])
    assert result.endswith('\n\n{"day":"Monday"}')


async def until_settled(driver: Driver, task_id: str) -> dict[str, Any]:
    """The task once it left AUTH_REQUIRED and WORKING (bounded)."""
    async with asyncio.timeout(30):
        while True:
            task: dict[str, Any] = await driver.call("GetTask", {"id": task_id})
            if task["status"]["state"] not in ("TASK_STATE_AUTH_REQUIRED", "TASK_STATE_WORKING"):
                return task
            await asyncio.sleep(0.05)


async def next_inbox_entry(inbox: Path, seen: int) -> dict[str, Any]:
    """The owner inbox's entry after its first ``seen`` ones (bounded wait: the owner is
    asked as the caller is answered, not before)."""
    async with asyncio.timeout(10):
        while True:
            lines = inbox.read_text().splitlines() if inbox.exists() else []  # noqa: ASYNC240 (a small test file)
            if len(lines) > seen:
                entry: dict[str, Any] = json.loads(lines[seen])
                return entry
            await asyncio.sleep(0.02)


async def test_a_secret_is_asked_of_the_owner_on_a_one_time_link(
    assistant: Gateway, driver: Driver, llm: FakeLLM
) -> None:
    secret = f"tok-serve-{driver.binding}-4c7e19a2d5"
    use_secret(secret)
    ask = {"question": "Your API token?", "secret": True}
    llm.script(Calls([("request_input", ask)]), Say("Connected."))
    # A blocking send answers at AUTH_REQUIRED, while the turn waits for the owner.
    task = (await driver.call("SendMessage", send("connect it")))["task"]
    status = task["status"]
    assert status["state"] == "TASK_STATE_AUTH_REQUIRED"
    text = status["message"]["parts"][0]["text"]
    assert "A person (the owner of this agent)" in text and text.endswith("Your API token?")
    ids = {"taskId": task["id"], "contextId": task["contextId"]}
    refused = await expect_error(
        "UNSUPPORTED_OPERATION", driver.call("SendMessage", send(secret, message=ids))
    )
    assert "comes from its owner" in refused.message
    workspace = workspace_of(assistant)
    inbox = WorkspaceLayout(workspace).owner_inbox
    entry = await next_inbox_entry(inbox, 0)
    assert entry["caller"] == "alice" and entry["text"].endswith("Your API token?")
    url = entry["url"]
    assert url.startswith(f"http://127.0.0.1:{assistant.http_port}/a2a/secrets/")
    async with aiohttp.ClientSession() as http:
        async with http.get(url) as page:
            assert page.status == 200 and "Your API token?" in await page.text()
        async with http.post(url, data={"value": secret}) as page:
            assert page.status == 200
        async with http.post(url, data={"value": "a-second-try-0000"}) as page:
            assert page.status == 404  # once only
    done = await until_settled(driver, task["id"])
    assert done["status"]["state"] == COMPLETED and artifact_text(done) == "Connected."
    (result,) = tool_results(llm.requests[1])
    assert result.endswith(secret)  # the model got it...
    assert secret not in json.dumps(done)  # ...the task, its history and the files did not
    assert files_holding(workspace, secret) == []
    assert not [line for line in captured_logs() if secret in line]
    transcript = "".join(p.read_text() for p in WorkspaceLayout(workspace).sessions.iterdir())
    assert "The owner gave a secret here" in transcript

    # An expired link is refused, and the turn goes on without the value.
    llm.script(Calls([("request_input", ask)]), Say("Not connected."))
    task = (await driver.call("SendMessage", send("connect again")))["task"]
    assert task["status"]["state"] == "TASK_STATE_AUTH_REQUIRED"
    url = (await next_inbox_entry(inbox, 1))["url"]
    links = assistant.secret_links
    assert links is not None
    links.clock = lambda: float("inf")  # past every expiry
    try:
        async with aiohttp.ClientSession() as http, http.get(url) as page:
            assert page.status == 404
    finally:
        links.clock = time.monotonic
    done = await until_settled(driver, task["id"])
    assert artifact_text(done) == "Not connected."
    (result,) = tool_results(llm.requests[3])
    assert result.startswith("Error: No value was given")


async def test_second_task_in_a_context_sees_the_first(
    assistant: Gateway, driver: Driver, llm: FakeLLM
) -> None:
    llm.script(Say("first answer"), Say("second answer"))
    first = (await driver.call("SendMessage", send("first")))["task"]
    again = send("second", message={"contextId": first["contextId"]})
    second = (await driver.call("SendMessage", again))["task"]
    assert second["id"] != first["id"] and artifact_text(second) == "second answer"
    messages = llm.requests[1]["messages"]
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "user"]
    assert messages[2]["content"] == "first answer"
    scope = f"serve-a2a-alice_{first['contextId']}"
    transcript = WorkspaceLayout(workspace_of(assistant)).sessions / f"{scope}.jsonl"
    assert len(transcript.read_bytes().splitlines()) == 4


async def test_provider_failure_fails_the_task_redacted(driver: Driver, llm: FakeLLM) -> None:
    llm.script(Status(401, {"error": {"message": f"bad key {API_KEY}"}}))
    task = (await driver.call("SendMessage", send("hi")))["task"]
    assert task["status"]["state"] == "TASK_STATE_FAILED"
    text = task["status"]["message"]["parts"][0]["text"]
    assert text.startswith("The model provider answered HTTP 401: bad key")
    assert API_KEY not in text


async def test_cancel_closes_the_provider_request(driver: Driver, llm: FakeLLM) -> None:
    stall = Stall(first="thinking", every=0.05)
    llm.script(stall)
    request = send("think hard", configuration={"returnImmediately": True})
    task = (await driver.call("SendMessage", request))["task"]
    async with asyncio.timeout(10):
        await llm.received.wait()  # the turn has reached the provider
    canceled = await driver.call("CancelTask", {"id": task["id"]})
    assert canceled["status"]["state"] == "TASK_STATE_CANCELED"
    async with asyncio.timeout(10):
        await stall.closed.wait()


async def test_notify_owner_and_send_file(
    assistant: Gateway, driver: Driver, llm: FakeLLM, caplog: pytest.LogCaptureFixture
) -> None:
    workspace = workspace_of(assistant)
    (workspace / "report.txt").write_text("quarterly numbers")
    llm.script(
        Calls(
            [
                ("notify_owner", {"text": "travel-bot asked for the report"}),
                ("send_file", {"path": "report.txt"}),
                ("read_file", {"path": ".a2a/callers.json"}),
            ]
        ),
        Say("Sent."),
    )
    with caplog.at_level(logging.INFO, logger="a2a_gateway"):
        task = (await driver.call("SendMessage", send("send me the report")))["task"]
    assert task["status"]["state"] == COMPLETED
    files = [p for a in task["artifacts"] for p in a["parts"] if "raw" in p]
    assert len(files) == 1 and files[0]["filename"] == "report.txt"
    inbox = WorkspaceLayout(workspace).owner_inbox.read_bytes().splitlines()
    record = orjson.loads(inbox[-1])
    assert record["caller"] == "alice" and record["text"] == "travel-bot asked for the report"
    notes = [r.getMessage() for r in caplog.records if "owner notified" in r.getMessage()]
    assert notes == ["owner notified by alice (31 characters)"]
    assert "report" not in notes[0]
    results = tool_results(llm.requests[1])
    assert results[0] == "The owner was notified."
    assert results[2].startswith("Error: path: .a2a/ is the gateway's own folder")


async def test_message_template_and_per_task_sessions(tmp_path: Path, llm: FakeLLM) -> None:
    template = "Task {{a2a.task_id}} in {{a2a.context_id}}: {{a2a.text}}"
    gateway = await start_gateway(
        tmp_path / "ws", llm, message_template=template, session_mode="per-task"
    )
    try:
        async with aiohttp.ClientSession() as http, grpc.aio.insecure_channel("x") as channel:
            driver = Driver("jsonrpc", http, f"http://127.0.0.1:{gateway.http_port}", channel)
            first = (await driver.call("SendMessage", send("one")))["task"]
            again = send("two", message={"contextId": first["contextId"]})
            second = (await driver.call("SendMessage", again))["task"]
    finally:
        await gateway.stop()
    (text,) = user_texts(llm.requests[1])  # per-task: the first task is not replayed
    assert text.endswith(f"Task {second['id']} in {first['contextId']}: two")


async def test_message_template_payload_is_the_request_as_compact_protojson(
    tmp_path: Path, llm: FakeLLM
) -> None:
    template = "{{a2a.text}} | {{payload}}"
    gateway = await start_gateway(tmp_path / "ws", llm, message_template=template)
    request = send(
        "hello",
        message={"metadata": {"trip": "lisbon"}, "unknownField": 1},
        configuration={"acceptedOutputModes": ["text/plain"], "historyLength": 2},
        metadata={"origin": "test"},
    )
    try:
        async with aiohttp.ClientSession() as http, grpc.aio.insecure_channel("x") as channel:
            driver = Driver("jsonrpc", http, f"http://127.0.0.1:{gateway.http_port}", channel)
            task = (await driver.call("SendMessage", request))["task"]
    finally:
        await gateway.stop()
    assert task["status"]["state"] == COMPLETED
    (text,) = user_texts(llm.requests[0])
    rendered = text.split("\n\n")[-1]
    assert rendered.startswith("hello | {")
    payload = rendered.removeprefix("hello | ")
    assert " " not in payload and "\n" not in payload  # compact
    expected = dict(request)
    expected["message"] = {k: v for k, v in request["message"].items() if k != "unknownField"}
    assert json.loads(payload) == expected


async def test_shared_session_refuses_streaming(tmp_path: Path, llm: FakeLLM) -> None:
    gateway = await start_gateway(tmp_path / "ws", llm, session_mode="shared")
    try:
        async with aiohttp.ClientSession() as http, grpc.aio.insecure_channel("x") as channel:
            driver = Driver("jsonrpc", http, f"http://127.0.0.1:{gateway.http_port}", channel)
            with pytest.raises(WireError) as caught:
                await driver.stream("SendStreamingMessage", send("hi"))
            assert caught.value.reason == "UNSUPPORTED_OPERATION"
            card = await driver.http.get(driver.base + "/.well-known/agent-card.json")
            assert (await card.json())["capabilities"]["streaming"] is False
            llm.script(Say("one"), Say("two"))
            await driver.call("SendMessage", send("in context A"))
            await driver.call("SendMessage", send("in context B"))
    finally:
        await gateway.stop()
    # One session per caller: the second context sees the first.
    assert [t.split("\n\n")[-1] for t in user_texts(llm.requests[-1])] == [
        "in context A",
        "in context B",
    ]


@pytest.mark.parametrize("mode", ["off", "auto"])
async def test_a_provider_that_cannot_stream(tmp_path: Path, llm: FakeLLM, mode: str) -> None:
    """``--llm-stream off`` never asks for a stream; ``auto`` is refused once, then asks
    for whole answers: the caller's stream gets the answer as one chunk either way."""
    llm.refuse_streams = True
    llm.script(Say(chunks=["Who", "le"]), Say("Again"))
    gateway = await start_gateway(tmp_path / "ws", llm, llm_stream=mode)
    try:
        async with aiohttp.ClientSession() as http, grpc.aio.insecure_channel("x") as channel:
            driver = Driver("jsonrpc", http, f"http://127.0.0.1:{gateway.http_port}", channel)
            events = await driver.stream("SendStreamingMessage", send("hi"))
            again = (await driver.call("SendMessage", send("hi again")))["task"]
    finally:
        await gateway.stop()
    updates = [e["artifactUpdate"]["artifact"]["parts"] for e in events if "artifactUpdate" in e]
    assert updates == [[{"text": "Whole"}]]
    assert events[-1]["statusUpdate"]["status"]["state"] == COMPLETED
    assert artifact_text(again) == "Again"
    streamed = [body["stream"] for body in llm.requests]
    assert streamed == ([False, False] if mode == "off" else [True, False, False])


async def test_provider_500_timeout_garbage_and_down_fail_tasks(
    tmp_path: Path, llm: FakeLLM
) -> None:
    llm.script(Status(500), Garbage(), Stall())
    # Streams only: auto would ask again without streaming after the garbage.
    gateway = await start_gateway(tmp_path / "ws", llm, llm_timeout=0.5, llm_stream="on")
    down = await start_gateway(
        tmp_path / "ws-down", llm, llm_base_url="http://user:pw-5d1c9e7a@127.0.0.1:9/v1"
    )
    use_secret("pw-5d1c9e7a")
    try:
        async with aiohttp.ClientSession() as http, grpc.aio.insecure_channel("x") as channel:
            texts = []
            for server in (gateway, gateway, gateway, down):
                base = f"http://127.0.0.1:{server.http_port}"
                task = await Driver("rest", http, base, channel).call("SendMessage", send("hi"))
                status = task["task"]["status"]
                assert status["state"] == "TASK_STATE_FAILED"
                texts.append(status["message"]["parts"][0]["text"])
    finally:
        await gateway.stop()
        await down.stop()
    assert texts == [
        "The model provider answered HTTP 500: boom",
        "The model provider sent a malformed answer (no completion chunks).",
        "The model provider did not answer in time (0.5 s).",
        "Cannot reach the model provider at http://127.0.0.1:9/v1.",
    ]


async def test_metrics_count_the_assistants_turns_model_calls_tools_tokens_and_pushes(
    tmp_path: Path, llm: FakeLLM
) -> None:
    """``serve --llm --metrics``: after a turn with a tool call, a call of a tool that
    does not exist, a failed model call and a push delivery, /metrics shows each."""
    workspace = tmp_path / "ws"
    (workspace).mkdir()
    (workspace / "notes.txt").write_text("milk")
    llm.usage = (120, 7)
    llm.script(
        Calls([("read_file", {"path": "notes.txt"})]),
        Say("it says milk"),
        Calls([("made_up_tool", {})]),
        Say("no such tool"),
        Status(500),
    )
    async with webhook_receiver() as webhook:
        gateway = await start_gateway(workspace, llm, metrics=True, allow_private_urls=True)
        try:
            async with aiohttp.ClientSession() as http:
                base = f"http://127.0.0.1:{gateway.http_port}"
                driver = Driver("jsonrpc", http, base, None)  # type: ignore[arg-type]
                push = {"taskPushNotificationConfig": {"url": webhook.url("/hook")}}
                done = await driver.call("SendMessage", send("read it", configuration=push))
                assert done["task"]["status"]["state"] == COMPLETED
                await driver.call("SendMessage", send("call something"))
                failed = await driver.call("SendMessage", send("and again"))
                assert failed["task"]["status"]["state"] == "TASK_STATE_FAILED"
                await webhook.wait_for("/hook", 2)  # WORKING, COMPLETED
                await settle(gateway)
                async with http.get(base + "/metrics") as response:
                    assert response.status == 200
                    samples = parse(await response.text())
        finally:
            await gateway.stop()
    assert value(samples, "a2a_assistant_turns_total", outcome="finished") == 2
    assert value(samples, "a2a_assistant_turns_total", outcome="failed") == 1
    ok = value(samples, "a2a_assistant_tool_calls_total", tool="read_file", outcome="ok")
    assert ok == 1
    made_up = value(samples, "a2a_assistant_tool_calls_total", tool="none", outcome="no_such_tool")
    assert made_up == 1
    assert value(samples, "a2a_assistant_provider_errors_total", kind="status") == 1
    # Four answers came (with usage each), the fifth call failed.
    assert value(samples, "a2a_assistant_tokens_total", direction="in") == 4 * 120
    assert value(samples, "a2a_assistant_tokens_total", direction="out") == 4 * 7
    assert value(samples, "a2a_assistant_model_call_seconds_count") == 5
    assert value(samples, "a2a_assistant_first_token_seconds_count") == 4
    assert value(samples, "a2a_push_notifications_total", outcome="delivered") == 2
    assert value(samples, "a2a_push_attempts_count") == 2
    # No label holds free text: the model's made-up tool name is not one.
    assert not any("made_up_tool" in str(labels) for _, labels in samples)
