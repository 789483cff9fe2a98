"""The workspace file tools: confined lexically and after resolving symlinks, regular
files only, size caps, .a2a/ refused; failures are error results, never exceptions."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from a2a_gateway.agent.base import Signal
from a2a_gateway.agent.tools import ToolContext, ToolError, ToolResult
from a2a_gateway.agent.tools.files import FileResult, ListFiles, ReadFile, SendFile, WriteFile
from a2a_gateway.local.layout import WorkspaceLayout

#: The ``workspace`` of this module's tests has a callers.json (a file the tools must
#: never reach), a file of its own, and a file beside it (outside it).
pytestmark = pytest.mark.callers({"name": "a", "key": "k"})


@pytest.fixture(autouse=True)
def files(workspace: Path, tmp_path: Path) -> None:
    (workspace / "notes.txt").write_text("hello")
    (tmp_path / "outside.txt").write_text("private")


def context(workspace: Path) -> ToolContext:
    return ToolContext(workspace.resolve(), "local-owner", None, 0, Signal())


async def call(tool: Any, workspace: Path, **arguments: Any) -> ToolResult:
    return await tool.call(arguments, context(workspace))  # type: ignore[no-any-return]


async def refused(tool: Any, workspace: Path, needle: str, **arguments: Any) -> None:
    with pytest.raises(ToolError) as caught:
        await call(tool, workspace, **arguments)
    assert needle in str(caught.value)


@pytest.mark.parametrize("tool", [ReadFile(), SendFile(), WriteFile()])
async def test_escapes_are_refused(tool: Any, workspace: Path, tmp_path: Path) -> None:
    extra = {"content": "x"} if isinstance(tool, WriteFile) else {}
    await refused(tool, workspace, "'..' is refused", path="../outside.txt", **extra)
    await refused(tool, workspace, "'..' is refused", path="sub/../../outside.txt", **extra)
    await refused(tool, workspace, "absolute paths", path=str(tmp_path / "outside.txt"), **extra)
    await refused(tool, workspace, ".a2a/", path=".a2a/callers.json", **extra)
    await refused(tool, workspace, ".a2a/", path="./.a2a/callers.json", **extra)
    os.symlink(tmp_path / "outside.txt", workspace / "link.txt")
    await refused(tool, workspace, "outside the workspace", path="link.txt", **extra)
    os.symlink(WorkspaceLayout(workspace).state, workspace / "keys")
    await refused(tool, workspace, "into .a2a/", path="keys/callers.json", **extra)
    os.symlink(tmp_path, workspace / "up")
    await refused(tool, workspace, "outside the workspace", path="up/outside.txt", **extra)
    await refused(tool, workspace, "path:", path="", **extra)
    await refused(tool, workspace, "path:", path=7, **extra)
    assert (tmp_path / "outside.txt").read_text() == "private"
    assert "callers.json" in os.listdir(WorkspaceLayout(workspace).state)


async def test_fifos_and_folders_are_not_regular_files(workspace: Path) -> None:
    os.mkfifo(workspace / "pipe")
    await refused(ReadFile(), workspace, "not a regular file", path="pipe")
    await refused(SendFile(), workspace, "not a regular file", path="pipe")
    await refused(WriteFile(), workspace, "not a regular file", path="pipe", content="x")
    await refused(ReadFile(), workspace, "not a regular file", path=".")
    (workspace / "folder").mkdir()
    await refused(ReadFile(), workspace, "not a regular file", path="folder")
    await refused(SendFile(), workspace, "not a regular file", path="folder")


async def test_read_write_list_send_inside(workspace: Path) -> None:
    assert (await call(ReadFile(), workspace, path="notes.txt")).text == "hello"
    result = await call(WriteFile(), workspace, path="drafts/plan.md", content="# Plan\n")
    assert result.text == "Wrote 7 bytes."
    assert (workspace / "drafts" / "plan.md").read_text() == "# Plan\n"
    listing = (await call(ListFiles(), workspace)).text.splitlines()
    assert listing == ["drafts/", "notes.txt (5 bytes)"]  # .a2a/ is not listed
    sent = await call(SendFile(), workspace, path="drafts/plan.md")
    assert isinstance(sent, FileResult)
    assert (sent.filename, sent.data) == ("plan.md", b"# Plan\n")
    await refused(ReadFile(), workspace, "no such file", path="missing.txt")


async def test_size_caps(workspace: Path) -> None:
    (workspace / "big.txt").write_text("a" * 100)
    text = (await call(ReadFile(cap=10), workspace, path="big.txt")).text
    assert text.startswith("a" * 10 + "\n[cut: the file has 100 bytes")
    await refused(SendFile(cap=10), workspace, "the limit is 10", path="big.txt")
    await refused(WriteFile(cap=10), workspace, "the limit is 10", path="w.txt", content="b" * 11)
    assert not (workspace / "w.txt").exists()
    (workspace / "bin.dat").write_bytes(b"\xff\xfe\x00")
    await refused(ReadFile(), workspace, "not a UTF-8 text file", path="bin.dat")
