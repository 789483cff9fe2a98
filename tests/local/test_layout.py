"""The workspace's ``.a2a/`` layout: one object names every file the gateway keeps there,
and the modules that read or write those files take their paths from it."""

from __future__ import annotations

import ast
import dataclasses
import re
from pathlib import Path

import pytest

from a2a_gateway.agent.sessions import SESSIONS_DIR
from a2a_gateway.agent.tools.interaction import OWNER_INBOX
from a2a_gateway.client.agents_file import AGENTS_FILE
from a2a_gateway.client.pending import PENDING_FILE
from a2a_gateway.local.layout import RELATIVE, STATE_FOLDER, WorkspaceLayout
from a2a_gateway.proxy_owners import RECORDS_FOLDER
from a2a_gateway.server.auth import CALLERS_FILE
from a2a_gateway.server.file_store import EVENTS_FOLDER, TASKS_FOLDER
from a2a_gateway.server.pact import PACT_FILE
from a2a_gateway.server.pact.keys import SIGNING_KEY_FILE
from a2a_gateway.server.publication import CARD_FILE
from a2a_gateway.server.secret_box import KEY_FILE
from a2a_gateway.server.task_index import INDEX_NAME
from a2a_gateway.telegram.host import CHAT_SETTINGS_FILE
from tests.test_architecture import REPO, module_files

# Every file and folder of .a2a/, as the docs and existing workspaces know them.
FILES = {
    "callers": "callers.json",
    "card": "card.json",
    "pact": "pact.json",
    "pact_signing_key": "pact-signing-key.json",
    "secret_key": "secret.key",
    "tasks": "tasks",
    "events": "events",
    "task_index": "index.sqlite3",
    "proxy_tasks": "proxy-tasks",
    "agents": "agents.json",
    "pending": "pending.json",
    "sessions": "sessions",
    "owner_inbox": "owner-inbox.jsonl",
    "telegram_settings": "telegram.json",
    "chat_log": "logs/chat.log",
    "chat_history": "chat_history",
}


@pytest.mark.parametrize(("name", "relative"), sorted(FILES.items()))
def test_each_file_lives_under_the_state_folder(name: str, relative: str, tmp_path: Path) -> None:
    assert getattr(RELATIVE, name) == Path(".a2a") / relative
    assert getattr(WorkspaceLayout(tmp_path), name) == tmp_path / ".a2a" / relative


def test_the_layout_lists_exactly_these_files() -> None:
    properties = {
        name
        for name, value in vars(WorkspaceLayout).items()
        if isinstance(value, property) and name != "state"
    }
    assert properties == set(FILES)
    assert RELATIVE.state == Path(STATE_FOLDER) == Path(".a2a")


def test_a_layout_is_a_frozen_value(tmp_path: Path) -> None:
    layout = WorkspaceLayout(tmp_path)
    assert layout == WorkspaceLayout(tmp_path) and hash(layout) == hash(WorkspaceLayout(tmp_path))
    with pytest.raises(dataclasses.FrozenInstanceError):
        layout.root = Path("/elsewhere")  # type: ignore[misc]


def test_the_modules_take_their_paths_from_the_layout() -> None:
    assert [
        RELATIVE.callers,
        RELATIVE.card,
        RELATIVE.pact,
        RELATIVE.pact_signing_key,
        RELATIVE.secret_key,
        RELATIVE.tasks,
        RELATIVE.events,
        RELATIVE.proxy_tasks,
        RELATIVE.agents,
        RELATIVE.pending,
        RELATIVE.sessions,
        RELATIVE.owner_inbox,
        RELATIVE.telegram_settings,
    ] == [
        CALLERS_FILE,
        CARD_FILE,
        PACT_FILE,
        SIGNING_KEY_FILE,
        KEY_FILE,
        TASKS_FOLDER,
        EVENTS_FOLDER,
        RECORDS_FOLDER,
        AGENTS_FILE,
        PENDING_FILE,
        SESSIONS_DIR,
        OWNER_INBOX,
        CHAT_SETTINGS_FILE,
    ]
    assert RELATIVE.task_index.name == INDEX_NAME


#: A string that is a path into the folder (not prose that mentions it).
_SPELLED = re.compile(r"\.a2a(/[\w.-]*)*")


def spelled_paths(source: str) -> list[int]:
    """The lines of ``source`` whose code spells the folder as a path: the string
    ``".a2a"`` or ``".a2a/file"`` (docstrings and prose that mention it do not count)."""
    return sorted(
        node.lineno
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and _SPELLED.fullmatch(node.value)
    )


def test_no_module_but_the_layout_spells_the_folder() -> None:
    layout = REPO / "local" / "layout.py"
    found = [
        f"{path.relative_to(REPO)}:{line}"
        for path in sorted({*module_files().values(), *(REPO / "tools").glob("*.py")})
        if path != layout
        for line in spelled_paths(path.read_text(encoding="utf-8"))
    ]
    assert found == [], "take the path from a2a_gateway.local.layout"
    assert spelled_paths(layout.read_text(encoding="utf-8")) != []


def test_the_scan_finds_the_folder_in_any_spelling() -> None:
    source = (
        '"""Docs about .a2a/callers.json."""\n'
        'A = Path(".a2a") / "callers.json"\n'
        'B = workspace.joinpath(".a2a", "tasks")\n'
        'C = Path(".a2a/pending.json")\n'
        'D = "the gateway keeps .a2a/ private"\n'
    )
    assert spelled_paths(source) == [2, 3, 4]
