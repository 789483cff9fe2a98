"""Server side: 0.3 JSON-RPC params read into 1.0 requests. Bad 0.3 input raises
:class:`InvalidParamsError` naming the field by its 0.3 path."""

from __future__ import annotations

import base64
from collections.abc import Mapping
from typing import Any

from google.protobuf import json_format, message, struct_pb2

from lf.a2a.v1 import a2a_pb2 as pb

from .. import codec
from .shared import get_field, invalid_field
from .tables import DATA_PART_COMPAT, ROLE_IN, TASK_STATES


def _object(value: Any, path: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise invalid_field(path, "must be a JSON object")
    return value


def _string(obj: Mapping[str, Any], name: str, path: str, *, required: bool = False) -> str:
    value = get_field(obj, name)
    if value is None:
        if required:
            raise invalid_field(f"{path}.{name}", "is required")
        return ""
    if not isinstance(value, str):
        raise invalid_field(f"{path}.{name}", "must be a string")
    if required and not value:
        raise invalid_field(f"{path}.{name}", "must not be empty")
    return value


def _strings(obj: Mapping[str, Any], name: str, path: str) -> list[str]:
    value = get_field(obj, name)
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise invalid_field(f"{path}.{name}", "must be an array of strings")
    return value


def _bool(obj: Mapping[str, Any], name: str, path: str) -> bool | None:
    value = get_field(obj, name)
    if value is not None and not isinstance(value, bool):
        raise invalid_field(f"{path}.{name}", "must be true or false")
    return value


def _history_length(obj: Mapping[str, Any], path: str) -> int | None:
    """``historyLength``: a non-negative int32; 0 (0.3: unlimited) reads as unset."""
    value = get_field(obj, "historyLength")
    if value is None:
        return None
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value < 2**31:
        raise invalid_field(f"{path}.historyLength", "must be a non-negative integer")
    return value or None


def _struct(obj: Mapping[str, Any], name: str, path: str, target: struct_pb2.Struct) -> None:
    value = get_field(obj, name)
    if value is None:
        return
    if not isinstance(value, Mapping):
        raise invalid_field(f"{path}.{name}", "must be a JSON object")
    target.update(value)


def _value(value: Any, target: struct_pb2.Value, path: str) -> None:
    try:
        json_format.ParseDict(value, target)
    except json_format.ParseError:
        raise invalid_field(path, "is not a JSON value") from None


def _base64(text: Any, path: str) -> bytes:
    """Standard or URL-safe base64, padded or not (digest §8), and nothing else."""
    if not isinstance(text, str):
        raise invalid_field(path, "must be a base64 string")
    codec.check_base64(text, path)
    return base64.urlsafe_b64decode(text.translate(_TO_URL_SAFE) + "=" * (-len(text) % 4))


_TO_URL_SAFE = str.maketrans("+/", "-_")


def _part_kind(part: Mapping[str, Any], path: str) -> str:
    kind = part.get("kind")
    if kind is None:  # tolerate a peer that omits the discriminator
        for candidate in ("text", "file", "data"):
            if candidate in part:
                return candidate
        raise invalid_field(f"{path}.kind", 'is required ("text", "file" or "data")')
    if kind not in ("text", "file", "data"):
        raise invalid_field(f"{path}.kind", 'must be "text", "file" or "data"')
    return str(kind)


def part_in(value: Any, path: str) -> pb.Part:
    """One 0.3 part (kind text | file | data) as a 1.0 Part."""
    obj = _object(value, path)
    part = pb.Part()
    kind = _part_kind(obj, path)
    metadata = get_field(obj, "metadata")
    if metadata is not None and not isinstance(metadata, Mapping):
        raise invalid_field(f"{path}.metadata", "must be a JSON object")
    if kind == "text":
        text = get_field(obj, "text")
        if not isinstance(text, str):
            raise invalid_field(f"{path}.text", "is required and must be a string")
        part.text = text
    elif kind == "file":
        file = _object(get_field(obj, "file"), f"{path}.file")
        where = f"{path}.file"
        has_bytes = get_field(file, "bytes") is not None
        has_uri = get_field(file, "uri") is not None
        if has_bytes == has_uri:
            raise invalid_field(where, 'must have exactly one of "bytes" or "uri"')
        if has_bytes:
            part.raw = _base64(get_field(file, "bytes"), f"{where}.bytes")
        else:
            part.url = _string(file, "uri", where, required=True)
        media_type = _string(file, "mimeType", where)
        if media_type:
            part.media_type = media_type
        name = _string(file, "name", where)
        if name:
            part.filename = name
    else:
        data = get_field(obj, "data")
        if not isinstance(data, Mapping):
            raise invalid_field(f"{path}.data", "is required and must be a JSON object")
        if metadata is not None and metadata.get(DATA_PART_COMPAT) is True:
            if "value" not in data:
                raise invalid_field(f"{path}.data.value", f"is required when {DATA_PART_COMPAT}")
            metadata = {k: v for k, v in metadata.items() if k != DATA_PART_COMPAT}
            _value(data["value"], part.data, f"{path}.data.value")
        else:
            part.data.struct_value.update(data)
    if metadata:
        part.metadata.update(metadata)
    return part


def message_in(value: Any, path: str) -> pb.Message:
    """A 0.3 Message (``kind: "message"``, ``role: "user"|"agent"``) as a 1.0 Message."""
    obj = _object(value, path)
    kind = obj.get("kind")
    if kind is not None and kind != "message":
        raise invalid_field(f"{path}.kind", 'must be "message"')
    role_name = get_field(obj, "role")
    role = ROLE_IN.get(role_name) if isinstance(role_name, str) else None
    if role is None:
        raise invalid_field(f"{path}.role", 'is required and must be "user" or "agent"')
    msg = pb.Message(
        message_id=_string(obj, "messageId", path, required=True),
        role=role,
        context_id=_string(obj, "contextId", path),
        task_id=_string(obj, "taskId", path),
        reference_task_ids=_strings(obj, "referenceTaskIds", path),
        extensions=_strings(obj, "extensions", path),
    )
    parts = get_field(obj, "parts")
    if not isinstance(parts, list) or not parts:
        raise invalid_field(f"{path}.parts", "is required and must be a non-empty array")
    msg.parts.extend(part_in(item, f"{path}.parts[{i}]") for i, item in enumerate(parts))
    _struct(obj, "metadata", path, msg.metadata)
    return msg


def _push_config_in(value: Any, path: str, target: pb.TaskPushNotificationConfig) -> None:
    """A 0.3 PushNotificationConfig ``{id,url,token,authentication{schemes,credentials}}``
    merged into a flat 1.0 TaskPushNotificationConfig."""
    obj = _object(value, path)
    target.url = _string(obj, "url", path, required=True)
    config_id = _string(obj, "id", path)
    if config_id:
        target.id = config_id
    token = _string(obj, "token", path)
    if token:
        target.token = token
    auth = get_field(obj, "authentication")
    if auth is not None:
        where = f"{path}.authentication"
        auth = _object(auth, where)
        schemes = _strings(auth, "schemes", where)
        target.authentication.SetInParent()
        if schemes:
            target.authentication.scheme = schemes[0]  # 1.0 has one scheme (lossy)
        credentials = _string(auth, "credentials", where)
        if credentials:
            target.authentication.credentials = credentials


def _check(msg: message.Message) -> None:
    """The 1.0 REQUIRED rules, as for a 1.0 request (the 0.3 checks come first, so
    this only catches what 0.3 did not require)."""
    codec.validate(msg, "params")


def _params(value: Any) -> Mapping[str, Any]:
    if value is None:
        return {}
    codec.check_depth(value)
    return _object(value, "params")


def send_message_request(value: Any) -> pb.SendMessageRequest:
    """``message/send`` and ``message/stream`` params (MessageSendParams)."""
    params = _params(value)
    request = pb.SendMessageRequest()
    if get_field(params, "message") is None:
        raise invalid_field("params.message", "is required")
    request.message.CopyFrom(message_in(get_field(params, "message"), "params.message"))
    raw_config = get_field(params, "configuration")
    if raw_config is not None:
        where = "params.configuration"
        config = _object(raw_config, where)
        target = request.configuration
        target.SetInParent()
        target.accepted_output_modes.extend(_strings(config, "acceptedOutputModes", where))
        blocking = _bool(config, "blocking", where)
        if blocking is not None:
            target.return_immediately = not blocking
        history = _history_length(config, where)
        if history is not None:
            target.history_length = history
        push = get_field(config, "pushNotificationConfig")
        if push is not None:
            _push_config_in(
                push, f"{where}.pushNotificationConfig", target.task_push_notification_config
            )
    _struct(params, "metadata", "params", request.metadata)
    _check(request)
    return request


def get_task_request(value: Any) -> pb.GetTaskRequest:
    """``tasks/get`` params (TaskQueryParams ``{id, historyLength?, metadata?}``)."""
    params = _params(value)
    request = pb.GetTaskRequest(id=_string(params, "id", "params", required=True))
    history = _history_length(params, "params")
    if history is not None:
        request.history_length = history
    return request


def cancel_task_request(value: Any) -> pb.CancelTaskRequest:
    """``tasks/cancel`` params (TaskIdParams ``{id, metadata?}``)."""
    params = _params(value)
    request = pb.CancelTaskRequest(id=_string(params, "id", "params", required=True))
    _struct(params, "metadata", "params", request.metadata)
    return request


def subscribe_request(value: Any) -> pb.SubscribeToTaskRequest:
    """``tasks/resubscribe`` params (TaskIdParams)."""
    params = _params(value)
    return pb.SubscribeToTaskRequest(id=_string(params, "id", "params", required=True))


def set_push_config_request(value: Any) -> pb.TaskPushNotificationConfig:
    """``tasks/pushNotificationConfig/set`` params ``{taskId, pushNotificationConfig}``,
    flattened; a config without an id gets the task id (the 0.3 default)."""
    params = _params(value)
    task_id = _string(params, "taskId", "params", required=True)
    request = pb.TaskPushNotificationConfig(task_id=task_id)
    config = get_field(params, "pushNotificationConfig")
    if config is None:
        raise invalid_field("params.pushNotificationConfig", "is required")
    _push_config_in(config, "params.pushNotificationConfig", request)
    if not request.id:
        request.id = task_id
    _check(request)
    return request


def get_push_config_request(value: Any) -> pb.GetTaskPushNotificationConfigRequest:
    """``tasks/pushNotificationConfig/get``: 0.3 ``id`` is the TASK id."""
    params = _params(value)
    task_id = _string(params, "id", "params", required=True)
    config_id = _string(params, "pushNotificationConfigId", "params") or task_id
    return pb.GetTaskPushNotificationConfigRequest(task_id=task_id, id=config_id)


def list_push_configs_request(value: Any) -> pb.ListTaskPushNotificationConfigsRequest:
    """``tasks/pushNotificationConfig/list`` params ``{id: <task>}``."""
    params = _params(value)
    return pb.ListTaskPushNotificationConfigsRequest(
        task_id=_string(params, "id", "params", required=True)
    )


def delete_push_config_request(value: Any) -> pb.DeleteTaskPushNotificationConfigRequest:
    """``tasks/pushNotificationConfig/delete`` params ``{id: <task>,
    pushNotificationConfigId}``."""
    params = _params(value)
    task_id = _string(params, "id", "params", required=True)
    config_id = _string(params, "pushNotificationConfigId", "params") or task_id
    return pb.DeleteTaskPushNotificationConfigRequest(task_id=task_id, id=config_id)


def extended_card_request(value: Any) -> pb.GetExtendedAgentCardRequest:
    """``agent/getAuthenticatedExtendedCard`` (no params)."""
    _params(value)
    return pb.GetExtendedAgentCardRequest()


#: ``tasks/list`` ``status``: a 0.3 state name, or (leniently) the 1.0 enum name.
_LIST_STATUS_IN: dict[str, pb.TaskState.ValueType] = {
    **{name: value for name, value in TASK_STATES},
    **{pb.TaskState.Name(value): value for _, value in TASK_STATES},
}


def _int32(obj: Mapping[str, Any], name: str, path: str) -> int | None:
    value = get_field(obj, name)
    if value is None:
        return None
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value < 2**31:
        raise invalid_field(f"{path}.{name}", "must be a non-negative integer")
    return value


def list_tasks_request(value: Any) -> pb.ListTasksRequest:
    """``tasks/list`` params. Not in the 0.3 spec: deployed 0.3 peers call it with the
    1.0 ListTasks fields under their camelCase names, ``{contextId?, status?,
    pageSize?, pageToken?, historyLength?, statusTimestampAfter?, includeArtifacts?}``;
    ``status`` is a 0.3 state name (``working``; the 1.0 enum name is accepted too)."""
    params = _params(value)
    request = pb.ListTasksRequest(
        context_id=_string(params, "contextId", "params"),
        page_token=_string(params, "pageToken", "params"),
    )
    status = get_field(params, "status")
    if status is not None:
        if not isinstance(status, str) or status not in _LIST_STATUS_IN:
            raise invalid_field("params.status", 'must be a 0.3 task state such as "working"')
        request.status = _LIST_STATUS_IN[status]
    page_size = _int32(params, "pageSize", "params")
    if page_size is not None:
        request.page_size = page_size
    history = _history_length(params, "params")
    if history is not None:
        request.history_length = history
    after = get_field(params, "statusTimestampAfter")
    if after is not None:
        if not isinstance(after, str):
            raise invalid_field("params.statusTimestampAfter", "must be an RFC 3339 timestamp")
        try:
            request.status_timestamp_after.FromJsonString(after)
        except ValueError:
            raise invalid_field(
                "params.statusTimestampAfter", "must be an RFC 3339 timestamp"
            ) from None
    include = _bool(params, "includeArtifacts", "params")
    if include is not None:
        request.include_artifacts = include
    return request
