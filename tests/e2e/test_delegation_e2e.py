"""Delegation end to end with real processes: gateway A (``serve --faux`` with a caller
key) and ``a2a-gateway chat`` on workspace B, whose scripted model (the fake
OpenAI-compatible server of the assistant tests) calls the a2a tool.

The model's script: a user message ``a2a {json}`` becomes a call of the a2a tool with
those arguments; a tool result is answered ``TOOL RESULT:`` + the result; a delivered
follow-up (``[A2A result from ...``) is answered ``FOLLOW-UP:`` + its text.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pexpect
import pytest

import lf.a2a.v1.a2a_pb2 as pb
from a2a_gateway.chat_tui import PROMPT, SECRET_PROMPT
from a2a_gateway.client import connect
from a2a_gateway.local.layout import WorkspaceLayout
from tests.support.ports import HOST, free_ports
from tests.support.processes import CARD_PATH, GATEWAY, ServerProcess
from tests.support.secrets import use_secret
from tests.support.workspace import write_callers

from ..agent.fake_llm import Calls, FakeLLM, Reply, Say, Stall, tool_results, user_texts
from ..client.delegation_support import REMOTE_KEY, eventually, start_remote_task
from .conftest import files_holding, pending_records

LLM_KEY = "sk-delegation-e2e-7c41d09a2b"
CHAT_BOUND_S = 90.0


def script(body: dict[str, Any]) -> Reply:
    last = body["messages"][-1]
    content = last.get("content") or ""
    if last["role"] == "tool":
        return Say("TOOL RESULT:\n" + content)
    if "[A2A result from" in content or "[A2A question from" in content:
        return Say("FOLLOW-UP:\n" + content[content.index("[A2A ") :])
    if "a2a {" in content:
        return Calls([("a2a", json.loads(content[content.index("a2a {") + 4 :]))])
    return Say("ok")


@pytest.fixture(scope="module")
def remote(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Gateway A: the faux agent, caller ``assistant-b``; it may push to loopback."""
    folder = tmp_path_factory.mktemp("gateway-a")
    write_callers(folder, [{"name": "assistant-b", "key": REMOTE_KEY}])
    (port,) = free_ports(1)
    command = [
        *GATEWAY,
        "serve",
        "--faux",
        "--workspace",
        str(folder),
        "--host",
        HOST,
        "--port",
        str(port),
        "--grpc-port",
        "-1",
        "--allow-private-urls",
    ]
    base = f"http://{HOST}:{port}"
    server = ServerProcess("gateway-a", command, folder, base + CARD_PATH, grpc_port=None)
    with server.running():
        yield base


@pytest.fixture
async def llm() -> AsyncIterator[FakeLLM]:
    fake = FakeLLM(script)
    await fake.start()
    try:
        yield fake
    finally:
        await fake.aclose()


@pytest.fixture
def workspace_b(tmp_path: Path, remote: str) -> Path:
    ws = tmp_path / "b"
    WorkspaceLayout(ws).state.mkdir(parents=True)
    WorkspaceLayout(ws).agents.write_text(
        json.dumps(
            [{"name": "assistant-a", "url": remote, "key": REMOTE_KEY, "allow_private": True}]
        )
    )
    return ws


def chat_command(llm: FakeLLM, workspace: Path, *extra: str) -> list[str]:
    return [
        *GATEWAY,
        "chat",
        "--workspace",
        str(workspace),
        "--llm-base-url",
        llm.base_url,
        "--llm-model",
        "fake",
        "--llm-max-retries",
        "0",
        *extra,
    ]


def chat_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("A2A_GATEWAY_")}
    env["A2A_GATEWAY_LLM_API_KEY"] = LLM_KEY
    return env


async def chat_message(
    llm: FakeLLM, workspace: Path, message: str, *extra: str
) -> tuple[int | None, str, str]:
    """``chat --message``: its exit status, stdout and stderr (no key in either)."""
    process = await asyncio.create_subprocess_exec(
        *chat_command(llm, workspace, "--message", message, *extra),
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=chat_env(),
    )
    out, err = await asyncio.wait_for(process.communicate(), CHAT_BOUND_S)
    assert LLM_KEY not in out.decode() + err.decode() and REMOTE_KEY not in err.decode()
    return process.returncode, out.decode(), err.decode()


