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

PACT Delegated (:mod:`.oauth`, :mod:`.tokens`):

- A turn that called a scoped tool without its scope ends auth-required: the answer is
  then that Task (the one exception to "no tasks"), whose metadata names the missing
  scopes (``pact.missingScopes``) and a sign-in link asking for them and for those
  already granted (``pact.verificationUriComplete``, a new device authorization for
  this personal agent and, under a token, the same account), with its
  ``pact.deviceCode`` (to poll the token endpoint with), ``pact.interval`` and
  ``pact.expiresIn``. The stored task keeps none of these.
- Every reply under a delegation token carries ``metadata["pact.receipt"]``: a JWS
  (``typ: pact-receipt+jwt``) by the workspace's key with ``iss`` the oauth URL,
  ``sub`` the account, ``aud`` the personal agent, ``iat``, ``jti``, ``scope`` (as
  granted), ``tools`` (the scoped tools that ran in the turn), ``contextId`` and
  ``messageId`` (the user's message). A retried message gets the stored reply with a
  fresh receipt of the same turn.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any

from google.protobuf import empty_pb2, json_format

from a2a_gateway.agent.base import DELEGATION_ARTIFACT
from a2a_gateway.protocol.context import CallContext, OnBehalf
from a2a_gateway.protocol.errors import UnsupportedOperationError
from a2a_gateway.protocol.service import A2AService
from lf.a2a.v1 import a2a_pb2 as pb

from ..engine.state import invalid
from .oauth import (
    DEVICE_CODE_LIFETIME_S,
    DEVICE_PATH,
    OAUTH,
    POLL_INTERVAL_S,
    DelegationServer,
    OAuthError,
    add_query,
)

log = logging.getLogger(__name__)

STATE_KEY = "a2a-gateway.taskState"
NO_TASKS = "PACT: no tasks on this URL; send messages (the reply is a Message)"
NO_STREAMING = "PACT: no streaming on this URL; use SendMessage"
NO_PUSH = "PACT: no push notifications on this URL"
UNKNOWN_CONTEXT = "is not a conversation of this user"
RECEIPT_KEY = "pact.receipt"
MISSING_SCOPES_KEY = "pact.missingScopes"
VERIFICATION_KEY = "pact.verificationUriComplete"
_REPLY_IDS = uuid.UUID("0b6f1f4e-6b9e-4c55-9d0f-2f6f0e5f7a11")


def reply_of(task: pb.Task) -> pb.Message:
    """The agent's reply in ``task`` as a Message (the same for the same task)."""
    reply = pb.Message(
        message_id=str(uuid.uuid5(_REPLY_IDS, task.id)),
        context_id=task.context_id,
        role=pb.ROLE_AGENT,
    )
    for artifact in task.artifacts:
        if artifact.name != DELEGATION_ARTIFACT:
            reply.parts.extend(artifact.parts)
    state = task.status.state
    if state != pb.TASK_STATE_COMPLETED or not reply.parts:
        reply.parts.extend(task.status.message.parts)
    if state != pb.TASK_STATE_COMPLETED:
        reply.metadata[STATE_KEY] = pb.TaskState.Name(state)
    return reply


def delegation_record(task: pb.Task) -> tuple[list[str], list[str]]:
    """The scoped tools that ran in ``task``'s turn and the scopes it missed."""
    for artifact in task.artifacts:
        if artifact.name == DELEGATION_ARTIFACT and artifact.parts:
            value = json_format.MessageToDict(artifact.parts[0].data)
            if isinstance(value, dict):
                ran, missing = value.get("toolsRun", []), value.get("missingScopes", [])
                return [str(t) for t in ran], [str(s) for s in missing]
    return [], []


async def _refused_stream(error: UnsupportedOperationError) -> AsyncIterator[pb.StreamResponse]:
    raise error
    yield pb.StreamResponse()  # pragma: no cover (makes this an async generator)


class PactService(A2AService):
    """See the module docstring. ``service`` is the gateway's own (the engine)."""

    def __init__(self, service: A2AService) -> None:
        self.service = service
        #: Set by the mount: the authorization server and this request's PACT URL.
        self.delegation: DelegationServer | None = None
        self.endpoint: Callable[[], str] = lambda: ""

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
        context.prints_json = False  # the answer's task is read here, not printed
        answer = await self.service.send_message(forwarded, context)
        if answer.HasField("message"):  # a service that answered without a task anyway
            return answer
        task = answer.task
        on_behalf = context.caller.on_behalf
        ran, missing = delegation_record(task)
        receipt = ""
        if on_behalf is not None and on_behalf.account:
            receipt = await self._receipt(on_behalf, ran, task.context_id, message.message_id)
        if task.status.state == pb.TASK_STATE_AUTH_REQUIRED and missing:
            shown = self._auth_required(task, on_behalf, missing)
            if receipt:
                shown.metadata[RECEIPT_KEY] = receipt
            return pb.SendMessageResponse(task=shown)
        reply = reply_of(task)
        if receipt:
            reply.metadata[RECEIPT_KEY] = receipt
        return pb.SendMessageResponse(message=reply)

    async def _receipt(
        self, on_behalf: OnBehalf, ran: list[str], context_id: str, message_id: str
    ) -> str:
        server = self.delegation
        found = server.delegating() if server is not None else None
        if server is None or found is None:
            return ""
        now = int(server.verifier.wall_clock())
        claims: dict[str, Any] = {
            "iss": self.endpoint() + OAUTH,
            "sub": on_behalf.account,
            "aud": on_behalf.agent,
            "iat": now,
            "jti": str(uuid.uuid4()),
            "scope": " ".join(sorted(on_behalf.scopes)),
            "tools": ran,
            "contextId": context_id,
            "messageId": message_id,
        }
        return await server.receipt(found[0], claims)

    def _auth_required(
        self, task: pb.Task, on_behalf: OnBehalf | None, missing: list[str]
    ) -> pb.Task:
        """The task as the personal agent sees it, with the sign-in link."""
        shown = pb.Task(id=task.id, context_id=task.context_id, status=task.status)
        for artifact in task.artifacts:
            if artifact.name != DELEGATION_ARTIFACT:
                shown.artifacts.append(artifact)
        shown.metadata[MISSING_SCOPES_KEY] = missing
        server = self.delegation
        found = server.delegating() if server is not None else None
        if server is None or found is None or on_behalf is None:
            return shown
        delegation = found[2]
        wanted = {*on_behalf.scopes, *missing}
        scopes = [s.id for s in delegation.scopes if s.id in wanted]
        try:
            started = server.start(
                delegation, on_behalf.agent, scopes, expected_sub=on_behalf.account
            )
        except OAuthError as exc:
            log.warning("PACT: no sign-in link for an auth-required task: %s", exc.error)
            return shown
        link = add_query(self.endpoint() + DEVICE_PATH, [("user_code", started.grant.user_code)])
        shown.metadata.update(
            {
                VERIFICATION_KEY: link,
                "pact.deviceCode": started.device_code,
                "pact.interval": POLL_INTERVAL_S,
                "pact.expiresIn": DEVICE_CODE_LIFETIME_S,
            }
        )
        return shown

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


__all__ = [
    "MISSING_SCOPES_KEY",
    "RECEIPT_KEY",
    "VERIFICATION_KEY",
    "PactService",
    "delegation_record",
    "reply_of",
]
