"""The A2A service of the PACT URL: messages in, the agent's reply as a Message out.

It wraps the gateway's service (the task engine) for callers that are personal
agents' users (:mod:`.tokens`):

- ``SendMessage`` runs the agent as the engine always does (a blocking send, under the
  user's own caller name) and answers with the reply as a Message: the task's
  artifacts' parts, then, unless it completed, its status message (a question, a
  failure). No task is shown: the Message carries no taskId; a reply that did not
  complete says its state in ``metadata["a2a-gateway.taskState"]``.
- Every message is a turn (``Agent.reply`` is not consulted: ``message_replies`` off),
  so every reply has its task, and the store keeps what the rules below need.
- A retried messageId (the same message again, :mod:`..engine.retries`) gets the same
  reply without running the agent: the engine's retry keys find the task the first
  attempt made (kept by the store: on disk with the workspace store, across restarts),
  and the reply's messageId is derived from that task's id.
- A ``contextId`` continues a conversation of the same user only: one in which this
  user has a task. Anyone else's, or one that does not exist, is the same
  InvalidParams, so the answer tells nothing about others.
- ``taskId`` (no tasks here), ``returnImmediately`` and an inline push config, the
  streaming operations, the task operations, the push operations and the extended card
  are UnsupportedOperation.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

from google.protobuf import empty_pb2

from a2a_gateway.protocol.context import CallContext
from a2a_gateway.protocol.errors import UnsupportedOperationError
from a2a_gateway.protocol.service import A2AService
from lf.a2a.v1 import a2a_pb2 as pb

from ..engine.state import invalid

STATE_KEY = "a2a-gateway.taskState"
NO_TASKS = "PACT: no tasks on this URL; send messages (the reply is a Message)"
NO_STREAMING = "PACT: no streaming on this URL; use SendMessage"
NO_PUSH = "PACT: no push notifications on this URL"
UNKNOWN_CONTEXT = "is not a conversation of this user"
_REPLY_IDS = uuid.UUID("0b6f1f4e-6b9e-4c55-9d0f-2f6f0e5f7a11")


def reply_of(task: pb.Task) -> pb.Message:
    """The agent's reply in ``task`` as a Message (the same for the same task)."""
    reply = pb.Message(
        message_id=str(uuid.uuid5(_REPLY_IDS, task.id)),
        context_id=task.context_id,
        role=pb.ROLE_AGENT,
    )
    for artifact in task.artifacts:
        reply.parts.extend(artifact.parts)
    state = task.status.state
    if state != pb.TASK_STATE_COMPLETED or not reply.parts:
        reply.parts.extend(task.status.message.parts)
    if state != pb.TASK_STATE_COMPLETED:
        reply.metadata[STATE_KEY] = pb.TaskState.Name(state)
    return reply


async def _refused_stream(error: UnsupportedOperationError) -> AsyncIterator[pb.StreamResponse]:
    raise error
    yield pb.StreamResponse()  # pragma: no cover (makes this an async generator)


class PactService(A2AService):
    """See the module docstring. ``service`` is the gateway's own (the engine)."""

    def __init__(self, service: A2AService) -> None:
        self.service = service

    async def send_message(
        self, request: pb.SendMessageRequest, context: CallContext
    ) -> pb.SendMessageResponse:
        message = request.message
        if message.task_id:
            raise UnsupportedOperationError(NO_TASKS)
        configuration = request.configuration
        if configuration.return_immediately:
            raise UnsupportedOperationError(NO_TASKS)
        if configuration.HasField("task_push_notification_config"):
            raise UnsupportedOperationError(NO_PUSH)
        if message.context_id:
            await self._check_context(message.context_id, context)
        forwarded = pb.SendMessageRequest()
        forwarded.CopyFrom(request)
        forwarded.configuration.history_length = 0  # the reply needs none of it
        context.message_replies = False
        answer = await self.service.send_message(forwarded, context)
        if answer.HasField("message"):  # a service that answered without a task anyway
            return answer
        return pb.SendMessageResponse(message=reply_of(answer.task))

    async def _check_context(self, context_id: str, context: CallContext) -> None:
        """The user's own conversation, else the one refusal for all other cases."""
        listing = pb.ListTasksRequest(context_id=context_id, page_size=1)
        found = await self.service.list_tasks(listing, context)
        if not found.tasks:
            raise invalid("message.contextId", UNKNOWN_CONTEXT)

    def send_streaming_message(
        self, request: pb.SendMessageRequest, context: CallContext
    ) -> AsyncIterator[pb.StreamResponse]:
        return _refused_stream(UnsupportedOperationError(NO_STREAMING))

    async def get_task(self, request: pb.GetTaskRequest, context: CallContext) -> pb.Task:
        raise UnsupportedOperationError(NO_TASKS)

    async def list_tasks(
        self, request: pb.ListTasksRequest, context: CallContext
    ) -> pb.ListTasksResponse:
        raise UnsupportedOperationError(NO_TASKS)

    async def cancel_task(self, request: pb.CancelTaskRequest, context: CallContext) -> pb.Task:
        raise UnsupportedOperationError(NO_TASKS)

    def subscribe_to_task(
        self, request: pb.SubscribeToTaskRequest, context: CallContext
    ) -> AsyncIterator[pb.StreamResponse]:
        return _refused_stream(UnsupportedOperationError(NO_TASKS))

    async def create_task_push_notification_config(
        self, request: pb.TaskPushNotificationConfig, context: CallContext
    ) -> pb.TaskPushNotificationConfig:
        raise UnsupportedOperationError(NO_PUSH)

    async def get_task_push_notification_config(
        self, request: pb.GetTaskPushNotificationConfigRequest, context: CallContext
    ) -> pb.TaskPushNotificationConfig:
        raise UnsupportedOperationError(NO_PUSH)

    async def list_task_push_notification_configs(
        self, request: pb.ListTaskPushNotificationConfigsRequest, context: CallContext
    ) -> pb.ListTaskPushNotificationConfigsResponse:
        raise UnsupportedOperationError(NO_PUSH)

    async def delete_task_push_notification_config(
        self, request: pb.DeleteTaskPushNotificationConfigRequest, context: CallContext
    ) -> empty_pb2.Empty:
        raise UnsupportedOperationError(NO_PUSH)

    async def get_extended_agent_card(
        self, request: pb.GetExtendedAgentCardRequest, context: CallContext
    ) -> pb.AgentCard:
        raise UnsupportedOperationError("PACT: the agent card is at .well-known/agent-card.json")


__all__ = ["PactService", "reply_of"]
