"""``send --save-dir DIR``: file parts an agent returns, saved under safe names in DIR.

A name comes from the part's ``filename`` reduced to its last path component and to
letters, digits, ``.``, ``-``, ``_`` and spaces (no leading dot, at most 120 characters;
``file`` when nothing is left). An existing file is never replaced: ``-2``, ``-3``, ...
is added before the extension. Files are created with ``O_EXCL | O_NOFOLLOW`` directly
in DIR, so nothing is ever written outside it.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

_UNSAFE = re.compile(r"[^A-Za-z0-9._ -]+")
MAX_NAME_CHARS = 120
MAX_TRIES = 1000


def safe_name(filename: str) -> str:
    """``filename`` as a plain name that stays inside a folder."""
    base = filename.replace("\\", "/").rsplit("/", 1)[-1]
    base = _UNSAFE.sub("_", base).strip(" .")
    base = base.lstrip(".-")
    if len(base) > MAX_NAME_CHARS:
        stem, dot, ext = base.rpartition(".")
        ext = ext[:16] if dot else ""
        base = (stem if dot else base)[: MAX_NAME_CHARS - len(ext) - 1] + (f".{ext}" if ext else "")
    return base or "file"


def save_file(folder: Path, filename: str, data: bytes) -> Path:
    """Write ``data`` to a new file in ``folder``; returns its path."""
    folder.mkdir(parents=True, exist_ok=True)
    name = safe_name(filename)
    stem, dot, ext = name.rpartition(".")
    if not dot or not stem:
        stem, ext = name, ""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
    for attempt in range(1, MAX_TRIES + 1):
        candidate = name if attempt == 1 else f"{stem}-{attempt}" + (f".{ext}" if ext else "")
        path = folder / candidate
        try:
            fd = os.open(path, flags, 0o644)
        except FileExistsError:
            continue
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        return path
    raise FileExistsError(f"{folder}: no free name for {name!r}")


__all__ = ["safe_name", "save_file"]
