"""Client side over 0.3 HTTP+JSON.

The 1.0 request goes to 0.3 JSON-RPC params (:data:`.calls.CALLS`), then to the 0.3
REST path and body; the 0.3 REST answer comes back to the 0.3 JSON-RPC shape, then to
1.0. So both 0.3 bindings share one translation, as on the server side.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from google.protobuf import message

from lf.a2a.v1 import a2a_pb2 as pb

from .calls import legacy_call
from .rest_server import REST_SHAPES, REST_STATE_IN, rest_message_in, rest_part_in, rest_push_in
from .results_in import stream_response_in
from .shared import bad_result, copy_fields, copy_fields_in, get_field, result_object
from .tables import JSON


def _rest_status_in(status: Any) -> Any:
    if not isinstance(status, Mapping):
        return status
    out: JSON = {}
    state = get_field(status, "state")
    if state is not None:
        out["state"] = REST_STATE_IN.get(state, state)
    if get_field(status, "message") is not None:
        out["message"] = rest_message_in(get_field(status, "message"))
    copy_fields_in(status, out, "timestamp")
    return out


def _rest_artifact_in(artifact: Any) -> Any:
    if not isinstance(artifact, Mapping):
        return artifact
    out: JSON = {}
    copy_fields_in(artifact, out, "artifactId", "name", "description", "metadata", "extensions")
    parts = get_field(artifact, "parts")
    out["parts"] = [rest_part_in(p) for p in parts] if isinstance(parts, list) else parts
    return out


def _rest_task_in(task: Any) -> Any:
    if not isinstance(task, Mapping):
        return task
    out: JSON = {"kind": "task"}
    copy_fields_in(task, out, "id", "contextId", "metadata")
    out["status"] = _rest_status_in(get_field(task, "status") or {})
    history = get_field(task, "history")
    if isinstance(history, list):
        out["history"] = [rest_message_in(m) for m in history]
    artifacts = get_field(task, "artifacts")
    if isinstance(artifacts, list):
        out["artifacts"] = [_rest_artifact_in(a) for a in artifacts]
    return out


def _rest_status_update_in(event: Any) -> Any:
    if not isinstance(event, Mapping):
        return event
    out: JSON = {"kind": "status-update"}
    copy_fields_in(event, out, "taskId", "contextId", "final", "metadata")
    out["status"] = _rest_status_in(get_field(event, "status") or {})
    return out


def _rest_artifact_update_in(event: Any) -> Any:
    if not isinstance(event, Mapping):
        return event
    out: JSON = {"kind": "artifact-update"}
    copy_fields_in(event, out, "taskId", "contextId", "append", "lastChunk", "metadata")
    out["artifact"] = _rest_artifact_in(get_field(event, "artifact") or {})
    return out


_REST_MEMBER_IN: dict[str, Callable[[Any], Any]] = {
    "task": _rest_task_in,
    "message": rest_message_in,
    "msg": rest_message_in,
    "statusUpdate": _rest_status_update_in,
    "status_update": _rest_status_update_in,
    "artifactUpdate": _rest_artifact_update_in,
    "artifact_update": _rest_artifact_update_in,
}


def _rest_member_in(value: Any, path: str) -> Any:
    """A 0.3 REST SendMessageResponse / StreamResponse (one member) as the bare 0.3
    JSON-RPC object."""
    obj = result_object(value, path)
    for member, convert in _REST_MEMBER_IN.items():
        if obj.get(member) is not None:
            return convert(obj[member])
    raise bad_result(path, "has none of task, message, statusUpdate, artifactUpdate")


def _rest_push_config_in(value: Any, path: str) -> Any:
    """A 0.3 REST TaskPushNotificationConfig ``{name, pushNotificationConfig}`` as the
    0.3 JSON-RPC ``{taskId, pushNotificationConfig}``. The name is a resource name,
    not a URL path: its ids are not escaped (the SDK writes and reads them raw)."""
    obj = result_object(value, path)
    name = get_field(obj, "name")
    segments = name.split("/") if isinstance(name, str) else []
    task_id = segments[1] if len(segments) >= 2 and segments[0] == "tasks" else ""
    return {
        "taskId": task_id,
        "pushNotificationConfig": rest_push_in(get_field(obj, "pushNotificationConfig")),
    }


def _rest_push_list_in(value: Any, path: str) -> Any:
    obj = result_object(value, path)
    configs = get_field(obj, "configs") or []
    if not isinstance(configs, list):
        raise bad_result(f"{path}.configs", "must be an array")
    return [_rest_push_config_in(c, f"{path}.configs[{i}]") for i, c in enumerate(configs)]


#: How each rpc's 0.3 REST answer becomes its 0.3 JSON-RPC result.
_REST_RESULT_IN: dict[str, Callable[[Any, str], Any]] = {
    "SendMessage": _rest_member_in,
    "GetTask": lambda value, path: _rest_task_in(result_object(value, path)),
    "CancelTask": lambda value, path: _rest_task_in(result_object(value, path)),
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
    body: JSON = {"message": REST_SHAPES.message(params["message"])}
    config = params.get("configuration")
    if isinstance(config, Mapping):
        out: JSON = {}
        copy_fields(config, out, "acceptedOutputModes", "historyLength", "blocking")
        if "pushNotificationConfig" in config:
            out["pushNotification"] = config["pushNotificationConfig"]
        body["configuration"] = out
    copy_fields(params, body, "metadata")
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
