"""Client side: 0.3 result JSON read into 1.0 messages (lenient: unknown fields ignored; what
cannot be read is InvalidAgentResponseError naming the field by its 0.3 path)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from google.protobuf import empty_pb2, json_format, message

from lf.a2a.v1 import a2a_pb2 as pb

from ..errors import InvalidAgentResponseError
from .params_in import _copy_in, _get
from .tables import DATA_PART_COMPAT, JSON, ROLES, TASK_STATES


def _bad_result(path: str, problem: str) -> InvalidAgentResponseError:
    return InvalidAgentResponseError(f"{path}: {problem}")


def _result_object(value: Any, path: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise _bad_result(path, "must be a JSON object")
    return value


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
    part = _result_object(value, path)
    kind = part.get("kind")
    if kind is None:
        kind = next((k for k in ("text", "file", "data") if k in part), None)
    metadata = _get(part, "metadata")
    out: JSON = {}
    if kind == "text":
        out["text"] = _get(part, "text") if _get(part, "text") is not None else ""
    elif kind == "file":
        file = _result_object(_get(part, "file"), f"{path}.file")
        if _get(file, "bytes") is not None:
            out["raw"] = _get(file, "bytes")
        elif _get(file, "uri") is not None:
            out["url"] = _get(file, "uri")
        else:
            raise _bad_result(f"{path}.file", 'has neither "bytes" nor "uri"')
        if _get(file, "mimeType") is not None:
            out["mediaType"] = _get(file, "mimeType")
        if _get(file, "name") is not None:
            out["filename"] = _get(file, "name")
    elif kind == "data":
        data = _get(part, "data")
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
        raise _bad_result(f"{path}.kind", 'must be "text", "file" or "data"')
    if metadata:
        out["metadata"] = metadata
    return out


def _parts_in(value: Any, path: str) -> list[JSON]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise _bad_result(path, "must be an array")
    return [part_json_in(item, f"{path}[{i}]") for i, item in enumerate(value)]


def message_json_in(value: Any, path: str) -> JSON:
    """A 0.3 Message as 1.0 Message ProtoJSON."""
    msg = _result_object(value, path)
    role = _get(msg, "role")
    out: JSON = {
        "messageId": _get(msg, "messageId") or "",
        "role": _ROLE_NAME_IN.get(role, "ROLE_UNSPECIFIED") if isinstance(role, str) else role,
        "parts": _parts_in(_get(msg, "parts"), f"{path}.parts"),
    }
    _copy_in(msg, out, "contextId", "taskId", "referenceTaskIds", "metadata", "extensions")
    return out


def _status_json_in(value: Any, path: str) -> JSON:
    status = _result_object(value, path)
    state = _get(status, "state")
    if state is not None and state not in _STATE_IN:
        raise _bad_result(f"{path}.state", f"unknown task state {str(state)[:40]!r}")
    out: JSON = {"state": _STATE_IN.get(state, "TASK_STATE_UNSPECIFIED")}
    if _get(status, "message") is not None:
        out["message"] = message_json_in(_get(status, "message"), f"{path}.message")
    if _get(status, "timestamp") is not None:
        out["timestamp"] = _timestamp_in(_get(status, "timestamp"))
    return out


def _artifact_json_in(value: Any, path: str) -> JSON:
    artifact = _result_object(value, path)
    out: JSON = {
        "artifactId": _get(artifact, "artifactId") or "",
        "parts": _parts_in(_get(artifact, "parts"), f"{path}.parts"),
    }
    _copy_in(artifact, out, "name", "description", "metadata", "extensions")
    return out


def task_json_in(value: Any, path: str) -> JSON:
    """A 0.3 Task as 1.0 Task ProtoJSON."""
    task = _result_object(value, path)
    out: JSON = {
        "id": _get(task, "id") or "",
        "contextId": _get(task, "contextId") or "",
        "status": _status_json_in(_get(task, "status") or {}, f"{path}.status"),
    }
    history = _get(task, "history")
    if isinstance(history, list):
        out["history"] = [message_json_in(m, f"{path}.history[{i}]") for i, m in enumerate(history)]
    artifacts = _get(task, "artifacts")
    if isinstance(artifacts, list):
        out["artifacts"] = [
            _artifact_json_in(a, f"{path}.artifacts[{i}]") for i, a in enumerate(artifacts)
        ]
    _copy_in(task, out, "metadata")
    return out


def _status_update_json_in(value: Any, path: str) -> JSON:
    """A 0.3 ``status-update`` without ``final`` (1.0: the stream's end says it)."""
    event = _result_object(value, path)
    out: JSON = {
        "taskId": _get(event, "taskId") or "",
        "contextId": _get(event, "contextId") or "",
        "status": _status_json_in(_get(event, "status") or {}, f"{path}.status"),
    }
    _copy_in(event, out, "metadata")
    return out


def _artifact_update_json_in(value: Any, path: str) -> JSON:
    event = _result_object(value, path)
    out: JSON = {
        "taskId": _get(event, "taskId") or "",
        "contextId": _get(event, "contextId") or "",
        "artifact": _artifact_json_in(_get(event, "artifact") or {}, f"{path}.artifact"),
    }
    _copy_in(event, out, "append", "lastChunk", "metadata")
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
    raise _bad_result(f"{path}.kind", "must be task, message, status-update or artifact-update")


def _parse_result(cls: type[message.Message], value: JSON, path: str) -> Any:
    try:
        return json_format.ParseDict(value, cls(), ignore_unknown_fields=True)
    except (json_format.ParseError, ValueError, TypeError, RecursionError) as exc:
        raise _bad_result(path, str(exc).split("\n", 1)[0]) from None


def stream_response_in(value: Any, path: str = "result") -> pb.StreamResponse:
    """One 0.3 stream ``result`` (a bare Task, Message or update event) as a 1.0
    StreamResponse."""
    obj = _result_object(value, path)
    member, convert = _KIND_IN[_kind_of(obj, path)]
    parsed: pb.StreamResponse = _parse_result(pb.StreamResponse, {member: convert(obj, path)}, path)
    return parsed


def send_result_in(value: Any, path: str = "result") -> pb.SendMessageResponse:
    """A ``message/send`` result (a bare Task or Message) as a 1.0 SendMessageResponse."""
    obj = _result_object(value, path)
    kind = _kind_of(obj, path)
    if kind not in ("task", "message"):
        raise _bad_result(f"{path}.kind", "must be task or message")
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
    obj = _result_object(value, path)
    tasks = _get(obj, "tasks")
    if tasks is None:
        tasks = []
    if not isinstance(tasks, list):
        raise _bad_result(f"{path}.tasks", "must be an array")
    out: JSON = {"tasks": [task_json_in(t, f"{path}.tasks[{i}]") for i, t in enumerate(tasks)]}
    _copy_in(obj, out, "nextPageToken", "pageSize", "totalSize")
    parsed: pb.ListTasksResponse = _parse_result(pb.ListTasksResponse, out, path)
    return parsed


def _push_config_json_in(value: Any, path: str) -> JSON:
    """A nested 0.3 TaskPushNotificationConfig as a flat 1.0 one (``schemes[0]``)."""
    obj = _result_object(value, path)
    inner = _result_object(_get(obj, "pushNotificationConfig"), f"{path}.pushNotificationConfig")
    out: JSON = {"taskId": _get(obj, "taskId") or ""}
    _copy_in(inner, out, "id", "url", "token")
    auth = _get(inner, "authentication")
    if isinstance(auth, Mapping):
        schemes = _get(auth, "schemes")
        out_auth: JSON = {}
        if isinstance(schemes, list) and schemes:
            out_auth["scheme"] = schemes[0]
        _copy_in(auth, out_auth, "credentials")
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
        raise _bad_result(path, "must be an array")
    configs = [_push_config_json_in(c, f"{path}[{i}]") for i, c in enumerate(value)]
    parsed: pb.ListTaskPushNotificationConfigsResponse = _parse_result(
        pb.ListTaskPushNotificationConfigsResponse, {"configs": configs}, path
    )
    return parsed


def empty_result_in(value: Any, path: str = "result") -> message.Message:
    """A ``tasks/pushNotificationConfig/delete`` result (``null``) as Empty."""
    return empty_pb2.Empty()
