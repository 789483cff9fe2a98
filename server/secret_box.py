"""Secrets at rest: push-config ``token`` and ``authentication.credentials`` are stored
encrypted in task files, with a key that lives next to them.

- One key per workspace, ``<workspace>/.a2a/secret.key`` (32 random bytes, base64),
  created on first use with mode 0600 (written whole to a private temp file, then
  linked in, so two processes racing to create it agree on one key and a reader never
  sees half a key). A key file readable by others is used, with a warning naming the
  path.
- AES-256-GCM (``cryptography``), a fresh 96-bit nonce per value. The associated data
  binds each value to its task, config and field, so a sealed token copied into
  another config (or into the credentials field) does not open.
- Sealed values read ``enc:v1:<base64url(nonce | ciphertext | tag)>``. A value without
  that prefix is plaintext (a hand-edited task file) and is returned as is: the next
  save seals it. An empty value stays empty.
- A sealed value that does not open (the key file was replaced or removed, the value
  was edited) raises :class:`SecretBoxError`, whose message names the key file and
  never a value.

- A crash while the key is being created can leave a ``.secret.key.*.tmp`` file; the
  box removes those older than a minute when it first opens the folder. Age rather
  than the pid in the name decides: the workspace may be shared by containers or
  hosts whose pids mean nothing here (and pids are reused), while creating a key
  takes milliseconds, so a minute-old temp file is abandoned whoever wrote it.

The key protects the values from anyone who can read task files but not the key (a
backup of ``tasks/``, a log of file contents); someone who can read the whole
workspace can read both.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import logging
import os
import stat
import time
from pathlib import Path

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from a2a_gateway.local.atomic_files import fsync_folder, write_file
from a2a_gateway.local.layout import RELATIVE
from lf.a2a.v1 import a2a_pb2 as pb

log = logging.getLogger(__name__)

KEY_FILE = RELATIVE.secret_key
SEALED_PREFIX = "enc:v1:"
_KEY_BYTES = 32
_NONCE_BYTES = 12
_TEMP_PREFIX = ".secret.key."
_TEMP_SUFFIX = ".tmp"
#: A key-creation temp file older than this was left by a crash.
STALE_TEMP_AGE_S = 60.0


class SecretBoxError(Exception):
    """A key file or a sealed value is unusable (the message never holds a secret)."""


def is_sealed(value: str) -> bool:
    """True when ``value`` is a sealed (encrypted) value."""
    return value.startswith(SEALED_PREFIX)


def push_context(config: pb.TaskPushNotificationConfig, field: str) -> str:
    """The associated data that binds a push-config secret to its place."""
    return f"push-config\x00{config.task_id}\x00{config.id}\x00{field}"


class SecretBox:
    """Seals and opens secrets with the key of one workspace (see the module
    docstring). The key is read (or created) on first use and then kept."""

    def __init__(self, workspace: Path) -> None:
        self.workspace = Path(workspace)
        self.key_path = self.workspace / KEY_FILE
        self._aead: AESGCM | None = None

    # --- values -----------------------------------------------------------------------

    def seal(self, plaintext: str, context: str) -> str:
        """``plaintext`` encrypted for ``context``; ``""`` stays ``""``."""
        if not plaintext:
            return ""
        nonce = os.urandom(_NONCE_BYTES)
        sealed = self._key(create=True).encrypt(nonce, plaintext.encode(), context.encode())
        return SEALED_PREFIX + base64.urlsafe_b64encode(nonce + sealed).decode("ascii")

    def open(self, value: str, context: str) -> str:
        """The plaintext of a sealed ``value`` (a plaintext value is returned as is)."""
        if not is_sealed(value):
            return value
        try:
            blob = base64.urlsafe_b64decode(value[len(SEALED_PREFIX) :].encode("ascii"))
        except (binascii.Error, UnicodeEncodeError, ValueError):
            raise SecretBoxError("a sealed value is not valid base64") from None
        if len(blob) <= _NONCE_BYTES:
            raise SecretBoxError("a sealed value is too short")
        nonce, sealed = blob[:_NONCE_BYTES], blob[_NONCE_BYTES:]
        try:
            plaintext = self._key(create=False).decrypt(nonce, sealed, context.encode())
        except InvalidTag:
            raise SecretBoxError(
                f"a sealed value does not open with the key {self.key_path} "
                "(was the key file replaced?)"
            ) from None
        try:
            return plaintext.decode()
        except UnicodeDecodeError:
            raise SecretBoxError("a sealed value is not UTF-8") from None

    # --- push configs -----------------------------------------------------------------

    def seal_push_config(
        self, config: pb.TaskPushNotificationConfig, *, keep_sealed: bool = True
    ) -> pb.TaskPushNotificationConfig:
        """A copy of ``config`` with ``token`` and ``authentication.credentials``
        sealed. Values that already look sealed are kept when ``keep_sealed``; a
        store whose configs are always plaintext in memory passes False, so a caller's
        token that merely starts with the sealed prefix is sealed like any other."""
        sealed = pb.TaskPushNotificationConfig()
        sealed.CopyFrom(config)
        if sealed.token and not (keep_sealed and is_sealed(sealed.token)):
            sealed.token = self.seal(sealed.token, push_context(config, "token"))
        if sealed.HasField("authentication"):
            credentials = sealed.authentication.credentials
            if credentials and not (keep_sealed and is_sealed(credentials)):
                sealed.authentication.credentials = self.seal(
                    credentials, push_context(config, "authentication.credentials")
                )
        return sealed

    def open_push_config(
        self, config: pb.TaskPushNotificationConfig
    ) -> pb.TaskPushNotificationConfig:
        """A copy of ``config`` with its sealed secrets opened (SecretBoxError if one
        does not open)."""
        opened = pb.TaskPushNotificationConfig()
        opened.CopyFrom(config)
        if opened.token:
            opened.token = self.open(opened.token, push_context(config, "token"))
        if opened.HasField("authentication") and opened.authentication.credentials:
            opened.authentication.credentials = self.open(
                opened.authentication.credentials,
                push_context(config, "authentication.credentials"),
            )
        return opened

    # --- the key ----------------------------------------------------------------------

    def _key(self, *, create: bool) -> AESGCM:
        if self._aead is None:
            self._remove_stale_temps()
            key = self._read_key()
            if key is None:
                if not create:
                    raise SecretBoxError(f"the key file {self.key_path} is missing")
                key = self._create_key()
            self._aead = AESGCM(key)
        return self._aead

    def _read_key(self) -> bytes | None:
        try:
            # O_NONBLOCK: a FIFO in the key's place must not hang the server.
            flags = os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK
            fd = os.open(self.key_path, flags)
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise SecretBoxError(
                f"the key file {self.key_path} cannot be read: {exc.strerror}"
            ) from None
        try:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode):
                raise SecretBoxError(f"the key file {self.key_path} is not a regular file")
            with open(fd, "rb", closefd=False) as file:
                text = file.read(1024)
        finally:
            os.close(fd)
        if info.st_mode & 0o077:
            log.warning("the key file %s is readable by others; chmod 600 it", self.key_path)
        try:
            key = base64.urlsafe_b64decode(text.strip())
        except (binascii.Error, ValueError):
            key = b""
        if len(key) != _KEY_BYTES:
            raise SecretBoxError(f"the key file {self.key_path} does not hold a valid key")
        return key

    def _remove_stale_temps(self) -> None:
        """Remove key-creation temp files a crash left behind (see the module docstring)."""
        folder = self.key_path.parent
        cutoff = time.time() - STALE_TEMP_AGE_S
        try:
            entries = list(os.scandir(folder))
        except OSError:  # no folder yet: nothing to clean
            return
        for entry in entries:
            name = entry.name
            if not (name.startswith(_TEMP_PREFIX) and name.endswith(_TEMP_SUFFIX)):
                continue
            try:
                if entry.stat(follow_symlinks=False).st_mtime > cutoff:
                    continue  # possibly another process creating the key right now
                os.unlink(entry.path)  # unlink never follows a symlink
            except OSError:
                continue
            log.info("removed a stale key temp file %s", entry.path)

    def _create_key(self) -> bytes:
        folder = self.key_path.parent
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        key = os.urandom(_KEY_BYTES)
        tmp = folder / f".secret.key.{os.getpid()}.{os.urandom(4).hex()}.tmp"
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC | os.O_NOFOLLOW
        try:
            write_file(str(tmp), base64.urlsafe_b64encode(key) + b"\n", flags, fsync=True)
            try:
                os.link(tmp, self.key_path)  # fails if another process was first
            except FileExistsError:
                theirs = self._read_key()
                if theirs is None:  # removed again in between: give up loudly
                    raise SecretBoxError(f"the key file {self.key_path} keeps changing") from None
                return theirs
        finally:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
        # Once per workspace: make the new name durable, or a power cut could keep
        # task files sealed with a key whose file is gone.
        with contextlib.suppress(OSError):
            fsync_folder(str(folder))
        log.info("created the secret key file %s", self.key_path)
        return key

    def __repr__(self) -> str:
        return f"SecretBox({str(self.key_path)!r})"


__all__ = [
    "KEY_FILE",
    "SEALED_PREFIX",
    "SecretBox",
    "SecretBoxError",
    "is_sealed",
    "push_context",
]
