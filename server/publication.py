"""Whether a workspace's agent is published: ``"published"`` in
``<workspace>/.a2a/card.json`` (``callers publish`` / ``callers unpublish``), true when
absent.

While a workspace is unpublished every call of its callers is refused (401, on every
binding: the check is part of admission), and once no workspace is published the public
card (and the icon) answer 404. The file is read fresh: its stat is looked at on every
check and the file read again when the stat changes (and while it is younger than
:data:`.fresh_file.FRESH_S`, as callers.json is), so publishing needs no restart.

A card.json that cannot be read or is not a JSON object counts as published (as a
missing one does: the extended card falls back to its defaults too), with one warning
per version of the file; a ``published`` that is not true or false counts as
unpublished (someone meant to change it).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import orjson

from a2a_gateway.local.layout import RELATIVE

from .fresh_file import FreshFile

log = logging.getLogger(__name__)

CARD_FILE = RELATIVE.card
PUBLISHED_KEY = "published"
_MAX_FILE_BYTES = 1024 * 1024


def _published(raw: bytes, path: Path) -> tuple[bool, list[str]]:
    """The ``published`` flag of a card.json's bytes, and why it was read as it was:
    unreadable or not an object is published (as the extended card reads it), a
    non-boolean flag is unpublished."""
    try:
        if len(raw) > _MAX_FILE_BYTES:
            raise ValueError(f"larger than {_MAX_FILE_BYTES} bytes")
        data: Any = orjson.loads(raw)
    except ValueError as exc:
        why = "not valid JSON" if isinstance(exc, orjson.JSONDecodeError) else str(exc)
        return True, [f"card file {path} is unreadable ({why}): published"]
    if not isinstance(data, dict):
        return True, [f"card file {path} is not a JSON object: published"]
    value = data.get(PUBLISHED_KEY, True)
    if not isinstance(value, bool):
        return False, [f"card file {path}: published is not true or false: unpublished"]
    return value, []


def _flag(path: Path) -> FreshFile[bool]:
    """One card.json's flag, read fresh (a missing or unreadable file: published)."""
    return FreshFile(path, lambda raw: _published(raw, path), True, "card file", "published")


class Publication:
    """The ``published`` flags of a gateway's workspaces (see the module docstring).
    Callers without a workspace (anonymous) belong to the first, as their tasks do."""

    def __init__(self, workspaces: Sequence[Path]) -> None:
        self._flags = {str(w): _flag(Path(w) / CARD_FILE) for w in workspaces}
        self._first = next(iter(self._flags.values()), None)

    def published(self, workspace: str) -> bool:
        """Whether calls of a caller of ``workspace`` ("": anonymous) are served."""
        flag = self._flags.get(workspace) if workspace else self._first
        return True if flag is None else flag.value()

    def any_published(self) -> bool:
        """Whether the public card is served: some workspace is published (or there is
        none)."""
        return not self._flags or any(flag.value() for flag in self._flags.values())


__all__ = ["CARD_FILE", "PUBLISHED_KEY", "Publication"]
