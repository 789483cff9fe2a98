"""The assistant runtime against the scripted provider: what the model is sent, what
the host sees, what the transcript keeps."""

from __future__ import annotations

import asyncio
import contextlib
import os
from pathlib import Path

import orjson
import pytest

from a2a_gateway.agent.base import Signal
from a2a_gateway.agent.runtime import (
    NO_SECRET_ASKER,
    SECRET_KEPT_OUT,
    Asked,
    FileReady,
    Finished,
    Runtime,
    SecretAnswered,
    SecretAsked,
    TextDelta,
    ToolFinished,
    ToolStarted,
    TurnEvent,
    TurnFailed,
)
from a2a_gateway.agent.sessions import transcript_path
from a2a_gateway.agent.tools import ToolRegistry
from a2a_gateway.agent.tools.files import workspace_tools
from a2a_gateway.agent.tools.interaction import RequestInput, SecretQuestion
from tests.support.secrets import use_secret

from .fake_llm import Calls, FakeLLM, Garbage, Say, Stall, Status, tool_results, user_texts
from .llm_support import API_KEY, FakeClock, llm, make_runtime, run

__all__ = ["llm"]


async def test_streams_deltas_and_sends_system_prompt_and_transcript(
    llm: FakeLLM, tmp_path: Path
) -> None:
    (tmp_path / "AGENTS.md").write_text("Always answer in French.")
    (tmp_path / "PERSONA.md").write_text("You are Marie.")
    (tmp_path / "MEMORY.md").write_text("The owner likes tea.")
    llm.script(Say(chunks=["Bon", "jour"]), Say("Encore"))
    runtime = make_runtime(llm.base_url)
    try:
        events = await run(runtime, tmp_path, "hello")
        assert events == [TextDelta("Bon"), TextDelta("jour"), Finished("Bonjour")]
        events = await run(runtime, tmp_path, "again")
        assert events[-1] == Finished("Encore")
    finally:
        await runtime.aclose()
    first, second = llm.requests
    assert first["model"] == "fake-model" and first["stream"] is True
    system = first["messages"][0]
    assert system["role"] == "system"
    for needle in ("Always answer in French.", "You are Marie.", "The owner likes tea."):
        assert needle in system["content"]
    assert first["messages"][1:] == [{"role": "user", "content": "hello"}]
    assert "tools" not in first  # no tools registered: none offered
    # The second turn replays the first from the session.
    assert second["messages"][1:] == [
        {"role": "user", "content": "hello"},
        {"role": "assistant", "content": "Bonjour"},
        {"role": "user", "content": "again"},
    ]
    assert llm.headers[0]["Authorization"] == f"Bearer {API_KEY}"
    lines = transcript_path(tmp_path, "local-owner").read_bytes().splitlines()
    assert [orjson.loads(line)["role"] for line in lines] == ["user", "assistant"] * 2


async def test_workspace_files_are_read_fresh_and_capped(llm: FakeLLM, tmp_path: Path) -> None:
    (tmp_path / "CLAUDE.md").write_text("claude rules")
    runtime = make_runtime(llm.base_url, prompt_file_cap=100)
    try:
        await run(runtime, tmp_path, "one")
        (tmp_path / "AGENTS.md").write_text("agents rules")  # AGENTS.md wins over CLAUDE.md
        (tmp_path / "MEMORY.md").write_text("m" * 500)
        await run(runtime, tmp_path, "two")
        os.mkfifo(tmp_path / "PERSONA.md")  # never opened for a blocking read
        await run(runtime, tmp_path, "three")
    finally:
        await runtime.aclose()
    prompts = [body["messages"][0]["content"] for body in llm.requests]
    assert "claude rules" in prompts[0] and "agents rules" not in prompts[0]
    assert "agents rules" in prompts[1] and "claude rules" not in prompts[1]
    assert "m" * 100 in prompts[1] and "m" * 101 not in prompts[1]
    assert "[cut: the file is longer]" in prompts[1]
    assert "PERSONA.md" not in prompts[2]


