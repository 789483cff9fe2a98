"""The gateway's own folder in a workspace, ``<workspace>/.a2a/``, spelled once.

Every module that reads or writes a file there takes its path from a
:class:`WorkspaceLayout`; no other module names the folder or its files. The files the
agent's file tools may never touch (keys, tasks, callers) all live here, so the folder's
name (:data:`STATE_FOLDER`) is also what those tools refuse.

``WorkspaceLayout(workspace)`` gives absolute paths (when ``workspace`` is); :data:`RELATIVE`
gives the same paths relative to a workspace (``.a2a/callers.json``), for joining onto a
workspace later and for messages that name a file without its workspace.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Final

#: The name of the gateway's own folder in every workspace.
STATE_FOLDER: Final = ".a2a"


@dataclass(frozen=True, slots=True)
class WorkspaceLayout:
    """Where each file of the gateway's own folder lives in the workspace ``root``."""

    root: Path

    @property
    def state(self) -> Path:
        """``.a2a/``: the gateway's own folder."""
        return self.root / STATE_FOLDER

    # --- who may call, what is published ---------------------------------------------

    @property
    def callers(self) -> Path:
        """``callers.json``: who may call this workspace (server/auth.py)."""
        return self.state / "callers.json"

    @property
    def card(self) -> Path:
        """``card.json``: the workspace's card overlay and its published flag."""
        return self.state / "card.json"

    @property
    def pact(self) -> Path:
        """``pact.json``: the personal agents that may speak for their users."""
        return self.state / "pact.json"

    @property
    def pact_signing_key(self) -> Path:
        """``pact-signing-key.json``: the key that signs delegation tokens and receipts."""
        return self.state / "pact-signing-key.json"

    @property
    def secret_key(self) -> Path:
        """``secret.key``: the key that seals secrets at rest (server/secret_box.py)."""
        return self.state / "secret.key"

    # --- tasks --------------------------------------------------------------------------

    @property
    def tasks(self) -> Path:
        """``tasks/``: one file per task (server/file_store/)."""
        return self.state / "tasks"

    @property
    def events(self) -> Path:
        """``events/``: the event log of the streamed tasks, in segment files
        (server/event_log.py)."""
        return self.state / "events"

    @property
    def task_index(self) -> Path:
        """``index.sqlite3``: the derived task index (server/task_index.py)."""
        return self.state / "index.sqlite3"

    @property
    def proxy_tasks(self) -> Path:
        """``proxy-tasks/``: who owns each task the proxy relayed (gateway/proxy_owners.py)."""
        return self.state / "proxy-tasks"

    # --- the owner's assistant ----------------------------------------------------------

    @property
    def agents(self) -> Path:
        """``agents.json``: the agents the owner's assistant may call (client/agents_file.py)."""
        return self.state / "agents.json"

    @property
    def pending(self) -> Path:
        """``pending.json``: the watches of remote tasks (client/pending.py)."""
        return self.state / "pending.json"

    @property
    def sessions(self) -> Path:
        """``sessions/``: one transcript per conversation scope (agent/sessions.py)."""
        return self.state / "sessions"

    @property
    def owner_inbox(self) -> Path:
        """``owner-inbox.jsonl``: what the agent tells the owner (notify_owner, secret links)."""
        return self.state / "owner-inbox.jsonl"

    @property
    def telegram_settings(self) -> Path:
        """``telegram.json``: a Telegram chat's own settings (its time zone)."""
        return self.state / "telegram.json"

    @property
    def chat_log(self) -> Path:
        """``logs/chat.log``: the terminal chat's log lines (rotated)."""
        return self.state / "logs" / "chat.log"

    @property
    def chat_history(self) -> Path:
        """``chat_history``: the terminal chat's input history."""
        return self.state / "chat_history"


#: The layout relative to a workspace: ``RELATIVE.callers == Path(".a2a/callers.json")``.
RELATIVE: Final = WorkspaceLayout(Path())

__all__ = ["RELATIVE", "STATE_FOLDER", "WorkspaceLayout"]
