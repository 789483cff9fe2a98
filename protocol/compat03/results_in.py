"""Client side: 0.3 result JSON read into 1.0 messages (lenient: unknown fields ignored; what
cannot be read is InvalidAgentResponseError naming the field by its 0.3 path)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from google.protobuf import empty_pb2, json_format, message

from lf.a2a.v1 import a2a_pb2 as pb

from .shared import bad_result, copy_fields_in, get_field, result_object
from .tables import DATA_PART_COMPAT, JSON, ROLES, TASK_STATES

_STATE_IN = {name: pb.TaskState.Name(value) for name, value in TASK_STATES}
_STATE_IN.update({pb.TaskState.Name(value): pb.TaskState.Name(value) for _, value in TASK_STATES})
_STATE_IN["TASK_STATE_CANCELLED"] = "TASK_STATE_CANCELED"  # the 0.3 proto's spelling
_ROLE_NAME_IN = {name: pb.Role.Name(value) for name, value in ROLES}
_ROLE_NAME_IN.update({pb.Role.Name(value): pb.Role.Name(value) for _, value in ROLES})


def _timestamp_in(value: Any) -> Any:
    """0.3 peers wrote ISO timestamps, sometimes without a zone: those are UTC."""
    if isinstance(value, str) and "T" in value:
        clock = value.split("T", 1)[1]
        if not any(mark in clock for mark in ("Z", "z", "+", "-")):
            return value + "Z"
    return value


def part_json_in(value: Any, path: str) -> JSON:
    """A 0.3 part (``kind`` text | file | data) as 1.0 Part ProtoJSON."""
    part = result_object(value, path)
    kind = part.get("kind")
    if kind is None:
        kind = next((k for k in ("text", "file", "data") if k in part), None)
    metadata = get_field(part, "metadata")
    out: JSON = {}
    if kind == "text":
        out["text"] = get_field(part, "text") if get_field(part, "text") is not None else ""
    elif kind == "file":
        file = result_object(get_field(part, "file"), f"{path}.file")
        if get_field(file, "bytes") is not None:
            out["raw"] = get_field(file, "bytes")
        elif get_field(file, "uri") is not None:
            out["url"] = get_field(file, "uri")
        else:
            raise bad_result(f"{path}.file", 'has neither "bytes" nor "uri"')
        if get_field(file, "mimeType") is not None:
            out["mediaType"] = get_field(file, "mimeType")
        if get_field(file, "name") is not None:
            out["filename"] = get_field(file, "name")
    elif kind == "data":
        data = get_field(part, "data")
        if (
            isinstance(metadata, Mapping)
            and metadata.get(DATA_PART_COMPAT) is True
            and isinstance(data, Mapping)
            and "value" in data
        ):
            metadata = {k: v for k, v in metadata.items() if k != DATA_PART_COMPAT}
            data = data["value"]
        out["data"] = data
    else:
        raise bad_result(f"{path}.kind", 'must be "text", "file" or "data"')
    if metadata:
        out["metadata"] = metadata
    return out


def _parts_in(value: Any, path: str) -> list[JSON]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise bad_result(path, "must be an array")
    return [part_json_in(item, f"{path}[{i}]") for i, item in enumerate(value)]


def message_json_in(value: Any, path: str) -> JSON:
    """A 0.3 Message as 1.0 Message ProtoJSON."""
    msg = result_object(value, path)
    role = get_field(msg, "role")
    out: JSON = {
        "messageId": get_field(msg, "messageId") or "",
        "role": _ROLE_NAME_IN.get(role, "ROLE_UNSPECIFIED") if isinstance(role, str) else role,
        "parts": _parts_in(get_field(msg, "parts"), f"{path}.parts"),
    }
    copy_fields_in(msg, out, "contextId", "taskId", "referenceTaskIds", "metadata", "extensions")
    return out


def _status_json_in(value: Any, path: str) -> JSON:
    status = result_object(value, path)
    state = get_field(status, "state")
    if state is not None and state not in _STATE_IN:
        raise bad_result(f"{path}.state", f"unknown task state {str(state)[:40]!r}")
    out: JSON = {"state": _STATE_IN.get(state, "TASK_STATE_UNSPECIFIED")}
    if get_field(status, "message") is not None:
        out["message"] = message_json_in(get_field(status, "message"), f"{path}.message")
    if get_field(status, "timestamp") is not None:
        out["timestamp"] = _timestamp_in(get_field(status, "timestamp"))
    return out


def _artifact_json_in(value: Any, path: str) -> JSON:
    artifact = result_object(value, path)
    out: JSON = {
        "artifactId": get_field(artifact, "artifactId") or "",
        "parts": _parts_in(get_field(artifact, "parts"), f"{path}.parts"),
    }
    copy_fields_in(artifact, out, "name", "description", "metadata", "extensions")
    return out


def task_json_in(value: Any, path: str) -> JSON:
    """A 0.3 Task as 1.0 Task ProtoJSON."""
    task = result_object(value, path)
    out: JSON = {
        "id": get_field(task, "id") or "",
        "contextId": get_field(task, "contextId") or "",
        "status": _status_json_in(get_field(task, "status") or {}, f"{path}.status"),
    }
    history = get_field(task, "history")
    if isinstance(history, list):
        out["history"] = [message_json_in(m, f"{path}.history[{i}]") for i, m in enumerate(history)]
    artifacts = get_field(task, "artifacts")
    if isinstance(artifacts, list):
        out["artifacts"] = [
            _artifact_json_in(a, f"{path}.artifacts[{i}]") for i, a in enumerate(artifacts)
        ]
    copy_fields_in(task, out, "metadata")
    return out


def _status_update_json_in(value: Any, path: str) -> JSON:
    """A 0.3 ``status-update`` without ``final`` (1.0: the stream's end says it)."""
    event = result_object(value, path)
    out: JSON = {
        "taskId": get_field(event, "taskId") or "",
        "contextId": get_field(event, "contextId") or "",
        "status": _status_json_in(get_field(event, "status") or {}, f"{path}.status"),
    }
    copy_fields_in(event, out, "metadata")
    return out


def _artifact_update_json_in(value: Any, path: str) -> JSON:
    event = result_object(value, path)
    out: JSON = {
        "taskId": get_field(event, "taskId") or "",
        "contextId": get_field(event, "contextId") or "",
        "artifact": _artifact_json_in(get_field(event, "artifact") or {}, f"{path}.artifact"),
    }
    copy_fields_in(event, out, "append", "lastChunk", "metadata")
    return out


_KIND_IN: dict[str, tuple[str, Callable[[Any, str], JSON]]] = {
    "task": ("task", task_json_in),
    "message": ("message", message_json_in),
    "status-update": ("statusUpdate", _status_update_json_in),
    "artifact-update": ("artifactUpdate", _artifact_update_json_in),
}


def _kind_of(value: Mapping[str, Any], path: str) -> str:
    """The ``kind`` of a 0.3 result object, inferred for peers that omit it."""
    kind = value.get("kind")
    if isinstance(kind, str) and kind in _KIND_IN:
        return kind
    if kind is None:
        if "artifact" in value:
            return "artifact-update"
        if "messageId" in value or "message_id" in value:
            return "message"
        if "id" in value:
            return "task"
        if "status" in value:
            return "status-update"
    raise bad_result(f"{path}.kind", "must be task, message, status-update or artifact-update")


def _parse_result(cls: type[message.Message], value: JSON, path: str) -> Any:
    try:
        return json_format.ParseDict(value, cls(), ignore_unknown_fields=True)
    except (json_format.ParseError, ValueError, TypeError, RecursionError) as exc:
        raise bad_result(path, str(exc).split("\n", 1)[0]) from None


def stream_response_in(value: Any, path: str = "result") -> pb.StreamResponse:
    """One 0.3 stream ``result`` (a bare Task, Message or update event) as a 1.0
    StreamResponse."""
    obj = result_object(value, path)
    member, convert = _KIND_IN[_kind_of(obj, path)]
    parsed: pb.StreamResponse = _parse_result(pb.StreamResponse, {member: convert(obj, path)}, path)
    return parsed


def send_result_in(value: Any, path: str = "result") -> pb.SendMessageResponse:
    """A ``message/send`` result (a bare Task or Message) as a 1.0 SendMessageResponse."""
    obj = result_object(value, path)
    kind = _kind_of(obj, path)
    if kind not in ("task", "message"):
        raise bad_result(f"{path}.kind", "must be task or message")
    member, convert = _KIND_IN[kind]
    parsed: pb.SendMessageResponse = _parse_result(
        pb.SendMessageResponse, {member: convert(obj, path)}, path
    )
    return parsed


def task_result_in(value: Any, path: str = "result") -> pb.Task:
    """A ``tasks/get`` / ``tasks/cancel`` result as a 1.0 Task."""
    parsed: pb.Task = _parse_result(pb.Task, task_json_in(value, path), path)
    return parsed


def list_result_in(value: Any, path: str = "result") -> pb.ListTasksResponse:
    """A ``tasks/list`` result (``{tasks: [0.3 Task], nextPageToken, pageSize,
    totalSize}``, the 1.0 ListTasksResponse with 0.3 tasks) as a 1.0 ListTasksResponse."""
    obj = result_object(value, path)
    tasks = get_field(obj, "tasks")
    if tasks is None:
        tasks = []
    if not isinstance(tasks, list):
        raise bad_result(f"{path}.tasks", "must be an array")
    out: JSON = {"tasks": [task_json_in(t, f"{path}.tasks[{i}]") for i, t in enumerate(tasks)]}
    copy_fields_in(obj, out, "nextPageToken", "pageSize", "totalSize")
    parsed: pb.ListTasksResponse = _parse_result(pb.ListTasksResponse, out, path)
    return parsed


def _push_config_json_in(value: Any, path: str) -> JSON:
    """A nested 0.3 TaskPushNotificationConfig as a flat 1.0 one (``schemes[0]``)."""
    obj = result_object(value, path)
    inner = result_object(
        get_field(obj, "pushNotificationConfig"), f"{path}.pushNotificationConfig"
    )
    out: JSON = {"taskId": get_field(obj, "taskId") or ""}
    copy_fields_in(inner, out, "id", "url", "token")
    auth = get_field(inner, "authentication")
    if isinstance(auth, Mapping):
        schemes = get_field(auth, "schemes")
        out_auth: JSON = {}
        if isinstance(schemes, list) and schemes:
            out_auth["scheme"] = schemes[0]
        copy_fields_in(auth, out_auth, "credentials")
        out["authentication"] = out_auth
    return out


def push_config_result_in(value: Any, path: str = "result") -> pb.TaskPushNotificationConfig:
    """A ``tasks/pushNotificationConfig/set|get`` result as a flat 1.0 config."""
    parsed: pb.TaskPushNotificationConfig = _parse_result(
        pb.TaskPushNotificationConfig, _push_config_json_in(value, path), path
    )
    return parsed


def push_list_result_in(
    value: Any, path: str = "result"
) -> pb.ListTaskPushNotificationConfigsResponse:
    """A ``tasks/pushNotificationConfig/list`` result (a bare array) as one 1.0 page."""
    if value is None:
        value = []
    if not isinstance(value, list):
        raise bad_result(path, "must be an array")
    configs = [_push_config_json_in(c, f"{path}[{i}]") for i, c in enumerate(value)]
    parsed: pb.ListTaskPushNotificationConfigsResponse = _parse_result(
        pb.ListTaskPushNotificationConfigsResponse, {"configs": configs}, path
    )
    return parsed


def empty_result_in(value: Any, path: str = "result") -> message.Message:
    """A ``tasks/pushNotificationConfig/delete`` result (``null``) as Empty."""
    return empty_pb2.Empty()
