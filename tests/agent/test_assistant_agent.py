"""The A2A adapter on its own (no engine): framing with and without notify_owner, the
tool-loop bound as a failed ending, the message template."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from a2a_gateway.agent.assistant import AssistantAgent, AssistantConfig
from a2a_gateway.agent.base import Completed, Failed, Output, Signal, TextChunk, Turn
from a2a_gateway.agent.prompt import (
    check_template,
    framing_header,
    render_template,
    uses_payload,
)
from a2a_gateway.agent.tools.interaction import InboxNotifier
from a2a_gateway.protocol.context import Caller
from lf.a2a.v1 import a2a_pb2 as pb

from .fake_llm import Calls, FakeLLM, user_texts
from .llm_support import llm, make_runtime

__all__ = ["llm"]


def a_turn(workspace: Path, text: str) -> Turn:
    message = pb.Message(message_id="m-1", role=pb.ROLE_USER, parts=[pb.Part(text=text)])
    task = pb.Task(id="task-1", context_id="ctx-1", history=[message])
    caller = Caller(name="travel-bot", workspace=str(workspace))
    return Turn(message, task, caller, "ctx-1", Signal())


async def outputs(agent: AssistantAgent, turn: Turn) -> list[Output]:
    async with asyncio.timeout(15):
        return [output async for output in agent.run(turn)]


def test_framing_mentions_notify_owner_only_when_it_exists() -> None:
    with_tool = framing_header("travel-bot", can_notify_owner=True)
    without = framing_header("travel-bot", can_notify_owner=False)
    assert "'travel-bot'" in without and "not your owner" in without
    assert "notify_owner" in with_tool and "notify_owner" not in without


def test_template_placeholders() -> None:
    rendered = render_template(
        "[{{a2a.task_id}}/{{a2a.context_id}}] {{a2a.text}} {{a2a.other}}",
        text="hi {{a2a.task_id}}",
        task_id="t",
        context_id="c",
    )
    assert rendered == "[t/c] hi {{a2a.task_id}} {{a2a.other}}"
    with_payload = render_template(
        "{{ a2a.text }} {{payload}} {{ payload }} {{other}}",
        text="hi",
        task_id="t",
        context_id="c",
        payload='{"message":{"parts":[{"text":"{{a2a.text}}"}]}}',
    )
    assert with_payload == (
        'hi {"message":{"parts":[{"text":"{{a2a.text}}"}]}}'
        ' {"message":{"parts":[{"text":"{{a2a.text}}"}]}} {{other}}'
    )
    check_template("{{a2a.text}} {{payload}}")
    assert uses_payload("{{ payload }}") and not uses_payload("{{a2a.text}} payload")
    with pytest.raises(ValueError, match="unknown placeholder"):
        check_template("{{a2a.payload}}")
    with pytest.raises(ValueError):
        AssistantConfig(session_mode="per-day")


async def test_without_a_notifier_there_is_no_notify_owner(llm: FakeLLM, tmp_path: Path) -> None:
    runtime = make_runtime(llm.base_url)
    try:
        plain = AssistantAgent(runtime, AssistantConfig(message_template="Q: {{a2a.text}}"))
        assert await outputs(plain, a_turn(tmp_path, "hello")) == [TextChunk("ok"), Completed()]
        notifying = AssistantAgent(runtime, notifier=InboxNotifier())
        await outputs(notifying, a_turn(tmp_path / "other", "again"))
    finally:
        await runtime.aclose()
    first, second = llm.requests
    assert "notify_owner" not in user_texts(first)[0]
    assert user_texts(first)[0].endswith("\n\nQ: hello")
    assert "notify_owner" not in [t["function"]["name"] for t in first["tools"]]
    assert "notify_owner" in user_texts(second)[0]
    assert "notify_owner" in [t["function"]["name"] for t in second["tools"]]


async def test_tool_loop_bound_fails_the_task(llm: FakeLLM, tmp_path: Path) -> None:
    llm.responder = lambda body: Calls([("list_files", {})])
    runtime = make_runtime(llm.base_url, max_tool_rounds=2)
    try:
        found = await outputs(AssistantAgent(runtime), a_turn(tmp_path, "loop"))
    finally:
        await runtime.aclose()
    assert found == [Failed("The model kept calling tools: stopped after 2 rounds.")]
