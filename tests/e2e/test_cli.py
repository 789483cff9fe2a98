"""The client verbs (``card``, ``send``, ``get``, ``list``, ``cancel``, ``subscribe``) run as
real subprocesses (``python -P -m a2a_gateway ...``) against a real in-process gateway:
stdout, stderr and exit codes."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import pty
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from a2a_gateway.agent.faux import FORM_SCHEMA
from a2a_gateway.serve import Gateway
from tests.support.ports import held_port

from .conftest import KEY_ALICE, KEY_BOB

ROOT = Path(__file__).resolve().parents[2]
CLI_TIMEOUT_S = 30.0
TRANSPORTS = ("jsonrpc", "rest", "grpc")
WRONG_KEY = "wrong-key-5b0c9d2e7f11"


@dataclass
class Run:
    code: int
    stdout: str
    stderr: str

    def lines(self) -> list[dict[str, Any]]:
        return [json.loads(line) for line in self.stdout.splitlines()]


def cli_env(key: str | None = KEY_ALICE) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("A2A_GATEWAY_")}
    if key is not None:
        env["A2A_GATEWAY_KEY"] = key
    return env


async def cli(*args: str, key: str | None = KEY_ALICE, stderr: int | None = None) -> Run:
    """Run ``a2a-gateway ARGS`` to completion (bounded); the key comes from the env."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-P",
        "-m",
        "a2a_gateway",
        *args,
        cwd=ROOT,
        env=cli_env(key),
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE if stderr is None else stderr,
    )
    try:
        async with asyncio.timeout(CLI_TIMEOUT_S):
            out, err = await proc.communicate()
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    return Run(proc.returncode or 0, out.decode(), (err or b"").decode())


@pytest.fixture
def url(gateway: Gateway) -> str:
    return f"http://127.0.0.1:{gateway.http_port}"


def summary(text: str) -> str:
    """The ``task ID: STATE (context C)`` line a human run ends with."""
    last = text.rstrip("\n").splitlines()[-1]
    assert last.startswith("task "), text
    return last


# --- help and usage -----------------------------------------------------------------------


async def test_help_lists_verbs_and_exit_codes() -> None:
    run = await cli("--help", key=None)
    assert run.code == 0
    for verb in ("serve", "card", "send", "get", "list", "cancel", "subscribe"):
        assert verb in run.stdout
    for line in ("0  success", "1  the agent returned an A2A error", "2  usage error"):
        assert line in run.stdout
    assert "3  authentication failed" in run.stdout
    assert "4  agent unreachable" in run.stdout
    assert "130  interrupted (Ctrl-C)" in run.stdout
    assert "A2A_GATEWAY_KEY" in run.stdout


async def test_usage_errors_exit_2(url: str, tmp_path: Path) -> None:
    missing, bad_state, empty, bad_transport = await asyncio.gather(
        cli("send", url, "hi", "--file", str(tmp_path / "nope.txt")),
        cli("list", url, "--status", "bogus"),
        cli("send", url, ""),
        cli("card", url, "--transport", "carrier-pigeon"),
    )
    assert (missing.code, bad_state.code, empty.code, bad_transport.code) == (2, 2, 2, 2)
    assert "nope.txt: not a file" in missing.stderr
    assert "unknown task state 'bogus'" in bad_state.stderr
    assert "needs text or at least one file" in empty.stderr
    assert missing.stdout == bad_state.stdout == empty.stdout == ""


# --- card -------------------------------------------------------------------------------


async def test_card_human_and_json(url: str, gateway: Gateway) -> None:
    human, as_json = await asyncio.gather(cli("card", url), cli("card", url, "--json"))
    assert human.code == as_json.code == 0
    assert human.stdout.startswith("a2a-gateway agent (version 1.0.0)\n")
    assert f"  JSONRPC 1.0  {url}/a2a\n" in human.stdout
    assert f"  HTTP+JSON 1.0  {url}/a2a/v1\n" in human.stdout
    assert f"  GRPC 1.0  127.0.0.1:{gateway.grpc_port}\n" in human.stdout
    assert "capabilities: streaming, push notifications, extended card" in human.stdout
    assert "  chat (Chat): " in human.stdout
    (card,) = as_json.lines()
    assert card["name"] == "a2a-gateway agent"
    bindings = [i["protocolBinding"] for i in card["supportedInterfaces"]]
    assert bindings == ["JSONRPC", "HTTP+JSON", "GRPC", "JSONRPC", "HTTP+JSON", "GRPC"]
    assert KEY_ALICE not in human.stdout + human.stderr + as_json.stdout + as_json.stderr


