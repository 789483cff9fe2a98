"""``/a2a`` in a chat: what the chat's workspace says about A2A, keys never in full.

Four parts, each read fresh from the workspace: whether the a2a client is on, the
agents of ``.a2a/agents.json`` (name, url, key as its last 4 characters when it has 12
or more), the running watches of ``.a2a/pending.json`` (agent, task, state, age), the
callers of ``.a2a/callers.json`` (name, note, key as its last 4 characters or
"sha256 hash") with their recent tasks and states, as the A2A side's task store lists
them (:func:`recent_tasks`; none without ``--a2a``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from pathlib import Path

from a2a_gateway.client.agents_file import key_hint as agent_key_hint
from a2a_gateway.client.agents_file import read_agents
from a2a_gateway.client.pending import read_pending
from a2a_gateway.local.layout import RELATIVE
from a2a_gateway.server.auth import CALLERS_FILE, read_callers
from a2a_gateway.server.task_store import TaskFilter, TaskStore, Window
from lf.a2a.v1 import a2a_pb2 as pb

#: How many recent tasks are listed per caller.
RECENT_TASKS = 5
_HINT_MIN, _HINT_CHARS = 12, 4

log = logging.getLogger("a2a_gateway.telegram")


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


def _state(value: int) -> str:
    return (
        pb.TaskState.Name(pb.TaskState.ValueType(value))
        .removeprefix("TASK_STATE_")
        .lower()
        .replace("_", "-")
    )


#: A caller's recent tasks as /a2a lists them: (task id, state), newest first.
RecentTasks = Mapping[str, list[tuple[str, str]]]


async def recent_tasks(store: TaskStore, workspace: Path) -> dict[str, list[tuple[str, str]]]:
    """Caller name -> its newest tasks, from the task store the A2A side serves (files,
    memory or PostgreSQL alike); a store that cannot answer lists none."""
    callers, _ = await asyncio.to_thread(read_callers, workspace / CALLERS_FILE, str(workspace))
    recent: dict[str, list[tuple[str, str]]] = {}
    for caller in callers:
        try:
            await store.before_listing(caller.caller)
            page, _, _ = await store.listing(
                caller.caller, TaskFilter(), Window(None, RECENT_TASKS)
            )
        except Exception as exc:  # a store that is down costs the list, not the report
            log.warning(
                "/a2a: the tasks of %s could not be listed: %s", caller.name, type(exc).__name__
            )
            continue
        recent[caller.name] = [(task.task_id, _state(task.state)) for task in page]
    return recent


def status_report(
    workspace: Path,
    *,
    client_on: bool,
    watch_states: Callable[[str], str | None] = lambda watch_id: None,
    recent: RecentTasks | None = None,
    now: datetime | None = None,
) -> str:
    """The text of ``/a2a`` for the chat whose workspace is ``workspace`` (blocking:
    run it in a worker thread)."""
    now = now or datetime.now(UTC)
    lines = [f"A2A client: {'on' if client_on else 'off'}", "", f"Agents ({RELATIVE.agents}):"]
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
    lines += ["", f"Callers ({RELATIVE.callers}):"]
    callers, problems = read_callers(workspace / CALLERS_FILE, str(workspace))
    recent = recent or {}
    for caller in callers:
        note = f", {caller.note}" if caller.note else ""
        lines.append(f"  {caller.name} (key {caller_key_hint(caller.key)}{note})")
        for task_id, state in recent.get(caller.name, []):
            lines.append(f"    task {task_id}: {state}")
    lines += [f"  {problem}" for problem in problems]
    if not callers and not problems:
        lines.append("  none")
    return "\n".join(lines)
