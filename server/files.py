"""File parts: files callers send in (saved to the inbox) and files agents send out.

In: a message part with inline bytes (``raw``) or a URL (``url``, downloaded through the
guarded :class:`~.outbound.OutboundClient`) is saved as
``<workspace>/inbox/<caller>/<name>``:

- the name comes from the part's ``filename`` (else the URL's last path segment, else
  ``file`` plus an extension for its media type), sanitised by
  :func:`~a2a_gateway.local.files.sanitize_filename`; a clash gets ``-2``, ``-3``, ...
  before the extension;
- each part is capped at ``max_file_bytes`` (10 MB by default) and a message at
  ``max_files`` file parts; the first part that is too large, not downloadable or
  not storable raises :class:`FileRefused` (the task fails with its message) and the
  files already saved for that message are removed again;
- a file is written whole to a temp file in the caller's folder and then linked to
  its final name (:func:`~a2a_gateway.local.files.save_new_file`), which never
  replaces an existing file; folders are opened component by component without
  following symlinks, so a symlinked ``inbox`` or caller folder cannot redirect the
  write. New folders are 0700 and files 0600: strangers' files are for the agent (the
  same user), nobody else.

Out: :func:`outgoing_parts` turns files an agent returns (bytes, or a path inside the
workspace, never under its ``.a2a/``, where keys and tasks live: the same rule as the
assistant's file tools) into artifact parts with inline bytes, ``mediaType`` and
``filename``. A file over the cap (or unreadable, or outside those bounds) is skipped,
and :attr:`OutgoingParts.note` says so for the task's text.
"""

from __future__ import annotations

import contextlib
import mimetypes
import os
import stat
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from yarl import URL

from a2a_gateway.local.files import (
    DEFAULT_MAX_FILE_BYTES,
    INBOX_FOLDER,
    OCTET_STREAM,
    clean_media_type,
    guess_media_type,
    sanitize_filename,
    save_new_file,
)
from a2a_gateway.local.layout import STATE_FOLDER
from a2a_gateway.protocol.context import Caller
from lf.a2a.v1 import a2a_pb2 as pb

from .outbound import OutboundClient, OutboundError, ResponseTooLarge, url_label

DEFAULT_MAX_FILES = 20
DOWNLOAD_TIMEOUT_S = 60.0


class FileRefused(Exception):
    """A file part was not accepted. The message names the part (``message.parts[2]``)
    and the reason, never the URL's path or query: fit for the task's status."""


# --- files in --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SavedFile:
    """A received file: where it was saved and what it is."""

    path: Path  # absolute
    relative: str  # to the workspace, with "/" separators: "inbox/alice/report.pdf"
    filename: str  # the name it was saved under
    media_type: str
    size: int
    part_index: int  # its index in message.parts


def is_file_part(part: pb.Part) -> bool:
    """True for parts that carry a file: inline bytes (``raw``) or a URL (``url``)."""
    return part.WhichOneof("content") in ("raw", "url")


def inbox_folder(workspace: Path, caller: Caller) -> Path:
    """``<workspace>/inbox/<caller>``, the folder a caller's files land in."""
    return Path(workspace) / INBOX_FOLDER / sanitize_filename(caller.name, fallback="anonymous")


async def receive_files(
    message: pb.Message,
    *,
    workspace: Path,
    caller: Caller,
    client: OutboundClient | None,
    max_file_bytes: int = DEFAULT_MAX_FILE_BYTES,
    max_files: int = DEFAULT_MAX_FILES,
    field: str = "message.parts",
    download_timeout_s: float = DOWNLOAD_TIMEOUT_S,
) -> list[SavedFile]:
    """Save every file part of ``message`` to the caller's inbox folder (see the
    module docstring); the saved files in part order. ``client`` downloads URL parts
    (``None``: URL parts are refused). Raises :class:`FileRefused` and then leaves no
    file of this message behind."""
    indexed = [(i, p) for i, p in enumerate(message.parts) if is_file_part(p)]
    if not indexed:
        return []
    if len(indexed) > max_files:
        raise FileRefused(f"{field}: at most {max_files} file parts are accepted per message")
    for index, part in indexed:  # refuse an over-size inline file before any download
        if part.WhichOneof("content") == "raw" and len(part.raw) > max_file_bytes:
            raise FileRefused(_too_large(field, index, part.filename, max_file_bytes))
    saved: list[SavedFile] = []
    try:
        for index, part in indexed:
            if part.WhichOneof("content") == "raw":
                data, name, media_type = bytes(part.raw), part.filename, part.media_type
                media_type = clean_media_type(media_type)
                if not name:
                    name = "file" + (mimetypes.guess_extension(media_type or OCTET_STREAM) or "")
            else:
                data, name, media_type = await _download(
                    part, index, field, client, max_file_bytes, download_timeout_s
                )
            filename = sanitize_filename(name)
            saved.append(
                _save(
                    Path(workspace),
                    caller,
                    filename,
                    data,
                    media_type or guess_media_type(filename),
                    index,
                    field,
                )
            )
    except BaseException:
        for file in saved:
            with contextlib.suppress(OSError):
                file.path.unlink()
        raise
    return saved