# --- send -------------------------------------------------------------------------------


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_send_prints_the_answer(url: str, transport: str) -> None:
    run = await cli("send", url, "hello there", "--transport", transport)
    assert run.code == 0, run.stderr
    assert run.stdout.startswith("hello there\ntask ")
    task_line = summary(run.stdout)
    assert task_line.split(": ", 1)[1].startswith("completed (context ")
    # No progress indicator (stderr is not a terminal): only the task id, said at once.
    assert run.stderr == task_line.split(":", 1)[0] + "\n"


async def test_send_message_reply_and_json(url: str) -> None:
    human, as_json = await asyncio.gather(
        cli("send", url, "message:just words"), cli("send", url, "hi", "--json")
    )
    assert (human.code, human.stdout) == (0, "just words\n")
    (reply,) = as_json.lines()
    task = reply["task"]
    assert task["status"]["state"] == "TASK_STATE_COMPLETED"
    assert task["artifacts"][0]["parts"] == [{"text": "hi"}]


async def test_agent_text_cannot_drive_the_terminal(url: str) -> None:
    run = await cli("send", url, "message:\x1b[2J\x1b]0;owned\x07red\rtext\tok")
    assert run.code == 0
    assert run.stdout == "\ufffd[2J\ufffd]0;owned\ufffdred\ufffdtext\tok\n"


async def test_stream_human_and_json(url: str) -> None:
    human, as_json = await asyncio.gather(
        cli("send", url, "chunks:3", "--stream", "--transport", "rest"),
        cli("send", url, "chunks:3", "--stream", "--json", "--transport", "grpc"),
    )
    assert human.code == as_json.code == 0
    text, last = human.stdout.rstrip("\n").rsplit("\n", 1)
    assert text == "chunk-0chunk-1chunk-2"
    assert last.startswith("task ") and ": completed (context " in last
    events = as_json.lines()
    assert next(iter(events[0])) == "task"
    chunks = [
        e["artifactUpdate"]["artifact"]["parts"][0]["text"]
        for e in events[1:]
        if "artifactUpdate" in e
    ]
    assert chunks == ["chunk-0", "chunk-1", "chunk-2"]
    assert events[-1]["statusUpdate"]["status"]["state"] == "TASK_STATE_COMPLETED"


