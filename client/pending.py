"""``<workspace>/.a2a/pending.json``: one record per watch of a remote task.

    [{"watchId": "...", "target": "local-owner", "agent": "travel-bot", "taskId": "...",
      "contextId": "...", "pushToken": null, "startedAt": "2026-10-08T12:00:00+00:00",
      "source": "poll", "undelivered": null, "resultSchema": null}]

The file is rewritten whole and atomically (temp file, fsync, rename, fsync of the
folder) on every change, under one lock per file in this process, held until the change's
thread has ended even when its caller is cancelled: changes land in order. A finished
watch first stores its text in ``undelivered``, then delivers it, then removes the
record, so a result is delivered at least once: a crash between delivering and removing
delivers it again at the next start. A malformed file reads as no records (with a
warning); a malformed record is skipped; neither is ever rewritten over until a change
is made.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import re
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, TypeVar

from a2a_gateway.local.atomic_files import replace_file
from a2a_gateway.local.layout import RELATIVE

from .agents_file import NAME_PATTERN, read_raw

log = logging.getLogger(__name__)

PENDING_FILE = RELATIVE.pending
SOURCES = ("push", "subscribe", "poll")
_ID = re.compile(r"^[A-Za-z0-9_.:-]{1,200}$")
_T = TypeVar("_T")


@dataclass(frozen=True, slots=True)
class PendingRecord:
    watchId: str  # the members are named as in the file
    target: str
    agent: str
    taskId: str
    contextId: str
    pushToken: str | None
    startedAt: str
    source: str
    undelivered: str | None = None
    #: The a2a tool's resultSchema: the settled answer is checked against it.
    resultSchema: dict[str, Any] | None = field(default=None, hash=False)

    def __repr__(self) -> str:  # never the push token
        return (
            f"PendingRecord({self.watchId!r}, target={self.target!r}, agent={self.agent!r}, "
            f"task={self.taskId!r}, source={self.source!r})"
        )

    def with_(self, **changes: Any) -> PendingRecord:
        return replace(self, **changes)


def _record(value: Any) -> PendingRecord | None:
    if not isinstance(value, dict):
        return None
    strings = ("watchId", "target", "agent", "taskId", "contextId", "startedAt", "source")
    if not all(isinstance(value.get(k), str) and value[k] for k in strings[:-1]):
        return None
    if value.get("source") not in SOURCES or not NAME_PATTERN.match(value["agent"]):
        return None
    if not _ID.match(value["watchId"]) or not _ID.match(value["taskId"]):
        return None
    token, undelivered = value.get("pushToken"), value.get("undelivered")
    if token is not None and not isinstance(token, str):
        return None
    if undelivered is not None and not isinstance(undelivered, str):
        return None
    schema = value.get("resultSchema")
    if schema is not None and not isinstance(schema, dict):
        return None
    return PendingRecord(
        value["watchId"],
        value["target"],
        value["agent"],
        value["taskId"],
        value["contextId"],
        token,
        value["startedAt"],
        value["source"],
        undelivered,
        schema,
    )


def pending_path(workspace: Path) -> Path:
    return workspace / PENDING_FILE


def read_pending(workspace: Path) -> list[PendingRecord]:
    """The valid records of ``workspace``'s pending.json (blocking; small file)."""
    path = pending_path(workspace)
    try:
        raw = read_raw(path)
    except OSError as exc:
        log.warning("pending watches unreadable (%s): %s", exc.strerror, path)
        return []
    if raw is None or not raw.strip():
        return []
    try:
        data = json.loads(raw)
    except (ValueError, RecursionError):
        log.warning("pending watches file is not valid JSON, ignored: %s", path)
        return []
    if not isinstance(data, list):
        log.warning("pending watches file is not a JSON array, ignored: %s", path)
        return []
    records = [r for r in (_record(v) for v in data) if r is not None]
    if len(records) != len(data):
        log.warning("%d malformed record(s) skipped in %s", len(data) - len(records), path)
    return records


def write_pending(workspace: Path, records: list[PendingRecord]) -> None:
    """Replace the file atomically (blocking). An empty list removes the file."""
    path = pending_path(workspace)
    if not records:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    data = json.dumps([asdict(r) for r in records], indent=2, ensure_ascii=False).encode()
    replace_file(path, data + b"\n", fsync=True)


class PendingFiles:
    """Serialised read-modify-write of each workspace's pending.json (worker thread)."""

    def __init__(self) -> None:
        self._locks: dict[Path, asyncio.Lock] = {}

    def _lock(self, workspace: Path) -> asyncio.Lock:
        return self._locks.setdefault(workspace, asyncio.Lock())

    async def _locked(self, workspace: Path, work: Callable[[], _T]) -> _T:
        """``work()`` in a worker thread under the workspace's lock. A cancelled caller
        keeps the lock until the thread has ended: the thread cannot be stopped, and a
        write that landed after a later one (a removed record back in the file) would
        undo it."""
        async with self._lock(workspace):
            running = asyncio.ensure_future(asyncio.to_thread(work))
            try:
                return await asyncio.shield(running)
            except asyncio.CancelledError:
                while not running.done():
                    with contextlib.suppress(asyncio.CancelledError):
                        await asyncio.wait({running})
                if not running.cancelled() and running.exception() is not None:
                    log.warning(
                        "pending watches of %s: a change whose caller was cancelled failed: %s",
                        workspace,
                        running.exception(),
                    )
                raise

    async def read(self, workspace: Path) -> list[PendingRecord]:
        return await self._locked(workspace, lambda: read_pending(workspace))

    async def put(self, workspace: Path, record: PendingRecord) -> None:
        """Add ``record``, or replace the one with its watchId."""

        def change() -> None:
            records = [r for r in read_pending(workspace) if r.watchId != record.watchId]
            write_pending(workspace, [*records, record])

        await self._locked(workspace, change)

    async def remove(self, workspace: Path, watch_id: str) -> None:
        def change() -> None:
            records = read_pending(workspace)
            kept = [r for r in records if r.watchId != watch_id]
            if len(kept) != len(records):
                write_pending(workspace, kept)

        await self._locked(workspace, change)