def _too_large(field: str, index: int, filename: str, limit: int) -> str:
    what = f"file {sanitize_filename(filename)!r}" if filename else "the file"
    return f"{field}[{index}]: {what} is larger than {limit} bytes (max_file_bytes)"


async def _download(
    part: pb.Part,
    index: int,
    field: str,
    client: OutboundClient | None,
    max_file_bytes: int,
    timeout_s: float,
) -> tuple[bytes, str, str]:
    where = f"{field}[{index}]"
    if client is None:
        raise FileRefused(f"{where}: files by URL are not accepted here")
    url = part.url
    try:
        response = await client.get(url, max_response_bytes=max_file_bytes, timeout_s=timeout_s)
    except ResponseTooLarge:
        raise FileRefused(_too_large(field, index, part.filename, max_file_bytes)) from None
    except OutboundError as exc:
        raise FileRefused(f"{where}: could not download the file: {exc}") from None
    if response.status != 200:
        raise FileRefused(
            f"{where}: could not download the file: {url_label(url)} answered HTTP "
            f"{response.status}"
        )
    name = part.filename
    if not name:
        with contextlib.suppress(ValueError, TypeError):
            name = URL(url).name
    media_type = clean_media_type(part.media_type)
    if not media_type and response.media_type != OCTET_STREAM:
        media_type = clean_media_type(response.media_type)
    return response.body, name, media_type


def _save(
    workspace: Path,
    caller: Caller,
    filename: str,
    data: bytes,
    media_type: str,
    index: int,
    field: str,
) -> SavedFile:
    caller_folder = sanitize_filename(caller.name, fallback="anonymous")
    try:
        path, relative = save_new_file(workspace, (INBOX_FOLDER, caller_folder), filename, data)
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise FileRefused(f"{field}[{index}]: the file could not be saved: {reason}") from None
    return SavedFile(path, relative, path.name, media_type, len(data), index)


def received_note(files: Sequence[SavedFile]) -> str:
    """One line for the agent: where the received files are (``""`` when none)."""
    if not files:
        return ""
    listed = ", ".join(f"{f.relative} ({f.media_type}, {f.size} bytes)" for f in files)
    return f"Files received (saved in the workspace): {listed}"


# --- files out -------------------------------------------------------------------------


class FileLike(Protocol):
    """What :func:`outgoing_parts` reads from a file an agent returns (an agent output
    type elsewhere may have the same four attributes instead of being an
    :class:`OutgoingFile`)."""

    @property
    def filename(self) -> str: ...
    @property
    def data(self) -> bytes | None: ...
    @property
    def path(self) -> Path | None: ...
    @property
    def media_type(self) -> str: ...


@dataclass(frozen=True, slots=True)
class OutgoingFile:
    """A file an agent returns: ``data``, or a ``path`` to read (relative paths are
    relative to the workspace). ``media_type`` empty: guessed from ``filename``."""

    filename: str
    data: bytes | None = None
    path: Path | None = None
    media_type: str = ""


