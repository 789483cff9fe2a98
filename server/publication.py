"""Whether a workspace's agent is published: ``"published"`` in
``<workspace>/.a2a/card.json`` (``callers publish`` / ``callers unpublish``), true when
absent.

While a workspace is unpublished every call of its callers is refused (401, on every
binding: the check is part of admission), and once no workspace is published the public
card (and the icon) answer 404. The file is read fresh: its stat is looked at on every
check and the file read again when the stat changes (and while it is younger than
:data:`FRESH_S`, as for callers.json), so publishing needs no restart.

A card.json that cannot be read or is not a JSON object counts as published (as a
missing one does: the extended card falls back to its defaults too), with one warning
per version of the file; a ``published`` that is not true or false counts as
unpublished (someone meant to change it).
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import orjson

log = logging.getLogger(__name__)

CARD_FILE = Path(".a2a") / "card.json"
PUBLISHED_KEY = "published"
#: A workspace file younger than this is read on every check (an edit within one
#: timestamp tick and of the same size would otherwise go unnoticed); callers.json too.
FRESH_S = 2.0
_MAX_FILE_BYTES = 1024 * 1024

_Stamp = tuple[int, int, int, int]


class _Flag:
    """The ``published`` flag of one card.json, re-read whenever its stat changes."""

    __slots__ = ("_name", "_stamp", "_value", "path")

    def __init__(self, path: Path) -> None:
        self.path = path
        self._name = str(path)  # stat(2) of a str: no os.fspath per call
        self._stamp: _Stamp | None = None
        self._value = True

    def value(self) -> bool:
        try:
            st = os.stat(self._name)
        except OSError:  # no card.json (or no workspace): published
            self._stamp, self._value = None, True
            return True
        stamp = (st.st_mtime_ns, st.st_ctime_ns, st.st_size, st.st_ino)
        if stamp != self._stamp or time.time_ns() - max(stamp[:2]) < FRESH_S * 1e9:
            self._value = self._read(stamp, st.st_size)
            self._stamp = stamp
        return self._value

    def _read(self, stamp: _Stamp, size: int) -> bool:
        warn = stamp != self._stamp  # once per version of the file
        try:
            if size > _MAX_FILE_BYTES:
                raise ValueError(f"larger than {_MAX_FILE_BYTES} bytes")
            data: Any = orjson.loads(self.path.read_bytes())
        except (OSError, ValueError) as exc:
            if warn:
                log.warning("card file %s is unreadable (%s): published", self.path, _why(exc))
            return True
        if not isinstance(data, dict):
            if warn:
                log.warning("card file %s is not a JSON object: published", self.path)
            return True
        value = data.get(PUBLISHED_KEY, True)
        if not isinstance(value, bool):
            if warn:
                log.warning("card file %s: published is not true or false: unpublished", self.path)
            return False
        return value


def _why(exc: Exception) -> str:
    if isinstance(exc, OSError):
        return (exc.strerror or type(exc).__name__).lower()
    if isinstance(exc, orjson.JSONDecodeError):
        return "not valid JSON"
    return str(exc)


class Publication:
    """The ``published`` flags of a gateway's workspaces (see the module docstring).
    Callers without a workspace (anonymous) belong to the first, as their tasks do."""

    def __init__(self, workspaces: Sequence[Path]) -> None:
        self._flags = {str(w): _Flag(Path(w) / CARD_FILE) for w in workspaces}
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
