"""The a2a tool against a real faux gateway, on the injected clock: every action, the
exact result texts, files out and in, errors, hops, and the hand-over to a watch."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from a2a_gateway.agent.tools.base import ToolError
from a2a_gateway.client.a2a_tool import A2ATool
from a2a_gateway.client.pending import read_pending
from a2a_gateway.client.watches import WatchRegistry
from a2a_gateway.local.layout import WorkspaceLayout
from a2a_gateway.local.redaction import redact
from a2a_gateway.serve import Gateway
from tests.support.ports import free_port

from .client_support import serving, silent_server
from .delegation_support import (
    REMOTE_KEY,
    SCOPE,
    Inbox,
    ManualClock,
    base_url,
    call,
    ctx,
    eventually,
    faux_gateway,
    ids,
    write_agents,
)


@pytest.fixture
async def remote(tmp_path: Path) -> AsyncIterator[Gateway]:
    async with faux_gateway(tmp_path / "a", max_hops=2) as gateway:
        yield gateway


#: What this module's ``workspace`` says of ``remote`` (``calls_remote``, tests/client/conftest.py).
REMOTE_ENTRY = {"description": "The other assistant"}
pytestmark = pytest.mark.usefixtures("calls_remote")


@pytest.fixture
async def tool() -> AsyncIterator[A2ATool]:
    registry = WatchRegistry(clock=ManualClock())
    try:
        yield A2ATool(registry)
    finally:
        await registry.aclose()


async def test_agents_lists_cards_and_problems(tool: A2ATool, workspace: Path) -> None:
    path = WorkspaceLayout(workspace).agents
    entries = json.loads(path.read_text())
    gone = f"http://127.0.0.1:{free_port()}"
    entries += [{"name": "gone", "url": gone, "allow_private": True}, {"name": "BAD"}]
    path.write_text(json.dumps(entries))
    text = await call(tool, workspace, action="agents")
    lines = text.splitlines()
    assert lines[0] == "- assistant-a: The other assistant"
    assert lines[1] == "  card name: a2a-gateway agent; streaming: yes; push: yes"
    assert any(line.startswith("  skill ") for line in lines)
    assert any(line.startswith("- gone: unreachable (Could not reach ") for line in lines)
    assert lines[-1].startswith("skipped: entry 3")
    assert REMOTE_KEY not in text
    path.write_text("{oops")
    text = await call(tool, workspace, action="agents")
    assert text == ".a2a/agents.json could not be read: not valid JSON"


async def test_blocking_send_hi(tool: A2ATool, workspace: Path) -> None:
    text = await call(tool, workspace, action="send", agent="assistant-a", message="hi")
    task_id, context_id = ids(text)
    assert text == f'Agent "assistant-a": task {task_id} (context {context_id}) is completed.\nhi'
    # The same conversation continues with contextId.
    again = await call(
        tool, workspace, action="send", agent="assistant-a", message="more", contextId=context_id
    )
    assert ids(again)[1] == context_id
    status = await call(tool, workspace, action="status", agent="assistant-a", taskId=task_id)
    assert status == text


async def test_plain_message_reply(tool: A2ATool, workspace: Path) -> None:
    text = await call(tool, workspace, action="send", agent="assistant-a", message="message:hello")
    assert text.startswith('Agent "assistant-a" replied (context ')
    assert text.endswith("):\nhello")


async def test_question_then_answer_with_task_id(tool: A2ATool, workspace: Path) -> None:
    text = await call(
        tool, workspace, action="send", agent="assistant-a", message="ask:Which city?"
    )
    task_id, context_id = ids(text)
    assert text.splitlines() == [
        f'Agent "assistant-a": task {task_id} (context {context_id}) is input-required.',
        "Which city?",
        f'To answer, call a2a with action=send, agent="assistant-a", taskId={task_id} and the'
        " answer as the message (ask the user first if you do not know it).",
    ]
    answer = await call(
        tool, workspace, action="send", agent="assistant-a", message="Lisbon", taskId=task_id
    )
    assert answer.splitlines()[0].endswith("is completed.") and ids(answer)[0] == task_id
    assert "Lisbon" in answer


async def test_files_out_and_back(tool: A2ATool, workspace: Path, remote: Gateway) -> None:
    (workspace / "notes.txt").write_text("some notes")
    text = await call(
        tool,
        workspace,
        action="send",
        agent="assistant-a",
        message="file:report.txt",
        files=["notes.txt"],
    )
    assert text.splitlines()[-1] == "Files: inbox/a2a/assistant-a/report.txt"
    saved = workspace / "inbox" / "a2a" / "assistant-a" / "report.txt"
    assert b"Name: report.txt" in saved.read_bytes()
    # The file went out: it is in A's inbox, under the caller's name.
    a_inbox = Path(remote.config.workspaces[0]) / "inbox" / "assistant-b" / "notes.txt"
    assert a_inbox.read_text() == "some notes"
    # A clash with other bytes gets -2; the same bytes again are the file already saved.
    again = await call(
        tool, workspace, action="send", agent="assistant-a", message="file:report.txt:50"
    )
    assert again.splitlines()[-1] == "Files: inbox/a2a/assistant-a/report-2.txt"
    for _ in range(2):
        status = await call(
            tool, workspace, action="status", agent="assistant-a", taskId=ids(again)[0]
        )
        assert status == again
    first = await call(
        tool, workspace, action="send", agent="assistant-a", message="file:report.txt"
    )
    assert first.splitlines()[-1] == "Files: inbox/a2a/assistant-a/report.txt"
    names = sorted(p.name for p in saved.parent.iterdir())
    assert names == ["report-2.txt", "report.txt"]


async def test_files_over_the_cap_are_skipped(workspace: Path) -> None:
    registry = WatchRegistry(clock=ManualClock())
    small = A2ATool(registry, max_file_bytes=20)
    try:
        text = await call(
            small, workspace, action="send", agent="assistant-a", message="file:big.bin:100"
        )
        assert "Files skipped (over 20 bytes): big.bin" in text
        assert not (workspace / "inbox" / "a2a" / "assistant-a" / "big.bin").exists()
        (workspace / "a.txt").write_bytes(b"x" * 15)
        (workspace / "b.txt").write_bytes(b"y" * 15)
        with pytest.raises(ToolError, match="together they are over 20 bytes"):
            await small.call(
                {"action": "send", "agent": "assistant-a", "files": ["a.txt", "b.txt"]},
                ctx(workspace),
            )
    finally:
        await registry.aclose()


@pytest.mark.parametrize(
    ("path", "error"),
    [
        ("../outside.txt", "'..' is refused"),
        ("/etc/passwd", "absolute paths are refused"),
        ("missing.txt", "no such file"),
        ("folder", "not a regular file"),
        ("link.txt", "outside the workspace"),
    ],
)
async def test_files_out_are_confined(
    tool: A2ATool, workspace: Path, tmp_path: Path, path: str, error: str
) -> None:
    (workspace / "folder").mkdir()
    (tmp_path / "secret.txt").write_text("no")
    (workspace / "link.txt").symlink_to(tmp_path / "secret.txt")
    with pytest.raises(ToolError, match=error):
        await tool.call(
            {"action": "send", "agent": "assistant-a", "message": "hi", "files": [path]},
            ctx(workspace),
        )


async def test_long_send_is_handed_to_a_watch(workspace: Path, remote: Gateway) -> None:
    clock = ManualClock()
    registry = WatchRegistry(clock=clock)
    tool = A2ATool(registry)
    try:
        pending = asyncio.ensure_future(
            call(tool, workspace, action="send", agent="assistant-a", message="hold:100")
        )
        await eventually(lambda: 60.0 in clock.slept)  # waiting on the stream
        clock.advance(60)
        text = await pending
        task_id, context_id = ids(text)
        assert text == (
            f'Agent "assistant-a": task {task_id} (context {context_id}) is working.\n'
            "It is still running: the result will be delivered to this conversation when it"
            " is ready."
        )
        (record,) = read_pending(workspace)
        assert (record.taskId, record.target, record.source) == (task_id, SCOPE, "subscribe")
        # cancel stops the watch first, then cancels the task.
        text = await call(tool, workspace, action="cancel", agent="assistant-a", taskId=task_id)
        assert text == f'Agent "assistant-a": task {task_id} (context {context_id}) is canceled.'
        assert read_pending(workspace) == [] and registry.watches() == []
        # Canceling again is refused by the agent: said so, with the task's outcome.
        text = await call(tool, workspace, action="cancel", agent="assistant-a", taskId=task_id)
        first, rest = text.split("\n", 1)
        assert first.startswith('Agent "assistant-a" refused to cancel: ')
        assert first.endswith("(-32002)")
        assert rest == f'Agent "assistant-a": task {task_id} (context {context_id}) is canceled.'
    finally:
        await registry.aclose()


async def test_wait_zero_hands_over_at_once_and_the_watch_delivers(
    workspace: Path, remote: Gateway
) -> None:
    clock, inbox = ManualClock(), Inbox()
    registry = WatchRegistry(clock=clock)
    registry.register_target(workspace, SCOPE, inbox)
    tool = A2ATool(registry, wait_s=0)
    try:
        text = await call(tool, workspace, action="send", agent="assistant-a", message="hold:1")
        assert text.endswith("when it is ready.")
        await eventually(lambda: bool(inbox.texts))  # the watch's stream saw it complete
        task_id, context_id = ids(text)
        assert inbox.texts[0][1] == (
            f'[A2A result from "assistant-a", task {task_id} (completed)]\n'
            f"Context: {context_id}"  # hold: completes without an answer text
        )
        text = await call(tool, workspace, action="send", agent="assistant-a", message="ask:Why?")
        task_id, context_id = ids(text)
        await eventually(lambda: len(inbox.texts) == 2)
        assert inbox.texts[1][1].splitlines()[:3] == [
            f'[A2A question from "assistant-a", task {task_id} (input-required)]',
            f"Context: {context_id}",
            "Why?",
        ]
        await eventually(lambda: read_pending(workspace) == [])
    finally:
        await registry.aclose()


async def test_aborted_send_still_watches_the_task(workspace: Path, remote: Gateway) -> None:
    clock = ManualClock()
    registry = WatchRegistry(clock=clock)
    tool = A2ATool(registry)
    try:
        pending = asyncio.ensure_future(
            call(tool, workspace, action="send", agent="assistant-a", message="hold:100")
        )
        await eventually(lambda: 60.0 in clock.slept)
        pending.cancel()  # the owner stopped the turn
        with pytest.raises(asyncio.CancelledError):
            await pending
        (watch,) = registry.watches()
        assert watch.record.agent == "assistant-a"
        await eventually(lambda: len(read_pending(workspace)) == 1)
        await call(
            tool, workspace, action="cancel", agent="assistant-a", taskId=watch.record.taskId
        )
    finally:
        await registry.aclose()


async def test_cancel_when_unreachable_rearms_the_watch(workspace: Path, tmp_path: Path) -> None:
    clock = ManualClock()
    registry = WatchRegistry(clock=clock)
    tool = A2ATool(registry, wait_s=0)
    async with faux_gateway(tmp_path / "c") as other:
        write_agents(
            workspace,
            [{"name": "c", "url": base_url(other), "key": REMOTE_KEY, "allow_private": True}],
        )
        text = await call(tool, workspace, action="send", agent="c", message="hold:100")
        task_id, _ = ids(text)
        watch_id = registry.watches()[0].record.watchId
        # The agent "moves" where nothing answers (agents.json is read on every call). The
        # gateway itself stays up: stopping it would cancel the task, and a watch that
        # sees it settle ends, which is not the case under test.
        write_agents(
            workspace,
            [{"name": "c", "url": f"http://127.0.0.1:{free_port()}/", "key": REMOTE_KEY,
              "allow_private": True}],
        )  # fmt: skip
        try:
            with pytest.raises(ToolError) as failed:
                await tool.call(
                    {"action": "cancel", "agent": "c", "taskId": task_id}, ctx(workspace)
                )
            message = str(failed.value)
            assert message.startswith('Could not reach agent "c": ')
            assert message.endswith("The task is still watched.")
            assert [w.record.watchId for w in registry.watches()] == [watch_id]
            assert [r.watchId for r in read_pending(workspace)] == [watch_id]
        finally:
            await registry.aclose()


async def test_cancel_whose_key_is_rejected_keeps_the_watch(
    workspace: Path, tmp_path: Path
) -> None:
    # Only an unreachable agent re-armed the watch: a cancel refused for its key (or a
    # broken card) dropped the watch and its record of a task still running.
    registry = WatchRegistry(clock=ManualClock())
    tool = A2ATool(registry, wait_s=0)
    async with faux_gateway(tmp_path / "c") as other:
        entry = {"name": "c", "url": base_url(other), "allow_private": True}
        write_agents(workspace, [{**entry, "key": REMOTE_KEY}])
        text = await call(tool, workspace, action="send", agent="c", message="hold:100")
        task_id, _ = ids(text)
        watch_id = registry.watches()[0].record.watchId
        write_agents(workspace, [{**entry, "key": "k-rotated-0123456789"}])
        try:
            with pytest.raises(ToolError) as failed:
                await tool.call(
                    {"action": "cancel", "agent": "c", "taskId": task_id}, ctx(workspace)
                )
            assert str(failed.value) == (
                'Agent "c" rejected the key (401). The task is still watched.'
            )
            assert [w.record.watchId for w in registry.watches()] == [watch_id]
            assert [r.watchId for r in read_pending(workspace)] == [watch_id]
        finally:
            await registry.aclose()


async def test_errors(tool: A2ATool, workspace: Path, remote: Gateway) -> None:
    async def error(**arguments: Any) -> str:
        with pytest.raises(ToolError) as failed:
            await tool.call(arguments, ctx(workspace))
        return str(failed.value)

    assert (
        await error(action="send", agent="nobody", message="hi")
        == 'Unknown agent "nobody". Configured agents: assistant-a.'
    )
    refused = await error(action="send", agent="assistant-a", message="x", taskId="no-such-task")
    assert refused.startswith('Agent "assistant-a" refused: ') and refused.endswith("(-32001)")
    assert "action must be one of" in await error(action="fly", agent="assistant-a")
    assert "taskId: required" in await error(action="status", agent="assistant-a")
    assert "needs a message, data or files" in await error(action="send", agent="assistant-a")
    wrong = "wrong-key-5f3a2b1c9d0e"
    async with silent_server() as silent_port:
        write_agents(
            workspace,
            [
                {"name": "wrong", "url": base_url(remote), "key": wrong, "allow_private": True},
                {"name": "down", "url": f"http://127.0.0.1:{free_port()}", "allow_private": True},
                {"name": "guarded", "url": base_url(remote), "key": REMOTE_KEY},
                {"name": "silent", "url": f"http://127.0.0.1:{silent_port}", "allow_private": True},
            ],
        )
        assert (
            await error(action="send", agent="wrong", message="hi")
            == 'Agent "wrong" rejected the key (401).'
        )
        assert (await error(action="send", agent="down", message="hi")).startswith(
            'Could not reach agent "down": '
        )
        guarded = await error(action="send", agent="guarded", message="hi")
        assert guarded.startswith('Could not reach agent "guarded": ') and "loopback" in guarded
        tool.call_timeout_s = 0.3
        assert (
            await error(action="send", agent="silent", message="hi")
            == 'Agent "silent" did not answer in time.'
        )
    with pytest.raises(ToolError, match="only available in the owner's own"):
        await tool.call({"action": "agents"}, ctx(workspace, caller="someone"))


async def test_hops_plus_one(tool: A2ATool, workspace: Path) -> None:
    # The remote allows 2 hops: an owner session (0) sends 1, an inbound one at 2 sends 3.
    ok = await tool.call(
        {"action": "send", "agent": "assistant-a", "message": "hi"}, ctx(workspace, hops=1)
    )
    assert ok.text.split("\n", 1)[0].endswith("is completed.")
    over = await tool.call(
        {"action": "send", "agent": "assistant-a", "message": "hi"}, ctx(workspace, hops=2)
    )
    assert over.text.split("\n", 1)[0].endswith("is failed.")


ECHOED_KEY = "echoed-key-3e8d1c5b9a7f"


def echoing_agent() -> web.Application:
    """An agent that takes the task, then answers every read of it with an error that
    quotes the key it was sent (as careless servers quote a rejected credential)."""

    async def card(request: web.Request) -> web.Response:
        base = f"http://{request.host}"
        return web.json_response(
            {
                "name": "echo",
                "description": "echoes credentials in its errors",
                "version": "1.0.0",
                "capabilities": {"streaming": True},
                "defaultInputModes": ["text/plain"],
                "defaultOutputModes": ["text/plain"],
                "skills": [],
                "supportedInterfaces": [
                    {"url": base + "/rpc", "protocolBinding": "JSONRPC", "protocolVersion": "1.0"}
                ],
            }
        )

    async def rpc(request: web.Request) -> web.Response:
        body = await request.json()
        if body["method"] == "SendMessage":
            state = {"state": "TASK_STATE_WORKING"}
            task = {"id": "t-echo", "contextId": "c-echo", "status": state}
            return web.json_response({"jsonrpc": "2.0", "id": body["id"], "result": {"task": task}})
        presented = request.headers.get("X-API-Key", "")
        error = {"code": -32603, "message": f"{body['method']}: key {presented} is not allowed"}
        return web.json_response({"jsonrpc": "2.0", "id": body["id"], "error": error})

    app = web.Application()
    app.router.add_get("/.well-known/agent-card.json", card)
    app.router.add_post("/rpc", rpc)
    return app


async def test_a_key_the_agent_echoes_is_never_logged(
    workspace: Path, caplog: pytest.LogCaptureFixture
) -> None:
    registry = WatchRegistry(clock=ManualClock())
    tool = A2ATool(registry, wait_s=5)
    caplog.set_level(logging.INFO, logger="a2a_gateway.client")
    async with serving(echoing_agent()) as url:
        entry = {"name": "echo", "url": url, "key": ECHOED_KEY, "allow_private": True}
        write_agents(workspace, [entry])
        try:
            text = await call(tool, workspace, action="send", agent="echo", message="hi")
            # The stream and the read both failed: the task is handed to a watch.
            assert text.endswith("delivered to this conversation when it is ready.")
            watch = registry.watches()[0]
            await eventually(lambda: watch.checks >= 1)
        finally:
            await registry.aclose()
    lines = [r.getMessage() for r in caplog.records if r.name.startswith("a2a_gateway.client")]
    stream = [line for line in lines if "a2a send: stream of task t-echo ended" in line]
    waiting = [line for line in lines if "a2a send: waiting on task t-echo failed" in line]
    assert stream and waiting, lines
    assert all("[redacted]" in line for line in stream + waiting), lines
    assert not [line for line in lines if ECHOED_KEY in line]
    # agents.json keys are registered with the log redaction: any line that would still
    # carry one (whatever logged it) leaves the log handler without it.
    assert redact(f"saw {ECHOED_KEY} here") == "saw *** here"


async def test_a_key_the_agent_echoes_never_reaches_the_model(
    tool: A2ATool, workspace: Path, tmp_path: Path
) -> None:
    # Every text from the agent's side passes the entry's redactor, answers as errors.
    said = f"your key is {REMOTE_KEY}"
    text = await call(tool, workspace, action="send", agent="assistant-a", message=said)
    assert text.endswith("\nyour key is [redacted]") and REMOTE_KEY not in text
    status = await call(tool, workspace, action="status", agent="assistant-a", taskId=ids(text)[0])
    assert status == text
    reply = await call(
        tool, workspace, action="send", agent="assistant-a", message=f"message:{said}"
    )
    assert reply.endswith("\nyour key is [redacted]") and REMOTE_KEY not in reply
    asking = await call(
        tool, workspace, action="send", agent="assistant-a", message=f"ask:Is {REMOTE_KEY} yours?"
    )
    assert "\nIs [redacted] yours?\n" in asking and REMOTE_KEY not in asking
    async with faux_gateway(tmp_path / "c", card_description=f"Uses {REMOTE_KEY}") as other:
        entry = {"name": "other", "url": base_url(other), "key": REMOTE_KEY}
        write_agents(workspace, [{**entry, "allow_private": True}])
        listing = await call(tool, workspace, action="agents")
    assert "- other: Uses [redacted]" in listing and REMOTE_KEY not in listing
