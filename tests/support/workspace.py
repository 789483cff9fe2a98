"""A workspace folder and its ``.a2a/callers.json``, the way every test writes them.

The ``workspace`` fixture (:mod:`tests.support.fixtures`) is ``tmp_path / "ws"`` with its
``.a2a/`` folder; a test (or its module, with ``pytestmark``) says who may call it with
the ``callers`` marker::

    pytestmark = pytest.mark.callers({"name": "alice", "key": KEY_ALICE})

and the ``callers`` fixture rewrites that file in the middle of a test. Workspaces a
test makes by hand (a second one, one per subprocess) use :func:`make_workspace` and
:func:`write_callers`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from a2a_gateway.local.layout import RELATIVE, WorkspaceLayout

#: Where a workspace keeps its callers (relative to the workspace folder).
CALLERS_FILE = RELATIVE.callers

#: Entries, or any JSON value or text on purpose (a malformed file).
Callers = Sequence[Mapping[str, Any]] | str | Any


def write_callers(root: Path, callers: Callers) -> Path:
    """Write ``root/.a2a/callers.json``: ``callers`` as JSON, or as it is when it is
    text (a malformed file on purpose); returns its path."""
    path = root / CALLERS_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(callers if isinstance(callers, str) else json.dumps(callers))
    return path


def make_workspace(root: Path, callers: Callers | None = None) -> Path:
    """The folder ``root`` (resolved) with its ``.a2a/`` folder and, when ``callers`` is
    given, its callers.json."""
    root = root.resolve()
    WorkspaceLayout(root).state.mkdir(parents=True, exist_ok=True)
    if callers is not None:
        write_callers(root, callers)
    return root
