"""Server side: 1.0 ProtoJSON written as 0.3 JSON (messages, parts, tasks, stream events,
push configs).

Each function takes the 1.0 ProtoJSON dict (codec.to_dict: camelCase, Z timestamps,
base64 bytes), so only the shapes that differ are rewritten.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from lf.a2a.v1 import a2a_pb2 as pb

from .. import codec
from .tables import _FINAL_OUT, _ROLE_OUT, _STATE_OUT, DATA_PART_COMPAT, JSON


def _copy(source: Mapping[str, Any], target: JSON, *names: str) -> None:
    for name in names:
        if name in source:
            target[name] = source[name]


def part_out(part: Mapping[str, Any]) -> JSON:
    """A 1.0 Part as a 0.3 part (text | file | data, with ``kind``)."""
    metadata = part.get("metadata")
    if "raw" in part or "url" in part:
        file: JSON = {"bytes": part["raw"]} if "raw" in part else {"uri": part["url"]}
        if "mediaType" in part:
            file["mimeType"] = part["mediaType"]
        if "filename" in part:
            file["name"] = part["filename"]
        out: JSON = {"kind": "file", "file": file}
    elif "data" in part:
        data = part["data"]
        if not isinstance(data, dict):
            data = {"value": data}
            metadata = {**(metadata or {}), DATA_PART_COMPAT: True}
        out = {"kind": "data", "data": data}
    else:
        out = {"kind": "text", "text": part.get("text", "")}
    if metadata is not None:
        out["metadata"] = metadata
    return out


def message_out(msg: Mapping[str, Any]) -> JSON:
    """A 1.0 Message as a 0.3 Message."""
    out: JSON = {
        "kind": "message",
        "messageId": msg.get("messageId", ""),
        "role": _ROLE_OUT.get(msg.get("role", ""), "agent"),
        "parts": [part_out(p) for p in msg.get("parts", ())],
    }
    _copy(msg, out, "contextId", "taskId", "referenceTaskIds", "metadata", "extensions")
    return out


def status_out(status: Mapping[str, Any]) -> JSON:
    out: JSON = {"state": _STATE_OUT.get(status.get("state", ""), "unknown")}
    if "message" in status:
        out["message"] = message_out(status["message"])
    _copy(status, out, "timestamp")
    return out


def artifact_out(artifact: Mapping[str, Any]) -> JSON:
    out: JSON = {
        "artifactId": artifact.get("artifactId", ""),
        "parts": [part_out(p) for p in artifact.get("parts", ())],
    }
    _copy(artifact, out, "name", "description", "metadata", "extensions")
    return out


def task_out(task: Mapping[str, Any]) -> JSON:
    """A 1.0 Task as a bare 0.3 Task (``kind: "task"``)."""
    out: JSON = {
        "kind": "task",
        "id": task.get("id", ""),
        "contextId": task.get("contextId", ""),
        "status": status_out(task.get("status", {})),
    }
    if task.get("history"):
        out["history"] = [message_out(m) for m in task["history"]]
    if task.get("artifacts"):
        out["artifacts"] = [artifact_out(a) for a in task["artifacts"]]
    _copy(task, out, "metadata")
    return out


def status_update_out(event: Mapping[str, Any]) -> JSON:
    status = status_out(event.get("status", {}))
    out: JSON = {
        "kind": "status-update",
        "taskId": event.get("taskId", ""),
        "contextId": event.get("contextId", ""),
        "status": status,
        "final": status["state"] in _FINAL_OUT,
    }
    _copy(event, out, "metadata")
    return out


def artifact_update_out(event: Mapping[str, Any]) -> JSON:
    out: JSON = {
        "kind": "artifact-update",
        "taskId": event.get("taskId", ""),
        "contextId": event.get("contextId", ""),
        "artifact": artifact_out(event.get("artifact", {})),
        "append": bool(event.get("append", False)),
        "lastChunk": bool(event.get("lastChunk", False)),
    }
    _copy(event, out, "metadata")
    return out


_STREAM_OUT: dict[str, Callable[[Mapping[str, Any]], JSON]] = {
    "task": task_out,
    "message": message_out,
    "statusUpdate": status_update_out,
    "artifactUpdate": artifact_update_out,
}


def stream_event(event: pb.StreamResponse) -> JSON:
    """A 1.0 StreamResponse as the bare 0.3 object of one SSE event's ``result``."""
    for member, value in codec.to_dict(event).items():
        convert = _STREAM_OUT.get(member)
        if convert is not None:
            return convert(value)
    raise ValueError("empty StreamResponse")


def push_config_out(config: Mapping[str, Any]) -> JSON:
    """A flat 1.0 TaskPushNotificationConfig as a nested 0.3 TaskPushNotificationConfig."""
    inner: JSON = {"url": config.get("url", "")}
    _copy(config, inner, "id", "token")
    auth = config.get("authentication")
    if auth is not None:
        out_auth: JSON = {"schemes": [auth["scheme"]] if auth.get("scheme") else []}
        _copy(auth, out_auth, "credentials")
        inner["authentication"] = out_auth
    return {"taskId": config.get("taskId", ""), "pushNotificationConfig": inner}
