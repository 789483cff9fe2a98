"""Task rules every part of the engine applies: what a message must carry, how a status
changes, which states a task may be cancelled or subscribed in, and the agent's view
of a turn."""

from __future__ import annotations

import dataclasses

import orjson
from google.protobuf import json_format

from a2a_gateway.agent.base import Signal, Turn
from a2a_gateway.protocol import codec
from a2a_gateway.protocol.context import Caller
from a2a_gateway.protocol.errors import TaskNotCancelableError, UnsupportedOperationError
from a2a_gateway.protocol.json_schemas import asked_schema, data_parts, part_value, violation
from lf.a2a.v1 import a2a_pb2 as pb

from ..task_states import TERMINAL, set_now
from ..task_store import MAX_MESSAGE_ID_CHARS
from .state import invalid


def new_turn(
    request: pb.SendMessageRequest,
    message: pb.Message,
    task: pb.Task | None,
    caller: Caller,
    context_id: str,
    cancelled: Signal,
    hops: int,
    *,
    payload: bool = False,
) -> Turn:
    """The agent's view of a turn. It keeps no reference to the request (a held
    stream should not pin the parsed request in memory); with ``payload`` its
    encoding (:func:`request_payload`) is kept instead."""
    modes: tuple[str, ...] = ()
    if request.HasField("configuration"):  # (a read of an absent one makes an empty one)
        accepted = request.configuration.accepted_output_modes
        modes = tuple(accepted) if accepted else ()
    if payload:
        turn = new_turn(request, message, task, caller, context_id, cancelled, hops)
        return dataclasses.replace(turn, payload=request_payload(request))
    if request.HasField("metadata"):
        metadata = json_format.MessageToDict(request.metadata)
        return Turn(message, task, caller, context_id, cancelled, hops, modes, metadata)
    return Turn(message, task, caller, context_id, cancelled, hops, modes)


def request_payload(request: pb.SendMessageRequest) -> str:
    """The request's params as compact ProtoJSON for the agent (``{{payload}}``), without
    what must not reach a model's transcript: the bytes of file parts (saved to the
    inbox; the part says ``raw`` was there by its filename and media type) and the push
    config's token and credentials."""
    shown = pb.SendMessageRequest()
    shown.CopyFrom(request)
    for part in shown.message.parts:
        if part.WhichOneof("content") == "raw":
            part.raw = b""
    if shown.configuration.HasField("task_push_notification_config"):
        push = shown.configuration.task_push_notification_config
        push.ClearField("token")
        if push.HasField("authentication"):
            push.authentication.ClearField("credentials")
    return orjson.dumps(codec.to_dict(shown)).decode()


def check_cancelable(task: pb.Task) -> None:
    state = task.status.state
    if state in TERMINAL:
        raise TaskNotCancelableError(
            f"Task {task.id} is already {pb.TaskState.Name(state)}", metadata={"taskId": task.id}
        )


def check_not_terminal(task: pb.Task) -> None:
    state = task.status.state
    if state in TERMINAL:
        raise UnsupportedOperationError(
            f"Task {task.id} is in a terminal state ({pb.TaskState.Name(state)})"
        )


def check_message(request: pb.SendMessageRequest) -> None:
    if not request.HasField("message"):
        raise invalid("message", "is required")
    message = request.message
    if not message.message_id:
        raise invalid("message.messageId", "is required")
    if len(message.message_id) > MAX_MESSAGE_ID_CHARS:
        raise invalid("message.messageId", f"must be at most {MAX_MESSAGE_ID_CHARS} characters")
    if message.role != pb.ROLE_USER:
        raise invalid("message.role", "must be ROLE_USER")
    if not message.parts:
        raise invalid("message.parts", "must contain at least one part")


def check_answer(task: pb.Task, message: pb.Message) -> None:
    """A data part answering a question asked with a schema must conform to it
    (InvalidParams naming the part and the violation); text answers pass as they are."""
    if task.status.state != pb.TASK_STATE_INPUT_REQUIRED or not task.status.HasField("message"):
        return
    schema = asked_schema(task.status.message)
    if schema is None:
        return
    for index, part in data_parts(message.parts):
        problem = violation(schema, part_value(part))
        if problem is not None:
            raise invalid(
                f"message.parts[{index}].data", f"does not match the question's schema: {problem}"
            )


def read_history_length(request: pb.GetTaskRequest | pb.ListTasksRequest, field: str) -> int | None:
    if not request.HasField("history_length"):
        return None
    if request.history_length < 0:
        raise invalid(field, "must not be negative")
    return request.history_length


def apply_status(task: pb.Task, state: int, message: pb.Message | None) -> None:
    """Move to ``state`` now; the previous status message goes into history."""
    archive_status_message(task)
    status = task.status
    status.state = state  # type: ignore[assignment]
    if message is not None:
        status.message.CopyFrom(message)
    set_now(status.timestamp)


def archive_status_message(task: pb.Task) -> None:
    status = task.status
    if status.HasField("message"):
        task.history.append(status.message)
        status.ClearField("message")
