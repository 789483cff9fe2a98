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
from .objects_out import _copy
from .params_in import _copy_in, _get
from .rest_server import _REST_STATE_IN, REST_SHAPES, _rest_message_in, _rest_part_in, _rest_push_in
from .results_in import _bad_result, _result_object, stream_response_in
from .tables import JSON


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
    body: JSON = {"message": REST_SHAPES.message(params["message"])}
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