async def test_multi_turn_with_task_and_context_ids(url: str) -> None:
    asked = await cli("send", url, "ask:your name?", "--json")
    task = asked.lines()[0]["task"]
    assert task["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
    human = await cli("send", url, "ask:again?")
    assert human.stdout.startswith("again?\ntask ")
    assert ": input-required (context " in summary(human.stdout)

    answered = await cli(
        "send", url, "Ada", "--task-id", task["id"], "--context-id", task["contextId"]
    )
    assert answered.code == 0, answered.stderr
    assert answered.stdout == f"Ada\ntask {task['id']}: completed (context {task['contextId']})\n"


async def test_a_question_with_a_schema_is_answered_with_data(url: str) -> None:
    asked = await cli("send", url, "form:Where?")
    question, schema, last = asked.stdout.splitlines()
    assert question == "Where?"
    prefix = "[answer schema, everruns/ask_user: answer with --data JSON] "
    assert schema.startswith(prefix)
    assert json.loads(schema.removeprefix(prefix)) == {"schema": FORM_SCHEMA}
    task_id = last.split()[1].rstrip(":")
    answered = await cli("send", url, "--data", '{"answer": "Faro"}', "--task-id", task_id)
    assert answered.code == 0, answered.stderr
    assert answered.stdout.startswith('[data] {"answer":"Faro"}\ntask ')


async def test_send_file(url: str, tmp_path: Path) -> None:
    path = tmp_path / "notes.md"
    path.write_bytes(b"# notes\n")
    run = await cli("send", url, "see file", "--file", str(path), "--json")
    assert run.code == 0, run.stderr
    sent = run.lines()[0]["task"]["history"][0]["parts"]
    assert sent[0] == {"text": "see file"}
    assert sent[1]["filename"] == "notes.md"
    assert sent[1]["mediaType"] == "text/markdown"
    # The gateway saved the bytes to the inbox; the stored history keeps the part without them.
    assert sent[1]["raw"] == ""
    assert sent[1]["metadata"] == {"a2a-gateway.savedAs": "inbox/alice/notes.md"}


# --- get, list, cancel, subscribe --------------------------------------------------------


async def test_get_list_cancel(url: str) -> None:
    created = await cli(
        "send", url, "hold:30", "--return-immediately", "--json", "--key", KEY_ALICE
    )
    task = created.lines()[0]["task"]
    task_id = task["id"]
    assert task["status"]["state"] in ("TASK_STATE_SUBMITTED", "TASK_STATE_WORKING")

    got, listed, human_list, bobs = await asyncio.gather(
        cli("get", url, task_id, "--json", "--history-length", "1"),
        cli("list", url, "--json", "--context-id", task["contextId"]),
        cli("list", url, "--status", "working", "--page-size", "5", "--transport", "grpc"),
        cli("get", url, task_id, key=KEY_BOB),
    )
    assert got.code == 0
    assert got.lines()[0]["id"] == task_id
    assert len(got.lines()[0]["history"]) == 1
    (page,) = listed.lines()
    assert [t["id"] for t in page["tasks"]] == [task_id]
    assert page["totalSize"] == 1
    assert human_list.code == 0
    assert human_list.stdout.startswith(f"{task_id}  working")
    assert "1 of 1 task(s)" in human_list.stdout
    assert bobs.code == 1 and "TASK_NOT_FOUND (-32001)" in bobs.stderr  # scoped to alice

    canceled = await cli("cancel", url, task_id)
    assert canceled.code == 0, canceled.stderr
    assert canceled.stdout == f"task {task_id}: canceled (context {task['contextId']})\n"
    again = await cli("cancel", url, task_id, "--transport", "rest")
    assert again.code == 1
    assert again.stdout == ""
    assert "TASK_NOT_CANCELABLE (-32002)" in again.stderr


async def test_subscribe_streams_events_as_they_arrive(url: str) -> None:
    created = await cli("send", url, "hold:30", "--return-immediately", "--json")
    task_id = created.lines()[0]["task"]["id"]
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-P",
        "-m",
        "a2a_gateway",
        "subscribe",
        url,
        task_id,
        "--json",
        cwd=ROOT,
        env=cli_env(),
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        async with asyncio.timeout(CLI_TIMEOUT_S):
            assert proc.stdout is not None
            # The snapshot is printed while the task still runs: nothing is buffered.
            first = json.loads(await proc.stdout.readline())
            assert first["task"]["id"] == task_id
            assert proc.returncode is None
            canceled = await cli("cancel", url, task_id)
            assert canceled.code == 0
            rest, err = await proc.communicate()
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    assert proc.returncode == 0, err
    last = json.loads(rest.decode().splitlines()[-1])
    state = last.get("statusUpdate", last.get("task", {})).get("status", {}).get("state")
    assert state == "TASK_STATE_CANCELED"


# --- exit codes for failures ---------------------------------------------------------------


async def test_auth_failures_exit_3_and_never_print_the_key(url: str) -> None:
    no_key, wrong, wrong_grpc = await asyncio.gather(
        cli("get", url, "some-task", key=None),
        cli("list", url, "--key", WRONG_KEY),
        cli("send", url, "hi", "--transport", "grpc", key=WRONG_KEY),
    )
    assert (no_key.code, wrong.code, wrong_grpc.code) == (3, 3, 3)
    assert "requires a key (none was given)" in no_key.stderr
    assert "rejected the key" in wrong.stderr
    for run in (wrong, wrong_grpc):
        assert run.stdout == ""
        assert WRONG_KEY not in run.stderr


async def test_unreachable_and_timeout_exit_4(url: str) -> None:
    # 3 s, not less: the card and the send must get through within it on a loaded machine.
    with held_port() as port:
        closed = f"http://127.0.0.1:{port}"  # bound, never listening
        unreachable, slow = await asyncio.gather(
            cli("card", closed), cli("send", url, "hold:20", "--timeout", "3")
        )
    assert unreachable.code == 4
    assert "Could not reach" in unreachable.stderr
    assert slow.code == 4
    assert "did not answer within 3 s" in slow.stderr
    # The task goes on: the hints say how to follow it or stop it.
    task_id = slow.stderr.splitlines()[0].removeprefix("task ")
    assert f"follow it: a2a-gateway subscribe {url} {task_id}" in slow.stderr
    assert f"stop it:   a2a-gateway cancel {url} {task_id}" in slow.stderr


async def test_not_an_agent_exits_1(url: str) -> None:
    run = await cli("card", f"{url}/nowhere/card.json")
    assert run.code == 1
    assert "no agent card" in run.stderr


# --- progress indicator --------------------------------------------------------------------


@contextlib.contextmanager
def _pty() -> Any:
    leader, follower = pty.openpty()
    try:
        yield leader, follower
    finally:
        for fd in (leader, follower):
            with contextlib.suppress(OSError):
                os.close(fd)


def _drain(fd: int) -> bytes:
    os.set_blocking(fd, False)
    data = b""
    with contextlib.suppress(BlockingIOError, OSError):
        while chunk := os.read(fd, 65536):
            data += chunk
    return data


async def test_progress_indicator_only_on_a_terminal(url: str) -> None:
    with _pty() as (leader, follower):
        run = await cli("send", url, "hold:0.3", stderr=follower)
        shown = _drain(leader).decode(errors="replace")
    assert run.code == 0
    assert ": completed (context " in summary(run.stdout)
    assert "waiting for the agent..." in shown
    # With --json (or stderr not a terminal) nothing is drawn.
    with _pty() as (leader, follower):
        quiet = await cli("send", url, "hi", "--json", stderr=follower)
        assert _drain(leader) == b""
    assert quiet.code == 0
