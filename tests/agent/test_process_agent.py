"""The ``--exec`` agent: one shell command per turn, stdout streamed back."""

from __future__ import annotations

import asyncio
import dataclasses
import os
import time
from collections.abc import Sequence
from pathlib import Path

import pytest

from a2a_gateway.agent import process
from a2a_gateway.agent.base import Completed, Failed, TextChunk
from a2a_gateway.agent.process import ProcessAgent
from a2a_gateway.protocol.context import Caller, OnBehalf

from .agent_helpers import outputs, turn


def text_of(found: Sequence[object]) -> str:
    return "".join(o.text for o in found if isinstance(o, TextChunk))


async def test_stdin_in_stdout_out() -> None:
    found = await outputs(ProcessAgent("tr a-z A-Z"), turn("hello world"))
    assert text_of(found) == "HELLO WORLD"
    chunks = [o for o in found if isinstance(o, TextChunk)]
    assert chunks[-1].last and not any(c.last for c in chunks[:-1])
    assert found[-1] == Completed()


async def test_output_streams_as_several_chunks() -> None:
    command = "for i in 1 2 3; do echo line-$i; sleep 0.05; done"
    found = await outputs(ProcessAgent(command), turn(""))
    assert text_of(found) == "line-1\nline-2\nline-3\n"
    assert len([o for o in found if isinstance(o, TextChunk)]) >= 2


async def test_environment_and_working_directory(tmp_path: Path) -> None:
    agent = ProcessAgent(
        'echo "$A2A_TASK_ID $A2A_CONTEXT_ID $A2A_CALLER $EXTRA $PWD"',
        cwd=tmp_path,
        env={"EXTRA": "x"},
    )
    found = await outputs(agent, turn("", task_id="task-9"))
    assert text_of(found).split() == ["task-9", "c-1", "tester", "x", str(tmp_path)]


async def test_a_personal_agents_user_is_named_in_the_environment() -> None:
    agent = ProcessAgent('printf "[%s] [%s]" "$A2A_PACT_AGENT" "$A2A_PACT_USER"')
    assert text_of(await outputs(agent, turn(""))) == "[] []"
    speaker = Caller("pact.0123", on_behalf=OnBehalf("https://pa.example", "alice"))
    found = await outputs(agent, dataclasses.replace(turn(""), caller=speaker))
    assert text_of(found) == "[https://pa.example] [alice]"


async def test_non_zero_exit_fails_with_a_redacted_reason() -> None:
    command = "echo partial; echo 'boom: api_key=supersecretvalue' >&2; exit 3"
    found = await outputs(ProcessAgent(command), turn(""))
    assert text_of(found) == "partial\n"
    failure = found[-1]
    assert isinstance(failure, Failed)
    assert "status 3" in failure.text and "boom" in failure.text
    assert "supersecretvalue" not in failure.text


async def test_timeout_fails_and_kills() -> None:
    found = await outputs(ProcessAgent("sleep 30", timeout_s=0.2), turn(""))
    assert isinstance(found[-1], Failed) and "did not finish" in found[-1].text


async def test_timeout_kills_the_group_before_reporting(tmp_path: Path) -> None:
    pid_file = tmp_path / "pid"
    command = f"sleep 30 & echo $! > {pid_file}; wait"
    run = ProcessAgent(command, timeout_s=0.5).run(turn(""))
    try:
        async with asyncio.timeout(10):
            failure = await anext(run)
        assert isinstance(failure, Failed) and "did not finish" in failure.text
        # Killed before the failure was reported, not only when the generator closes.
        async with asyncio.timeout(5):
            while _alive(int(pid_file.read_text())):  # noqa: ASYNC110
                await asyncio.sleep(0.01)
    finally:
        await run.aclose()  # type: ignore[attr-defined]


async def test_a_command_ignoring_sigterm_is_killed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(process, "_KILL_GRACE_S", 0.2)
    pid_file = tmp_path / "pid"
    command = f"trap '' TERM; echo $$ > {pid_file}; while :; do sleep 0.05; done"
    found = await outputs(ProcessAgent(command, timeout_s=0.5), turn(""))
    assert isinstance(found[-1], Failed)
    assert not _alive(int(pid_file.read_text()))


async def test_cancellation_kills_the_whole_process_group(tmp_path: Path) -> None:
    pid_file = tmp_path / "pid"
    command = f"sleep 30 & echo $! > {pid_file}; wait"
    running = asyncio.create_task(outputs(ProcessAgent(command), turn("")))
    async with asyncio.timeout(5):
        while not pid_file.exists() or not pid_file.read_text().strip():  # noqa: ASYNC110
            await asyncio.sleep(0.01)
    child = int(pid_file.read_text())
    running.cancel()
    with pytest.raises(asyncio.CancelledError):
        await running
    async with asyncio.timeout(5):
        while _alive(child):  # noqa: ASYNC110 - the kernel reaps it asynchronously
            await asyncio.sleep(0.01)


async def test_cancellation_while_starting_kills_the_whole_process_group(
    tmp_path: Path,
) -> None:
    """Cancelled while asyncio still connects the pipes, asyncio itself kills only the
    shell: the background child must not outlive the turn."""
    pid_file = tmp_path / "pid"
    command = f"sleep 30 & echo $! > {pid_file}; wait"
    running = asyncio.create_task(outputs(ProcessAgent(command), turn("")))
    for _ in range(2):  # the turn forks the shell, then waits for its pipes to connect
        await asyncio.sleep(0)
    # Block the loop (so the pipes cannot connect) until the shell has started its child.
    deadline = time.monotonic() + 5
    while not pid_file.exists() or not pid_file.read_text().strip():
        assert time.monotonic() < deadline, "the command never started its child"
        time.sleep(0.01)  # noqa: ASYNC251 - the loop must not run here
    child = int(pid_file.read_text())
    running.cancel()
    with pytest.raises(asyncio.CancelledError):
        async with asyncio.timeout(5):
            await running
    async with asyncio.timeout(5):
        while _alive(child):  # noqa: ASYNC110 - the kernel reaps it asynchronously
            await asyncio.sleep(0.01)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie (killed, not yet reaped by its parent shell) counts as gone
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def test_an_empty_command_is_refused() -> None:
    with pytest.raises(ValueError):
        ProcessAgent("  ")