async def chat_once(llm: FakeLLM, workspace: Path, message: str, *extra: str) -> str:
    """``chat --message``; its stdout (exit status 0 asserted)."""
    code, out, err = await chat_message(llm, workspace, message, *extra)
    assert code == 0, err[-3000:]
    return out


def tool(**arguments: Any) -> str:
    return "a2a " + json.dumps(arguments)


def first_ids(text: str) -> tuple[str, str]:
    line = next(line for line in text.splitlines() if line.startswith('Agent "'))
    words = line.split()
    return words[3], words[5].rstrip(")")


def pending(workspace: Path) -> list[dict[str, Any]]:
    return pending_records(workspace)


async def task_state(remote: str, task_id: str) -> int:
    async with await connect(remote, key=REMOTE_KEY) as service:
        return (await service.get_task(pb.GetTaskRequest(id=task_id))).status.state


async def test_agents_send_question_files_and_cancel(
    llm: FakeLLM, workspace_b: Path, remote: str
) -> None:
    out = await chat_once(llm, workspace_b, tool(action="agents"))
    assert "TOOL RESULT:\n- assistant-a: " in out and "card name: a2a-gateway agent" in out

    out = await chat_once(llm, workspace_b, tool(action="send", agent="assistant-a", message="hi"))
    task_id, context_id = first_ids(out)
    assert f'Agent "assistant-a": task {task_id} (context {context_id}) is completed.\nhi' in out

    out = await chat_once(
        llm, workspace_b, tool(action="send", agent="assistant-a", message="ask:Which city?")
    )
    task_id, _ = first_ids(out)
    assert "is input-required.\nWhich city?\n" in out and f"taskId={task_id}" in out
    out = await chat_once(
        llm,
        workspace_b,
        tool(action="send", agent="assistant-a", message="Lisbon", taskId=task_id),
    )
    assert first_ids(out)[0] == task_id and "is completed." in out and "Lisbon" in out

    (workspace_b / "notes.txt").write_text("notes for A")
    out = await chat_once(
        llm,
        workspace_b,
        tool(action="send", agent="assistant-a", message="file:report.txt", files=["notes.txt"]),
    )
    assert "Files: inbox/a2a/assistant-a/report.txt" in out
    assert (
        b"report.txt" in (workspace_b / "inbox" / "a2a" / "assistant-a" / "report.txt").read_bytes()
    )

    out = await chat_once(
        llm,
        workspace_b,
        tool(action="send", agent="assistant-a", message="hold:100"),
        "--a2a-wait",
        "0",
    )
    task_id, context_id = first_ids(out)
    assert "It is still running: the result will be delivered" in out
    assert [r["taskId"] for r in pending(workspace_b)] == [task_id]
    out = await chat_once(
        llm, workspace_b, tool(action="cancel", agent="assistant-a", taskId=task_id)
    )
    assert f'Agent "assistant-a": task {task_id} (context {context_id}) is canceled.' in out
    assert pending(workspace_b) == []
    assert await task_state(remote, task_id) == pb.TASK_STATE_CANCELED


async def test_foreground_with_a_result_schema_and_wait(
    llm: FakeLLM, workspace_b: Path, remote: str
) -> None:
    city = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
    out = await chat_once(
        llm,
        workspace_b,
        tool(
            action="send",
            agent="assistant-a",
            message='data:{"city": "Lisbon"}',
            mode="foreground",
            resultSchema=city,
        ),
    )
    assert 'is completed.\nResult (matches resultSchema):\n{"city":"Lisbon"}' in out
    # wait on a task started elsewhere (by the same caller) returns once it settles.
    task = await start_remote_task(remote, "hold:1")
    out = await chat_once(
        llm, workspace_b, tool(action="wait", agent="assistant-a", taskId=task.id)
    )
    assert f'TOOL RESULT:\nAgent "assistant-a": task {task.id} (context' in out
    assert first_ids(out)[0] == task.id and "is completed." in out
    assert pending(workspace_b) == []


