"""Push secrets at rest: the per-workspace key file and sealed token/credentials."""

from __future__ import annotations

import base64
import logging
import os
import stat
from pathlib import Path

import orjson
import pytest

from a2a_gateway.local.layout import WorkspaceLayout
from a2a_gateway.protocol import proto_dict
from a2a_gateway.server.secret_box import (
    KEY_FILE,
    SEALED_PREFIX,
    SecretBox,
    SecretBoxError,
    is_sealed,
)
from lf.a2a.v1 import a2a_pb2 as pb
from tests.support.secrets import use_secret

TOKEN = "push-token-4f2a9c81d7e3"
CREDENTIALS = "hook-credentials-9b7e15c3a0"
use_secret(TOKEN, CREDENTIALS)


def config(config_id: str = "hook-1", task_id: str = "task-1") -> pb.TaskPushNotificationConfig:
    return pb.TaskPushNotificationConfig(
        id=config_id,
        task_id=task_id,
        url="https://hooks.example.com/a2a",
        token=TOKEN,
        authentication=pb.AuthenticationInfo(scheme="Bearer", credentials=CREDENTIALS),
    )


def test_key_file_is_created_on_first_seal_with_mode_0600(tmp_path: Path) -> None:
    box = SecretBox(tmp_path)
    assert not (tmp_path / KEY_FILE).exists()
    sealed = box.seal("hello", "ctx")
    key_file = tmp_path / KEY_FILE
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    assert len(base64.urlsafe_b64decode(key_file.read_bytes().strip())) == 32
    assert sorted(p.name for p in key_file.parent.iterdir()) == ["secret.key"]  # no temp left
    assert sealed.startswith(SEALED_PREFIX) and is_sealed(sealed)
    assert box.open(sealed, "ctx") == "hello"


def test_each_seal_is_fresh_and_empty_stays_empty(tmp_path: Path) -> None:
    box = SecretBox(tmp_path)
    first, second = box.seal("same", "ctx"), box.seal("same", "ctx")
    assert first != second
    assert box.open(first, "ctx") == box.open(second, "ctx") == "same"
    assert box.seal("", "ctx") == ""
    assert box.open("", "ctx") == ""


def test_push_config_secrets_are_sealed_and_reopened(tmp_path: Path) -> None:
    original = config()
    sealed = SecretBox(tmp_path).seal_push_config(original)
    stored = orjson.dumps(proto_dict.to_dict(sealed)).decode()
    assert TOKEN not in stored and CREDENTIALS not in stored
    assert is_sealed(sealed.token) and is_sealed(sealed.authentication.credentials)
    assert (sealed.url, sealed.id, sealed.task_id) == (original.url, "hook-1", "task-1")
    assert sealed.authentication.scheme == "Bearer"
    assert original.token == TOKEN  # the input is not modified
    # A new box (another process, after a restart) reads the same key file.
    reopened = SecretBox(tmp_path).open_push_config(sealed)
    assert reopened == original
    # Sealing twice does not double-seal.
    assert SecretBox(tmp_path).seal_push_config(sealed) == sealed


def test_a_config_without_secrets_is_unchanged(tmp_path: Path) -> None:
    plain = pb.TaskPushNotificationConfig(id="c", task_id="t", url="https://x.example/")
    box = SecretBox(tmp_path)
    assert box.seal_push_config(plain) == plain
    assert box.open_push_config(plain) == plain
    assert not (tmp_path / KEY_FILE).exists()


def test_sealed_values_are_bound_to_their_place(tmp_path: Path) -> None:
    box = SecretBox(tmp_path)
    sealed = box.seal_push_config(config("hook-1"))
    moved = pb.TaskPushNotificationConfig()
    moved.CopyFrom(sealed)
    moved.id = "hook-2"  # the same ciphertext under another config id
    with pytest.raises(SecretBoxError, match="does not open"):
        box.open_push_config(moved)
    swapped = pb.TaskPushNotificationConfig()
    swapped.CopyFrom(sealed)
    swapped.token = sealed.authentication.credentials  # credentials into the token field
    with pytest.raises(SecretBoxError):
        box.open_push_config(swapped)


