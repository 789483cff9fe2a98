"""The A2A 0.3 gRPC binding: ``a2a.v1.A2AService`` next to ``lf.a2a.v1.A2AService``.

Digest §13/§14.1: a 0.3 peer calls the 0.3 service's rpcs (``TaskSubscription``,
``GetAgentCard``, resource names ``tasks/{id}[/pushNotificationConfigs/{cid}]``) on the
same port as 1.0. Each rpc is served by :class:`~.grpc_binding.RpcAdapter` (admission,
signature over the raw bytes, deadline, stream write bounds: all as on 1.0), with its
messages translated:

- in: the 0.3 message as ProtoJSON (``MessageToDict``) is the 0.3 REST body, so
  :mod:`a2a_gateway.protocol.compat03`'s REST and JSON-RPC translations turn it into the
  1.0 request (bad input: InvalidParams naming the field);
- out: the 1.0 result goes through the same 0.3 REST translation and is parsed into the
  0.3 message. The agent card keeps 1.0's security shapes, which are the 0.3 proto's.

Version rule as on the other 0.3 bindings (the same function,
:func:`a2a_gateway.protocol.versioning.negotiate_legacy_version`): no ``a2a-version`` or
a 0.3 one (the SDK's 0.3 client sends ``0.3``); anything else is VersionNotSupported,
answered exactly as the 1.0 service answers it. Other errors leave as the one table's
gRPC status with the message ``"<ErrorClass>: <message>"``, which the SDK's 0.3 gRPC
client reads back into its error class, plus the ``google.rpc.Status`` trailer (same
message) as on 1.0.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NoReturn

import grpc
from google.protobuf import json_format, message, message_factory

from a2a_gateway.protocol import codec, compat03, versioning
from a2a_gateway.protocol.errors import (
    A2AError,
    FieldViolation,
    InvalidParamsError,
    VersionNotSupportedError,
    status_proto,
)
from a2a_gateway.protocol.service import SERVICE_DESCRIPTOR, A2AService
from lf.a2a.v0_3 import a2a_pb2 as pb03
from lf.a2a.v1 import a2a_pb2 as pb

from .auth import Authenticator
from .grpc_binding import STATUS_DETAILS_KEY, CallWatch, GrpcBounds, RpcAdapter
from .metrics import NULL_METER, Meter

LEGACY_SERVICE_DESCRIPTOR = pb03.DESCRIPTOR.services_by_name["A2AService"]
#: The 0.3 wire name: the 0.3 schema's package is ``a2a.v1``.
LEGACY_SERVICE_NAME = LEGACY_SERVICE_DESCRIPTOR.full_name

_TASK_NAME = re.compile(r"tasks/([^/]+)")
_CONFIG_NAME = re.compile(r"tasks/([^/]+)/pushNotificationConfigs/([^/]+)")

Params = Callable[[Any], Any]


def _invalid(field: str, problem: str) -> InvalidParamsError:
    return InvalidParamsError(f"{field}: {problem}", violations=[FieldViolation(field, problem)])


def task_id(name: str, field: str) -> str:
    """The task id of a ``tasks/{id}`` resource name in ``field``."""
    found = _TASK_NAME.fullmatch(name)
    if found is None:
        raise _invalid(field, f"must be tasks/{{id}}, got {name[:64]!r}")
    return found.group(1)


def config_name(name: str, field: str) -> tuple[str, str]:
    """(task id, config id) of ``tasks/{id}/pushNotificationConfigs/{cid}`` in ``field``."""
    found = _CONFIG_NAME.fullmatch(name)
    if found is None:
        raise _invalid(
            field, f"must be tasks/{{id}}/pushNotificationConfigs/{{cid}}, got {name[:64]!r}"
        )
    return found.group(1), found.group(2)


# --- 0.3 gRPC requests as 0.3 JSON-RPC params (compat03 takes it from there) ------------


def _send_params(request: Any) -> Any:
    return compat03.rest_send_params(json_format.MessageToDict(request))


def _get_task_params(request: Any) -> Any:
    return {"id": task_id(request.name, "name"), "historyLength": request.history_length or None}


def _task_params(request: Any) -> Any:
    return {"id": task_id(request.name, "name")}


def _set_push_params(request: Any) -> Any:
    return compat03.rest_set_push_params(
        task_id(request.parent, "parent"), json_format.MessageToDict(request)
    )


def _push_params(request: Any) -> Any:
    task, config = config_name(request.name, "name")
    return {"id": task, "pushNotificationConfigId": config}


def _list_push_params(request: Any) -> Any:
    return {"id": task_id(request.parent, "parent")}


def _no_params(request: Any) -> Any:
    return None


# --- 1.0 results as 0.3 messages ----------------------------------------------------------


def legacy_card(card: pb.AgentCard) -> pb03.AgentCard:
    """The 0.3 AgentCard message for a 1.0 card (VersionNotSupported when the card has
    no 0.3 interface, as on 0.3 JSON-RPC)."""
    data = codec.to_dict(card)
    legacy = compat03.agent_card(data)
    if legacy is None:
        raise VersionNotSupportedError("the agent card has no A2A 0.3 interface")
    # compat03 writes 0.3 JSON-RPC security shapes; the 0.3 proto's are 1.0's own
    # (``{apiKeySecurityScheme: …}``, ``[{schemes: {name: {list: […]}}}]``).
    legacy.pop("securitySchemes", None)
    legacy.pop("security", None)
    if data.get("securitySchemes"):
        legacy["securitySchemes"] = data["securitySchemes"]
    if data.get("securityRequirements"):
        legacy["security"] = data["securityRequirements"]
    for out, skill in zip(legacy["skills"], data.get("skills", ()), strict=False):
        out.pop("security", None)
        if skill.get("securityRequirements"):
            out["security"] = skill["securityRequirements"]
    # 1.0-only fields (e.g. an OAuth deviceCode flow, pkceRequired) have no 0.3 field.
    return json_format.ParseDict(legacy, pb03.AgentCard(), ignore_unknown_fields=True)


@dataclass(frozen=True, slots=True)
class LegacyRpc:
    """One 0.3 rpc: its wire name, the 0.3 JSON-RPC method sharing its translation
    (and naming the 1.0 operation), and how its request becomes that method's params."""

    wire: str
    method: compat03.Method
    params: Params


