"""The A2A 0.3 bridge: pure translation between 0.3 JSON-RPC payloads and 1.0 messages.

No I/O. The JSON-RPC binding looks a 0.3 method name up in :data:`METHODS`, turns its
``params`` into the 1.0 request with :attr:`Method.parse`, calls the same service
operation as the 1.0 method, and turns the 1.0 result into the 0.3 JSON with
:attr:`Method.result` (streams: :func:`stream_event`; errors: :func:`error_object`).
Ground truth is the official SDK's ``a2a/compat/v0_3/conversions.py`` (digest §14).

Decisions where 0.3 and 1.0 do not line up:

- ``configuration.blocking`` absent means blocking; ``returnImmediately = !blocking``.
- ``historyLength: 0`` meant "unlimited" in 0.3 and is left unset, as the SDK does.
- A non-object ``Part.data`` travels as ``{"value": X}`` with
  ``metadata.data_part_compat = true`` (both ways).
- Push auth ``schemes[]`` keeps only ``schemes[0]`` (1.0 has one scheme).
- A 0.3 push config without an ``id`` gets the task id, and a get/delete without
  ``pushNotificationConfigId`` means that config: 0.3 servers (the SDK's store too)
  defaulted the config id to the task id.
- 1.0-only errors (-32008, -32009) become -32603, as the SDK's 0.3 adapter does.
- ``status-update`` carries ``final: true`` only in a terminal state (the SDK's rule;
  input-required is not final).

Bad 0.3 input raises :class:`InvalidParamsError` naming the field by its 0.3 path.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, unquote

from google.protobuf import empty_pb2, json_format, message, struct_pb2

from lf.a2a.v1 import a2a_pb2 as pb

from . import codec
from .errors import (
    A2AError,
    FieldViolation,
    InvalidAgentResponseError,
    InvalidParamsError,
    UnsupportedOperationError,
    VersionNotSupportedError,
)

JSON = dict[str, Any]

#: The version a 0.3 method is served as (``CallContext.version``).
LEGACY_VERSION = "0.3"
#: Card-level ``protocolVersion`` of the 0.3 keys of the hybrid card (0.3 used semver).
LEGACY_CARD_VERSION = "0.3.0"
#: The SDK's marker for a non-object ``Part.data`` wrapped as ``{"value": X}``.
DATA_PART_COMPAT = "data_part_compat"

# --- tables (digest §14.2) ------------------------------------------------------------

#: 0.3 role <-> 1.0 role.
ROLES: tuple[tuple[str, pb.Role.ValueType], ...] = (
    ("user", pb.ROLE_USER),
    ("agent", pb.ROLE_AGENT),
)
_ROLE_IN = dict(ROLES)
_ROLE_OUT = {pb.Role.Name(value): name for name, value in ROLES}

#: 0.3 task state <-> 1.0 task state (``unknown`` is UNSPECIFIED).
TASK_STATES: tuple[tuple[str, pb.TaskState.ValueType], ...] = (
    ("unknown", pb.TASK_STATE_UNSPECIFIED),
    ("submitted", pb.TASK_STATE_SUBMITTED),
    ("working", pb.TASK_STATE_WORKING),
    ("completed", pb.TASK_STATE_COMPLETED),
    ("failed", pb.TASK_STATE_FAILED),
    ("canceled", pb.TASK_STATE_CANCELED),
    ("input-required", pb.TASK_STATE_INPUT_REQUIRED),
    ("rejected", pb.TASK_STATE_REJECTED),
    ("auth-required", pb.TASK_STATE_AUTH_REQUIRED),
)
#: 1.0 ProtoJSON state name -> 0.3 state.
_STATE_OUT = {pb.TaskState.Name(value): name for name, value in TASK_STATES}
_TERMINAL_OUT = frozenset({"completed", "failed", "canceled", "rejected"})

#: JSON-RPC codes a 0.3 peer knows (standard errors and -32001..-32007).
V03_ERROR_CODES = frozenset({-32700, -32600, -32601, -32602, -32603, *range(-32007, -32000)})
#: What a 1.0 code without a 0.3 equivalent becomes.
V03_FALLBACK_CODE = -32603
#: Our own transport errors (authentication, permission, rate limit) keep their
#: implementation-defined codes: they are not A2A errors in either version.
_GATEWAY_CODES = frozenset({-32000, -32100, -32101})

#: 1.0 security scheme member -> 0.3 ``type``.
_SCHEME_TYPES = {
    "apiKeySecurityScheme": "apiKey",
    "httpAuthSecurityScheme": "http",
    "oauth2SecurityScheme": "oauth2",
    "openIdConnectSecurityScheme": "openIdConnect",
    "mtlsSecurityScheme": "mutualTLS",
}
#: 0.3 OAuth flows (1.0 ``deviceCode`` has none and is dropped).
_OAUTH_FLOWS = ("authorizationCode", "clientCredentials", "implicit", "password")


def is_legacy_version(value: str) -> bool:
    """Whether an ``A2A-Version`` value names 0.3 (``0.3`` or ``0.3.x``)."""
    if not value.lstrip().startswith("0"):  # "1.0" leaves here (checked on every request)
        return False
    parts = value.strip().split(".")
    return (
        len(parts) in (2, 3)
        and all(p.isascii() and p.isdigit() for p in parts)
        and int(parts[0]) == 0
        and int(parts[1]) == 3
    )


def negotiate_legacy_version(value: str | None, operation: str) -> str:
    """The 0.3 version rule of every binding (digest §13): the 0.3 ``operation`` takes
    no ``A2A-Version``, or ``0.3``/``0.3.x``; anything else is VersionNotSupported."""
    if value is None or not value.strip() or is_legacy_version(value):
        return LEGACY_VERSION
    raise VersionNotSupportedError(
        f"A2A-Version {value.strip()[:32]!r} does not match the 0.3 operation "
        f"{operation!r} (send no A2A-Version, or {LEGACY_VERSION})",
        metadata={"supportedVersions": LEGACY_VERSION},
    )


# --- inbound: 0.3 params -> 1.0 requests ---------------------------------------------


def _invalid(path: str, problem: str) -> InvalidParamsError:
    return InvalidParamsError(f"{path}: {problem}", violations=[FieldViolation(path, problem)])


def _get(obj: Mapping[str, Any], name: str) -> Any:
    """``obj[name]`` by its camelCase name or its snake_case alias (the SDK accepts
    both); ``None`` (JSON null) counts as absent."""
    value = obj.get(name)
    if value is None and not name.islower():
        value = obj.get("".join("_" + c.lower() if c.isupper() else c for c in name))
    return value


def _object(value: Any, path: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise _invalid(path, "must be a JSON object")
    return value


def _string(obj: Mapping[str, Any], name: str, path: str, *, required: bool = False) -> str:
    value = _get(obj, name)
    if value is None:
        if required:
            raise _invalid(f"{path}.{name}", "is required")
        return ""
    if not isinstance(value, str):
        raise _invalid(f"{path}.{name}", "must be a string")
    if required and not value:
        raise _invalid(f"{path}.{name}", "must not be empty")
    return value


def _strings(obj: Mapping[str, Any], name: str, path: str) -> list[str]:
    value = _get(obj, name)
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise _invalid(f"{path}.{name}", "must be an array of strings")
    return value


def _bool(obj: Mapping[str, Any], name: str, path: str) -> bool | None:
    value = _get(obj, name)
    if value is not None and not isinstance(value, bool):
        raise _invalid(f"{path}.{name}", "must be true or false")
    return value


def _history_length(obj: Mapping[str, Any], path: str) -> int | None:
    """``historyLength``: a non-negative int32; 0 (0.3: unlimited) reads as unset."""
    value = _get(obj, "historyLength")
    if value is None:
        return None
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value < 2**31:
        raise _invalid(f"{path}.historyLength", "must be a non-negative integer")
    return value or None


def _struct(obj: Mapping[str, Any], name: str, path: str, target: struct_pb2.Struct) -> None:
    value = _get(obj, name)
    if value is None:
        return
    if not isinstance(value, Mapping):
        raise _invalid(f"{path}.{name}", "must be a JSON object")
    target.update(value)


def _value(value: Any, target: struct_pb2.Value, path: str) -> None:
    try:
        json_format.ParseDict(value, target)
    except json_format.ParseError:
        raise _invalid(path, "is not a JSON value") from None


def _base64(text: Any, path: str) -> bytes:
    """Standard or URL-safe base64, padded or not (digest §8)."""
    if not isinstance(text, str):
        raise _invalid(path, "must be a base64 string")
    padded = text + "=" * (-len(text) % 4)
    try:
        if "-" in text or "_" in text:
            return base64.urlsafe_b64decode(padded)
        return base64.b64decode(padded, validate=True)
    except (binascii.Error, ValueError):
        raise _invalid(path, "is not valid base64") from None


def _part_kind(part: Mapping[str, Any], path: str) -> str:
    kind = part.get("kind")
    if kind is None:  # tolerate a peer that omits the discriminator
        for candidate in ("text", "file", "data"):
            if candidate in part:
                return candidate
        raise _invalid(f"{path}.kind", 'is required ("text", "file" or "data")')
    if kind not in ("text", "file", "data"):
        raise _invalid(f"{path}.kind", 'must be "text", "file" or "data"')
    return str(kind)


def part_in(value: Any, path: str) -> pb.Part:
    """One 0.3 part (kind text | file | data) as a 1.0 Part."""
    obj = _object(value, path)
    part = pb.Part()
    kind = _part_kind(obj, path)
    metadata = _get(obj, "metadata")
    if metadata is not None and not isinstance(metadata, Mapping):
        raise _invalid(f"{path}.metadata", "must be a JSON object")
    if kind == "text":
        text = _get(obj, "text")
        if not isinstance(text, str):
            raise _invalid(f"{path}.text", "is required and must be a string")
        part.text = text
    elif kind == "file":
        file = _object(_get(obj, "file"), f"{path}.file")
        where = f"{path}.file"
        has_bytes = _get(file, "bytes") is not None
        has_uri = _get(file, "uri") is not None
        if has_bytes == has_uri:
            raise _invalid(where, 'must have exactly one of "bytes" or "uri"')
        if has_bytes:
            part.raw = _base64(_get(file, "bytes"), f"{where}.bytes")
        else:
            part.url = _string(file, "uri", where, required=True)
        media_type = _string(file, "mimeType", where)
        if media_type:
            part.media_type = media_type
        name = _string(file, "name", where)
        if name:
            part.filename = name
    else:
        data = _get(obj, "data")
        if not isinstance(data, Mapping):
            raise _invalid(f"{path}.data", "is required and must be a JSON object")
        if metadata is not None and metadata.get(DATA_PART_COMPAT) is True:
            if "value" not in data:
                raise _invalid(f"{path}.data.value", f"is required when {DATA_PART_COMPAT}")
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
        raise _invalid(f"{path}.kind", 'must be "message"')
    role_name = _get(obj, "role")
    role = _ROLE_IN.get(role_name) if isinstance(role_name, str) else None
    if role is None:
        raise _invalid(f"{path}.role", 'is required and must be "user" or "agent"')
    msg = pb.Message(
        message_id=_string(obj, "messageId", path, required=True),
        role=role,
        context_id=_string(obj, "contextId", path),
        task_id=_string(obj, "taskId", path),
        reference_task_ids=_strings(obj, "referenceTaskIds", path),
        extensions=_strings(obj, "extensions", path),
    )
    parts = _get(obj, "parts")
    if not isinstance(parts, list) or not parts:
        raise _invalid(f"{path}.parts", "is required and must be a non-empty array")
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
    auth = _get(obj, "authentication")
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
    if _get(params, "message") is None:
        raise _invalid("params.message", "is required")
    request.message.CopyFrom(message_in(_get(params, "message"), "params.message"))
    raw_config = _get(params, "configuration")
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
        push = _get(config, "pushNotificationConfig")
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
    config = _get(params, "pushNotificationConfig")
    if config is None:
        raise _invalid("params.pushNotificationConfig", "is required")
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


# --- outbound: 1.0 ProtoJSON -> 0.3 JSON ----------------------------------------------
#
# Each function takes the 1.0 ProtoJSON dict (codec.to_dict: camelCase, Z timestamps,
# base64 bytes), so only the shapes that differ are rewritten.


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
        "final": status["state"] in _TERMINAL_OUT,
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


# --- results per method --------------------------------------------------------------


def _send_result(result: message.Message) -> Any:
    data = codec.to_dict(result)
    if "task" in data:
        return task_out(data["task"])
    return message_out(data.get("message", {}))


def _task_result(result: message.Message) -> Any:
    return task_out(codec.to_dict(result))


def _push_config_result(result: message.Message) -> Any:
    return push_config_out(codec.to_dict(result))


def _push_list_result(result: message.Message) -> Any:
    return [push_config_out(c) for c in codec.to_dict(result).get("configs", ())]


def _null_result(result: message.Message) -> Any:
    return None


def _card_result(result: message.Message) -> Any:
    card = agent_card(codec.to_dict(result))
    if card is None:  # the card has no 0.3 interface: nothing a 0.3 peer could use
        raise VersionNotSupportedError("the agent card has no A2A 0.3 interface")
    return card


# --- agent card (digest §14.3) --------------------------------------------------------


def _security_out(requirements: Any) -> list[dict[str, list[str]]]:
    """1.0 ``[{schemes:{name:{list:[…]}}}]`` as 0.3 ``[{name:[…]}]``."""
    return [
        {name: list(scopes.get("list", ())) for name, scopes in req.get("schemes", {}).items()}
        for req in requirements
    ]


def _scheme_out(scheme: Mapping[str, Any]) -> JSON | None:
    """A 1.0 SecurityScheme (one wrapper member) as a flat 0.3 scheme with ``type``."""
    for member, kind in _SCHEME_TYPES.items():
        if member not in scheme:
            continue
        body = dict(scheme[member])
        out: JSON = {"type": kind}
        if kind == "apiKey":
            out["in"] = body.pop("location", "")
        elif kind == "oauth2":
            flows = body.pop("flows", {})
            out["flows"] = {
                name: {k: v for k, v in flows[name].items() if k != "pkceRequired"}
                for name in _OAUTH_FLOWS
                if name in flows
            }
        out.update(body)
        return out
    return None


def agent_card(card: Mapping[str, Any]) -> JSON | None:
    """The 0.3 AgentCard for a 1.0 card's ProtoJSON, or None when no interface speaks
    0.3 (the SDK's ``to_compat_agent_card``). The first 0.3 interface is the primary
    (``url`` + ``preferredTransport``); the others become ``additionalInterfaces``."""
    legacy = [
        i
        for i in card.get("supportedInterfaces", ())
        if not i.get("protocolVersion") or is_legacy_version(str(i["protocolVersion"]))
    ]
    if not legacy:
        return None
    primary = legacy[0]
    out: JSON = {
        "name": card.get("name", ""),
        "description": card.get("description", ""),
        "version": card.get("version", ""),
        "url": primary.get("url", ""),
        "preferredTransport": primary.get("protocolBinding", "JSONRPC"),
        "protocolVersion": LEGACY_CARD_VERSION,
    }
    if len(legacy) > 1:
        out["additionalInterfaces"] = [
            {"url": i.get("url", ""), "transport": i.get("protocolBinding", "")} for i in legacy[1:]
        ]
    _copy(card, out, "provider", "documentationUrl", "iconUrl")
    capabilities = card.get("capabilities", {})
    out["capabilities"] = {
        k: v for k, v in capabilities.items() if k in ("streaming", "pushNotifications")
    }
    if capabilities.get("extensions"):
        # 0.3 wrote ``required`` even when false (the SDK's 0.3 card does too).
        out["capabilities"]["extensions"] = [
            {**e, "required": e.get("required", False)} for e in capabilities["extensions"]
        ]
    if capabilities.get("extendedAgentCard"):
        out["supportsAuthenticatedExtendedCard"] = True
    schemes = card.get("securitySchemes")
    if schemes:
        flat = {name: _scheme_out(s) for name, s in schemes.items()}
        out["securitySchemes"] = {k: v for k, v in flat.items() if v is not None}
    if card.get("securityRequirements"):
        out["security"] = _security_out(card["securityRequirements"])
    out["defaultInputModes"] = list(card.get("defaultInputModes", ()))
    out["defaultOutputModes"] = list(card.get("defaultOutputModes", ()))
    skills = []
    for skill in card.get("skills", ()):
        item = {k: v for k, v in skill.items() if k != "securityRequirements"}
        item.setdefault("tags", [])
        if skill.get("securityRequirements"):
            item["security"] = _security_out(skill["securityRequirements"])
        skills.append(item)
    out["skills"] = skills
    _copy(card, out, "signatures")
    return out


def _merge(target: JSON, extra: Mapping[str, Any]) -> None:
    """Add ``extra``'s keys that ``target`` lacks, recursing into objects and into
    arrays of objects element by element (the SDK's ``agent_card_to_dict`` merge)."""
    for key, value in extra.items():
        if key not in target:
            target[key] = value
            continue
        mine = target[key]
        if isinstance(value, dict) and isinstance(mine, dict):
            _merge(mine, value)
        elif isinstance(value, list) and isinstance(mine, list):
            for a, b in zip(mine, value, strict=False):
                if isinstance(a, dict) and isinstance(b, dict):
                    _merge(a, b)


def hybrid_card(card: JSON) -> JSON:
    """A 1.0 card's ProtoJSON with the 0.3 keys merged in (in place; returned).

    1.0 clients ignore the extra keys; 0.3 clients read ``url``, ``preferredTransport``,
    ``protocolVersion`` and the flat security schemes. Without a 0.3 interface the card
    is returned unchanged.
    """
    legacy = agent_card(card)
    if legacy is not None:
        _merge(card, legacy)
    return card


# --- errors --------------------------------------------------------------------------


def error_code(error: A2AError) -> int:
    """The 0.3 JSON-RPC code for ``error``: its own when a 0.3 peer knows it (or it is
    one of our transport errors), else -32603."""
    code = error.spec.jsonrpc_code
    if code in V03_ERROR_CODES or code in _GATEWAY_CODES:
        return code
    return V03_FALLBACK_CODE


def error_object(error: A2AError) -> JSON:
    """A 0.3 JSON-RPC ``error``: ``{code, message, data?}``; ``data`` is free-form in
    0.3, here ``{reason, ...ErrorInfo.metadata, fieldViolations?}``."""
    data: JSON = {"reason": error.spec.reason, **error.metadata}
    if error.violations:
        data["fieldViolations"] = [
            {"field": v.field, "description": v.description} for v in error.violations
        ]
    return {"code": error_code(error), "message": error.message, "data": data}


# --- the method table ----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Method:
    """One 0.3 JSON-RPC method: the 1.0 rpc it calls and its translations.

    ``result`` is None for the two streaming methods (their events go through
    :func:`stream_event`).
    """

    name: str
    rpc: str
    parse: Callable[[Any], message.Message]
    result: Callable[[message.Message], Any] | None


#: Every 0.3 JSON-RPC method (digest §14.1) by name. ListTasks has no 0.3 method.
METHODS: dict[str, Method] = {
    m.name: m
    for m in (
        Method("message/send", "SendMessage", send_message_request, _send_result),
        Method("message/stream", "SendStreamingMessage", send_message_request, None),
        Method("tasks/get", "GetTask", get_task_request, _task_result),
        Method("tasks/cancel", "CancelTask", cancel_task_request, _task_result),
        Method("tasks/resubscribe", "SubscribeToTask", subscribe_request, None),
        Method(
            "tasks/pushNotificationConfig/set",
            "CreateTaskPushNotificationConfig",
            set_push_config_request,
            _push_config_result,
        ),
        Method(
            "tasks/pushNotificationConfig/get",
            "GetTaskPushNotificationConfig",
            get_push_config_request,
            _push_config_result,
        ),
        Method(
            "tasks/pushNotificationConfig/list",
            "ListTaskPushNotificationConfigs",
            list_push_configs_request,
            _push_list_result,
        ),
        Method(
            "tasks/pushNotificationConfig/delete",
            "DeleteTaskPushNotificationConfig",
            delete_push_config_request,
            _null_result,
        ),
        Method(
            "agent/getAuthenticatedExtendedCard",
            "GetExtendedAgentCard",
            extended_card_request,
            _card_result,
        ),
    )
}


# --- 0.3 HTTP+JSON ("REST", digest §14.1/§14.2 last paragraph) --------------------------
#
# 0.3 REST bodies are ProtoJSON of the 0.3 proto (``Message.content``, ``Part.file``
# with ``fileWithUri``/``fileWithBytes``, ``TaskStatus.message``, ``TASK_STATE_CANCELLED``,
# resource names ``tasks/{id}/pushNotificationConfigs/{cid}``). They are rewritten into
# the 0.3 JSON-RPC shapes above (and back), so both 0.3 bindings share one translation.

#: Prefix of every 0.3 REST path, below the REST mount.
REST_PREFIX = "/v1/"

_REST_STATE = {
    name: ("TASK_STATE_CANCELLED" if value == pb.TASK_STATE_CANCELED else pb.TaskState.Name(value))
    for name, value in TASK_STATES
}
_REST_STATE_IN = {v: k for k, v in _REST_STATE.items()}
_REST_ROLE = {"user": "ROLE_USER", "agent": "ROLE_AGENT"}
_REST_ROLE_IN: dict[Any, str] = {
    "ROLE_USER": "user",
    "ROLE_AGENT": "agent",
    1: "user",
    2: "agent",
    "user": "user",
    "agent": "agent",
}


def _file_bytes_in(value: Any) -> Any:
    """A 0.3 proto ``fileWithBytes`` (ProtoJSON: base64 of the field) as the 0.3 JSON-RPC
    ``bytes`` (base64 of the content).

    The SDK's 0.3 REST and gRPC code stores the base64 TEXT of the content in that
    ``bytes`` field (``file.bytes.encode()``; its clients and servers read it back with
    ``.decode()``), so on the wire the content is base64-encoded twice. A field that
    decodes to base64 text is read that way; one that does not (a peer that put the
    raw content there) is the content itself. Anything else passes through for the
    JSON-RPC parser to report.
    """
    if not isinstance(value, str):
        return value
    try:
        field = base64.b64decode(value + "=" * (-len(value) % 4), validate=True)
        text = field.decode("ascii")
        base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        return value
    return text if text else value


def _file_bytes_out(value: str) -> str:
    """The 0.3 JSON-RPC ``bytes`` (base64 of the content) as the SDK writes the 0.3
    proto's ``fileWithBytes``: the base64 text itself is the field (see
    :func:`_file_bytes_in`)."""
    return base64.b64encode(value.encode("ascii")).decode("ascii")


def _rest_part_in(part: Any) -> Any:
    """A 0.3 proto Part as a 0.3 JSON-RPC part (unknown shapes pass through, so the
    JSON-RPC parser reports them)."""
    if not isinstance(part, Mapping):
        return part
    out: JSON = {}
    file = _get(part, "file")
    data = _get(part, "data")
    if _get(part, "text") is not None:
        out = {"kind": "text", "text": _get(part, "text")}
    elif isinstance(file, Mapping):
        inner: JSON = {}
        if _get(file, "fileWithBytes") is not None:
            inner["bytes"] = _file_bytes_in(_get(file, "fileWithBytes"))
        if _get(file, "fileWithUri") is not None:
            inner["uri"] = _get(file, "fileWithUri")
        for name in ("mimeType", "name"):
            if _get(file, name) is not None:
                inner[name] = _get(file, name)
        out = {"kind": "file", "file": inner}
    elif isinstance(data, Mapping):
        out = {"kind": "data", "data": _get(data, "data") or {}}
    else:
        out = dict(part)
    if _get(part, "metadata") is not None:
        out["metadata"] = _get(part, "metadata")
    return out


def _rest_message_in(msg: Any) -> Any:
    if not isinstance(msg, Mapping):
        return msg
    out: JSON = {"kind": "message"}
    for name in ("messageId", "contextId", "taskId", "metadata", "extensions"):
        if _get(msg, name) is not None:
            out[name] = _get(msg, name)
    role = _get(msg, "role")
    out["role"] = _REST_ROLE_IN.get(role, role) if isinstance(role, str | int) else role
    content = _get(msg, "content")
    if content is None:
        content = _get(msg, "parts")
    out["parts"] = [_rest_part_in(p) for p in content] if isinstance(content, list) else content
    return out


def _rest_push_in(config: Any) -> Any:
    """0.3 proto PushNotificationConfig -> JSON-RPC shape (same keys but snake_case)."""
    if not isinstance(config, Mapping):
        return config
    out: JSON = {}
    for name in ("id", "url", "token"):
        if _get(config, name) is not None:
            out[name] = _get(config, name)
    auth = _get(config, "authentication")
    if auth is not None:
        out["authentication"] = auth
    return out


def rest_send_params(body: Any) -> Any:
    """A 0.3 REST ``SendMessageRequest`` body as ``message/send`` params.

    ``blocking`` is a plain proto3 bool there: a ``configuration`` without it is
    non-blocking, as in the SDK's 0.3 REST handler; no ``configuration`` blocks.
    """
    if not isinstance(body, Mapping):
        return body
    out: JSON = {}
    message_value = _get(body, "message")
    if message_value is None:
        message_value = body.get("request")
    if message_value is not None:
        out["message"] = _rest_message_in(message_value)
    config = _get(body, "configuration")
    if isinstance(config, Mapping):
        blocking = _get(config, "blocking")  # a non-bool stays for the parser to name
        rpc_config: JSON = {"blocking": False if blocking is None else blocking}
        for name in ("acceptedOutputModes", "historyLength"):
            if _get(config, name) is not None:
                rpc_config[name] = _get(config, name)
        push = _get(config, "pushNotification")
        if push is not None:
            rpc_config["pushNotificationConfig"] = _rest_push_in(push)
        out["configuration"] = rpc_config
    elif config is not None:
        out["configuration"] = config
    if _get(body, "metadata") is not None:
        out["metadata"] = _get(body, "metadata")
    return out


def rest_set_push_params(task_id: str, body: Any) -> Any:
    """A 0.3 REST ``CreateTaskPushNotificationConfigRequest`` body as
    ``tasks/pushNotificationConfig/set`` params; the task comes from the path and the
    config id from the config, else ``configId``, else the task id."""
    if not isinstance(body, Mapping):
        return body
    config = _get(body, "config")
    inner = _get(config, "pushNotificationConfig") if isinstance(config, Mapping) else None
    push = _rest_push_in(inner) if inner is not None else None
    if isinstance(push, dict) and not push.get("id"):
        config_id = _get(body, "configId")
        if isinstance(config_id, str) and config_id:
            push["id"] = config_id
    return {"taskId": task_id, "pushNotificationConfig": push}


def _rest_part_out(part: Mapping[str, Any]) -> JSON:
    kind = part.get("kind")
    out: JSON
    if kind == "file":
        file = part.get("file", {})
        inner: JSON = (
            {"fileWithBytes": _file_bytes_out(file["bytes"])}
            if "bytes" in file
            else {"fileWithUri": file.get("uri", "")}
        )
        _copy(file, inner, "mimeType", "name")
        out = {"file": inner}
    elif kind == "data":
        out = {"data": {"data": part.get("data", {})}}
    else:
        out = {"text": part.get("text", "")}
    _copy(part, out, "metadata")
    return out


def _rest_message_out(msg: Mapping[str, Any]) -> JSON:
    out: JSON = {
        "messageId": msg.get("messageId", ""),
        "role": _REST_ROLE.get(msg.get("role", ""), "ROLE_AGENT"),
        "content": [_rest_part_out(p) for p in msg.get("parts", ())],
    }
    _copy(msg, out, "contextId", "taskId", "metadata", "extensions")
    return out


def _rest_status_out(status: Mapping[str, Any]) -> JSON:
    out: JSON = {"state": _REST_STATE.get(status.get("state", ""), "TASK_STATE_UNSPECIFIED")}
    if "message" in status:
        out["message"] = _rest_message_out(status["message"])
    _copy(status, out, "timestamp")
    return out


def _rest_artifact_out(artifact: Mapping[str, Any]) -> JSON:
    out: JSON = {
        "artifactId": artifact.get("artifactId", ""),
        "parts": [_rest_part_out(p) for p in artifact.get("parts", ())],
    }
    _copy(artifact, out, "name", "description", "metadata", "extensions")
    return out


def _rest_task_out(task: Mapping[str, Any]) -> JSON:
    out: JSON = {
        "id": task.get("id", ""),
        "contextId": task.get("contextId", ""),
        "status": _rest_status_out(task.get("status", {})),
    }
    if task.get("artifacts"):
        out["artifacts"] = [_rest_artifact_out(a) for a in task["artifacts"]]
    if task.get("history"):
        out["history"] = [_rest_message_out(m) for m in task["history"]]
    _copy(task, out, "metadata")
    return out


def rest_object(value: Mapping[str, Any]) -> JSON:
    """A 0.3 JSON-RPC result object (by ``kind``) as 0.3 REST ProtoJSON: a Task, or a
    StreamResponse/SendMessageResponse member for the other kinds."""
    kind = value.get("kind")
    if kind == "task":
        return _rest_task_out(value)
    if kind == "message":
        return _rest_message_out(value)
    event: JSON = {
        "taskId": value.get("taskId", ""),
        "contextId": value.get("contextId", ""),
    }
    if kind == "status-update":
        event["status"] = _rest_status_out(value.get("status", {}))
        event["final"] = bool(value.get("final", False))
    else:
        event["artifact"] = _rest_artifact_out(value.get("artifact", {}))
        event["append"] = bool(value.get("append", False))
        event["lastChunk"] = bool(value.get("lastChunk", False))
    _copy(value, event, "metadata")
    return event


_REST_MEMBER = {
    "task": "task",
    "message": "message",
    "status-update": "statusUpdate",
    "artifact-update": "artifactUpdate",
}


def rest_stream_event(event: pb.StreamResponse) -> JSON:
    """A 1.0 StreamResponse as a 0.3 REST StreamResponse (``{"task"|"message"|
    "statusUpdate"|"artifactUpdate": …}``)."""
    legacy = stream_event(event)
    return {_REST_MEMBER[legacy["kind"]]: rest_object(legacy)}


def _rest_push_out(config: Mapping[str, Any]) -> JSON:
    inner = config.get("pushNotificationConfig", {})
    return {
        "name": f"tasks/{config.get('taskId', '')}/pushNotificationConfigs/{inner.get('id', '')}",
        "pushNotificationConfig": inner,
    }


def rest_result(method: Method, result: message.Message) -> Any:
    """A unary 1.0 result as the 0.3 REST response body."""
    assert method.result is not None  # only the streaming methods have none
    legacy = method.result(result)
    if method.rpc == "SendMessage":
        return {_REST_MEMBER[legacy["kind"]]: rest_object(legacy)}
    if method.rpc in ("GetTask", "CancelTask"):
        return rest_object(legacy)
    if method.rpc in ("CreateTaskPushNotificationConfig", "GetTaskPushNotificationConfig"):
        return _rest_push_out(legacy)
    if method.rpc == "ListTaskPushNotificationConfigs":
        return {"configs": [_rest_push_out(c) for c in legacy]}
    if method.rpc == "DeleteTaskPushNotificationConfig":
        return {}
    return legacy  # the agent card: the same JSON as on JSON-RPC


def rest_error_body(error: A2AError) -> JSON:
    """A 0.3 REST error body: ``{type, code, message, data}``. The SDK's 0.3 REST client
    raises the error class named by ``type`` (its class names are ours, the 1.0 ones,
    so -32008/-32009 keep their names here); ``code`` and ``data`` are as on 0.3
    JSON-RPC. The HTTP status is the 1.0 one."""
    return {"type": type(error).__name__, **error_object(error)}


@dataclass(frozen=True, slots=True)
class RestRoute:
    """One 0.3 REST route: its path pattern (segments, ``{}`` = a path parameter) and,
    per HTTP method, the 0.3 method and how its params are built from
    (path parameters, query, body)."""

    pattern: tuple[str, ...]
    suffix: str  # ":cancel" / ":subscribe" on the last segment, else ""
    methods: dict[str, tuple[str, Callable[[list[str], Mapping[str, str], Any], Any]]]


def _history_query(query: Mapping[str, str]) -> Any:
    value = query.get("historyLength", query.get("history_length"))
    if value is None or value == "":
        return None
    if value.isascii() and value.isdigit():
        return int(value)
    raise _invalid("historyLength", "must be a non-negative integer")


REST_ROUTES: tuple[RestRoute, ...] = (
    RestRoute(
        ("message:send",), "", {"POST": ("message/send", lambda p, q, b: rest_send_params(b))}
    ),
    RestRoute(
        ("message:stream",), "", {"POST": ("message/stream", lambda p, q, b: rest_send_params(b))}
    ),
    RestRoute(
        ("tasks", "{}"),
        "",
        {"GET": ("tasks/get", lambda p, q, b: {"id": p[0], "historyLength": _history_query(q)})},
    ),
    RestRoute(("tasks", "{}"), ":cancel", {"POST": ("tasks/cancel", lambda p, q, b: {"id": p[0]})}),
    RestRoute(
        ("tasks", "{}"),
        ":subscribe",
        {
            "GET": ("tasks/resubscribe", lambda p, q, b: {"id": p[0]}),
            "POST": ("tasks/resubscribe", lambda p, q, b: {"id": p[0]}),
        },
    ),
    RestRoute(
        ("tasks", "{}", "pushNotificationConfigs"),
        "",
        {
            "POST": (
                "tasks/pushNotificationConfig/set",
                lambda p, q, b: rest_set_push_params(p[0], b),
            ),
            "GET": ("tasks/pushNotificationConfig/list", lambda p, q, b: {"id": p[0]}),
        },
    ),
    RestRoute(
        ("tasks", "{}", "pushNotificationConfigs", "{}"),
        "",
        {
            "GET": (
                "tasks/pushNotificationConfig/get",
                lambda p, q, b: {"id": p[0], "pushNotificationConfigId": p[1]},
            ),
            "DELETE": (
                "tasks/pushNotificationConfig/delete",
                lambda p, q, b: {"id": p[0], "pushNotificationConfigId": p[1]},
            ),
        },
    ),
    RestRoute(("card",), "", {"GET": ("agent/getAuthenticatedExtendedCard", lambda p, q, b: None)}),
)


@dataclass(frozen=True, slots=True)
class RestMatch:
    """A matched 0.3 REST path: its route and path parameters (still percent-encoded:
    :meth:`params` decodes them, so a bad one is a 0.3 InvalidParams error)."""

    route: RestRoute
    path_params: list[str]

    @property
    def allowed(self) -> list[str]:
        return sorted(self.route.methods)

    def method(self, http_method: str) -> Method | None:
        entry = self.route.methods.get(http_method)
        return METHODS[entry[0]] if entry is not None else None

    def params(self, http_method: str, query: Mapping[str, str], body: Any) -> Any:
        names = _PATH_PARAM_NAMES[: len(self.path_params)]
        decoded = [_path_param(v, n) for v, n in zip(self.path_params, names, strict=True)]
        return self.route.methods[http_method][1](decoded, query, body)


#: The 0.3 params a route's path parameters stand for, in order (the task, its config).
_PATH_PARAM_NAMES = ("id", "pushNotificationConfigId")


def _path_param(value: str, name: str) -> str:
    """A path segment decoded as the 1.0 routes do: invalid UTF-8 is refused, not
    replaced (which would silently name another task)."""
    try:
        return unquote(value, errors="strict")
    except UnicodeDecodeError:
        raise _invalid(name, "path segment is not percent-encoded UTF-8") from None


def rest_match(path: str) -> RestMatch | None:
    """The 0.3 route of a raw path below the REST mount (``/v1/...``), or None."""
    if not path.startswith(REST_PREFIX):
        return None
    segments = path[len(REST_PREFIX) :].split("/")
    for route in REST_ROUTES:
        if len(segments) != len(route.pattern):
            continue
        last = segments[-1]
        if route.suffix:
            if not last.endswith(route.suffix):
                continue
            last = last[: -len(route.suffix)]
        elif ":" in last and route.pattern[-1] == "{}":
            continue  # "tasks/x:cancel" is not "tasks/{id}"
        found = [*segments[:-1], last]
        params: list[str] = []
        for want, got in zip(route.pattern, found, strict=True):
            if want == "{}":
                if not got:
                    break
                params.append(got)
            elif want != got:
                break
        else:
            return RestMatch(route, params)
    return None


# --- client side: 1.0 requests -> 0.3 params, 0.3 results -> 1.0 messages ------------
#
# Our client calls a 0.3-only agent with the 1.0 service interface: each 1.0 request
# becomes 0.3 JSON-RPC params (the same shapes the server side parses above), and each
# 0.3 result becomes 1.0 ProtoJSON, parsed leniently (unknown fields ignored, as for 1.0
# results). A 0.3 result that cannot be read raises InvalidAgentResponseError naming
# the field by its 0.3 path.


def send_params(request: pb.SendMessageRequest) -> JSON:
    """``message/send`` / ``message/stream`` params (MessageSendParams) for a 1.0 request:
    ``blocking = !returnImmediately`` (always sent, as the SDK does)."""
    params: JSON = {"message": message_out(codec.to_dict(request.message))}
    if request.HasField("configuration"):
        config = request.configuration
        out: JSON = {"blocking": not config.return_immediately}
        if config.accepted_output_modes:
            out["acceptedOutputModes"] = list(config.accepted_output_modes)
        if config.HasField("history_length"):
            out["historyLength"] = config.history_length
        if config.HasField("task_push_notification_config"):
            push = push_config_out(codec.to_dict(config.task_push_notification_config))
            out["pushNotificationConfig"] = push["pushNotificationConfig"]
        params["configuration"] = out
    if request.HasField("metadata"):
        params["metadata"] = codec.to_dict(request)["metadata"]
    return params


def get_task_params(request: pb.GetTaskRequest) -> JSON:
    params: JSON = {"id": request.id}
    if request.HasField("history_length"):
        params["historyLength"] = request.history_length
    return params


def cancel_task_params(request: pb.CancelTaskRequest) -> JSON:
    params: JSON = {"id": request.id}
    if request.HasField("metadata"):
        params["metadata"] = codec.to_dict(request)["metadata"]
    return params


def subscribe_params(request: pb.SubscribeToTaskRequest) -> JSON:
    return {"id": request.id}


def set_push_config_params(request: pb.TaskPushNotificationConfig) -> JSON:
    """``tasks/pushNotificationConfig/set`` params ``{taskId, pushNotificationConfig}``."""
    return push_config_out(codec.to_dict(request))


def get_push_config_params(request: pb.GetTaskPushNotificationConfigRequest) -> JSON:
    """``tasks/pushNotificationConfig/get``: 0.3 ``id`` is the TASK id."""
    params: JSON = {"id": request.task_id}
    if request.id:
        params["pushNotificationConfigId"] = request.id
    return params


def list_push_configs_params(request: pb.ListTaskPushNotificationConfigsRequest) -> JSON:
    """``tasks/pushNotificationConfig/list`` (0.3 has no paging: the whole list comes back)."""
    return {"id": request.task_id}


def delete_push_config_params(request: pb.DeleteTaskPushNotificationConfigRequest) -> JSON:
    params: JSON = {"id": request.task_id}
    if request.id:
        params["pushNotificationConfigId"] = request.id
    return params


# 0.3 result JSON -> 1.0 ProtoJSON


def _bad_result(path: str, problem: str) -> InvalidAgentResponseError:
    return InvalidAgentResponseError(f"{path}: {problem}")


def _result_object(value: Any, path: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise _bad_result(path, "must be a JSON object")
    return value


def _copy_in(source: Mapping[str, Any], target: JSON, *names: str) -> None:
    """Copy ``names`` (camelCase, or their snake_case alias) when present."""
    for name in names:
        value = _get(source, name)
        if value is not None:
            target[name] = value


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


_ERROR_INFO = "type.googleapis.com/google.rpc.ErrorInfo"
_BAD_REQUEST = "type.googleapis.com/google.rpc.BadRequest"


def error_in(error: Any) -> Any:
    """A 0.3 JSON-RPC ``error`` in the 1.0 shape (``data`` an array of ErrorInfo and
    BadRequest), so one parser reads both. 0.3 ``data`` is free-form: an object with a
    ``reason`` (ours, :func:`error_object`) keeps it and its string members as
    metadata; anything else is dropped and the code alone picks the class."""
    if not isinstance(error, Mapping):
        return error
    out = {k: v for k, v in error.items() if k != "data"}
    data = error.get("data")
    if isinstance(data, list):
        out["data"] = data  # a 1.0-style peer: already the right shape
    elif isinstance(data, Mapping) and isinstance(data.get("reason"), str):
        metadata = {str(k): v for k, v in data.items() if isinstance(v, str) and k != "reason"}
        details: list[JSON] = [
            {"@type": _ERROR_INFO, "reason": data["reason"], "metadata": metadata}
        ]
        violations = data.get("fieldViolations")
        if isinstance(violations, list):
            details.append({"@type": _BAD_REQUEST, "fieldViolations": violations})
        out["data"] = details
    return out


@dataclass(frozen=True, slots=True)
class Call:
    """How a client makes one 1.0 rpc on a 0.3 agent: the 0.3 method, its params, and
    the reading of its result (None for the streaming rpcs and the agent card, which
    the transport reads itself)."""

    rpc: str
    method: str
    params: Callable[[Any], Any]
    result: Callable[[Any, str], message.Message] | None
    #: The result may be missing altogether (the SDK's 0.3 delete answers without one).
    result_optional: bool = False


#: Every 1.0 rpc a 0.3 agent can serve, by 1.0 name. ListTasks has no 0.3 method.
CALLS: dict[str, Call] = {
    c.rpc: c
    for c in (
        Call("SendMessage", "message/send", send_params, send_result_in),
        Call("SendStreamingMessage", "message/stream", send_params, None),
        Call("GetTask", "tasks/get", get_task_params, task_result_in),
        Call("CancelTask", "tasks/cancel", cancel_task_params, task_result_in),
        Call("SubscribeToTask", "tasks/resubscribe", subscribe_params, None),
        Call(
            "CreateTaskPushNotificationConfig",
            "tasks/pushNotificationConfig/set",
            set_push_config_params,
            push_config_result_in,
        ),
        Call(
            "GetTaskPushNotificationConfig",
            "tasks/pushNotificationConfig/get",
            get_push_config_params,
            push_config_result_in,
        ),
        Call(
            "ListTaskPushNotificationConfigs",
            "tasks/pushNotificationConfig/list",
            list_push_configs_params,
            push_list_result_in,
        ),
        Call(
            "DeleteTaskPushNotificationConfig",
            "tasks/pushNotificationConfig/delete",
            delete_push_config_params,
            empty_result_in,
            result_optional=True,
        ),
        Call(
            "GetExtendedAgentCard",
            "agent/getAuthenticatedExtendedCard",
            lambda request: {},
            None,
        ),
    )
}


def legacy_call(rpc: str) -> Call:
    """The 0.3 call for a 1.0 rpc, or UnsupportedOperationError naming why there is none
    (raised before anything is sent)."""
    call = CALLS.get(rpc)
    if call is None:
        raise UnsupportedOperationError(
            f"{rpc} does not exist in A2A 0.3, the only version this agent offers"
        )
    return call


# --- client side over 0.3 HTTP+JSON ----------------------------------------------------
#
# The 1.0 request goes to 0.3 JSON-RPC params (:data:`CALLS`), then to the 0.3 REST path
# and body; the 0.3 REST answer comes back to the 0.3 JSON-RPC shape, then to 1.0. So
# both 0.3 bindings share one translation, as on the server side.


def _rest_status_in(status: Any) -> Any:
    if not isinstance(status, Mapping):
        return status
    out: JSON = {}
    state = _get(status, "state")
    if state is not None:
        out["state"] = _REST_STATE_IN.get(state, state)
    if _get(status, "message") is not None:
        out["message"] = _rest_message_in(_get(status, "message"))
    _copy_in(status, out, "timestamp")
    return out


def _rest_artifact_in(artifact: Any) -> Any:
    if not isinstance(artifact, Mapping):
        return artifact
    out: JSON = {}
    _copy_in(artifact, out, "artifactId", "name", "description", "metadata", "extensions")
    parts = _get(artifact, "parts")
    out["parts"] = [_rest_part_in(p) for p in parts] if isinstance(parts, list) else parts
    return out


def _rest_task_in(task: Any) -> Any:
    if not isinstance(task, Mapping):
        return task
    out: JSON = {"kind": "task"}
    _copy_in(task, out, "id", "contextId", "metadata")
    out["status"] = _rest_status_in(_get(task, "status") or {})
    history = _get(task, "history")
    if isinstance(history, list):
        out["history"] = [_rest_message_in(m) for m in history]
    artifacts = _get(task, "artifacts")
    if isinstance(artifacts, list):
        out["artifacts"] = [_rest_artifact_in(a) for a in artifacts]
    return out


def _rest_status_update_in(event: Any) -> Any:
    if not isinstance(event, Mapping):
        return event
    out: JSON = {"kind": "status-update"}
    _copy_in(event, out, "taskId", "contextId", "final", "metadata")
    out["status"] = _rest_status_in(_get(event, "status") or {})
    return out


def _rest_artifact_update_in(event: Any) -> Any:
    if not isinstance(event, Mapping):
        return event
    out: JSON = {"kind": "artifact-update"}
    _copy_in(event, out, "taskId", "contextId", "append", "lastChunk", "metadata")
    out["artifact"] = _rest_artifact_in(_get(event, "artifact") or {})
    return out


_REST_MEMBER_IN: dict[str, Callable[[Any], Any]] = {
    "task": _rest_task_in,
    "message": _rest_message_in,
    "msg": _rest_message_in,
    "statusUpdate": _rest_status_update_in,
    "status_update": _rest_status_update_in,
    "artifactUpdate": _rest_artifact_update_in,
    "artifact_update": _rest_artifact_update_in,
}


def _rest_member_in(value: Any, path: str) -> Any:
    """A 0.3 REST SendMessageResponse / StreamResponse (one member) as the bare 0.3
    JSON-RPC object."""
    obj = _result_object(value, path)
    for member, convert in _REST_MEMBER_IN.items():
        if obj.get(member) is not None:
            return convert(obj[member])
    raise _bad_result(path, "has none of task, message, statusUpdate, artifactUpdate")


def _rest_push_config_in(value: Any, path: str) -> Any:
    """A 0.3 REST TaskPushNotificationConfig ``{name, pushNotificationConfig}`` as the
    0.3 JSON-RPC ``{taskId, pushNotificationConfig}``. The name is a resource name,
    not a URL path: its ids are not escaped (the SDK writes and reads them raw)."""
    obj = _result_object(value, path)
    name = _get(obj, "name")
    segments = name.split("/") if isinstance(name, str) else []
    task_id = segments[1] if len(segments) >= 2 and segments[0] == "tasks" else ""
    return {
        "taskId": task_id,
        "pushNotificationConfig": _rest_push_in(_get(obj, "pushNotificationConfig")),
    }


def _rest_push_list_in(value: Any, path: str) -> Any:
    obj = _result_object(value, path)
    configs = _get(obj, "configs") or []
    if not isinstance(configs, list):
        raise _bad_result(f"{path}.configs", "must be an array")
    return [_rest_push_config_in(c, f"{path}.configs[{i}]") for i, c in enumerate(configs)]


#: How each rpc's 0.3 REST answer becomes its 0.3 JSON-RPC result.
_REST_RESULT_IN: dict[str, Callable[[Any, str], Any]] = {
    "SendMessage": _rest_member_in,
    "GetTask": lambda value, path: _rest_task_in(_result_object(value, path)),
    "CancelTask": lambda value, path: _rest_task_in(_result_object(value, path)),
    "CreateTaskPushNotificationConfig": _rest_push_config_in,
    "GetTaskPushNotificationConfig": _rest_push_config_in,
    "ListTaskPushNotificationConfigs": _rest_push_list_in,
    "DeleteTaskPushNotificationConfig": lambda value, path: None,
    "GetExtendedAgentCard": lambda value, path: value,
}


@dataclass(frozen=True, slots=True)
class RestCall:
    """One 0.3 REST request: method, path below the interface URL (``/v1/...``, path
    parameters escaped), query and JSON body (None: no body)."""

    http_method: str
    path: str
    query: dict[str, str]
    body: Any


def _segment(value: Any) -> str:
    return quote(str(value), safe="")


def _rest_send_body(params: Mapping[str, Any]) -> JSON:
    """``message/send`` params as a 0.3 REST SendMessageRequest."""
    body: JSON = {"message": _rest_message_out(params["message"])}
    config = params.get("configuration")
    if isinstance(config, Mapping):
        out: JSON = {}
        _copy(config, out, "acceptedOutputModes", "historyLength", "blocking")
        if "pushNotificationConfig" in config:
            out["pushNotification"] = config["pushNotificationConfig"]
        body["configuration"] = out
    _copy(params, body, "metadata")
    return body


def rest_call(rpc: str, request: message.Message) -> RestCall:
    """The 0.3 REST request for a 1.0 rpc (UnsupportedOperationError for ListTasks)."""
    params: Any = legacy_call(rpc).params(request)
    task = f"/v1/tasks/{_segment(params.get('id') or params.get('taskId') or '')}"
    if rpc in ("SendMessage", "SendStreamingMessage"):
        verb = "send" if rpc == "SendMessage" else "stream"
        return RestCall("POST", f"/v1/message:{verb}", {}, _rest_send_body(params))
    if rpc == "GetTask":
        query = {"historyLength": str(params["historyLength"])} if "historyLength" in params else {}
        return RestCall("GET", task, query, None)
    if rpc == "CancelTask":
        return RestCall("POST", f"{task}:cancel", {}, {"name": f"tasks/{params['id']}"})
    if rpc == "SubscribeToTask":
        return RestCall("GET", f"{task}:subscribe", {}, None)
    configs = f"{task}/pushNotificationConfigs"
    if rpc == "CreateTaskPushNotificationConfig":
        inner = params["pushNotificationConfig"]
        config_id = str(inner.get("id") or params["taskId"])
        body = {
            "parent": f"tasks/{params['taskId']}",
            "configId": config_id,
            "config": {
                "name": f"tasks/{params['taskId']}/pushNotificationConfigs/{config_id}",
                "pushNotificationConfig": inner,
            },
        }
        return RestCall("POST", configs, {}, body)
    if rpc == "ListTaskPushNotificationConfigs":
        return RestCall("GET", configs, {}, None)
    if rpc in ("GetTaskPushNotificationConfig", "DeleteTaskPushNotificationConfig"):
        # 0.3 servers defaulted a config's id to its task's id.
        config_id = _segment(params.get("pushNotificationConfigId") or params["id"])
        verb = "GET" if rpc == "GetTaskPushNotificationConfig" else "DELETE"
        return RestCall(verb, f"{configs}/{config_id}", {}, None)
    return RestCall("GET", "/v1/card", {}, None)  # GetExtendedAgentCard


def rest_result_in(rpc: str, value: Any) -> Any:
    """A 0.3 REST answer as the 0.3 JSON-RPC ``result`` of the same call (read further
    with the rpc's :attr:`Call.result`; the agent card is returned as it came)."""
    return _REST_RESULT_IN[rpc](value, "body")


def rest_stream_response_in(value: Any) -> pb.StreamResponse:
    """One 0.3 REST SSE event (a 0.3 StreamResponse) as a 1.0 StreamResponse."""
    return stream_response_in(_rest_member_in(value, "event"), "event")
