"""Server side of 0.3 HTTP+JSON ("REST", digest §14.1/§14.2 last paragraph).

0.3 REST bodies are ProtoJSON of the 0.3 proto (``Message.content``, ``Part.file``
with ``fileWithUri``/``fileWithBytes``, ``TaskStatus.message``, ``TASK_STATE_CANCELLED``,
resource names ``tasks/{id}/pushNotificationConfigs/{cid}``). They are rewritten into
the 0.3 JSON-RPC shapes (and back), so both 0.3 bindings share one translation.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote

from google.protobuf import message

from lf.a2a.v1 import a2a_pb2 as pb

from ..errors import A2AError
from .errors import error_object
from .methods import METHODS, Method
from .objects_out import Shapes, stream_event
from .shared import copy_fields, copy_fields_in, get_field, invalid_field
from .tables import JSON, TASK_STATES

#: Prefix of every 0.3 REST path, below the REST mount.
REST_PREFIX = "/v1/"

_REST_STATE = {
    name: ("TASK_STATE_CANCELLED" if value == pb.TASK_STATE_CANCELED else pb.TaskState.Name(value))
    for name, value in TASK_STATES
}
REST_STATE_IN = {v: k for k, v in _REST_STATE.items()}
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


def rest_part_in(part: Any) -> Any:
    """A 0.3 proto Part as a 0.3 JSON-RPC part (unknown shapes pass through, so the
    JSON-RPC parser reports them)."""
    if not isinstance(part, Mapping):
        return part
    out: JSON = {}
    file = get_field(part, "file")
    data = get_field(part, "data")
    if get_field(part, "text") is not None:
        out = {"kind": "text", "text": get_field(part, "text")}
    elif isinstance(file, Mapping):
        inner: JSON = {}
        if get_field(file, "fileWithBytes") is not None:
            inner["bytes"] = _file_bytes_in(get_field(file, "fileWithBytes"))
        if get_field(file, "fileWithUri") is not None:
            inner["uri"] = get_field(file, "fileWithUri")
        copy_fields_in(file, inner, "mimeType", "name")
        out = {"kind": "file", "file": inner}
    elif isinstance(data, Mapping):
        out = {"kind": "data", "data": get_field(data, "data") or {}}
    else:
        out = dict(part)
    if get_field(part, "metadata") is not None:
        out["metadata"] = get_field(part, "metadata")
    return out


def rest_message_in(msg: Any) -> Any:
    if not isinstance(msg, Mapping):
        return msg
    out: JSON = {"kind": "message"}
    copy_fields_in(msg, out, "messageId", "contextId", "taskId", "metadata", "extensions")
    role = get_field(msg, "role")
    out["role"] = _REST_ROLE_IN.get(role, role) if isinstance(role, str | int) else role
    content = get_field(msg, "content")
    if content is None:
        content = get_field(msg, "parts")
    out["parts"] = [rest_part_in(p) for p in content] if isinstance(content, list) else content
    return out


def rest_push_in(config: Any) -> Any:
    """0.3 proto PushNotificationConfig -> JSON-RPC shape (same keys but snake_case)."""
    if not isinstance(config, Mapping):
        return config
    out: JSON = {}
    copy_fields_in(config, out, "id", "url", "token")
    auth = get_field(config, "authentication")
    if auth is not None:
        out["authentication"] = auth
    return out


def rest_send_params(body: Any) -> Any:
    """A 0.3 REST ``SendMessageRequest`` body as ``message/send`` params.

    ``blocking`` is a plain proto3 bool there (0.3 REST and gRPC): absent is false, with
    or without a ``configuration``, as the SDK's 0.3 REST and gRPC handlers read it.
    """
    if not isinstance(body, Mapping):
        return body
    out: JSON = {}
    message_value = get_field(body, "message")
    if message_value is None:
        message_value = body.get("request")
    if message_value is not None:
        out["message"] = rest_message_in(message_value)
    config = get_field(body, "configuration")
    if isinstance(config, Mapping):
        blocking = get_field(config, "blocking")  # a non-bool stays for the parser to name
        rpc_config: JSON = {"blocking": False if blocking is None else blocking}
        copy_fields_in(config, rpc_config, "acceptedOutputModes", "historyLength")
        push = get_field(config, "pushNotification")
        if push is not None:
            rpc_config["pushNotificationConfig"] = rest_push_in(push)
        out["configuration"] = rpc_config
    elif config is not None:
        out["configuration"] = config
    else:
        out["configuration"] = {"blocking": False}
    if get_field(body, "metadata") is not None:
        out["metadata"] = get_field(body, "metadata")
    return out


def rest_set_push_params(task_id: str, body: Any) -> Any:
    """A 0.3 REST ``CreateTaskPushNotificationConfigRequest`` body as
    ``tasks/pushNotificationConfig/set`` params; the task comes from the path and the
    config id from the config, else ``configId``, else the task id.

    The JS SDK's 0.3 REST client sends the bare ``TaskPushNotificationConfig`` instead
    (``{"name": "tasks/T/pushNotificationConfigs/C", "pushNotificationConfig": …}``): its
    config is read the same way, the id, when the config has none, from the name."""
    if not isinstance(body, Mapping):
        return body
    config = get_field(body, "config")
    if config is None and get_field(body, "pushNotificationConfig") is not None:
        config = body  # the JS client's bare TaskPushNotificationConfig
    inner = get_field(config, "pushNotificationConfig") if isinstance(config, Mapping) else None
    push = rest_push_in(inner) if inner is not None else None
    if isinstance(push, dict) and not push.get("id"):
        config_id = get_field(body, "configId")
        name = get_field(config, "name") if isinstance(config, Mapping) else None
        if not config_id and isinstance(name, str) and "/pushNotificationConfigs/" in name:
            config_id = name.rsplit("/pushNotificationConfigs/", 1)[1]
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
        copy_fields(file, inner, "mimeType", "name")
        out = {"file": inner}
    elif kind == "data":
        out = {"data": {"data": part.get("data", {})}}
    else:
        out = {"text": part.get("text", "")}
    copy_fields(part, out, "metadata")
    return out


#: 0.3 HTTP+JSON (the 0.3 proto's ProtoJSON), from 0.3 JSON-RPC objects.
REST_SHAPES = Shapes(
    kinds=False,
    roles=_REST_ROLE,
    default_role="ROLE_AGENT",
    states=_REST_STATE,
    default_state="TASK_STATE_UNSPECIFIED",
    message_parts="content",
    message_fields=("contextId", "taskId", "metadata", "extensions"),
    part=_rest_part_out,
)


def rest_object(value: Mapping[str, Any]) -> JSON:
    """A 0.3 JSON-RPC result object (by ``kind``) as 0.3 REST ProtoJSON: a Task, or a
    StreamResponse/SendMessageResponse member for the other kinds."""
    kind = value.get("kind")
    if kind == "task":
        return REST_SHAPES.task(value)
    if kind == "message":
        return REST_SHAPES.message(value)
    if kind == "status-update":
        return REST_SHAPES.status_update(value, bool(value.get("final", False)))
    return REST_SHAPES.artifact_update(value)


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
    raise invalid_field("historyLength", "must be a non-negative integer")


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
        raise invalid_field(name, "path segment is not percent-encoded UTF-8") from None


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