@dataclass(frozen=True, slots=True)
class OutgoingParts:
    """Artifact parts for the files that fit, and the ones skipped with why."""

    parts: tuple[pb.Part, ...]
    skipped: tuple[tuple[str, str], ...]  # (filename, reason)

    @property
    def note(self) -> str:
        """A sentence for the task's text about skipped files (``""`` when none)."""
        if not self.skipped:
            return ""
        listed = ", ".join(f"{name} ({reason})" for name, reason in self.skipped)
        return f"Files skipped: {listed}."


def outgoing_parts(
    files: Sequence[FileLike],
    *,
    max_file_bytes: int = DEFAULT_MAX_FILE_BYTES,
    workspace: Path | None = None,
) -> OutgoingParts:
    """One part per file with inline bytes, ``mediaType`` and ``filename``; files over
    ``max_file_bytes`` or unreadable are skipped. With ``workspace``, a ``path``
    must resolve inside it and outside its ``.a2a/`` (after symlinks) or the file is
    skipped."""
    parts: list[pb.Part] = []
    skipped: list[tuple[str, str]] = []
    for file in files:
        filename = sanitize_filename(file.filename or (file.path.name if file.path else ""))
        data: bytes | None
        if file.data is not None:
            data, reason = file.data, ""
            if len(data) > max_file_bytes:
                data, reason = None, f"over {max_file_bytes} bytes"
        elif file.path is not None:
            data, reason = _read_outgoing(file.path, max_file_bytes, workspace)
        else:
            data, reason = None, "no content"
        if data is None:
            skipped.append((filename, reason))
            continue
        media_type = clean_media_type(file.media_type) or guess_media_type(filename)
        parts.append(pb.Part(raw=data, filename=filename, media_type=media_type))
    return OutgoingParts(tuple(parts), tuple(skipped))


def _read_outgoing(
    path: Path, max_file_bytes: int, workspace: Path | None
) -> tuple[bytes | None, str]:
    if workspace is not None:
        root = Path(workspace).resolve()
        target = (root / path).resolve()
        if not target.is_relative_to(root):
            return None, "outside the workspace"
        inside = target.relative_to(root).parts
        if inside and inside[0] == STATE_FOLDER:  # keys, secret.key, tasks: never a caller's
            return None, f"in the gateway's own folder {STATE_FOLDER}"
        path = target
    try:
        # O_NONBLOCK: opening a FIFO must not block; it is refused as not a file below.
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        return None, (exc.strerror or "unreadable").lower()
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            return None, "not a regular file"
        if info.st_size > max_file_bytes:
            return None, f"over {max_file_bytes} bytes"
        with open(fd, "rb", closefd=False) as reader:
            data = reader.read(max_file_bytes + 1)
    except OSError as exc:
        return None, (exc.strerror or "unreadable").lower()
    finally:
        os.close(fd)
    if len(data) > max_file_bytes:  # it grew while we read it
        return None, f"over {max_file_bytes} bytes"
    return data, ""


def files_artifact(
    files: Sequence[FileLike],
    *,
    max_file_bytes: int = DEFAULT_MAX_FILE_BYTES,
    workspace: Path | None = None,
    name: str = "files",
) -> tuple[pb.Artifact | None, str]:
    """An artifact (no id yet: the engine assigns one) holding the files that fit,
    or None when none does, and the note about skipped files (``""`` when none)."""
    built = outgoing_parts(files, max_file_bytes=max_file_bytes, workspace=workspace)
    if not built.parts:
        return None, built.note
    return pb.Artifact(name=name, parts=built.parts), built.note


def demo_file(name: str, size: int | None = None) -> OutgoingFile:
    """A small generated file for the faux agent's ``file:NAME`` directive (``size``
    bytes of it when given, e.g. to exercise the cap)."""
    filename = sanitize_filename(name, fallback="file.txt")
    text = f"This file was generated by the a2a-gateway faux agent.\nName: {filename}\n"
    data = text.encode()
    if size is not None:
        size = max(0, size)
        data = (data * (size // len(data) + 1))[:size]
    return OutgoingFile(filename=filename, data=data)


__all__ = [
    "DEFAULT_MAX_FILES",
    "FileLike",
    "FileRefused",
    "OutgoingFile",
    "OutgoingParts",
    "SavedFile",
    "demo_file",
    "files_artifact",
    "inbox_folder",
    "is_file_part",
    "outgoing_parts",
    "receive_files",
    "received_note",
]