async def test_long_send_is_delivered_on_the_next_start(
    llm: FakeLLM, workspace_b: Path, remote: str
) -> None:
    out = await chat_once(
        llm,
        workspace_b,
        tool(action="send", agent="assistant-a", message="hold:2"),
        "--a2a-wait",
        "0",
    )
    task_id, context_id = first_ids(out)
    (record,) = pending(workspace_b)
    assert record["taskId"] == task_id and record["target"] == "local-owner"
    assert record["undelivered"] is None and record["source"] == "subscribe"
    async with asyncio.timeout(30):
        while await task_state(remote, task_id) != pb.TASK_STATE_COMPLETED:  # noqa: ASYNC110
            await asyncio.sleep(0.2)
    out = await chat_once(llm, workspace_b, "hello")
    delivered = f'FOLLOW-UP:\n[A2A result from "assistant-a", task {task_id} (completed)]'
    assert delivered in out and f"Context: {context_id}" in out
    assert out.index(delivered) < out.rindex("ok")  # the result first, then the message
    assert pending(workspace_b) == []


async def start_chat(llm: FakeLLM, workspace: Path, *extra: str) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        *chat_command(llm, workspace, *extra),
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=chat_env(),
    )


async def read_until(process: asyncio.subprocess.Process, marker: str) -> str:
    assert process.stdout is not None
    seen = ""
    async with asyncio.timeout(CHAT_BOUND_S):
        while marker not in seen:
            chunk = await process.stdout.read(4096)
            assert chunk, f"chat ended before {marker!r}: {seen[-2000:]}"
            seen += chunk.decode()
    return seen


async def end_chat(process: asyncio.subprocess.Process) -> None:
    assert process.stdin is not None
    process.stdin.close()
    await asyncio.wait_for(process.wait(), CHAT_BOUND_S)
    assert process.returncode == 0


async def test_restart_mid_watch_delivers(llm: FakeLLM, workspace_b: Path) -> None:
    process = await start_chat(llm, workspace_b, "--a2a-wait", "0")
    assert process.stdin is not None
    process.stdin.write(
        (tool(action="send", agent="assistant-a", message="hold:3") + "\n").encode()
    )
    out = await read_until(process, "It is still running")
    task_id, _ = first_ids(out)
    await eventually(lambda: len(pending(workspace_b)) == 1)
    process.send_signal(signal.SIGKILL)  # B dies mid-watch
    await process.wait()
    assert [r["taskId"] for r in pending(workspace_b)] == [task_id]
    process = await start_chat(llm, workspace_b)  # interactive again: re-armed in background
    await read_until(
        process, f'FOLLOW-UP:\n[A2A result from "assistant-a", task {task_id} (completed)]'
    )
    # The record goes once the delivery was taken, which may be just after the print.
    await eventually(lambda: pending(workspace_b) == [])
    await end_chat(process)


async def test_push_watch_with_a_public_url(llm: FakeLLM, workspace_b: Path) -> None:
    (port,) = free_ports(1)
    public = f"http://{HOST}:{port}"
    process = await start_chat(
        llm,
        workspace_b,
        "--a2a-wait",
        "0",
        "--public-url",
        public,
        "--host",
        HOST,
        "--port",
        str(port),
    )
    assert process.stdin is not None
    process.stdin.write(
        (tool(action="send", agent="assistant-a", message="hold:2") + "\n").encode()
    )
    out = await read_until(process, "It is still running")
    task_id, _ = first_ids(out)
    await eventually(lambda: [r["source"] for r in pending(workspace_b)] == ["push"])
    (record,) = pending(workspace_b)
    assert record["pushToken"] and len(record["pushToken"]) >= 43
    # No stream and no poll within 10 minutes: only A's push can wake the watch now.
    await read_until(process, f'FOLLOW-UP:\n[A2A result from "assistant-a", task {task_id}')
    # The record goes once the delivery was taken, which may be just after the print.
    await eventually(lambda: pending(workspace_b) == [])
    await end_chat(process)


