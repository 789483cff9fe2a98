"""The A2A 0.3 gRPC binding, behind the same :class:`Transport` interface.

A 0.3 agent serves ``a2a.v1.A2AService`` (the 0.3 schema's package; digest §13/§14.1):
rpcs such as ``TaskSubscription`` and ``GetAgentCard``, resource names
``tasks/{id}[/pushNotificationConfigs/{cid}]``. This is the mirror image of our 0.3 gRPC
server (:mod:`a2a_gateway.server.grpc03`): the 1.0 request becomes the 0.3 REST body
(:func:`compat03.rest_call`), which is the 0.3 proto's ProtoJSON, so it is parsed into
the 0.3 request; the 0.3 response, as ProtoJSON (``MessageToDict``), is the 0.3 REST
answer that :func:`compat03.rest_result_in` / :func:`compat03.rest_stream_response_in`
read back into 1.0. Channel, deadlines, metadata, stream bounds and redaction are
:class:`~.grpc_transport.GrpcTransport`'s; the metadata announces ``a2a-version: 0.3``.

Errors: 0.3 servers (the SDK's, ours) put ``"<ErrorClass>: <message>"`` in the status
message. With a ``google.rpc.Status`` trailer (ours) that names the class; without one
the class name does, else the status code.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Callable
from typing import Any

import grpc
from google.protobuf import json_format, message

import lf.a2a.v0_3.a2a_pb2 as pb03
import lf.a2a.v0_3.a2a_pb2_grpc as a2a03_pb2_grpc
import lf.a2a.v1.a2a_pb2 as pb
from a2a_gateway.protocol import compat03
from a2a_gateway.protocol.errors import ALL_ERRORS, A2AError, InternalError

from . import http_calls
from .cards import parse_card
from .errors import build, explain_auth
from .grpc_transport import GrpcTransport
from .subscribe03 import Subscribe03
from .transport import CallOptions, M

#: Our error classes by name; the SDK's 0.3 names are ours, plus its older card name.
_ERRORS_BY_NAME: dict[str, type[A2AError]] = {cls.__name__: cls for cls in ALL_ERRORS}
_ERRORS_BY_NAME["AuthenticatedExtendedCardNotConfiguredError"] = _ERRORS_BY_NAME[
    "ExtendedAgentCardNotConfiguredError"
]

#: 1.0 rpc names whose 0.3 rpc is named differently.
_WIRE_NAMES = {
    "SubscribeToTask": "TaskSubscription",
    "ListTaskPushNotificationConfigs": "ListTaskPushNotificationConfig",
    "GetExtendedAgentCard": "GetAgentCard",
}


def _parsed(body: Any, target: message.Message) -> message.Message:
    """``body`` (the 0.3 REST shape compat03 wrote) parsed into the 0.3 request ``target``.
    A failure is our translation's fault, so it is an InternalError naming the request."""
    try:
        return json_format.ParseDict(body, target)
    except json_format.ParseError as exc:
        name = type(target).__name__
        raise InternalError(f"cannot build the A2A 0.3 {name}: {exc}") from None


def legacy_grpc_request(rpc: str, request: message.Message) -> tuple[str, message.Message]:
    """The 0.3 rpc name and request for a 1.0 rpc and request (UnsupportedOperationError,
    before anything is sent, for rpcs 0.3 lacks such as ListTasks)."""
    call = compat03.rest_call(rpc, request)
    params: Any = compat03.legacy_call(rpc).params(request)
    wire = _WIRE_NAMES.get(rpc, rpc)
    task = f"tasks/{params.get('id') or params.get('taskId') or ''}"
    built: message.Message
    if rpc in ("SendMessage", "SendStreamingMessage"):
        built = _parsed(call.body, pb03.SendMessageRequest())
    elif rpc == "GetTask":
        built = pb03.GetTaskRequest(name=task, history_length=params.get("historyLength") or 0)
    elif rpc == "CancelTask":
        built = pb03.CancelTaskRequest(name=task)
    elif rpc == "SubscribeToTask":
        built = pb03.TaskSubscriptionRequest(name=task)
    elif rpc == "CreateTaskPushNotificationConfig":
        built = _parsed(call.body, pb03.CreateTaskPushNotificationConfigRequest())
    elif rpc == "ListTaskPushNotificationConfigs":
        built = pb03.ListTaskPushNotificationConfigRequest(parent=task)
    elif rpc in ("GetTaskPushNotificationConfig", "DeleteTaskPushNotificationConfig"):
        # 0.3 servers defaulted a config's id to its task's id.
        config_id = params.get("pushNotificationConfigId") or params["id"]
        name = f"{task}/pushNotificationConfigs/{config_id}"
        request_type: Callable[..., message.Message] = (
            pb03.GetTaskPushNotificationConfigRequest
            if rpc == "GetTaskPushNotificationConfig"
            else pb03.DeleteTaskPushNotificationConfigRequest
        )
        built = request_type(name=name)
    else:  # GetExtendedAgentCard
        built = pb03.GetAgentCardRequest()
    return wire, built


