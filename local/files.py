"""File names and new files in a workspace, for every layer that saves what a stranger
sends: the server's inbox (``server/files.py``), the a2a tool's results
(``client/results.py``) and the owner hosts' received files (Telegram, the terminal chat).

- :func:`sanitize_filename` makes any offered name safe to create (last path component,
  no control or Windows-forbidden characters, no dotfiles, bounded length);
- :func:`save_new_file` writes a new file whole to a temp file and links it to its final
  name, which never replaces an existing file (``-2``, ``-3``, ... on a clash); folders
  are opened component by component without following symlinks, so a symlinked folder
  cannot redirect the write. New folders are 0700 and files 0600;
- :func:`guess_media_type` and :func:`clean_media_type` name what a file is.
"""

from __future__ import annotations

import contextlib
import mimetypes
import os
import re
import unicodedata
from collections.abc import Iterator, Sequence
from pathlib import Path

from .atomic_files import write_all

#: The default cap on one file part, in bytes (``--max-file-bytes``).
DEFAULT_MAX_FILE_BYTES = 10 * 1024 * 1024
INBOX_FOLDER = "inbox"
OCTET_STREAM = "application/octet-stream"
#: Longest file name we write, in UTF-8 bytes (file systems allow 255; room for "-NNNN").
MAX_NAME_BYTES = 200
_MAX_SUFFIX_BYTES = 16
_CLASH_TRIES = 9999

_WINDOWS_FORBIDDEN = frozenset('<>:"|?*')
_RESERVED = frozenset(
    {"CON", "PRN", "AUX", "NUL", "CONIN$", "CONOUT$", "CLOCK$"}
    | {f"{device}{n}" for device in ("COM", "LPT") for n in "123456789¹²³"}
)
_MEDIA_TYPE = re.compile(r"[a-z0-9!#$&^_.+-]{1,64}/[a-z0-9!#$&^_.+-]{1,64}")
_SUFFIX = re.compile(r"\.[A-Za-z0-9]{1,15}")


# --- names -----------------------------------------------------------------------------


def sanitize_filename(name: str, *, fallback: str = "file") -> str:
    """A safe file name for ``name``: its last path component (``/`` and ``\\``),
    without control, format or Windows-forbidden characters, leading dots (no
    dotfiles, no ``..``), leading dashes, trailing dots and spaces; Windows device
    names (``CON``, ``nul.txt``, ``COM1``) get a ``_`` prefix; at most
    :data:`MAX_NAME_BYTES` UTF-8 bytes (the extension is kept). Empty: ``fallback``."""
    name = unicodedata.normalize("NFC", name)
    components = [c for c in re.split(r"[/\\]", name) if c.strip(" .")]
    name = components[-1] if components else ""
    name = "".join(c if c.isprintable() and c not in _WINDOWS_FORBIDDEN else "_" for c in name)
    name = name.strip(" ").lstrip(".-").rstrip(" .")
    if not name:
        return fallback
    stem = name.split(".", 1)[0].rstrip(" ").upper()
    if stem in _RESERVED:
        name = "_" + name
    return _truncate(name)


def _split_suffix(name: str) -> tuple[str, str]:
    stem, dot, suffix = name.rpartition(".")
    if dot and stem and _SUFFIX.fullmatch(f".{suffix}"):
        return stem, f".{suffix}"
    return name, ""


def _truncate(name: str) -> str:
    if len(name.encode()) <= MAX_NAME_BYTES:
        return name
    stem, suffix = _split_suffix(name)
    if len(suffix) > _MAX_SUFFIX_BYTES:
        stem, suffix = name, ""
    budget = MAX_NAME_BYTES - len(suffix.encode())
    cut = stem.encode()[:budget].decode(errors="ignore").rstrip(" .")
    return (cut or "file") + suffix


def clash_names(name: str) -> Iterator[str]:
    """``name``, then ``stem-2.ext``, ``stem-3.ext``, ... and a random last resort."""
    yield name
    stem, suffix = _split_suffix(name)
    for n in range(2, _CLASH_TRIES + 1):
        yield f"{stem}-{n}{suffix}"
    yield f"{stem}-{os.urandom(6).hex()}{suffix}"


def clean_media_type(value: str) -> str:
    """``value`` without parameters, lower-cased, if it looks like ``type/subtype``;
    else ``""``."""
    media_type = value.split(";", 1)[0].strip().lower()
    return media_type if _MEDIA_TYPE.fullmatch(media_type) else ""


def guess_media_type(filename: str) -> str:
    """The media type for ``filename``'s extension, or ``application/octet-stream``."""
    guessed, _ = mimetypes.guess_type(filename, strict=False)
    return clean_media_type(guessed or "") or OCTET_STREAM


# --- new files -------------------------------------------------------------------------


def _open_folder(parent_fd: int, name: str) -> int:
    """Open (creating it 0700 if needed) the folder ``name`` in ``parent_fd``,
    refusing a symlink."""
    with contextlib.suppress(FileExistsError):
        os.mkdir(name, 0o700, dir_fd=parent_fd)
    return os.open(
        name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=parent_fd
    )


def save_new_file(
    workspace: Path, folders: Sequence[str], filename: str, data: bytes
) -> tuple[Path, str]:
    """Save ``data`` as a new file ``filename`` (already sanitised) in the sub-folders
    ``folders`` of ``workspace`` (created 0700, never through a symlink), as ``-2``,
    ``-3``, ... on a clash. Returns its absolute path and its workspace-relative path
    (``/`` separators). Raises OSError."""
    fds: list[int] = []
    try:
        fds.append(os.open(workspace, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC))
        for name in folders:
            fds.append(_open_folder(fds[-1], name))
        final = _write_new(fds[-1], filename, data)
    finally:
        for fd in fds:
            os.close(fd)
    relative = "/".join([*folders, final])
    return Path(workspace).resolve().joinpath(*folders, final), relative


def _write_new(folder: int, filename: str, data: bytes) -> str:
    """Write ``data`` to a temp file in ``folder``, link it under the first free
    candidate name and return that name."""
    tmp = f".incoming-{os.urandom(8).hex()}.tmp"
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(tmp, flags, 0o600, dir_fd=folder)
    try:
        try:
            write_all(fd, data)
        finally:
            os.close(fd)
        for candidate in clash_names(filename):
            try:
                os.link(tmp, candidate, src_dir_fd=folder, dst_dir_fd=folder)
            except FileExistsError:
                continue
            return candidate
        raise FileExistsError(f"no free name for {filename}")
    finally:
        with contextlib.suppress(OSError):
            os.unlink(tmp, dir_fd=folder)