async def test_tool_call_result_goes_back_to_the_model(llm: FakeLLM, tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("the secret plan")
    llm.script(
        Calls([("read_file", {"path": "notes.txt"}), ("nope", {}), ("read_file", "{bad json")]),
        Calls([("send_file", {"path": "notes.txt"})], text="Here it is."),
        Say("done"),
    )
    runtime = make_runtime(llm.base_url)
    try:
        events = await run(runtime, tmp_path, "read it", tools=ToolRegistry(workspace_tools()))
    finally:
        await runtime.aclose()
    assert ToolStarted("read_file", {"path": "notes.txt"}) in events
    assert FileReady("notes.txt", b"the secret plan") in events
    assert events[-1] == Finished("Here it is.\n\ndone")
    assert tool_results(llm.requests[1]) == [
        "the secret plan",
        "Error: There is no tool named 'nope'.",
        "Error: The arguments are not a JSON object.",
    ]
    assert [t["function"]["name"] for t in llm.requests[0]["tools"]] == [
        "read_file",
        "write_file",
        "list_files",
        "send_file",
    ]
    assert tool_results(llm.requests[2])[-1] == "Sent notes.txt (15 bytes)."


async def test_request_input_suspends_and_the_answer_continues_the_turn(
    llm: FakeLLM, tmp_path: Path
) -> None:
    schema = {"type": "object", "properties": {"day": {"type": "string"}}}
    llm.script(
        Calls([("request_input", {"question": "Which day?", "schema": schema})]),
        Say("Booked for Monday."),
    )
    clock = FakeClock()
    runtime = make_runtime(llm.base_url, clock=clock, idle_timeout_s=60)
    tools = ToolRegistry([RequestInput()])
    try:
        events = await run(runtime, tmp_path, "book it", tools=tools, ask_tag="task-1")
        assert events[-1] == Asked("Which day?", schema)
        # Evicted while waiting: the question survives in the transcript.
        clock.now += 61
        assert runtime.sessions.sweep() == 1
        events = await run(runtime, tmp_path, "Monday", tools=tools, ask_tag="task-1")
        assert events[-1] == Finished("Booked for Monday.")
    finally:
        await runtime.aclose()
    assert tool_results(llm.requests[1]) == ["Monday"]
    assert user_texts(llm.requests[1]) == ["book it"]


async def test_a_new_request_closes_an_unanswered_question(llm: FakeLLM, tmp_path: Path) -> None:
    llm.script(Calls([("request_input", {"question": "Which day?"})]), Say("ok"))
    runtime = make_runtime(llm.base_url)
    tools = ToolRegistry([RequestInput()])
    try:
        events = await run(runtime, tmp_path, "book it", tools=tools, ask_tag="task-1")
        assert events[-1] == Asked("Which day?", None)
        await run(runtime, tmp_path, "something else", tools=tools, ask_tag="task-2")
    finally:
        await runtime.aclose()
    messages = llm.requests[1]["messages"]
    assert messages[-2]["role"] == "tool" and "No answer came" in messages[-2]["content"]
    assert messages[-1] == {"role": "user", "content": "something else"}


class OwnerAnswers:
    """A host's secret asker whose owner answers ``value`` (None: never answers)."""

    def __init__(self, value: str | None) -> None:
        self.value = value
        self.asked: list[SecretQuestion] = []

    async def ask_secret(self, question: SecretQuestion) -> str | None:
        self.asked.append(question)
        if self.value is None:
            await asyncio.sleep(question.wait_s)
        return self.value


@pytest.mark.parametrize("given", [True, False, None])
async def test_a_secret_reaches_the_model_but_not_the_transcript(
    llm: FakeLLM, tmp_path: Path, given: bool | None
) -> None:
    # given: the owner answers; False: no answer within the wait; None: no asker at all.
    value = "tok-runtime-5f0c2a9e81"
    use_secret(value)
    ask = {"question": "Your API token?", "secret": True}
    llm.script(Calls([("request_input", ask)]), Say("Connected."))
    runtime = make_runtime(llm.base_url, secret_wait_s=0.05)
    registered: list[str] = []
    runtime.on_secret = registered.append
    asker = None if given is None else OwnerAnswers(value if given else None)
    tools = ToolRegistry([RequestInput()])
    try:
        events = await run(
            runtime, tmp_path, "connect it", tools=tools, secrets=asker, caller="travel-bot"
        )
    finally:
        await runtime.aclose()
    assert events[-1] == Finished("Connected.")  # the same turn goes on
    (result,) = tool_results(llm.requests[1])
    transcript = transcript_path(tmp_path, "local-owner").read_text()
    assert value not in transcript
    if given:
        assert events[1:4] == [
            SecretAsked("Your API token?", 0.05),
            SecretAnswered(True),
            ToolFinished("request_input", False),
        ]
        assert result.endswith(value) and registered == [value]
        assert SECRET_KEPT_OUT in transcript
        assert asker is not None and asker.asked[0].caller == "travel-bot"
    elif given is False:
        assert SecretAnswered(False) in events
        assert result.startswith("Error: No value was given") and not registered
    else:
        assert result == f"Error: {NO_SECRET_ASKER}"


async def test_a_secret_the_model_repeats_is_taken_out_of_its_reply(
    llm: FakeLLM, tmp_path: Path
) -> None:
    """The model writes the value back, split across deltas, in this turn and the next:
    what is shown and what the transcript keeps say [secret] instead."""
    value = "tok-echo-7d21c9b04e"
    use_secret(value)
    ask = {"question": "Your API token?", "secret": True}
    echo = f"Got {value}, thanks."
    chunks = ["Got tok-ec", "ho-7d21", "c9b04e, th", "anks."]
    llm.script(Calls([("request_input", ask)]), Say(echo, chunks=chunks), Say(f"It was {value}"))
    runtime = make_runtime(llm.base_url, secret_wait_s=5)
    tools = ToolRegistry([RequestInput()])
    try:
        first = await run(runtime, tmp_path, "connect", tools=tools, secrets=OwnerAnswers(value))
        second = await run(runtime, tmp_path, "what was it?", tools=tools)
    finally:
        await runtime.aclose()
    shown = "".join(e.text for e in first if isinstance(e, TextDelta))
    assert shown == "Got [secret], thanks." and first[-1] == Finished(shown)
    assert second[-1] == Finished("It was [secret]")
    assert value not in transcript_path(tmp_path, "local-owner").read_text()
    assert value in tool_results(llm.requests[1])[0]  # the model itself was given it


async def test_idle_session_is_evicted_and_resumes_from_its_transcript(
    llm: FakeLLM, tmp_path: Path
) -> None:
    clock = FakeClock()
    llm.script(Say("first answer"), Say("second answer"))
    runtime = make_runtime(llm.base_url, clock=clock, idle_timeout_s=1800)
    try:
        await run(runtime, tmp_path, "first")
        clock.now += 1799
        assert runtime.sessions.sweep() == 0
        clock.now += 2
        assert runtime.sessions.sweep() == 1
        assert len(runtime.sessions) == 0
        await run(runtime, tmp_path, "second")
    finally:
        await runtime.aclose()
    assert llm.requests[1]["messages"][1:] == [
        {"role": "user", "content": "first"},
        {"role": "assistant", "content": "first answer"},
        {"role": "user", "content": "second"},
    ]


async def test_torn_last_line_and_unanswered_calls_load(llm: FakeLLM, tmp_path: Path) -> None:
    path = transcript_path(tmp_path, "local-owner")
    path.parent.mkdir(parents=True)
    call = {"id": "c1", "type": "function", "function": {"name": "read_file", "arguments": "{}"}}
    path.write_bytes(
        b'{"role":"user","content":"earlier"}\n'
        + orjson.dumps({"role": "assistant", "content": None, "tool_calls": [call]})
        + b'\n{"role":"assistant","cont'  # a crash tore the last line
    )
    runtime = make_runtime(llm.base_url)
    try:
        events = await run(runtime, tmp_path, "now")
        assert events[-1] == Finished("ok")
    finally:
        await runtime.aclose()
    assert llm.requests[0]["messages"][1:] == [
        {"role": "user", "content": "earlier"},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {
            "role": "tool",
            "tool_call_id": "c1",
            "content": "The run was interrupted before this tool finished.",
        },
        {"role": "user", "content": "now"},
    ]
    # The next append starts on a new line: the torn line stays alone.
    lines = path.read_bytes().split(b"\n")
    assert lines[2] == b'{"role":"assistant","cont'
    assert orjson.loads(lines[3])["content"] == "now"


async def test_context_budget_drops_oldest_turns_first(llm: FakeLLM, tmp_path: Path) -> None:
    runtime = make_runtime(llm.base_url, context_budget_chars=400)
    try:
        for index in range(4):
            await run(runtime, tmp_path, f"turn {index} " + "x" * 60)
        await run(runtime, tmp_path, "big " + "y" * 1000)  # bigger than the budget alone
    finally:
        await runtime.aclose()
    sent = [user_texts(body) for body in llm.requests]
    assert [t[:6] for t in sent[3]] == ["turn 1", "turn 2", "turn 3"]
    assert sent[4] == ["big " + "y" * 1000]  # the current turn always goes
    # What can never be sent again left memory; the transcript keeps everything.
    session = runtime.sessions.get(tmp_path, "local-owner")
    assert session is not None
    assert [m["role"] for m in session.messages] == ["user", "assistant"]
    lines = transcript_path(tmp_path, "local-owner").read_bytes().splitlines()
    assert len(lines) == 10
    assert llm.requests[4]["messages"][0]["role"] == "system"


async def test_length_limit_finishes(llm: FakeLLM, tmp_path: Path) -> None:
    llm.script(Say("cut he", finish="length"))
    runtime = make_runtime(llm.base_url)
    try:
        events = await run(runtime, tmp_path, "long story")
    finally:
        await runtime.aclose()
    assert events[-1] == Finished("cut he", truncated=True)


async def test_tool_loop_is_bounded(llm: FakeLLM, tmp_path: Path) -> None:
    llm.responder = lambda body: Calls([("list_files", {})])
    runtime = make_runtime(llm.base_url, max_tool_rounds=3)
    try:
        events = await run(runtime, tmp_path, "loop", tools=ToolRegistry(workspace_tools()))
        assert events[-1] == TurnFailed("The model kept calling tools: stopped after 3 rounds.")
        assert len(llm.requests) == 4
        llm.responder = lambda body: Say("fine")
        events = await run(runtime, tmp_path, "next", tools=ToolRegistry(workspace_tools()))
        assert events[-1] == Finished("fine")  # the transcript stayed valid
    finally:
        await runtime.aclose()
    last = llm.requests[-1]["messages"]
    calls = [c["id"] for m in last if m["role"] == "assistant" for c in m.get("tool_calls", [])]
    answered = [m["tool_call_id"] for m in last if m["role"] == "tool"]
    assert sorted(calls) == sorted(answered)


async def read_notes(runtime: Runtime, workspace: Path) -> list[TurnEvent]:
    """A turn in which the model reads notes.txt with a tool, then answers."""
    (workspace / "notes.txt").write_text("the plan")
    return await run(runtime, workspace, "read it", tools=ToolRegistry(workspace_tools()))


async def test_stream_off_asks_for_whole_answers(llm: FakeLLM, tmp_path: Path) -> None:
    llm.refuse_streams = True  # a server that only answers whole
    llm.script(Calls([("read_file", {"path": "notes.txt"})], text="Looking."), Say("It says: plan"))
    runtime = make_runtime(llm.base_url, stream="off")
    try:
        events = await read_notes(runtime, tmp_path)
    finally:
        await runtime.aclose()
    assert events == [
        TextDelta("Looking."),
        ToolStarted("read_file", {"path": "notes.txt"}),
        ToolFinished("read_file", False),
        TextDelta("\n\nIt says: plan"),
        Finished("Looking.\n\nIt says: plan"),
    ]
    assert [body["stream"] for body in llm.requests] == [False, False]
    assert tool_results(llm.requests[1]) == ["the plan"]


async def test_stream_auto_falls_back_once_when_streams_with_tools_fail(
    llm: FakeLLM, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    llm.refuse_streams = True
    llm.script(Calls([("read_file", {"path": "notes.txt"})]), Say("plan"), Say("again"))
    runtime = make_runtime(llm.base_url)  # auto
    try:
        first = await read_notes(runtime, tmp_path)
        second = await read_notes(runtime, tmp_path)
    finally:
        await runtime.aclose()
    assert (first[-1], second[-1]) == (Finished("plan"), Finished("again"))
    # One streamed try, refused; every later request with tools asks for a whole answer.
    assert [body["stream"] for body in llm.requests] == [True, False, False, False]
    warnings = [r for r in caplog.records if r.levelname == "WARNING"]
    assert len(warnings) == 1 and "without streaming" in warnings[0].getMessage()


async def test_stream_on_never_falls_back(llm: FakeLLM, tmp_path: Path) -> None:
    llm.refuse_streams = True
    runtime = make_runtime(llm.base_url, stream="on")
    try:
        events = await read_notes(runtime, tmp_path)
    finally:
        await runtime.aclose()
    assert events == [
        TurnFailed(
            "The model provider answered HTTP 400: streaming is not supported by this server"
        )
    ]
    assert [body["stream"] for body in llm.requests] == [True]


async def test_provider_failures_are_short_and_redacted(llm: FakeLLM, tmp_path: Path) -> None:
    leaky = {"error": {"message": f"Incorrect API key provided: {API_KEY}"}}
    llm.script(
        Status(500),
        Status(401, leaky),
        Garbage(),
        Stall(),
        Garbage(b"data: {not json\n\n"),
        Garbage(b'data: {"error": {"message": "overloaded"}}\n\n'),
        Garbage(b'data: {"choices": [{"delta": {"content": 7}}]}\n\n'),
    )
    runtime = make_runtime(llm.base_url, timeout_s=0.5)
    try:
        texts = [(await run(runtime, tmp_path, f"try {i}"))[-1] for i in range(7)]
    finally:
        await runtime.aclose()
    assert texts[0] == TurnFailed("The model provider answered HTTP 500: boom")
    assert isinstance(texts[1], TurnFailed) and texts[1].text.startswith(
        "The model provider answered HTTP 401: Incorrect API key provided: "
    )
    assert API_KEY not in texts[1].text and API_KEY[:12] not in texts[1].text
    assert texts[2] == TurnFailed(
        "The model provider sent a malformed answer (no completion chunks)."
    )
    assert texts[3] == TurnFailed("The model provider did not answer in time (0.5 s).")
    assert texts[4] == texts[6] == TurnFailed("The model provider sent a malformed answer.")
    assert texts[5] == TurnFailed("The model provider reported an error: overloaded")


async def test_provider_down_names_the_url_without_credentials(tmp_path: Path) -> None:
    use_secret("hunter2-password", "abc123secret")  # never in any log line either
    runtime = make_runtime("http://user:hunter2-password@127.0.0.1:9/v1?key=abc123secret")
    try:
        events = await run(runtime, tmp_path, "hi")
    finally:
        await runtime.aclose()
    assert events == [TurnFailed("Cannot reach the model provider at http://127.0.0.1:9/v1.")]


async def test_cancel_closes_the_provider_request(llm: FakeLLM, tmp_path: Path) -> None:
    stall = Stall(first="partial")
    llm.script(stall)
    runtime = make_runtime(llm.base_url)
    seen: list[object] = []
    started = asyncio.Event()
    try:

        async def consume() -> None:
            async for event in runtime.run_turn("local-owner", tmp_path, "go", cancelled=Signal()):
                seen.append(event)
                started.set()

        task = asyncio.create_task(consume())
        async with asyncio.timeout(10):
            await started.wait()
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            await stall.closed.wait()  # the server saw the client go away
    finally:
        await runtime.aclose()
    assert seen == [TextDelta("partial")]
    lines = transcript_path(tmp_path, "local-owner").read_bytes().splitlines()
    assert orjson.loads(lines[-1])["content"] == "partial"  # what was said is kept


async def test_idle_sessions_leave_memory_without_the_sweeper_task(
    llm: FakeLLM, tmp_path: Path
) -> None:
    clock = FakeClock()
    runtime = make_runtime(llm.base_url, clock=clock, idle_timeout_s=100)  # start() not called
    try:
        await run(runtime, tmp_path, "one", scope="first")
        clock.now += 101
        await run(runtime, tmp_path, "two", scope="second")  # opening a session sweeps
        assert runtime.sessions.get(tmp_path, "first") is None
        assert runtime.sessions.get(tmp_path, "second") is not None
    finally:
        await runtime.aclose()
