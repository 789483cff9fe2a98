"""The one atomic write: a file is replaced whole or not at all, and no temp file stays."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from a2a_gateway.local.atomic_files import is_stale_temp, remove_temp_files, replace_file


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.mark.parametrize("fsync", [False, True])
def test_a_file_is_created_then_replaced_whole(tmp_path: Path, fsync: bool) -> None:
    path = tmp_path / "state.json"
    replace_file(path, b'{"a": 1}\n', fsync=fsync)
    assert path.read_bytes() == b'{"a": 1}\n'
    assert _mode(path) == 0o600
    replace_file(str(path), b"[]\n", fsync=fsync)  # a str path too
    assert path.read_bytes() == b"[]\n"
    assert sorted(os.listdir(tmp_path)) == ["state.json"]  # no temp file left


def test_the_mode_of_a_new_file_can_follow_the_umask(tmp_path: Path) -> None:
    path = tmp_path / "settings.json"
    old = os.umask(0o022)
    try:
        replace_file(path, b"{}", fsync=False, mode=0o666)
    finally:
        os.umask(old)
    assert _mode(path) == 0o644


def test_a_failed_replace_keeps_the_old_file_and_leaves_no_temp_file(tmp_path: Path) -> None:
    (tmp_path / "folder").mkdir()
    (tmp_path / "folder" / "inside").write_bytes(b"kept")
    with pytest.raises(OSError):  # a rename cannot replace a non-empty folder
        replace_file(tmp_path / "folder", b"new", fsync=True)
    assert (tmp_path / "folder" / "inside").read_bytes() == b"kept"
    assert sorted(os.listdir(tmp_path)) == ["folder"]


def test_a_long_name_gets_a_temp_file_within_the_name_limit(tmp_path: Path) -> None:
    name = "é" * 120 + ".txt"  # 244 bytes: the name plus a temp suffix would pass 255
    replace_file(tmp_path / name, b"x", fsync=False)
    assert os.listdir(tmp_path) == [name]


def test_temp_files_of_another_process_are_stale_and_swept(tmp_path: Path) -> None:
    mine = f".t1.json.{os.getpid()}.0.tmp"
    theirs = f".t1.json.{os.getpid() + 1}.0.tmp"
    assert not is_stale_temp(mine) and is_stale_temp(theirs)
    assert not is_stale_temp("t1.json")
    for name in (theirs, "t1.json"):
        (tmp_path / name).write_bytes(b"x")
    remove_temp_files(str(tmp_path))
    assert os.listdir(tmp_path) == ["t1.json"]
