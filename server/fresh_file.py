"""A small workspace file read fresh: callers.json, pact.json.

Such a file is parsed again whenever its stat changes, and on every look while it is
younger than :data:`FRESH_S` (an edit within the same timestamp tick and of the same
size would otherwise go unnoticed). A missing file is the empty value; one that cannot
be read, is not a regular file (a FIFO must not hang the server) or does not parse is
the empty value too, with a warning naming the file (never its content), logged once
per version of the file.
"""

from __future__ import annotations

import logging
import os
import stat
import time
from collections.abc import Callable
from pathlib import Path
from typing import Generic, TypeVar

log = logging.getLogger(__name__)

T = TypeVar("T")

#: A file younger than this is re-read on every look (see the module doc).
FRESH_S = 2.0

#: Parses a file's bytes: the value and one warning per problem (naming no secret).
Parser = Callable[[bytes], tuple[T, list[str]]]


class Unreadable(Exception):
    """Why a file could not be read (its ``strerror``, or that it is not a file)."""


def read_regular_file(path: Path) -> bytes | None:
    """The bytes of ``path``; None when it does not exist; :class:`Unreadable` when it
    cannot be read or is not a regular file (opened without blocking first)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise Unreadable(f"unreadable ({exc.strerror})") from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise Unreadable("is not a regular file")
        with open(fd, "rb", closefd=False) as file:
            return file.read()
    except OSError as exc:
        raise Unreadable(f"unreadable ({exc.strerror})") from None
    finally:
        os.close(fd)


def read_file(
    path: Path, parse: Parser[T], empty: T, what: str, nothing: str
) -> tuple[T, list[str]]:
    """``path`` parsed, or ``empty`` with the warning saying why: ``what`` names the
    kind of file (``callers file``), ``nothing`` what follows (``no callers loaded``)."""
    try:
        raw = read_regular_file(path)
    except Unreadable as exc:
        return empty, [f"{what} {exc}, {nothing}: {path}"]
    if raw is None:
        return empty, []
    return parse(raw)


class FreshFile(Generic[T]):
    """One file, parsed again when it changed (see the module doc)."""

    def __init__(self, path: Path, parse: Parser[T], empty: T, what: str, nothing: str) -> None:
        self.path = path
        self._fspath = os.fspath(path)
        self._parse = parse
        self._empty = empty
        self._what = what
        self._nothing = nothing
        self._stamp: tuple[int, int, int, int] | None = None
        self._warned: tuple[int, int, int, int] | None = None
        self._value = empty
        self._absent = False

    def value(self) -> T:
        # Found missing at the last look: while it still is, ``access`` says so without
        # the exception a failed ``stat`` makes (1.5 against 2.8 us; a card.json is
        # looked at on every call's admission, and most workspaces have none).
        if self._absent and not os.access(self._fspath, os.F_OK):
            return self._empty
        self._absent = False
        try:
            st = os.stat(self._fspath)  # a str: no Path.__fspath__ on every look
        except FileNotFoundError:
            self._stamp, self._value, self._absent = None, self._empty, True
            return self._empty
        except OSError as exc:
            self._stamp, self._value = None, self._empty
            self._warn_once(
                (0, 0, 0, 0), [f"{self._what} unreadable ({exc.strerror}): {self.path}"]
            )
            return self._empty
        stamp = (st.st_mtime_ns, st.st_ctime_ns, st.st_size, st.st_ino)
        fresh = abs(time.time_ns() - max(st.st_mtime_ns, st.st_ctime_ns)) < FRESH_S * 1e9
        if stamp != self._stamp or fresh:
            value, warnings = read_file(
                self.path, self._parse, self._empty, self._what, self._nothing
            )
            self._warn_once(stamp, warnings)
            self._value, self._stamp = value, stamp
        return self._value

    def _warn_once(self, stamp: tuple[int, int, int, int], warnings: list[str]) -> None:
        if stamp == self._warned:
            return
        self._warned = stamp
        for warning in warnings:
            log.warning("%s", warning)


__all__ = ["FRESH_S", "FreshFile", "Unreadable", "read_file", "read_regular_file"]
