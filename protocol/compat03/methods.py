"""The server-side 0.3 JSON-RPC method table: each 0.3 method's 1.0 rpc, request parser and
result writer."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from google.protobuf import message

from .. import codec
from ..errors import VersionNotSupportedError
from .card import agent_card
from .objects_out import message_out, push_config_out, task_out
from .params_in import (
    cancel_task_request,
    delete_push_config_request,
    extended_card_request,
    get_push_config_request,
    get_task_request,
    list_push_configs_request,
    list_tasks_request,
    send_message_request,
    set_push_config_request,
    subscribe_request,
)


def _send_result(result: message.Message) -> Any:
    data = codec.to_dict(result)
    if "task" in data:
        return task_out(data["task"])
    return message_out(data.get("message", {}))


def _task_result(result: message.Message) -> Any:
    return task_out(codec.to_dict(result))


def _list_result(result: message.Message) -> Any:
    """ListTasksResponse with 0.3 tasks (``kind: "task"``, lower-case states)."""
    data = codec.to_dict(result)
    return {
        "tasks": [task_out(t) for t in data.get("tasks", ())],
        "nextPageToken": data.get("nextPageToken", ""),
        "pageSize": data.get("pageSize", 0),
        "totalSize": data.get("totalSize", 0),
    }


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


#: Every 0.3 JSON-RPC method (digest §14.1) by name, and ``tasks/list``: not in the 0.3
#: spec, but deployed 0.3 peers call it (ListTasks with 0.3 tasks out).
METHODS: dict[str, Method] = {
    m.name: m
    for m in (
        Method("message/send", "SendMessage", send_message_request, _send_result),
        Method("message/stream", "SendStreamingMessage", send_message_request, None),
        Method("tasks/get", "GetTask", get_task_request, _task_result),
        Method("tasks/list", "ListTasks", list_tasks_request, _list_result),
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
