"""A task file's format (see the package docstring): encoding, decoding and the
owner of a record file; the inbox files a task's messages brought."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Any, NamedTuple

import orjson
from google.protobuf import json_format

from a2a_gateway.local.files import INBOX_FOLDER
from a2a_gateway.protocol import proto_dict
from a2a_gateway.protocol.context import Caller
from lf.a2a.v1 import a2a_pb2 as pb

from ..secret_box import SecretBox
from ..task_store import MessageKey, TaskRecord

FORMAT_VERSION = 1
#: Part.metadata key naming where a received file was saved (the engine's SAVED_AS_KEY).
SAVED_AS_KEY = "a2a-gateway.savedAs"


def encode_record(record: TaskRecord, box: SecretBox | None = None) -> bytes:
    """The JSON bytes of a task file; with ``box``, push-config secrets are sealed."""
    configs = record.push_configs
    if box is not None and configs:
        configs = [box.seal_push_config(c, keep_sealed=False) for c in configs]
    document: dict[str, Any] = {
        "version": FORMAT_VERSION,
        "owner": {"name": record.owner.name, "workspace": record.owner.workspace},
        # Its JSON as the send's answer will print it (kept for it), in the file as is.
        "task": orjson.Fragment(proto_dict.remember_task_json(record.task)),
        "pushConfigs": [proto_dict.to_dict(c) for c in configs],
    }
    if record.push_versions:
        document["pushConfigVersions"] = dict(record.push_versions)
    if record.retry_keys:
        document["retryKeys"] = [
            {"messageId": message_id, "fingerprint": fingerprint}
            for message_id, fingerprint in record.retry_keys
        ]
    return orjson.dumps(document, option=orjson.OPT_INDENT_2 | orjson.OPT_APPEND_NEWLINE)


#: Where a task file's task line starts: the document's ``task`` key, at the indent
#: :func:`encode_record` gives top-level keys (a string holds no raw newline, a nested
#: key is indented deeper, and the task itself is one line: nothing else matches).
_TASK_LINE = b'\n  "task": '


def task_line(data: bytes) -> bytes | None:
    """The bytes of a task file's task line, as :func:`encode_record` writes it (its
    trailing comma cut), or None when the file has no such line. Its being the task's
    JSON as an answer prints it is the index's to vouch for (``answer``, checked by
    :func:`decode_document`)."""
    start = data.find(_TASK_LINE)
    if start < 0:
        return None
    start += len(_TASK_LINE)
    end = data.find(b"\n", start)
    if end < 0:
        return None
    return data[start : end - 1] if data[end - 1] == 0x2C else data[start:end]  # (",")


def owner_from_document(document: dict[str, Any]) -> Caller:
    """The ``"owner": {"name", "workspace"}`` of a record file (task files here, proxy
    ownership records in ``gateway.proxy_owners``); ValueError with a reason if bad."""
    owner = document.get("owner")
    if not isinstance(owner, dict):
        raise ValueError("owner is missing")
    name, workspace = owner.get("name"), owner.get("workspace", "")
    if not isinstance(name, str) or not name or not isinstance(workspace, str):
        raise ValueError("owner must have a name and a workspace string")
    return Caller(name=name, workspace=workspace)


def remove_inbox_files(workspace: Path, task: pb.Task) -> None:
    """(blocking) Remove the inbox files the task's messages brought (the parts whose
    ``a2a-gateway.savedAs`` names a file under ``inbox/``): only regular files inside
    the workspace's inbox, reached without symlinks."""
    inbox = os.path.realpath(workspace / INBOX_FOLDER)
    for message in [*task.history, task.status.message]:
        for part in message.parts:
            saved = part.metadata.fields.get(SAVED_AS_KEY)
            relative = saved.string_value if saved is not None else ""
            if not relative.startswith(f"{INBOX_FOLDER}/"):
                continue
            target = os.path.join(workspace, relative)
            real = os.path.realpath(target)
            if real.startswith(inbox + os.sep) and not os.path.islink(target):
                with contextlib.suppress(OSError):
                    os.unlink(real)


