"""Workspace file tools: ``read_file``, ``write_file``, ``list_files`` and ``send_file``.

Every path is relative to the workspace and confined to it twice: lexically (no
absolute paths, no ``..``, nothing under ``.a2a/``, where keys and tasks live) and
after resolving symlinks (the real path must still be inside the workspace and
outside ``.a2a/``). Only regular files are read or written (a FIFO or a device is
refused without being opened for blocking I/O), and each tool has a size cap.
``send_file`` returns a :class:`FileResult`: the runtime hands its bytes to the caller
(an artifact with one file part in an A2A task, an upload in a chat host).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import stat
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from a2a_gateway.local.atomic_files import replace_file
from a2a_gateway.local.layout import STATE_FOLDER

from .base import Tool, ToolContext, ToolError, ToolResult

READ_CAP = 256 * 1024
WRITE_CAP = 1024 * 1024
LIST_CAP = 500
SEND_CAP = 10 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class FileResult(ToolResult):
    """``send_file``'s result: the file to hand to the caller."""

    filename: str = ""
    data: bytes = b""
    media_type: str = ""


def confine(workspace: Path, relative: object) -> Path:
    """The real path of ``relative`` inside ``workspace``, or :class:`ToolError`."""
    if not isinstance(relative, str) or not relative.strip():
        raise ToolError("path: give a path relative to the workspace")
    if "\x00" in relative:
        raise ToolError("path: must not contain NUL")
    lexical = PurePosixPath(relative)
    if lexical.is_absolute():
        raise ToolError("path: absolute paths are refused; give one relative to the workspace")
    if ".." in lexical.parts:
        raise ToolError("path: '..' is refused; the path must stay inside the workspace")
    if lexical.parts and lexical.parts[0] == STATE_FOLDER:
        raise ToolError(f"path: {STATE_FOLDER}/ is the gateway's own folder and is refused")
    root = workspace.resolve()
    real = (root / lexical).resolve()
    if real != root and not real.is_relative_to(root):
        raise ToolError("path: it leads outside the workspace (through a symlink)")
    inside = real.relative_to(root).parts
    if inside and inside[0] == STATE_FOLDER:
        raise ToolError(
            f"path: it leads into {STATE_FOLDER}/ (through a symlink), which is refused"
        )
    return real


def _read_regular(path: Path, cap: int) -> tuple[bytes, int]:
    """Up to ``cap`` bytes of a regular file and its size (blocking)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW)
    except FileNotFoundError:
        raise ToolError("path: no such file") from None
    except OSError as exc:
        raise ToolError(f"path: cannot open it ({exc.strerror})") from None
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        os.close(fd)
        raise ToolError("path: not a regular file")
    with os.fdopen(fd, "rb") as file:
        return file.read(cap), info.st_size


def _write_regular(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically (temp file, rename), regular files only."""
    with contextlib.suppress(FileNotFoundError):
        if not stat.S_ISREG(os.lstat(path).st_mode):
            raise ToolError("path: exists and is not a regular file")
    if not path.parent.is_dir():
        path.parent.mkdir(parents=True, exist_ok=True)
    replace_file(path, data, fsync=False)


def _list(path: Path, root: Path) -> list[str]:
    if not path.is_dir():
        raise ToolError("path: not a folder")
    entries: list[str] = []
    for entry in sorted(path.iterdir()):
        if path == root and entry.name == STATE_FOLDER:
            continue
        if len(entries) >= LIST_CAP:
            entries.append(f"... (more than {LIST_CAP} entries)")
            break
        try:
            info = entry.lstat()
        except OSError:
            continue
        if stat.S_ISDIR(info.st_mode):
            entries.append(entry.name + "/")
        elif stat.S_ISREG(info.st_mode):
            entries.append(f"{entry.name} ({info.st_size} bytes)")
        else:
            entries.append(f"{entry.name} (not a regular file)")
    return entries


_PATH = {"type": "string", "description": "a path relative to the workspace"}


class ReadFile(Tool):
    name = "read_file"
    description = "Read a text file of the workspace (UTF-8; long files are cut)."
    parameters: Mapping[str, Any] = {
        "type": "object",
        "properties": {"path": _PATH},
        "required": ["path"],
    }

    def __init__(self, cap: int = READ_CAP) -> None:
        self.cap = cap

    async def call(self, arguments: Mapping[str, Any], context: ToolContext) -> ToolResult:
        path = confine(context.workspace, arguments.get("path"))
        data, size = await asyncio.to_thread(_read_regular, path, self.cap)
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            if size <= self.cap or exc.start < len(data) - 4:
                raise ToolError("path: not a UTF-8 text file") from None
            text = data[: exc.start].decode("utf-8")  # a character cut at the cap
        if size > self.cap:
            text += f"\n[cut: the file has {size} bytes, only the first {self.cap} are shown]"
        return ToolResult(text)


class WriteFile(Tool):
    name = "write_file"
    description = "Create or replace a text file of the workspace with the given content."
    parameters: Mapping[str, Any] = {
        "type": "object",
        "properties": {"path": _PATH, "content": {"type": "string"}},
        "required": ["path", "content"],
    }

    def __init__(self, cap: int = WRITE_CAP) -> None:
        self.cap = cap

    async def call(self, arguments: Mapping[str, Any], context: ToolContext) -> ToolResult:
        path = confine(context.workspace, arguments.get("path"))
        content = arguments.get("content")
        if not isinstance(content, str):
            raise ToolError("content: must be a string")
        data = content.encode("utf-8")
        if len(data) > self.cap:
            raise ToolError(f"content: {len(data)} bytes, the limit is {self.cap}")
        await asyncio.to_thread(_write_regular, path, data)
        return ToolResult(f"Wrote {len(data)} bytes.")


class ListFiles(Tool):
    name = "list_files"
    description = "List a folder of the workspace (default: its top folder)."
    parameters: Mapping[str, Any] = {
        "type": "object",
        "properties": {"path": {**_PATH, "default": "."}},
    }

    async def call(self, arguments: Mapping[str, Any], context: ToolContext) -> ToolResult:
        path = confine(context.workspace, arguments.get("path") or ".")
        entries = await asyncio.to_thread(_list, path, context.workspace.resolve())
        return ToolResult("\n".join(entries) if entries else "(empty)")


class SendFile(Tool):
    name = "send_file"
    description = "Send a file of the workspace to the one you are talking with."
    parameters: Mapping[str, Any] = {
        "type": "object",
        "properties": {"path": _PATH},
        "required": ["path"],
    }

    def __init__(self, cap: int = SEND_CAP) -> None:
        self.cap = cap

    async def call(self, arguments: Mapping[str, Any], context: ToolContext) -> ToolResult:
        path = confine(context.workspace, arguments.get("path"))
        data, size = await asyncio.to_thread(_read_regular, path, self.cap + 1)
        if size > self.cap or len(data) > self.cap:
            raise ToolError(f"path: the file has {size} bytes, the limit is {self.cap}")
        return FileResult(f"Sent {path.name} ({len(data)} bytes).", filename=path.name, data=data)


def workspace_tools(*, send_cap: int = SEND_CAP) -> list[Tool]:
    """The file tools every session gets."""
    return [ReadFile(), WriteFile(), ListFiles(), SendFile(send_cap)]


__all__ = [
    "FileResult",
    "ListFiles",
    "ReadFile",
    "SendFile",
    "WriteFile",
    "confine",
    "workspace_tools",
]