def test_chat_usage_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from a2a_gateway.cli import main

    assert main(["chat", "--message", "hi", "--llm-model", "x"]) == 2
    assert "--workspace is required" in capsys.readouterr().err
    assert main(["chat", "--workspace", str(tmp_path), "--message", "hi"]) == 2
    assert "--llm-model is required" in capsys.readouterr().err
    assert main(["chat", "--workspace", str(tmp_path), "--a2a-wait", "-1"]) == 2
    assert "a2a_wait" in capsys.readouterr().err


async def test_a_line_over_the_cap_is_skipped_and_the_chat_goes_on(
    llm: FakeLLM, tmp_path: Path
) -> None:
    # asyncio's line reader raised ValueError for a line over 64 KiB: a pasted document
    # ended the chat with a traceback. Now a line up to the cap is a message; a longer
    # one is not sent (said on stdout) and the next line is read as usual.
    from a2a_gateway.chat import MAX_LINE_BYTES

    process = await start_chat(llm, tmp_path / "w")
    assert process.stdin is not None
    pasted = "p" * (100 * 1024)
    process.stdin.write(f"{pasted}\n{'x' * (MAX_LINE_BYTES + 10)}\nhello\n".encode())
    await end_chat(process)  # every line is answered before the end of input ends it
    assert process.stdout is not None
    out = (await process.stdout.read()).decode()
    assert f"[not sent: the line is longer than {MAX_LINE_BYTES} bytes]" in out
    texts = [user_texts(request)[-1] for request in llm.requests]
    assert [len(text) for text in texts] == [len(pasted), len("hello")]


@pytest.mark.parametrize("source", ["file", "devnull"])
async def test_stdin_from_a_file_or_dev_null(llm: FakeLLM, tmp_path: Path, source: str) -> None:
    # The event loop's pipe reader takes pipes, sockets and terminals only: with
    # ``chat < lines.txt`` (or stdin on /dev/null, as a service manager gives it) the
    # chat was killed by SIGABRT (uvloop), saying nothing.
    lines = tmp_path / "lines.txt"
    lines.write_text("hello\nagain")
    with (lines if source == "file" else Path(os.devnull)).open("rb") as stdin:
        process = await asyncio.create_subprocess_exec(
            *chat_command(llm, tmp_path / "w"),
            stdin=stdin,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=chat_env(),
        )
        out, err = await asyncio.wait_for(process.communicate(), CHAT_BOUND_S)
    assert process.returncode == 0, err.decode()[-3000:]
    texts = [user_texts(request)[-1] for request in llm.requests]
    assert texts == (["hello", "again"] if source == "file" else [])
    assert out.decode().count("ok\n") == len(texts)


def test_chat_help_says_what_its_listener_is(capsys: pytest.CaptureFixture[str]) -> None:
    # serve's texts said card, gRPC and "required with --llm", none of which chat has.
    from a2a_gateway.cli import main

    with pytest.raises(SystemExit) as ended:
        main(["chat", "--help"])
    assert ended.value.code == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "--host HOST address the push receiver listens on (only with --public-url)" in text
    assert "--llm-model LLM_MODEL model name (required, unless --llm-demo)" in text
    assert "card" not in text and "gRPC" not in text and "--llm " not in text


# --- chat as a terminal program (a real pty) ----------------------------------------------

ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b[()][A-Z0-9]|\r")
LOG_LINE = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d+ (DEBUG|INFO|WARNING|ERROR) ")


