"""``send --save-dir DIR``: file parts an agent returns, saved under safe names in DIR.

The name is the part's ``filename`` made safe by the same rule as received files
(:func:`~a2a_gateway.local.files.sanitize_filename`: last path component, no control
or reserved characters, no leading dots); an existing file is never replaced (``-2``,
``-3``, ... before the extension), and the file is created directly in DIR, never
through a link (:func:`~a2a_gateway.local.files.save_new_file`), so nothing is written
outside it.
"""

from __future__ import annotations

from pathlib import Path

from a2a_gateway.local.files import sanitize_filename, save_new_file


def save_file(folder: Path, filename: str, data: bytes) -> Path:
    """Write ``data`` to a new file in ``folder`` (created when missing); its path."""
    folder.mkdir(parents=True, exist_ok=True)
    _, relative = save_new_file(folder, (), sanitize_filename(filename), data)
    return folder / relative


__all__ = ["save_file"]