def _as_json(response: message.Message) -> Any:
    return json_format.MessageToDict(response)


def _card_json(card: message.Message) -> Any:
    """A 0.3 AgentCard message as a card JSON :func:`parse_card` reads. The 0.3 proto's
    security shapes are 1.0's (unlike 0.3 JSON cards'): its ``security`` is 1.0's
    ``securityRequirements`` (``securitySchemes`` already read as 1.0's)."""
    data = _as_json(card)
    skills = data.get("skills")
    for holder in [data, *(skills if isinstance(skills, list) else [])]:
        if isinstance(holder, dict) and "security" in holder:
            holder["securityRequirements"] = holder.pop("security")
    return data


class Grpc03Transport(Subscribe03, GrpcTransport):
    """Calls one A2A 0.3 gRPC endpoint (the interface ``url``, as for 1.0 gRPC)."""

    version = compat03.LEGACY_VERSION

    def _new_stub(self, channel: grpc.aio.Channel) -> Any:
        return a2a03_pb2_grpc.A2AServiceStub(channel)

    def _invalid(self, exc: A2AError) -> A2AError:
        return http_calls.invalid_response(self.target, "A2A 0.3 result", exc.message, self.redact)

    def _error(self, exc: grpc.aio.AioRpcError, timeout: float) -> A2AError:
        error = super()._error(exc, timeout)
        name, sep, text = (exc.details() or "").partition(": ")
        named = _ERRORS_BY_NAME.get(name) if sep else None
        if named is None:
            return error
        if _has_status(exc):
            # The Status trailer (ours) already chose the class; drop the name prefix.
            error.message = error.message.replace(f"{name}: ", "", 1)
            error.args = (error.message,)
            return error
        named_error = build(named, text, self.redact)
        return explain_auth(
            named_error, self.target, has_key=self.credentials is not None, redact=self.redact
        )

    async def unary(
        self, rpc: str, request: message.Message, response_type: type[M], options: CallOptions
    ) -> M:
        call = compat03.legacy_call(rpc)
        wire, wire_request = legacy_grpc_request(rpc, request)
        response = await self._call_unary(wire, wire_request, options)
        if not isinstance(response, message.Message):
            raise self._invalid(InternalError(f"unexpected {type(response).__name__}"))
        parsed: message.Message
        try:
            if call.result is None:  # the agent card: a 0.3 card, read as cards are
                parsed = parse_card(_card_json(response), source=self.target, redact=self.redact)
            else:
                parsed = call.result(compat03.rest_result_in(rpc, _as_json(response)), "body")
        except A2AError as exc:
            raise self._invalid(exc) from None
        if not isinstance(parsed, response_type):
            raise TypeError(f"{rpc} returns {type(parsed).__name__}, not {response_type.__name__}")
        return parsed

    def _stream_event(self, item: object) -> pb.StreamResponse | None:
        if not isinstance(item, pb03.StreamResponse):
            return None  # grpc.aio.EOF
        try:
            return compat03.rest_stream_response_in(_as_json(item))
        except A2AError as exc:
            raise self._invalid(exc) from None

    async def _stream03(
        self, rpc: str, request: message.Message, options: CallOptions
    ) -> AsyncGenerator[pb.StreamResponse, None]:
        wire, wire_request = legacy_grpc_request(rpc, request)
        async for event in GrpcTransport.stream(self, wire, wire_request, options):
            yield event


def _has_status(exc: grpc.aio.AioRpcError) -> bool:
    raw: Any = exc.trailing_metadata() or ()
    return any(str(key) == "grpc-status-details-bin" for key, _ in raw)


__all__ = ["Grpc03Transport", "legacy_grpc_request"]