async def test_chat_in_a_terminal_shows_tools_stops_a_turn_and_names_running_watches(
    llm: FakeLLM, workspace_b: Path
) -> None:
    env = {**chat_env(), "TERM": "xterm-256color", "LANG": "C.UTF-8", "PROMPT_TOOLKIT_NO_CPR": "1"}
    command = chat_command(llm, workspace_b, "--a2a-wait", "1")
    child = pexpect.spawn(
        command[0], command[1:], env=env, encoding="utf-8", dimensions=(40, 120), timeout=60
    )
    screen: list[str] = []
    child.logfile_read = _Collect(screen)

    async def expect(pattern: str) -> None:
        await asyncio.to_thread(child.expect, pattern)

    try:
        await expect("a2a-gateway chat")
        await expect(re.escape(PROMPT.strip()))
        # A tool call: its status line while it runs, its mark when it ends, then the answer.
        hold = {"action": "send", "agent": "assistant-a", "message": "hold:90"}
        child.sendline("a2a " + json.dumps(hold))
        await expect("→ a2a send assistant-a")
        await expect("✓ .*a2a send assistant-a")
        await expect("TOOL RESULT")
        await expect(re.escape(PROMPT.strip()))
        child.sendline("/a2a")
        await expect("assistant-a  http://")
        await expect(r"assistant-a  task [0-9a-f-]+")
        await expect(re.escape(PROMPT.strip()))
        # Ctrl-C stops a streaming turn (the model's stream is closed), and the chat goes on.
        stall = Stall(first="partial-words ")
        llm.script(stall)
        child.sendline("tell me a long story")
        await expect("partial-words")
        child.sendintr()
        await expect(re.escape("[stopped]"))
        await asyncio.wait_for(stall.closed.wait(), 30)
        await expect(re.escape(PROMPT.strip()))
        llm.script(Say("back again"))
        child.sendline("hello")
        await expect("back again")
        await expect(re.escape(PROMPT.strip()))
        # Ctrl-D quits, naming the watch still running (its result comes next start).
        child.sendeof()
        await expect("still running; its result is delivered at the next start")
        await expect(pexpect.EOF)
    finally:
        child.close(force=True)
    assert child.exitstatus == 0
    text = ANSI.sub("", "".join(screen))
    assert not LOG_LINE.search(text)  # log lines go to the file, never the conversation
    logged = WorkspaceLayout(workspace_b).chat_log.read_text()
    assert "a2a client: agents in" in logged
    assert LLM_KEY not in text + logged and REMOTE_KEY not in text + logged


async def test_chat_in_a_terminal_asks_a_secret_with_a_hidden_prompt(
    llm: FakeLLM, tmp_path: Path
) -> None:
    # The value typed at the hidden prompt reaches the model's tool result and nothing
    # else: not the screen, the transcript, the prompt history or the log.
    secret = "tok-chat-pty-61f0d3b9a4"
    use_secret(secret)
    workspace = tmp_path / "owner"
    ask = {"question": "Your API token?", "secret": True}
    llm.script(Calls([("request_input", ask)]), Say("Connected."))
    env = {**chat_env(), "TERM": "xterm-256color", "LANG": "C.UTF-8", "PROMPT_TOOLKIT_NO_CPR": "1"}
    command = chat_command(llm, workspace)
    child = pexpect.spawn(
        command[0], command[1:], env=env, encoding="utf-8", dimensions=(40, 120), timeout=60
    )
    screen: list[str] = []
    child.logfile_read = _Collect(screen)

    async def expect(pattern: str) -> None:
        await asyncio.to_thread(child.expect, pattern)

    try:
        await expect(re.escape(PROMPT.strip()))
        child.sendline("connect the service")
        await expect(re.escape("Your API token?"))
        await expect(re.escape(SECRET_PROMPT.strip()))
        child.sendline(secret)
        await expect("Connected.")
        await expect(re.escape(PROMPT.strip()))
        child.sendeof()
        await expect(pexpect.EOF)
    finally:
        child.close(force=True)
    assert child.exitstatus == 0
    assert secret not in "".join(screen)
    offered = {t["function"]["name"] for t in llm.requests[0]["tools"]}
    assert "request_input" in offered
    (result,) = tool_results(llm.requests[1])
    assert result.endswith(secret)
    assert files_holding(workspace, secret) == []
    assert WorkspaceLayout(workspace).chat_log.is_file()


class _Collect:
    """pexpect's ``logfile_read``: keeps everything the program wrote."""

    def __init__(self, into: list[str]) -> None:
        self.into = into

    def write(self, data: str) -> None:
        self.into.append(data)

    def flush(self) -> None:
        pass
