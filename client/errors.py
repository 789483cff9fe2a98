"""Client-side errors: the three failures every caller must tell apart, plus the mapping of
remote errors (JSON-RPC ``error``, REST ``google.rpc.Status`` body, gRPC status details)
back to the same typed :class:`A2AError` classes the server raises.

``Unreachable``, ``Timeout``, ``AuthRejected`` and ``CardError`` subclass the table's
errors, so a server binding in front of a :class:`RemoteService` (proxy mode) puts them on
the wire with the table's codes. Catch them before :class:`A2AError`.

Every text built from remote data goes through a :class:`Redactor`, so a key echoed by a
remote never reaches an exception text or a log line.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import grpc
import orjson
from google.protobuf import message as pb_message
from google.rpc import status_pb2

from a2a_gateway.local.redaction import Redactor
from a2a_gateway.protocol.errors import (
    BAD_REQUEST_TYPE_URL,
    ERROR_INFO_TYPE_URL,
    A2AError,
    DeadlineExceededError,
    FieldViolation,
    InternalError,
    InvalidAgentResponseError,
    InvalidParamsError,
    InvalidRequestError,
    MethodNotAllowedError,
    MethodNotFoundError,
    PermissionDeniedError,
    RateLimitedError,
    TaskNotFoundError,
    UnauthenticatedError,
    UnavailableError,
    UnsupportedOperationError,
    error_for_jsonrpc_code,
    error_for_reason,
    status_details,
)

_STATUS_DETAILS_KEY = "grpc-status-details-bin"
#: Longest remote text quoted in an error message.
_MAX_QUOTE = 300


class Unreachable(UnavailableError):
    """The agent could not be reached: refused, reset, DNS or TLS failure, bad URL."""


class Timeout(DeadlineExceededError):
    """The agent accepted the connection but did not answer within the bound."""


class AuthRejected(UnauthenticatedError):
    """The agent refused our credentials (HTTP 401 / gRPC UNAUTHENTICATED)."""


class CardError(InvalidAgentResponseError):
    """The agent card could not be fetched or used (bad JSON, no usable interface, ...)."""


def quote(text: str, redact: Redactor) -> str:
    """A remote text fit for an error message: redacted, single line, bounded."""
    text = redact(" ".join(text.split()))
    return text if len(text) <= _MAX_QUOTE else text[:_MAX_QUOTE] + "..."


# --- building typed errors ------------------------------------------------------------


def build(
    cls: type[A2AError],
    message: str,
    redact: Redactor,
    *,
    metadata: Mapping[str, str] | None = None,
    violations: Iterable[FieldViolation] = (),
) -> A2AError:
    """An instance of ``cls`` with every text redacted; auth failures become AuthRejected."""
    if issubclass(cls, UnauthenticatedError):
        cls = AuthRejected
    clean_meta = {redact(k): quote(v, redact) for k, v in (metadata or {}).items()}
    clean_violations = [
        FieldViolation(redact(v.field), quote(v.description, redact)) for v in violations
    ]
    text = quote(message, redact) or None
    return cls(text, metadata=clean_meta, violations=clean_violations)


# When a remote error carries no ErrorInfo reason, the HTTP status or gRPC code picks the
# class. The keys come from the table's specs; only the preference among classes that
# share a status is chosen here.
_BY_HTTP_STATUS: dict[int, type[A2AError]] = {
    c.spec.http_status: c
    for c in (
        InvalidRequestError,
        MethodNotFoundError,
        MethodNotAllowedError,
        PermissionDeniedError,
        RateLimitedError,
        UnavailableError,
        DeadlineExceededError,
        InternalError,
        UnauthenticatedError,
    )
}
_BY_GRPC_STATUS: dict[grpc.StatusCode, type[A2AError]] = {
    c.spec.grpc_status: c
    for c in (
        InvalidParamsError,
        MethodNotFoundError,
        TaskNotFoundError,
        UnsupportedOperationError,
        PermissionDeniedError,
        RateLimitedError,
        UnavailableError,
        DeadlineExceededError,
        InternalError,
        UnauthenticatedError,
    )
}


def class_for_http_status(status: int) -> type[A2AError]:
    return _BY_HTTP_STATUS.get(status, InternalError)


# --- JSON shapes: JSON-RPC ``error`` and REST ``{"error": Status}`` ----------------------


def explain_auth(error: A2AError, target: str, *, has_key: bool, redact: Redactor) -> A2AError:
    """An AuthRejected that says which agent refused and whether a key was sent."""
    if not isinstance(error, AuthRejected):
        return error
    what = "rejected the key" if has_key else "requires a key (none was given)"
    detail = f": {error.message}" if error.message else ""
    return AuthRejected(f"{redact(target)} {what}{detail}", metadata=error.metadata)


def _details(items: Any) -> tuple[str | None, dict[str, str], list[FieldViolation]]:
    """ErrorInfo reason + metadata and BadRequest violations from JSON ``Any`` objects.

    Tolerant: the SDK puts non-string values in ``metadata``; they are JSON-encoded.
    """
    reason: str | None = None
    metadata: dict[str, str] = {}
    violations: list[FieldViolation] = []
    if not isinstance(items, list):
        return reason, metadata, violations
    for item in items:
        if not isinstance(item, dict):
            continue
        kind = item.get("@type")
        if kind == ERROR_INFO_TYPE_URL:
            if isinstance(item.get("reason"), str) and reason is None:
                reason = item["reason"]
            raw = item.get("metadata")
            if isinstance(raw, dict):
                for key, value in raw.items():
                    metadata[str(key)] = value if isinstance(value, str) else _json_text(value)
        elif kind == BAD_REQUEST_TYPE_URL:
            for violation in item.get("fieldViolations") or item.get("field_violations") or []:
                if isinstance(violation, dict):
                    violations.append(
                        FieldViolation(
                            str(violation.get("field", "")), str(violation.get("description", ""))
                        )
                    )
    return reason, metadata, violations


def _json_text(value: Any) -> str:
    try:
        return orjson.dumps(value).decode()
    except TypeError:
        return str(value)


def from_jsonrpc_error(error: Any, redact: Redactor, *, http_status: int = 200) -> A2AError:
    """The typed error for a JSON-RPC ``error`` member: ErrorInfo reason, then code."""
    if not isinstance(error, dict):
        return build(InvalidAgentResponseError, "remote sent a malformed JSON-RPC error", redact)
    code = error.get("code")
    message = error.get("message")
    text = message if isinstance(message, str) else ""
    reason, metadata, violations = _details(error.get("data"))
    cls = error_for_reason(reason) if reason else None
    if isinstance(code, int) and not isinstance(code, bool):
        by_code = error_for_jsonrpc_code(code)
        # The code is the finer name where a reason is shared (-32700 and -32600).
        if cls is None or (by_code is not None and by_code.spec.reason == cls.spec.reason):
            cls = by_code
    if cls is None:
        cls = class_for_http_status(http_status) if http_status >= 400 else InternalError
        text = f"remote error {code}: {text}"
    return build(cls, text, redact, metadata=metadata, violations=violations)


def from_rest_error(http_status: int, body: bytes, redact: Redactor) -> A2AError:
    """The typed error for a non-2xx HTTP+JSON response (``{"error": google.rpc.Status}``)."""
    try:
        value = orjson.loads(body) if body else None
    except orjson.JSONDecodeError:
        value = None
    error = value.get("error") if isinstance(value, dict) else None
    if not isinstance(error, dict):
        snippet = body[:200].decode("utf-8", errors="replace")
        return build(
            class_for_http_status(http_status),
            f"HTTP {http_status}" + (f": {snippet}" if snippet.strip() else ""),
            redact,
        )
    reason, metadata, violations = _details(error.get("details"))
    message = error.get("message")
    cls = error_for_reason(reason) if reason else None
    if cls is None:
        cls = class_for_http_status(http_status)
    return build(
        cls,
        message if isinstance(message, str) else f"HTTP {http_status}",
        redact,
        metadata=metadata,
        violations=violations,
    )


# --- gRPC -----------------------------------------------------------------------------


def from_grpc_status(
    code: grpc.StatusCode,
    details: str,
    trailing: Iterable[tuple[str, str | bytes]],
    redact: Redactor,
) -> A2AError:
    """The typed error for a failed gRPC call, from ``grpc-status-details-bin`` if sent."""
    status = _status_detail(trailing)
    if status is not None:
        found = status_details(status)
        cls = error_for_reason(found.reason) if found.reason else None
        if cls is not None:
            return build(
                cls,
                status.message or details,
                redact,
                metadata=found.metadata,
                violations=found.violations,
            )
    cls = _BY_GRPC_STATUS.get(code)
    if cls is None:
        return build(InternalError, f"gRPC {code.name}: {details}", redact)
    return build(cls, details or code.name, redact)


def _status_detail(trailing: Iterable[tuple[str, str | bytes]]) -> status_pb2.Status | None:
    for key, value in trailing:
        if key == _STATUS_DETAILS_KEY and isinstance(value, bytes):
            status = status_pb2.Status()
            try:
                status.ParseFromString(value)
            except pb_message.DecodeError:
                return None
            return status
    return None


__all__ = [
    "AuthRejected",
    "CardError",
    "Timeout",
    "Unreachable",
    "build",
    "explain_auth",
    "from_grpc_status",
    "from_jsonrpc_error",
    "from_rest_error",
]
