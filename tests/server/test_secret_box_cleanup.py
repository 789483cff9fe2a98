"""SecretBox removes the key-creation temp files a crash left in ``.a2a``."""

from __future__ import annotations

import os
import time
from pathlib import Path

from a2a_gateway.local.layout import WorkspaceLayout
from a2a_gateway.server.secret_box import STALE_TEMP_AGE_S, SecretBox


def _plant(folder: Path, name: str, age_s: float) -> Path:
    path = folder / name
    path.write_bytes(b"half a key\n")
    then = time.time() - age_s
    os.utime(path, (then, then))
    return path


def test_stale_temp_files_are_removed_when_the_box_opens(tmp_path: Path) -> None:
    folder = WorkspaceLayout(tmp_path).state
    folder.mkdir()
    stale = _plant(folder, ".secret.key.4242.deadbeef.tmp", STALE_TEMP_AGE_S + 60)
    fresh = _plant(folder, ".secret.key.4243.cafef00d.tmp", 0)  # maybe being written now
    other = _plant(folder, "notes.tmp", STALE_TEMP_AGE_S + 60)  # not ours
    box = SecretBox(tmp_path)
    sealed = box.seal("token", "ctx")
    assert not stale.exists()
    assert fresh.exists() and other.exists()
    assert box.open(sealed, "ctx") == "token"
    assert sorted(p.name for p in folder.iterdir()) == sorted(
        [fresh.name, other.name, "secret.key"]
    )


def test_stale_temp_files_are_removed_when_an_existing_key_is_read(tmp_path: Path) -> None:
    sealed = SecretBox(tmp_path).seal("token", "ctx")
    folder = WorkspaceLayout(tmp_path).state
    stale = _plant(folder, ".secret.key.1.00000000.tmp", STALE_TEMP_AGE_S + 1)
    assert SecretBox(tmp_path).open(sealed, "ctx") == "token"
    assert not stale.exists()


def test_a_stale_symlink_is_removed_not_followed(tmp_path: Path) -> None:
    folder = WorkspaceLayout(tmp_path).state
    folder.mkdir()
    target = tmp_path / "precious"
    target.write_text("keep me")
    link = folder / ".secret.key.7.0badf00d.tmp"
    link.symlink_to(target)
    then = time.time() - STALE_TEMP_AGE_S - 60
    os.utime(link, (then, then), follow_symlinks=False)
    SecretBox(tmp_path).seal("token", "ctx")
    assert not link.is_symlink()
    assert target.read_text() == "keep me"