def test_plaintext_values_pass_through(tmp_path: Path) -> None:
    # A hand-edited task file may hold plaintext: it is used as is (and sealed on save).
    box = SecretBox(tmp_path)
    assert box.open_push_config(config()) == config()


def test_wrong_missing_or_broken_keys_fail_without_showing_secrets(tmp_path: Path) -> None:
    sealed = SecretBox(tmp_path / "a").seal_push_config(config())
    with pytest.raises(SecretBoxError, match="is missing") as missing:
        SecretBox(tmp_path / "b").open_push_config(sealed)
    SecretBox(tmp_path / "c").seal("x", "ctx")
    with pytest.raises(SecretBoxError, match="does not open") as wrong:
        SecretBox(tmp_path / "c").open_push_config(sealed)
    tampered = sealed.token[:-4] + ("AAAA" if not sealed.token.endswith("AAAA") else "BBBB")
    with pytest.raises(SecretBoxError):
        SecretBox(tmp_path / "a").open(tampered, "ctx")
    with pytest.raises(SecretBoxError, match=r"base64|too short"):
        SecretBox(tmp_path / "a").open(SEALED_PREFIX + "!!", "ctx")
    broken = tmp_path / "d" / KEY_FILE
    broken.parent.mkdir(parents=True)
    broken.write_text("not a key\n")
    broken.chmod(0o600)
    with pytest.raises(SecretBoxError, match="valid key") as invalid:
        SecretBox(tmp_path / "d").seal("x", "ctx")
    for error in (missing, wrong, invalid):
        assert TOKEN not in str(error.value) and CREDENTIALS not in str(error.value)
        assert "not a key" not in str(error.value)


def test_a_key_file_readable_by_others_is_used_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    sealed = SecretBox(tmp_path).seal("value", "ctx")
    (tmp_path / KEY_FILE).chmod(0o644)
    with caplog.at_level(logging.WARNING, logger="a2a_gateway.server.secret_box"):
        assert SecretBox(tmp_path).open(sealed, "ctx") == "value"
    assert "readable by others" in caplog.text
    assert str(tmp_path / KEY_FILE) in caplog.text


def test_a_symlinked_key_file_is_refused(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere.key"
    elsewhere.write_text(base64.urlsafe_b64encode(os.urandom(32)).decode())
    key_file = tmp_path / "ws" / KEY_FILE
    key_file.parent.mkdir(parents=True)
    key_file.symlink_to(elsewhere)
    with pytest.raises(SecretBoxError, match="cannot be read"):
        SecretBox(tmp_path / "ws").seal("x", "ctx")


def test_racing_creators_agree_on_one_key(tmp_path: Path) -> None:
    early, late = SecretBox(tmp_path), SecretBox(tmp_path)
    sealed = early.seal("value", "ctx")
    # ``late`` decided to create a key before ``early``'s file appeared: its link
    # fails and it adopts the key that won.
    assert late._create_key() == base64.urlsafe_b64decode((tmp_path / KEY_FILE).read_bytes())
    assert late.open(sealed, "ctx") == "value"
    assert sorted(p.name for p in WorkspaceLayout(tmp_path).state.iterdir()) == ["secret.key"]


def test_a_fifo_key_file_is_refused_without_hanging(tmp_path: Path) -> None:
    key_file = tmp_path / "ws" / KEY_FILE
    key_file.parent.mkdir(parents=True)
    os.mkfifo(key_file)
    with pytest.raises(SecretBoxError, match="not a regular file"):
        SecretBox(tmp_path / "ws").seal("x", "ctx")


def test_a_short_write_still_creates_a_whole_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # os.write may write less than asked (a signal, a full disk's last blocks); a key
    # file cut short would make every sealed push secret unopenable from then on.
    real_write = os.write

    def write_a_few_bytes(fd: int, data: bytes | memoryview) -> int:
        return real_write(fd, bytes(data[:5]))

    monkeypatch.setattr(os, "write", write_a_few_bytes)
    sealed = SecretBox(tmp_path).seal("value", "ctx")
    monkeypatch.undo()
    assert len(base64.urlsafe_b64decode((tmp_path / KEY_FILE).read_bytes().strip())) == 32
    assert SecretBox(tmp_path).open(sealed, "ctx") == "value"
