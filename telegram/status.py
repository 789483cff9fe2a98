"""``/a2a`` in a chat: what the chat's workspace says about A2A, keys never in full.

Four parts, each read fresh from the workspace: whether the a2a client is on, the
agents of ``.a2a/agents.json`` (name, url, key as its last 4 characters when it has 12
or more), the running watches of ``.a2a/pending.json`` (agent, task, state, age), the
callers of ``.a2a/callers.json`` (name, note, key as its last 4 characters or
"sha256 hash") with their recent tasks and states.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

from a2a_gateway.client.agents_file import key_hint as agent_key_hint
from a2a_gateway.client.agents_file import read_agents
from a2a_gateway.client.pending import read_pending
from a2a_gateway.server.auth import CALLERS_FILE, read_callers
from a2a_gateway.server.file_store import decode_record
from lf.a2a.v1 import a2a_pb2 as pb

#: How many recent tasks are listed per caller.
RECENT_TASKS = 5
#: How many task files are looked at, newest first (a bound for a workspace with many).
SCANNED_TASK_FILES = 200
_HINT_MIN, _HINT_CHARS = 12, 4


def caller_key_hint(key: str) -> str:
    if key.startswith("sha256:"):
        return "sha256 hash"
    if len(key) < _HINT_MIN:
        return "hidden: shorter than 12"
    return "..." + key[-_HINT_CHARS:]


def _age(started: str, now: datetime) -> str:
    try:
        seconds = int((now - datetime.fromisoformat(started)).total_seconds())
    except (ValueError, TypeError):
        return "?"
    if seconds < 120:
        return f"{max(seconds, 0)} s"
    if seconds < 7200:
        return f"{seconds // 60} min"
    return f"{seconds // 3600} h"


def _state(value: pb.TaskState.ValueType) -> str:
    return pb.TaskState.Name(value).removeprefix("TASK_STATE_").lower().replace("_", "-")


def _recent_tasks(workspace: Path) -> dict[str, list[tuple[str, str]]]:
    """Caller name -> [(task id, state)], newest first, from the task files."""
    folder = workspace / ".a2a" / "tasks"
    try:
        entries = [e for e in os.scandir(folder) if e.name.endswith(".json") and e.is_file()]
    except OSError:
        return {}
    entries.sort(key=lambda e: e.stat().st_mtime, reverse=True)
    recent: dict[str, list[tuple[str, str]]] = {}
    for entry in entries[:SCANNED_TASK_FILES]:
        try:
            task, owner, *_ = decode_record(Path(entry.path).read_bytes(), entry.name[:-5])
        except (OSError, ValueError):
            continue  # a malformed or vanished file is no task
        tasks = recent.setdefault(owner.name, [])
        if len(tasks) < RECENT_TASKS:
            tasks.append((task.id, _state(task.status.state)))
    return recent


def status_report(
    workspace: Path,
    *,
    client_on: bool,
    watch_states: Callable[[str], str | None] = lambda watch_id: None,
    now: datetime | None = None,
) -> str:
    """The text of ``/a2a`` for the chat whose workspace is ``workspace`` (blocking:
    run it in a worker thread)."""
    now = now or datetime.now(UTC)
    lines = [f"A2A client: {'on' if client_on else 'off'}", "", "Agents (.a2a/agents.json):"]
    agents = read_agents(workspace)
    if agents.error:
        lines.append(f"  {agents.error}")
    for entry in agents.agents.values():
        lines.append(f"  {entry.name}: {entry.url} (key {agent_key_hint(entry.key)})")
    lines += [f"  {note}" for note in agents.notes() if note != agents.error]
    if not agents.agents and not agents.error:
        lines.append("  none")
    lines += ["", "Watches:"]
    records = read_pending(workspace)
    for record in records:
        state = watch_states(record.watchId) or (
            "result waiting" if record.undelivered else "running"
        )
        lines.append(
            f"  {record.agent}: task {record.taskId}, {state}, {_age(record.startedAt, now)}"
            f" ({record.source})"
        )
    if not records:
        lines.append("  none")
    lines += ["", "Callers (.a2a/callers.json):"]
    callers, problems = read_callers(workspace / CALLERS_FILE, str(workspace))
    recent = _recent_tasks(workspace) if callers else {}
    for caller in callers:
        note = f", {caller.note}" if caller.note else ""
        lines.append(f"  {caller.name} (key {caller_key_hint(caller.key)}{note})")
        for task_id, state in recent.get(caller.name, []):
            lines.append(f"    task {task_id}: {state}")
    lines += [f"  {problem}" for problem in problems]
    if not callers and not problems:
        lines.append("  none")
    return "\n".join(lines)
