"""A2A and JSON-RPC errors, and the one table that maps each to every binding.

Every error the gateway can return is an :class:`A2AError` subclass. Bindings never
choose codes themselves: they read :attr:`A2AError.spec` (JSON-RPC code, HTTP status,
gRPC status, ``ErrorInfo.reason``) and build their wire shape with
:func:`status_proto`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import google.rpc.error_details_pb2 as error_details_pb2
import google.rpc.status_pb2 as status_pb2
import grpc
from google.protobuf import any_pb2
from google.protobuf import message as pb_message

ERROR_DOMAIN = "a2a-protocol.org"


@dataclass(frozen=True, slots=True)
class ErrorSpec:
    """How one kind of error looks on each binding (digest §7)."""

    jsonrpc_code: int
    http_status: int
    grpc_status: grpc.StatusCode
    reason: str
    default_message: str


@dataclass(frozen=True, slots=True)
class FieldViolation:
    """One invalid field: ``field`` is a ProtoJSON path such as ``message.parts``."""

    field: str
    description: str


class A2AError(Exception):
    """Base of every error a binding can put on the wire.

    ``metadata`` becomes ``ErrorInfo.metadata`` (string values only); ``violations``
    becomes a ``google.rpc.BadRequest`` detail. Messages must never contain secrets.
    """

    spec: ClassVar[ErrorSpec]

    def __init__(
        self,
        message: str | None = None,
        *,
        metadata: dict[str, str] | None = None,
        violations: list[FieldViolation] | None = None,
    ) -> None:
        self.message = message or self.spec.default_message
        self.metadata = dict(metadata or {})
        self.violations = list(violations or [])
        super().__init__(self.message)


def _spec(code: int, http: int, grpc_status: grpc.StatusCode, reason: str, msg: str) -> ErrorSpec:
    return ErrorSpec(code, http, grpc_status, reason, msg)


_S = grpc.StatusCode

# --- the one table -----------------------------------------------------------------
# Standard JSON-RPC errors (digest §7.2); REST/gRPC equivalents as the official SDK.


class JSONParseError(A2AError):
    spec = _spec(-32700, 400, _S.INVALID_ARGUMENT, "INVALID_REQUEST", "Invalid JSON payload")


class InvalidRequestError(A2AError):
    spec = _spec(
        -32600, 400, _S.INVALID_ARGUMENT, "INVALID_REQUEST", "Request payload validation error"
    )


class MethodNotFoundError(A2AError):
    spec = _spec(-32601, 404, _S.UNIMPLEMENTED, "METHOD_NOT_FOUND", "Method not found")


class InvalidParamsError(A2AError):
    spec = _spec(-32602, 400, _S.INVALID_ARGUMENT, "INVALID_PARAMS", "Invalid parameters")


class InternalError(A2AError):
    spec = _spec(-32603, 500, _S.INTERNAL, "INTERNAL_ERROR", "Internal error")


# A2A errors (digest §7.1).


class TaskNotFoundError(A2AError):
    spec = _spec(-32001, 404, _S.NOT_FOUND, "TASK_NOT_FOUND", "Task not found")


class TaskNotCancelableError(A2AError):
    spec = _spec(
        -32002, 400, _S.FAILED_PRECONDITION, "TASK_NOT_CANCELABLE", "Task cannot be canceled"
    )


class PushNotificationNotSupportedError(A2AError):
    spec = _spec(
        -32003,
        400,
        _S.FAILED_PRECONDITION,
        "PUSH_NOTIFICATION_NOT_SUPPORTED",
        "Push notifications are not supported",
    )


class UnsupportedOperationError(A2AError):
    spec = _spec(
        -32004, 400, _S.FAILED_PRECONDITION, "UNSUPPORTED_OPERATION", "Operation not supported"
    )


class ContentTypeNotSupportedError(A2AError):
    spec = _spec(
        -32005,
        400,
        _S.INVALID_ARGUMENT,
        "CONTENT_TYPE_NOT_SUPPORTED",
        "Content type not supported",
    )


class InvalidAgentResponseError(A2AError):
    spec = _spec(-32006, 500, _S.INTERNAL, "INVALID_AGENT_RESPONSE", "Invalid agent response")


class ExtendedAgentCardNotConfiguredError(A2AError):
    spec = _spec(
        -32007,
        400,
        _S.FAILED_PRECONDITION,
        "EXTENDED_AGENT_CARD_NOT_CONFIGURED",
        "Extended agent card is not configured",
    )


class ExtensionSupportRequiredError(A2AError):
    spec = _spec(
        -32008,
        400,
        _S.FAILED_PRECONDITION,
        "EXTENSION_SUPPORT_REQUIRED",
        "A required extension was not requested",
    )


class VersionNotSupportedError(A2AError):
    spec = _spec(
        -32009,
        400,
        _S.FAILED_PRECONDITION,
        "VERSION_NOT_SUPPORTED",
        "Protocol version not supported",
    )


# Gateway errors outside the A2A table: authentication and rate limiting. JSON-RPC has
# no code for them; we use the implementation-defined server range (-32000..-32099 is
# taken by A2A from -32001 up, so -32000 and below -32099 stay ours).


class UnauthenticatedError(A2AError):
    spec = _spec(-32000, 401, _S.UNAUTHENTICATED, "UNAUTHENTICATED", "Authentication required")

    #: The HTTP ``WWW-Authenticate`` challenge naming the scheme that failed (RFC 9110
    #: §11.6.1); None means the binding's default. Never holds a credential.
    challenge: str | None = None

    def __init__(
        self,
        message: str | None = None,
        *,
        challenge: str | None = None,
        metadata: dict[str, str] | None = None,
        violations: list[FieldViolation] | None = None,
    ) -> None:
        super().__init__(message, metadata=metadata, violations=violations)
        if challenge is not None:
            self.challenge = challenge


class PermissionDeniedError(A2AError):
    spec = _spec(-32100, 403, _S.PERMISSION_DENIED, "PERMISSION_DENIED", "Permission denied")


class RateLimitedError(A2AError):
    spec = _spec(-32101, 429, _S.RESOURCE_EXHAUSTED, "RATE_LIMITED", "Too many requests")

    def __init__(
        self,
        message: str | None = None,
        *,
        retry_after_s: int | None = None,
        metadata: dict[str, str] | None = None,
        violations: list[FieldViolation] | None = None,
    ) -> None:
        metadata = dict(metadata or {})
        if retry_after_s is not None:
            metadata["retryAfterSeconds"] = str(retry_after_s)
        super().__init__(message, metadata=metadata, violations=violations)
        seconds = self.metadata.get("retryAfterSeconds", "1")
        # A peer's value: ASCII digits only (str.isdigit() admits "²", which int() refuses).
        self.retry_after_s = int(seconds) if seconds.isascii() and seconds.isdigit() else 1


class MethodNotAllowedError(A2AError):
    """HTTP+JSON only: a known path with the wrong HTTP method (405 with ``Allow``)."""

    spec = _spec(-32601, 405, _S.UNIMPLEMENTED, "METHOD_NOT_ALLOWED", "HTTP method not allowed")


class UnavailableError(A2AError):
    spec = _spec(-32603, 503, _S.UNAVAILABLE, "UNAVAILABLE", "Service unavailable")


class DeadlineExceededError(A2AError):
    spec = _spec(-32603, 504, _S.DEADLINE_EXCEEDED, "DEADLINE_EXCEEDED", "Deadline exceeded")


ALL_ERRORS: tuple[type[A2AError], ...] = (
    JSONParseError,
    InvalidRequestError,
    MethodNotFoundError,
    InvalidParamsError,
    InternalError,
    TaskNotFoundError,
    TaskNotCancelableError,
    PushNotificationNotSupportedError,
    UnsupportedOperationError,
    ContentTypeNotSupportedError,
    InvalidAgentResponseError,
    ExtendedAgentCardNotConfiguredError,
    ExtensionSupportRequiredError,
    VersionNotSupportedError,
    UnauthenticatedError,
    PermissionDeniedError,
    RateLimitedError,
    UnavailableError,
    DeadlineExceededError,
    MethodNotAllowedError,
)

#: The nine A2A protocol errors of digest §7.1, in code order.
A2A_PROTOCOL_ERRORS: tuple[type[A2AError], ...] = tuple(
    e for e in ALL_ERRORS if -32009 <= e.spec.jsonrpc_code <= -32001
)

_BY_REASON: dict[str, type[A2AError]] = {}
for _cls in ALL_ERRORS:
    _BY_REASON.setdefault(_cls.spec.reason, _cls)
# JSONParseError shares INVALID_REQUEST with InvalidRequestError: the reason alone names
# the general error (a request too large, a bad envelope), not a parse error; a JSON-RPC
# -32700 code still names the parse error (see the client's from_jsonrpc_error).
_BY_REASON[InvalidRequestError.spec.reason] = InvalidRequestError
# Unique JSON-RPC codes map back to one class; -32603 is shared, InternalError wins.
_BY_JSONRPC_CODE: dict[int, type[A2AError]] = {}
for _cls in ALL_ERRORS:
    _BY_JSONRPC_CODE.setdefault(_cls.spec.jsonrpc_code, _cls)


def error_for_reason(reason: str) -> type[A2AError] | None:
    """The error class whose ``ErrorInfo.reason`` is ``reason``, if any."""
    return _BY_REASON.get(reason)


def error_for_jsonrpc_code(code: int) -> type[A2AError] | None:
    """The error class for a JSON-RPC error code, if any."""
    return _BY_JSONRPC_CODE.get(code)


def error_info(error: A2AError) -> error_details_pb2.ErrorInfo:
    return error_details_pb2.ErrorInfo(
        reason=error.spec.reason, domain=ERROR_DOMAIN, metadata=error.metadata
    )


def bad_request(error: A2AError) -> error_details_pb2.BadRequest | None:
    if not error.violations:
        return None
    return error_details_pb2.BadRequest(
        field_violations=[
            error_details_pb2.BadRequest.FieldViolation(field=v.field, description=v.description)
            for v in error.violations
        ]
    )


_TYPE_URL_PREFIX = "type.googleapis.com/"  # (what ``Any.Pack`` writes)
_INFO = error_details_pb2.ErrorInfo.DESCRIPTOR
_BAD_REQUEST = error_details_pb2.BadRequest.DESCRIPTOR
_VIOLATION = error_details_pb2.BadRequest.FieldViolation.DESCRIPTOR
#: The ``@type`` of the ``ErrorInfo`` and ``BadRequest`` details in ProtoJSON.
ERROR_INFO_TYPE_URL = _TYPE_URL_PREFIX + _INFO.full_name
BAD_REQUEST_TYPE_URL = _TYPE_URL_PREFIX + _BAD_REQUEST.full_name
_REASON, _DOMAIN, _METADATA = (
    _INFO.fields_by_name[name].json_name for name in ("reason", "domain", "metadata")
)
_FIELD_VIOLATIONS = _BAD_REQUEST.fields_by_name["field_violations"].json_name
_FIELD, _DESCRIPTION = (
    _VIOLATION.fields_by_name[name].json_name for name in ("field", "description")
)


def status_details_json(error: A2AError) -> list[dict[str, Any]]:
    """The details of :func:`status_proto` in ProtoJSON, as ``json_format.MessageToDict``
    prints each packed ``Any`` (``@type`` first, empty strings and an empty map left
    out), built directly: the JSON bindings answer every error with them, and packing
    the protos to print them again was half the cost of an error's answer."""
    info: dict[str, Any] = {
        "@type": ERROR_INFO_TYPE_URL,
        _REASON: error.spec.reason,
        _DOMAIN: ERROR_DOMAIN,
    }
    if error.metadata:
        info[_METADATA] = dict(error.metadata)
    if not error.violations:
        return [info]
    violations = [
        {name: value for name, value in ((_FIELD, v.field), (_DESCRIPTION, v.description)) if value}
        for v in error.violations
    ]
    return [info, {"@type": BAD_REQUEST_TYPE_URL, _FIELD_VIOLATIONS: violations}]


