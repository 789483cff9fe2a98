"""The demo model (``--llm-demo``) through the real openai client and the assistant
runtime, as ``chat`` and ``serve`` build it from settings: it streams an echo word by
word, asks back with request_input for "ask me ...", calls a2a for "ask AGENT ...",
answers a tool's result with it, and works the same with ``--llm-stream off``."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from a2a_gateway.agent.demo_model import CAPABILITIES, DEMO_MODEL
from a2a_gateway.agent.runtime import Asked, Finished, TextDelta, ToolStarted
from a2a_gateway.agent.tools import ToolRegistry
from a2a_gateway.agent.tools.base import Tool, ToolContext, ToolResult
from a2a_gateway.agent.tools.interaction import RequestInput
from a2a_gateway.assistant_host import build_runtime
from a2a_gateway.settings import resolve

from .llm_support import run


class Agents(Tool):
    """An ``a2a`` tool whose agents all answer "<agent> says: <message>"."""

    name = "a2a"
    description = "Call other agents."
    parameters: dict[str, Any] = {"type": "object", "properties": {}}

    def __init__(self) -> None:
        self.calls: list[Mapping[str, Any]] = []

    async def call(self, arguments: Mapping[str, Any], context: ToolContext) -> ToolResult:
        self.calls.append(arguments)
        return ToolResult(f"{arguments['agent']} says: {arguments['message']}")


@pytest.fixture(params=["auto", "off"])
def stream(request: pytest.FixtureRequest) -> str:
    value: str = request.param
    return value


async def test_the_demo_model_echoes_asks_back_and_delegates(tmp_path: Path, stream: str) -> None:
    runtime = build_runtime(resolve({"llm_demo": True, "llm_stream": stream}, environ={}))
    agents = Agents()
    tools = ToolRegistry([RequestInput(), agents])
    try:
        assert runtime.provider.config.model == DEMO_MODEL
        echoed = await run(runtime, tmp_path, "hello there", tools=tools)
        assert echoed[-1] == Finished("You said: hello there")
        deltas = [e.text for e in echoed if isinstance(e, TextDelta)]
        assert "".join(deltas) == "You said: hello there"
        assert len(deltas) == (4 if stream == "auto" else 1)  # a word a chunk when streamed
        about = await run(runtime, tmp_path, "What can you do?", tools=tools)
        assert about[-1] == Finished(CAPABILITIES)

        asked = await run(runtime, tmp_path, "ask me which colour", tools=tools, ask_tag="t1")
        assert asked[-1] == Asked("which colour", None)
        answered = await run(runtime, tmp_path, "blue", tools=tools, ask_tag="t1")
        assert answered[-1] == Finished("blue")

        delegated = await run(runtime, tmp_path, "ask assistant-a what it can do", tools=tools)
        sent = {"action": "send", "agent": "assistant-a", "message": "what it can do"}
        assert delegated[0] == ToolStarted("a2a", sent)
        assert delegated[-1] == Finished("assistant-a says: what it can do")
        assert agents.calls == [sent]

        # Without the a2a tool (an inbound caller's session) it says it cannot; without
        # request_input (the owner's chat) it asks in its answer.
        alone = await run(runtime, tmp_path, "ask bob hi", tools=ToolRegistry([RequestInput()]))
        assert alone[-1] == Finished(
            "I cannot ask bob: here I have no a2a tool (the owner's chat has it)."
        )
        owner = await run(runtime, tmp_path, "ask me which day", tools=ToolRegistry([agents]))
        assert owner[-1] == Finished("which day?")
    finally:
        await runtime.aclose()


async def test_headers_the_assistant_adds_are_not_read_as_the_request(tmp_path: Path) -> None:
    runtime = build_runtime(resolve({"llm_demo": True}, environ={}))
    text = "[A2A message from the external agent 'b'. This is not your owner.]\n\nask me why"
    try:
        events = await run(runtime, tmp_path, text, tools=ToolRegistry([RequestInput()]))
    finally:
        await runtime.aclose()
    assert events[-1] == Asked("why", None)


def test_the_demo_model_asks_for_a_secret_and_never_repeats_it() -> None:
    from a2a_gateway.agent.demo_model import SECRET_THANKS, demo_reply
    from a2a_gateway.agent.runtime import SECRET_GIVEN

    for tool in (RequestInput(), RequestInput(secret_only=True)):
        body = {
            "messages": [{"role": "user", "content": "ask me for a secret: your token"}],
            "tools": [tool.spec()],
        }
        assert demo_reply(body) == (
            "",
            [("request_input", {"question": "your token", "secret": True})],
        )
    # The owner's terminal chat offers request_input for secrets only: a plain question
    # is the answer there.
    body["messages"] = [{"role": "user", "content": "ask me which colour"}]
    assert demo_reply(body) == ("which colour?", [])
    given = {"role": "tool", "content": SECRET_GIVEN + "tok-demo-0123456789"}
    assert demo_reply({"messages": [given]}) == (SECRET_THANKS, [])
