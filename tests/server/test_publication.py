"""The ``published`` flags of a gateway's workspaces, read fresh from card.json."""

from __future__ import annotations

import json
import logging
import os
import time
from pathlib import Path

import pytest

from a2a_gateway.server import fresh_file
from a2a_gateway.server.publication import CARD_FILE, Publication


def _card(workspace: Path, content: str) -> None:
    (workspace / CARD_FILE).parent.mkdir(parents=True, exist_ok=True)
    (workspace / CARD_FILE).write_text(content)


def test_each_workspace_has_its_flag_and_anonymous_follows_the_first(tmp_path: Path) -> None:
    first, second = tmp_path / "a", tmp_path / "b"
    publication = Publication([first, second])
    assert publication.published(str(first)) and publication.published("")  # no file
    _card(first, json.dumps({"name": "A", "published": False}))
    assert not publication.published(str(first)) and not publication.published("")
    assert publication.published(str(second))
    assert publication.any_published()  # the public card is shared: b still serves
    _card(second, json.dumps({"published": False}))
    assert not publication.any_published()
    _card(first, json.dumps({"published": True}))  # read fresh: no restart
    assert publication.published("") and publication.any_published()
    assert Publication([]).any_published() and Publication([]).published("")


def test_a_broken_file_is_published_and_a_wrong_flag_is_not(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    publication = Publication([tmp_path])
    _card(tmp_path, "{not json")
    with caplog.at_level(logging.WARNING):
        assert publication.published(str(tmp_path))
    assert "(not valid JSON): published" in caplog.text
    _card(tmp_path, json.dumps({"published": "no"}))
    assert not publication.published(str(tmp_path))


def test_a_card_edited_after_it_settled_is_read_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An old card.json's flag is kept without reading the clock (settled: here every
    file is old at once), and an edit keeping its size and mtime is still seen: its
    ctime moved."""
    monkeypatch.setattr(fresh_file, "FRESH_S", 0.0)
    card = tmp_path / CARD_FILE
    _card(tmp_path, '{"published": false}')
    old = time.time() - 60
    os.utime(card, (old, old))
    time.sleep(0.05)  # the next change's ctime a timestamp tick (coarse clock) later
    publication = Publication([tmp_path])
    for _ in range(3):  # read, then settled, then answered as settled
        assert not publication.published(str(tmp_path))
    _card(tmp_path, '{"published": true }')  # the same size, in place (the same inode)
    os.utime(card, (old, old))  # and the same mtime
    assert publication.published(str(tmp_path))
    card.unlink()  # missing: published (and a missing file is looked for without a stat)
    assert publication.published(str(tmp_path))
    _card(tmp_path, '{"published": false}')
    assert not publication.published(str(tmp_path))


def test_a_file_removed_then_written_again_is_read_again(tmp_path: Path) -> None:
    """A missing file is then looked for without a stat (``access``): it must still be
    seen the moment it is back, on every look."""
    publication = Publication([tmp_path])
    _card(tmp_path, json.dumps({"published": False}))
    assert not publication.published("")
    (tmp_path / CARD_FILE).unlink()
    for _ in range(3):  # missing, looked at again while missing
        assert publication.published("")
    _card(tmp_path, json.dumps({"published": False}))
    assert not publication.published("")
    (tmp_path / CARD_FILE).unlink()
    assert publication.published("")