def status_proto(error: A2AError) -> status_pb2.Status:
    """``google.rpc.Status`` for ``error`` (gRPC's code) with ``ErrorInfo`` (and
    ``BadRequest``) details: gRPC's status details. The JSON bindings print the details
    with :func:`status_details_json`."""
    details: list[any_pb2.Any] = []
    info = any_pb2.Any()
    info.Pack(error_info(error))
    details.append(info)
    violations = bad_request(error)
    if violations is not None:
        packed = any_pb2.Any()
        packed.Pack(violations)
        details.append(packed)
    code = error.spec.grpc_status.value[0]
    return status_pb2.Status(code=code, message=error.message, details=details)


@dataclass(frozen=True, slots=True)
class StatusDetails:
    """What a peer's ``google.rpc.Status`` details say: the first ErrorInfo reason
    (``""`` when none), its metadata, and the BadRequest field violations."""

    reason: str
    metadata: dict[str, str]
    violations: list[FieldViolation]


def status_details(status: status_pb2.Status) -> StatusDetails:
    """Read a peer's status details; a corrupt detail is skipped, never raised."""
    reason = ""
    metadata: dict[str, str] = {}
    violations: list[FieldViolation] = []
    for detail in status.details:
        try:
            if detail.TypeName() == _INFO.full_name:
                info = error_details_pb2.ErrorInfo()
                detail.Unpack(info)
                reason = reason or info.reason
                metadata.update(info.metadata)
            elif detail.TypeName() == _BAD_REQUEST.full_name:
                bad = error_details_pb2.BadRequest()
                detail.Unpack(bad)
                violations.extend(
                    FieldViolation(v.field, v.description) for v in bad.field_violations
                )
        except pb_message.DecodeError:
            continue
    return StatusDetails(reason, metadata, violations)


def error_from_status(
    status: status_pb2.Status, fallback: type[A2AError] = InternalError
) -> A2AError:
    """Rebuild the typed error from a ``google.rpc.Status`` (client side)."""
    details = status_details(status)
    cls = (error_for_reason(details.reason) if details.reason else None) or fallback
    return cls(status.message or None, metadata=details.metadata, violations=details.violations)


__all__ = [
    "A2A_PROTOCOL_ERRORS",
    "ALL_ERRORS",
    "BAD_REQUEST_TYPE_URL",
    "ERROR_DOMAIN",
    "ERROR_INFO_TYPE_URL",
    "A2AError",
    "ErrorSpec",
    "FieldViolation",
    "error_for_jsonrpc_code",
    "error_for_reason",
    "error_from_status",
    "status_details",
    "status_details_json",
    "status_proto",
]
