"""The ``--exec`` agent's process group ends with the turn, and it sees the turn's files."""

from __future__ import annotations

import asyncio
import dataclasses
import os
from pathlib import Path

import pytest

from a2a_gateway.agent import process
from a2a_gateway.agent.base import Completed, TextChunk
from a2a_gateway.agent.process import ProcessAgent

from .agent_helpers import outputs, turn


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie (killed, not yet reaped by its new parent) counts as gone
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[-1].split()[0] != "Z"
    except OSError:
        return False


async def _gone(pid: int) -> bool:
    async with asyncio.timeout(5):
        while _alive(pid):  # noqa: ASYNC110 - the kernel ends it asynchronously
            await asyncio.sleep(0.01)
    return True


async def test_a_background_child_holding_stdout_does_not_hold_the_turn(tmp_path: Path) -> None:
    pid_file = tmp_path / "pid"
    # The shell exits at once; its background child keeps the shared stdout open.
    command = f"sleep 100 & echo $! > {pid_file}; echo hi"
    found = await outputs(ProcessAgent(command, timeout_s=30), turn(""))  # bounded: 10 s
    assert "".join(o.text for o in found if isinstance(o, TextChunk)) == "hi\n"
    assert found[-1] == Completed()
    assert await _gone(int(pid_file.read_text()))


async def test_a_background_child_with_its_own_output_is_killed_too(tmp_path: Path) -> None:
    pid_file = tmp_path / "pid"
    command = f"sleep 100 >/dev/null 2>&1 </dev/null & echo $! > {pid_file}; exit 0"
    found = await outputs(ProcessAgent(command, timeout_s=30), turn(""))
    assert found[-1] == Completed()
    assert await _gone(int(pid_file.read_text()))


async def test_a_child_that_left_the_group_cannot_hold_the_turn(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(process, "_KILL_GRACE_S", 0.3)  # the bound on its leftover output
    # setsid escapes the group kill; the turn still ends (its output is bounded).
    pid_file = tmp_path / "pid"
    command = (
        f"setsid sh -c 'echo $$ > {pid_file}.tmp; mv {pid_file}.tmp {pid_file}; "
        f"exec sleep 100' & while [ ! -s {pid_file} ]; do sleep 0.01; done; echo hi"
    )
    try:
        found = await outputs(ProcessAgent(command, timeout_s=30), turn(""))
        assert "".join(o.text for o in found if isinstance(o, TextChunk)) == "hi\n"
        assert found[-1] == Completed()
    finally:
        if pid_file.exists():
            os.kill(int(pid_file.read_text()), 9)


async def test_the_turn_files_reach_the_command(tmp_path: Path) -> None:
    first = tmp_path / "inbox" / "a.txt"
    second = tmp_path / "inbox" / "b b.txt"
    first.parent.mkdir()
    first.write_text("alpha\n")
    second.write_text("beta\n")
    the_turn = dataclasses.replace(turn(""), files=(first, second))
    command = 'printf "%s\\n" "$A2A_FILES" | while IFS= read -r f; do cat "$f"; done'
    found = await outputs(ProcessAgent(command), the_turn)
    assert "".join(o.text for o in found if isinstance(o, TextChunk)) == "alpha\nbeta\n"
    assert found[-1] == Completed()


async def test_no_files_is_an_empty_variable() -> None:
    command = 'printf "[%s] %s %s %s" "$A2A_FILES" "$A2A_TASK_ID" "$A2A_CONTEXT_ID" "$A2A_CALLER"'
    found = await outputs(ProcessAgent(command), turn("", task_id="task-3"))
    assert "".join(o.text for o in found if isinstance(o, TextChunk)) == "[] task-3 c-1 tester"


async def test_closing_the_turn_early_kills_the_group(tmp_path: Path) -> None:
    # The engine may stop reading a run (its task was cancelled elsewhere): closing
    # the outputs must kill the command's group at once, not when it is collected.
    pid_file = tmp_path / "pid"
    command = f"sleep 100 & echo $! > {pid_file}; echo a; sleep 0.1; echo b; wait"
    run = ProcessAgent(command, timeout_s=30).run(turn(""))
    try:
        async with asyncio.timeout(10):
            first = await anext(run)
        assert isinstance(first, TextChunk)
    finally:
        async with asyncio.timeout(10):
            await run.aclose()  # type: ignore[attr-defined]
    assert await _gone(int(pid_file.read_text()))
