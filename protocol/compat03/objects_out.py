"""1.0 ProtoJSON written as 0.3 JSON (messages, parts, tasks, stream events, push
configs): the server's results and the client's params.

Each function takes the 1.0 ProtoJSON dict (codec.to_dict: camelCase, Z timestamps,
base64 bytes), so only the shapes that differ are rewritten.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from lf.a2a.v1 import a2a_pb2 as pb

from .. import codec
from .shared import copy_fields
from .tables import DATA_PART_COMPAT, FINAL_OUT, JSON, ROLE_OUT, STATE_OUT


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


@dataclass(frozen=True, slots=True)
class Shapes:
    """How one 0.3 binding writes the objects both carry: messages, statuses,
    artifacts, tasks and stream events. Both read the same keys (a 1.0 ProtoJSON dict
    and a 0.3 JSON-RPC object name these fields alike) and write the same fields; a
    binding has its own role and state names, its own part shape and name for a
    message's parts, and JSON-RPC alone tags each object with its ``kind``."""

    kinds: bool  # a ``kind`` member on every object (JSON-RPC)
    roles: Mapping[str, str]
    default_role: str
    states: Mapping[str, str]
    default_state: str
    message_parts: str  # the Message member holding its parts
    message_fields: tuple[str, ...]  # copied as they are
    part: Callable[[Mapping[str, Any]], JSON]

    def _head(self, kind: str) -> JSON:
        return {"kind": kind} if self.kinds else {}

    def message(self, msg: Mapping[str, Any]) -> JSON:
        out = self._head("message")
        out["messageId"] = msg.get("messageId", "")
        out["role"] = self.roles.get(msg.get("role", ""), self.default_role)
        out[self.message_parts] = [self.part(p) for p in msg.get("parts", ())]
        copy_fields(msg, out, *self.message_fields)
        return out

    def status(self, status: Mapping[str, Any]) -> JSON:
        out: JSON = {"state": self.states.get(status.get("state", ""), self.default_state)}
        if "message" in status:
            out["message"] = self.message(status["message"])
        copy_fields(status, out, "timestamp")
        return out

    def artifact(self, artifact: Mapping[str, Any]) -> JSON:
        out: JSON = {
            "artifactId": artifact.get("artifactId", ""),
            "parts": [self.part(p) for p in artifact.get("parts", ())],
        }
        copy_fields(artifact, out, "name", "description", "metadata", "extensions")
        return out

    def task(self, task: Mapping[str, Any]) -> JSON:
        out = self._head("task")
        out["id"] = task.get("id", "")
        out["contextId"] = task.get("contextId", "")
        out["status"] = self.status(task.get("status", {}))
        if task.get("history"):
            out["history"] = [self.message(m) for m in task["history"]]
        if task.get("artifacts"):
            out["artifacts"] = [self.artifact(a) for a in task["artifacts"]]
        copy_fields(task, out, "metadata")
        return out

    def _update(self, kind: str, event: Mapping[str, Any]) -> JSON:
        out = self._head(kind)
        out["taskId"] = event.get("taskId", "")
        out["contextId"] = event.get("contextId", "")
        return out

    def status_update(self, event: Mapping[str, Any], final: bool) -> JSON:
        out = self._update("status-update", event)
        out["status"] = self.status(event.get("status", {}))
        out["final"] = final
        copy_fields(event, out, "metadata")
        return out

    def artifact_update(self, event: Mapping[str, Any]) -> JSON:
        out = self._update("artifact-update", event)
        out["artifact"] = self.artifact(event.get("artifact", {}))
        out["append"] = bool(event.get("append", False))
        out["lastChunk"] = bool(event.get("lastChunk", False))
        copy_fields(event, out, "metadata")
        return out


#: 0.3 JSON-RPC, from 1.0 ProtoJSON.
JSONRPC_SHAPES = Shapes(
    kinds=True,
    roles=ROLE_OUT,
    default_role="agent",
    states=STATE_OUT,
    default_state="unknown",
    message_parts="parts",
    message_fields=("contextId", "taskId", "referenceTaskIds", "metadata", "extensions"),
    part=part_out,
)

#: A 1.0 Message as a 0.3 Message.
message_out = JSONRPC_SHAPES.message
status_out = JSONRPC_SHAPES.status
artifact_out = JSONRPC_SHAPES.artifact
#: A 1.0 Task as a bare 0.3 Task (``kind: "task"``).
task_out = JSONRPC_SHAPES.task
artifact_update_out = JSONRPC_SHAPES.artifact_update


def status_update_out(event: Mapping[str, Any]) -> JSON:
    """A 1.0 status update as a 0.3 one; ``final`` where a 0.3 stream ends."""
    state = event.get("status", {}).get("state", "")
    return JSONRPC_SHAPES.status_update(event, STATE_OUT.get(state, "unknown") in FINAL_OUT)


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
    copy_fields(config, inner, "id", "token")
    auth = config.get("authentication")
    if auth is not None:
        out_auth: JSON = {"schemes": [auth["scheme"]] if auth.get("scheme") else []}
        copy_fields(auth, out_auth, "credentials")
        inner["authentication"] = out_auth
    return {"taskId": config.get("taskId", ""), "pushNotificationConfig": inner}
