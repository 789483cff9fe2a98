"""The a2a tool's per-call choices against a real faux gateway, on the injected clock:
``mode`` (foreground, background), the ``wait`` action and its bound, a message to a
running task, ``resultSchema`` (checked, asked once more, the mismatch reported), and a
question asked with a schema answered with ``data``."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from google.protobuf import json_format

import lf.a2a.v1.a2a_pb2 as pb
from a2a_gateway.agent.faux import FORM_SCHEMA
from a2a_gateway.agent.tools.base import ToolError
from a2a_gateway.client import connect
from a2a_gateway.client.a2a_tool import A2ATool
from a2a_gateway.client.pending import read_pending
from a2a_gateway.client.results import STILL_RUNNING, STILL_RUNNING_UNWATCHED
from a2a_gateway.client.watches import WatchRegistry
from a2a_gateway.serve import Gateway

from .delegation_support import (
    REMOTE_KEY,
    SCOPE,
    Inbox,
    ManualClock,
    base_url,
    call,
    ctx,
    eventually,
    ids,
)

CITY = {
    "type": "object",
    "properties": {"city": {"type": "string"}},
    "required": ["city"],
}


#: Every test here is assistant B calling ``remote`` (tests/client/conftest.py).
pytestmark = pytest.mark.usefixtures("calls_remote")


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
async def registry(clock: ManualClock) -> AsyncIterator[WatchRegistry]:
    registry = WatchRegistry(clock=clock)
    try:
        yield registry
    finally:
        await registry.aclose()


@pytest.fixture
def tool(registry: WatchRegistry) -> A2ATool:
    return A2ATool(registry, wait_s=60, max_wait_s=600)


async def send_city(tool: A2ATool, workspace: Path, message: str, **extra: object) -> str:
    """send ``message`` with the CITY resultSchema."""
    return await call(
        tool,
        workspace,
        action="send",
        agent="assistant-a",
        message=message,
        resultSchema=CITY,
        **extra,
    )


async def error(tool: A2ATool, workspace: Path, **arguments: object) -> str:
    with pytest.raises(ToolError) as failed:
        await tool.call(arguments, ctx(workspace))
    return str(failed.value)


async def remote_task(remote: Gateway, task_id: str) -> pb.Task:
    async with await connect(base_url(remote), key=REMOTE_KEY) as service:
        return await service.get_task(pb.GetTaskRequest(id=task_id))


def still_running(text: str) -> bool:
    return text.split("\n")[1:] == [STILL_RUNNING]


async def test_foreground_waits_up_to_the_max_wait(
    tool: A2ATool, workspace: Path, clock: ManualClock
) -> None:
    text = await call(
        tool, workspace, action="send", agent="assistant-a", message="hold:0.2", mode="foreground"
    )
    assert text.splitlines()[0].endswith("is completed.")
    assert clock.slept == [600.0]  # the stream was followed for up to --a2a-max-wait


async def test_foreground_past_its_bound_is_handed_to_a_watch(
    tool: A2ATool, workspace: Path, clock: ManualClock, registry: WatchRegistry
) -> None:
    pending = asyncio.ensure_future(
        call(
            tool,
            workspace,
            action="send",
            agent="assistant-a",
            message="hold:100",
            mode="foreground",
        )
    )
    await eventually(lambda: 600.0 in clock.slept)
    clock.advance(599)
    await asyncio.sleep(0.05)
    assert not pending.done()
    clock.advance(1)
    text = await pending
    assert text.splitlines()[0].endswith("is working.") and still_running(text)
    (watch,) = registry.watches()
    await call(tool, workspace, action="cancel", agent="assistant-a", taskId=watch.record.taskId)


async def test_background_returns_at_once_and_the_result_follows(
    tool: A2ATool, workspace: Path, clock: ManualClock, registry: WatchRegistry
) -> None:
    inbox = Inbox()
    registry.register_target(workspace, SCOPE, inbox)
    text = await call(
        tool, workspace, action="send", agent="assistant-a", message="hi there", mode="background"
    )
    task_id, context_id = ids(text)
    assert still_running(text)
    assert 60.0 not in clock.slept  # --a2a-wait did not apply
    await eventually(lambda: bool(inbox.texts))
    assert inbox.texts == [
        (
            SCOPE,
            f'[A2A result from "assistant-a", task {task_id} (completed)]\n'
            f"Context: {context_id}\nhi there",
        )
    ]
    await eventually(lambda: read_pending(workspace) == [])


async def test_wait_returns_when_the_task_settles(
    tool: A2ATool, workspace: Path, registry: WatchRegistry
) -> None:
    # No delivery target: a result the watch finished first would stay kept.
    text = await call(
        tool, workspace, action="send", agent="assistant-a", message="hold:0.2", mode="background"
    )
    task_id, _ = ids(text)
    waited = await call(tool, workspace, action="wait", agent="assistant-a", taskId=task_id)
    assert waited.splitlines()[0].endswith("is completed.")
    status = await call(tool, workspace, action="status", agent="assistant-a", taskId=task_id)
    assert waited == status
    # The result was given by wait: no watch delivers it again.
    assert registry.watches() == [] and read_pending(workspace) == []


async def test_wait_at_its_bound_leaves_the_task_watched(
    tool: A2ATool, workspace: Path, clock: ManualClock, registry: WatchRegistry
) -> None:
    text = await call(
        tool, workspace, action="send", agent="assistant-a", message="hold:100", mode="background"
    )
    task_id, _ = ids(text)
    (watch,) = registry.watches()
    for seconds, expected in ((5, 5.0), (10_000, 600.0)):  # capped at --a2a-max-wait
        before = len(clock.slept)
        waiting = asyncio.ensure_future(
            call(
                tool, workspace, action="wait", agent="assistant-a", taskId=task_id, seconds=seconds
            )
        )
        await eventually(lambda e=expected, b=before: e in clock.slept[b:])  # type: ignore[misc]
        clock.advance(expected)
        waited = await waiting
        assert waited.splitlines()[0].endswith("is working.") and still_running(waited)
        # The watch paused while wait followed the task, then goes on as it was.
        assert [w.record.watchId for w in registry.watches()] == [watch.record.watchId]
        assert [r.watchId for r in read_pending(workspace)] == [watch.record.watchId]
    # An aborted wait (the owner stopped the turn) leaves the same watch going.
    before = len(clock.slept)
    waiting = asyncio.ensure_future(
        call(tool, workspace, action="wait", agent="assistant-a", taskId=task_id)
    )
    await eventually(lambda: len(clock.slept) > before)
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    assert [w.record.watchId for w in registry.watches()] == [watch.record.watchId]
    # status of a running task says the same.
    status = await call(tool, workspace, action="status", agent="assistant-a", taskId=task_id)
    assert still_running(status)
    assert "seconds: must be more than 0" in await error(
        tool, workspace, action="wait", agent="assistant-a", taskId=task_id, seconds=0
    )
    await call(tool, workspace, action="cancel", agent="assistant-a", taskId=task_id)


async def test_send_to_a_running_task_shows_the_agents_answer(
    tool: A2ATool, workspace: Path
) -> None:
    text = await call(
        tool, workspace, action="send", agent="assistant-a", message="hold:100", mode="background"
    )
    task_id, _ = ids(text)
    refused = await error(
        tool, workspace, action="send", agent="assistant-a", message="faster", taskId=task_id
    )
    # Our gateway takes messages only on a task waiting for input: its error, as is.
    assert refused == (
        f'Agent "assistant-a" refused: Task {task_id} is not waiting for input'
        " (TASK_STATE_WORKING) (-32004)"
    )
    await call(tool, workspace, action="cancel", agent="assistant-a", taskId=task_id)


async def test_mode_and_result_schema_are_checked(tool: A2ATool, workspace: Path) -> None:
    send = {"action": "send", "agent": "assistant-a", "message": "hi"}
    assert "mode: must be one of: foreground, background" in await error(
        tool, workspace, **send, mode="later"
    )
    assert "resultSchema: must be a JSON Schema object" in await error(
        tool, workspace, **send, resultSchema=[1]
    )
    assert "resultSchema: not a valid JSON Schema" in await error(
        tool, workspace, **send, resultSchema={"type": 5}
    )


async def test_result_schema_accepts_a_data_answer(
    tool: A2ATool, workspace: Path, remote: Gateway
) -> None:
    text = await send_city(tool, workspace, 'data:{"city": "Lisbon"}')
    assert text.splitlines()[1:] == ["Result (matches resultSchema):", '{"city":"Lisbon"}']
    # The schema went out as a data part and in the message's metadata.
    task = await remote_task(remote, ids(text)[0])
    sent = task.history[0]
    schema_part = sent.parts[1]
    assert schema_part.media_type == "application/schema+json"
    assert json_format.MessageToDict(schema_part.data) == CITY
    assert json_format.MessageToDict(sent.metadata)["resultSchema"] == CITY
    # A JSON text answer (the faux agent echoes it) is accepted as well.
    text = await send_city(tool, workspace, '```json\n{"city": "Porto"}\n```')
    assert text.splitlines()[1:] == ["Result (matches resultSchema):", '{"city":"Porto"}']


async def test_result_schema_on_a_message_reply(tool: A2ATool, workspace: Path) -> None:
    send = {"action": "send", "agent": "assistant-a", "resultSchema": CITY}
    text = await call(tool, workspace, **send, message='message:{"city": "Braga"}')
    assert text.splitlines()[1:] == ["Result (matches resultSchema):", '{"city":"Braga"}']
    # A reply that does not match is asked for once more (the faux agent answers the
    # second ask with a task that echoes it).
    text = await call(tool, workspace, **send, message="message:nope")
    assert text.splitlines()[1].startswith(
        "The answer does not match resultSchema: the answer holds no JSON"
    )


async def test_a_watch_keeps_the_result_schema(
    tool: A2ATool, workspace: Path, registry: WatchRegistry
) -> None:
    text = await send_city(tool, workspace, "hold:100", mode="background")
    task_id, _ = ids(text)
    (record,) = read_pending(workspace)
    assert (record.taskId, record.resultSchema) == (task_id, CITY)
    assert registry.watches()[0].record.resultSchema == CITY
    await call(tool, workspace, action="cancel", agent="assistant-a", taskId=task_id)


async def test_result_schema_asks_once_more_then_reports_the_mismatch(
    tool: A2ATool, workspace: Path, remote: Gateway
) -> None:
    text = await send_city(tool, workspace, 'data:{"town": "Lisbon"}')
    second_id, context_id = ids(text)
    lines = text.splitlines()
    assert lines[0].endswith("is completed.")
    # The faux agent echoes the second ask, which is no JSON.
    assert lines[1] == (
        "The answer does not match resultSchema: the answer holds no JSON (no data part,"
        " and no text that parses as JSON). It was asked once more; this is its second"
        " answer. The answer:"
    )
    assert lines[2].startswith("Your answer does not match the required result schema: at /:")
    second = await remote_task(remote, second_id)
    asked = second.history[0]
    (first_id,) = asked.reference_task_ids
    assert first_id != second_id and second.context_id == context_id
    assert "'city' is a required property" in asked.parts[0].text
    assert json_format.MessageToDict(asked.metadata)["resultSchema"] == CITY
    first = await remote_task(remote, first_id)
    assert first.context_id == context_id


async def test_a_watch_checks_the_result_before_delivering(
    tool: A2ATool, workspace: Path, registry: WatchRegistry
) -> None:
    inbox = Inbox()
    registry.register_target(workspace, SCOPE, inbox)
    for message, expected in (
        ('data:{"city": "Faro"}', ["Result (matches resultSchema):", '{"city":"Faro"}']),
        (
            'data:{"city": 7}',
            ["The answer does not match resultSchema: at /city: 7 is not of type 'string'."
             " The answer:", '{"city":7}'],
        ),
    ):  # fmt: skip
        text = await send_city(tool, workspace, message, mode="background")
        assert still_running(text)
        count = len(inbox.texts)
        await eventually(lambda c=count: len(inbox.texts) > c)  # type: ignore[misc]
        assert inbox.texts[-1][1].splitlines()[2:] == expected


async def test_a_question_with_a_schema_is_answered_with_data(
    tool: A2ATool, workspace: Path, remote: Gateway
) -> None:
    text = await call(tool, workspace, action="send", agent="assistant-a", message="form:Where?")
    task_id, _ = ids(text)
    lines = text.splitlines()
    schema_line = lines.pop(2)
    prefix = "Answer schema (JSON Schema): "
    assert schema_line.startswith(prefix)
    assert json.loads(schema_line.removeprefix(prefix)) == FORM_SCHEMA
    assert lines[1:] == [
        "Where?",
        f'To answer, call a2a with action=send, agent="assistant-a", taskId={task_id} and the'
        " answer as `data` (a JSON value matching the schema; it is checked) or as the"
        " message (ask the user first if you do not know it).",
    ]
    before = await remote_task(remote, task_id)
    refused = await error(
        tool, workspace, action="send", agent="assistant-a", taskId=task_id, data={"answer": 3}
    )
    assert refused == (
        'Agent "assistant-a" refused: message.parts[0].data: does not match the question\'s'
        " schema: at /answer: 3 is not of type 'string' (-32602)"
    )
    assert await remote_task(remote, task_id) == before  # nothing stored changed
    answered = await call(
        tool, workspace, action="send", agent="assistant-a", taskId=task_id, data={"answer": "Faro"}
    )
    assert answered.splitlines()[1:] == ['{"answer":"Faro"}']


async def test_an_inbound_callers_tool_waits_and_hands_nothing_to_a_watch(
    workspace: Path, clock: ManualClock, registry: WatchRegistry
) -> None:
    # The tool of a caller whose callers.json entry says "delegate": true (serve --llm):
    # it runs with a caller in its context, and a task still running at the wait's end is
    # reported so, unwatched (no conversation would take a later result), for `wait`.
    tool = A2ATool(registry, wait_s=60, max_wait_s=600, inbound=True)
    caller = ctx(workspace, caller="carol", hops=1)
    pending = asyncio.ensure_future(
        tool.call(
            {"action": "send", "agent": "assistant-a", "message": "hold:100", "mode": "background"},
            caller,
        )
    )
    text = (await pending).text
    assert text.splitlines()[0].endswith(("is submitted.", "is working."))
    assert text.split("\n")[1:] == [STILL_RUNNING_UNWATCHED]
    assert registry.watches() == [] and read_pending(workspace) == []
    task_id, _ = ids(text)
    waiting = asyncio.ensure_future(
        tool.call({"action": "wait", "agent": "assistant-a", "taskId": task_id}, caller)
    )
    await eventually(lambda: 600.0 in clock.slept)
    clock.advance(600)
    assert (await waiting).text.split("\n")[1:] == [STILL_RUNNING_UNWATCHED]
    assert registry.watches() == []
    canceled = await tool.call(
        {"action": "cancel", "agent": "assistant-a", "taskId": task_id}, caller
    )
    assert canceled.text.splitlines()[0].endswith("is canceled.")