#: Every rpc of ``a2a.v1.A2AService`` (digest §14.1).
LEGACY_RPCS: tuple[LegacyRpc, ...] = tuple(
    LegacyRpc(wire, compat03.METHODS[name], params)
    for wire, name, params in (
        ("SendMessage", "message/send", _send_params),
        ("SendStreamingMessage", "message/stream", _send_params),
        ("GetTask", "tasks/get", _get_task_params),
        ("CancelTask", "tasks/cancel", _task_params),
        ("TaskSubscription", "tasks/resubscribe", _task_params),
        ("CreateTaskPushNotificationConfig", "tasks/pushNotificationConfig/set", _set_push_params),
        ("GetTaskPushNotificationConfig", "tasks/pushNotificationConfig/get", _push_params),
        ("ListTaskPushNotificationConfig", "tasks/pushNotificationConfig/list", _list_push_params),
        ("DeleteTaskPushNotificationConfig", "tasks/pushNotificationConfig/delete", _push_params),
        ("GetAgentCard", "agent/getAuthenticatedExtendedCard", _no_params),
    )
)


def legacy_status_message(error: A2AError) -> str:
    """``"<ErrorClass>: <message>"``: the SDK's 0.3 gRPC client maps the class name back
    (our class names are the SDK's)."""
    return f"{type(error).__name__}: {error.message}"


class LegacyRpcAdapter(RpcAdapter):
    """A 0.3 rpc served by the 1.0 operation it maps to."""

    def __init__(
        self,
        rpc: LegacyRpc,
        service: A2AService,
        authenticator: Authenticator,
        *,
        bounds: GrpcBounds | None = None,
        write_timeout_s: float | None = None,
        watch: CallWatch | None = None,
        meter: Meter = NULL_METER,
    ) -> None:
        wire = LEGACY_SERVICE_DESCRIPTOR.methods_by_name[rpc.wire]
        super().__init__(
            SERVICE_DESCRIPTOR.methods_by_name[rpc.method.rpc],
            service,
            authenticator,
            bounds=bounds,
            write_timeout_s=write_timeout_s,
            wire=wire,
            watch=watch,
            meter=meter,
        )
        self._rpc = rpc
        self._operation = f"{LEGACY_SERVICE_NAME}/{rpc.wire}"  # as version errors name it
        self._wire_response: type[message.Message] = message_factory.GetMessageClass(
            wire.output_type
        )

    def negotiate(self, value: str | None) -> str:
        return versioning.negotiate_legacy_version(value, self._operation)

    def incoming(self, request: message.Message) -> message.Message:
        return super().incoming(self._rpc.method.parse(self._rpc.params(request)))

    def outgoing(self, response: object) -> message.Message:
        result = super().outgoing(response)
        if self.streaming:
            assert isinstance(result, pb.StreamResponse)  # outgoing checked the class
            shape = compat03.rest_stream_event(result)
        elif isinstance(result, pb.AgentCard):
            return legacy_card(result)
        else:
            shape = compat03.rest_result(self._rpc.method, result)
        return json_format.ParseDict(shape, self._wire_response())

    async def abort(self, context: grpc.aio.ServicerContext[Any, Any], error: A2AError) -> NoReturn:
        if isinstance(error, versioning.VersionRefused):
            await super().abort(context, error)  # the 1.0 vocabulary: 0.3 has none for it
        text = legacy_status_message(error)
        status = status_proto(error)
        status.message = text  # grpc-status-details-bin must agree with the status
        await context.abort(
            error.spec.grpc_status, text, ((STATUS_DETAILS_KEY, status.SerializeToString()),)
        )


def legacy_rpc_handler(
    service: A2AService,
    authenticator: Authenticator,
    *,
    bounds: GrpcBounds | None = None,
    write_timeout_s: float | None = None,
    watch: CallWatch | None = None,
    meter: Meter = NULL_METER,
) -> grpc.GenericRpcHandler[Any, Any]:
    """The generic handler serving every rpc of ``a2a.v1.A2AService`` (0.3) from
    ``service``, within ``bounds`` (``write_timeout_s``, ``watch``: as for 1.0), reporting
    to ``meter`` under the 1.0 rpc names."""
    watch = watch or CallWatch()
    handlers = {
        rpc.wire: LegacyRpcAdapter(
            rpc,
            service,
            authenticator,
            bounds=bounds,
            write_timeout_s=write_timeout_s,
            watch=watch,
            meter=meter,
        ).method_handler()
        for rpc in LEGACY_RPCS
    }
    return grpc.method_handlers_generic_handler(LEGACY_SERVICE_NAME, handlers)


__all__ = [
    "LEGACY_RPCS",
    "LEGACY_SERVICE_DESCRIPTOR",
    "LEGACY_SERVICE_NAME",
    "LegacyRpc",
    "LegacyRpcAdapter",
    "config_name",
    "legacy_card",
    "legacy_rpc_handler",
    "legacy_status_message",
    "task_id",
]