def decode_record(
    data: bytes, task_id: str
) -> tuple[pb.Task, Caller, list[pb.TaskPushNotificationConfig]]:
    """Parse a task file; raise ValueError (with a reason, never file content) if bad."""
    decoded = decode_document(data, task_id)
    return decoded.task, decoded.owner, decoded.configs


class Decoded(NamedTuple):
    """Everything a task file holds."""

    task: pb.Task
    owner: Caller
    configs: list[pb.TaskPushNotificationConfig]
    versions: dict[str, str]  # pushConfigVersions: config id -> A2A version
    retry_keys: tuple[MessageKey, ...]
    #: The task's JSON as ``to_dict`` writes it, when the file holds it so (as written
    #: here: ``task_from_dict`` took it) and is small enough for its answer to be kept
    #: (``proto_dict.remember_recent_json``); None otherwise.
    task_json: bytes | None = None
    #: Whether the file's task line (:func:`task_line`) is the task's JSON as ``to_dict``
    #: and ``orjson`` print it, whatever its size (the index's ``answer``); checked only
    #: when asked (``check_line``), False otherwise.
    answer: bool = False


def decode_document(data: bytes, task_id: str, *, check_line: bool = False) -> Decoded:
    """:func:`decode_record` with ``pushConfigVersions`` and ``retryKeys``; with
    ``check_line`` (the index's read of a file), whether its task line is the answer's
    JSON (``Decoded.answer``: one more printing of a large task, which a load skips)."""
    try:
        document = orjson.loads(data)
    except orjson.JSONDecodeError:
        raise ValueError("not valid JSON") from None
    if not isinstance(document, dict):
        raise ValueError("not a JSON object")
    owner = owner_from_document(document)
    raw_task, raw_configs = document.get("task"), document.get("pushConfigs", [])
    if not isinstance(raw_task, dict) or not isinstance(raw_configs, list):
        raise ValueError("task must be an object and pushConfigs a list")
    task_json = None
    try:
        task = proto_dict.task_from_dict(raw_task)  # the common shapes, ~7x faster
        answer = False
        if task is None:
            task = json_format.ParseDict(raw_task, pb.Task(), ignore_unknown_fields=True)
        else:
            small = len(data) <= proto_dict.RECENT_TASK_BYTES  # a small task's answer is kept
            printed = orjson.dumps(raw_task) if small or check_line else None
            if check_line:  # (a file written by hand may hold another line)
                answer = task_line(data) == printed
            if small:
                task_json = printed  # (the dict to_dict makes of the task)
        configs = [
            json_format.ParseDict(c, pb.TaskPushNotificationConfig(), ignore_unknown_fields=True)
            for c in raw_configs
        ]
    except (json_format.ParseError, ValueError, TypeError, AttributeError, RecursionError):
        raise ValueError("task or push configs do not parse") from None
    if task.id != task_id:
        raise ValueError("task id does not match the file name")
    if not task.HasField("status") or task.status.state == pb.TASK_STATE_UNSPECIFIED:
        raise ValueError("task has no status")
    raw_versions = document.get("pushConfigVersions", {})
    if not isinstance(raw_versions, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in raw_versions.items()
    ):
        raise ValueError("pushConfigVersions must map config ids to version strings")
    return Decoded(task, owner, configs, raw_versions, _retry_keys(document), task_json, answer)


def _retry_keys(document: dict[str, Any]) -> tuple[MessageKey, ...]:
    raw = document.get("retryKeys", [])
    if not isinstance(raw, list):
        raise ValueError("retryKeys must be a list")
    keys: list[MessageKey] = []
    for entry in raw:
        message_id = entry.get("messageId") if isinstance(entry, dict) else None
        fingerprint = entry.get("fingerprint") if isinstance(entry, dict) else None
        if not isinstance(message_id, str) or not isinstance(fingerprint, str):
            raise ValueError("retryKeys must hold messageId and fingerprint strings")
        keys.append((message_id, fingerprint))
    return tuple(keys)
