"""Client side: 1.0 requests as 0.3 JSON-RPC params, and the table of 0.3 calls.

Our client calls a 0.3-only agent with the 1.0 service interface: each 1.0 request
becomes 0.3 JSON-RPC params (the same shapes the server side parses), and each 0.3
result becomes 1.0 ProtoJSON (:mod:`.results_in`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from google.protobuf import message

from lf.a2a.v1 import a2a_pb2 as pb

from .. import codec
from ..errors import UnsupportedOperationError
from .objects_out import message_out, push_config_out
from .results_in import (
    empty_result_in,
    list_result_in,
    push_config_result_in,
    push_list_result_in,
    send_result_in,
    task_result_in,
)
from .tables import JSON, STATE_OUT


def send_params(request: pb.SendMessageRequest) -> JSON:
    """``message/send`` / ``message/stream`` params (MessageSendParams) for a 1.0 request:
    ``blocking = !returnImmediately``, always sent, a configuration or not: on 0.3
    HTTP+JSON and gRPC ``blocking`` is a proto3 bool, so a 0.3 agent reads its absence as
    non-blocking and would answer a 1.0 (blocking by default) send at once."""
    params: JSON = {"message": message_out(codec.to_dict(request.message))}
    config = request.configuration
    out: JSON = {"blocking": not config.return_immediately}
    if request.HasField("configuration"):
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


def list_tasks_params(request: pb.ListTasksRequest) -> JSON:
    """``tasks/list`` params: the 1.0 ListTasks fields under their camelCase names, the
    status as a 0.3 state name (what our 0.3 JSON-RPC surface reads; the tenant is not
    sent, as on every 0.3 call)."""
    params: JSON = codec.to_dict(request)
    params.pop("tenant", None)
    if "status" in params:
        params["status"] = STATE_OUT.get(params["status"], params["status"])
    return params


def delete_push_config_params(request: pb.DeleteTaskPushNotificationConfigRequest) -> JSON:
    params: JSON = {"id": request.task_id}
    if request.id:
        params["pushNotificationConfigId"] = request.id
    return params


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
    #: Not in the 0.3 spec: only a JSON-RPC interface may serve it (see :data:`LIST_TASKS`).
    jsonrpc_only: bool = False


#: ListTasks is not in A2A 0.3, but some 0.3 agents serve it as ``tasks/list`` over
#: JSON-RPC (our gateway's 0.3 surface does). Over 0.3 HTTP+JSON and gRPC no agent does:
#: the 0.3 proto has no such rpc, the a2a-sdk 0.3 releases route ``GET /v1/tasks`` to a
#: handler that raises NotImplementedError (HTTP 500) and its 1.x 0.3 layer leaves the
#: route out on purpose, and on our gateway ``/v1/tasks`` is tenant ``v1``'s 1.0 ListTasks.
LIST_TASKS = Call("ListTasks", "tasks/list", list_tasks_params, list_result_in, jsonrpc_only=True)

#: Every 1.0 rpc a 0.3 agent can serve, by 1.0 name (ListTasks over JSON-RPC only).
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
        LIST_TASKS,
    )
}


def legacy_call(rpc: str, *, jsonrpc: bool = False) -> Call:
    """The 0.3 call for a 1.0 rpc over JSON-RPC (``jsonrpc``) or another 0.3 binding, or
    UnsupportedOperationError naming why there is none (raised before anything is sent)."""
    call = CALLS.get(rpc)
    if call is None:
        raise UnsupportedOperationError(
            f"{rpc} does not exist in A2A 0.3, the only version this agent offers"
        )
    if call.jsonrpc_only and not jsonrpc:
        raise UnsupportedOperationError(
            f"{rpc} does not exist in A2A 0.3, the only version this agent offers; some 0.3"
            f" agents serve it as {call.method} over JSON-RPC, none over HTTP+JSON or gRPC"
        )
    return call
