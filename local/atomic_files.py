"""The one atomic write (:func:`replace_file`: a file replaced whole or not at all) and
the small file-system steps every atomic writer here shares (task files, proxy ownership
records, inbox files, keys): write a buffer whole, name a temp file next to its target,
remove it when publishing fails, fsync a folder, and sweep the temp files a killed
process left behind.

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


def write_file(path: str, data: bytes, flags: int, *, fsync: bool, mode: int = 0o600) -> None:
    """Open ``path`` with ``flags`` (``mode`` if created, 0o600 unless told), write
    ``data`` whole, fsync it when asked, close it."""
    fd = os.open(path, flags, mode)
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


#: Longest target name a temp file's name repeats, in UTF-8 bytes (file systems allow 255).
_MAX_TEMP_STEM_BYTES = 200


def replace_file(
    path: str | os.PathLike[str], data: bytes, *, fsync: bool, mode: int = 0o600
) -> None:
    """Replace ``path`` with ``data`` atomically: written whole to a temp file next to it
    (``mode`` if new, 0o600 unless told; fsync'd when asked), then renamed over it; with
    ``fsync`` the folder is fsync'd too, so the new name survives a power cut. A reader
    sees the old file or the new one, never a part; a failure leaves no temp file."""
    folder, name = os.path.split(os.fspath(path))
    folder = folder or "."
    stem = name.encode()[:_MAX_TEMP_STEM_BYTES].decode(errors="ignore")
    tmp = temp_path(folder, stem)
    with removed_on_failure(tmp):
        write_file(
            tmp, data, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, fsync=fsync, mode=mode
        )
        os.replace(tmp, path)
    if fsync:
        fsync_folder(folder)


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
