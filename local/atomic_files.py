"""The small file-system steps every atomic writer here shares (task files, proxy
ownership records, inbox files): write a buffer whole, name a temp file next to its
target, remove it when publishing fails, fsync a folder, and sweep the temp files a
killed process left behind.

A temp file is named ``.<name>.<pid>.<n>.tmp`` in the folder of its target (same file
system, so a rename or link publishes it atomically); the leading dot keeps it out of
every listing that looks for ``*.json``.
"""

from __future__ import annotations

import contextlib
import itertools
import os
from collections.abc import Iterator

_counter = itertools.count()


def write_all(fd: int, data: bytes) -> None:
    """``data`` written whole to ``fd`` (``os.write`` may write less than asked)."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def write_file(path: str, data: bytes, flags: int, *, fsync: bool) -> None:
    """Open ``path`` with ``flags`` (mode 0o600 if created), write ``data`` whole, fsync
    it when asked, close it."""
    fd = os.open(path, flags, 0o600)
    try:
        write_all(fd, data)
        if fsync:
            os.fsync(fd)
    finally:
        os.close(fd)


def temp_path(folder: str, name: str) -> str:
    """A fresh temp-file path in ``folder`` for a file about to become ``name``."""
    return f"{folder}/.{name}.{os.getpid()}.{next(_counter)}.tmp"


@contextlib.contextmanager
def removed_on_failure(tmp: str) -> Iterator[None]:
    """Remove the temp file ``tmp`` when the block fails (then re-raise): a write or a
    publish that did not complete leaves nothing behind."""
    try:
        yield
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def fsync_folder(folder: str) -> None:
    """Make the folder's entries (a new or renamed file) durable."""
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def is_stale_temp(name: str) -> bool:
    """Whether ``name`` is a temp file left by another (killed) process."""
    if not (name.startswith(".") and name.endswith(".tmp")):
        return False
    parts = name[:-4].rsplit(".", 2)
    return len(parts) != 3 or parts[1] != str(os.getpid())


def remove_temp_files(folder: str) -> None:
    """Remove the ``.*.tmp`` files of ``folder`` (a writer killed between writing and
    publishing leaves one). Call it before this process writes there. The folder is
    streamed, never listed whole (a tasks folder may hold millions of files)."""
    try:
        entries = os.scandir(folder)
    except OSError:
        return
    with entries:
        for entry in entries:
            if entry.name.startswith(".") and entry.name.endswith(".tmp"):
                with contextlib.suppress(OSError):
                    os.unlink(entry.path)
