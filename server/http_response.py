"""The answers of the HTTP bindings: JSON responses, the transport headers an error asks
for, the extensions header, and the generic error for an unexpected exception."""

from __future__ import annotations

import logging
from typing import Any

import orjson
from aiohttp import hdrs, web

from a2a_gateway.protocol import versioning
from a2a_gateway.protocol.context import CallContext
from a2a_gateway.protocol.errors import (
    A2AError,
    InternalError,
    MethodNotAllowedError,
    RateLimitedError,
    UnauthenticatedError,
)

log = logging.getLogger(__name__)

# --- media types --------------------------------------------------------------------

JSON_CONTENT_TYPE = "application/json"
A2A_JSON_CONTENT_TYPE = "application/a2a+json"

#: Challenge sent with every 401. Keys travel as ``X-API-Key`` or ``Authorization:
#: Bearer``; only Bearer is a registered HTTP scheme, so it is the one we name.
WWW_AUTHENTICATE = 'Bearer realm="a2a"'


class Answer(web.Response):
    """A unary answer whose body is let go as soon as its client is gone.

    When a client disconnects while aiohttp writes a body, the ConnectionError raised
    in its drain helper sits in a reference cycle (the exception's traceback holds the
    helper's frame, whose drain future holds the exception) that also reaches the
    frames holding this response, so a body of many megabytes stayed alive until a
    full garbage collection (minutes, with the start-up ``gc.freeze()`` and a large
    young threshold). Dropping the traceback breaks the cycle: the body is freed when
    the write fails (tests/server/test_dropped_answers.py runs with ``gc.disable()``).
    """

    async def write_eof(self, data: bytes = b"") -> None:
        try:
            await super().write_eof(data)
        except ConnectionError as exc:
            self._body = None
            exc.__traceback__ = None
            raise


def json_response(
    payload: Any,
    *,
    status: int = 200,
    content_type: str = JSON_CONTENT_TYPE,
    headers: dict[str, str] | None = None,
) -> web.Response:
    return Answer(
        body=orjson.dumps(payload), status=status, content_type=content_type, headers=headers
    )


def error_headers(error: A2AError) -> dict[str, str]:
    """Transport headers an error asks for: a 401 challenge, a 405's ``Allow``,
    ``Retry-After``."""
    headers: dict[str, str] = {}
    if isinstance(error, UnauthenticatedError):
        headers[hdrs.WWW_AUTHENTICATE] = error.challenge or WWW_AUTHENTICATE
    elif isinstance(error, MethodNotAllowedError):
        headers[hdrs.ALLOW] = error.metadata.get("allow", "")
    retry = error.metadata.get("retryAfterSeconds", "")
    if isinstance(error, RateLimitedError):
        headers[hdrs.RETRY_AFTER] = str(error.retry_after_s)
    elif error.spec.http_status == 503 and retry.isascii() and retry.isdigit():
        headers[hdrs.RETRY_AFTER] = retry
    return headers


def echo_extensions(response: web.StreamResponse, context: CallContext) -> None:
    """Tell the caller which requested extensions the service activated."""
    if context.activated_extensions:
        response.headers[versioning.EXTENSIONS_HEADER] = versioning.format_extensions(
            context.activated_extensions
        )


def unexpected(exc: BaseException, what: str) -> InternalError:
    """Log an unexpected exception with its traceback; the client gets a generic error."""
    log.error("unexpected error in %s", what, exc_info=exc)
    return InternalError()


__all__ = [
    "A2A_JSON_CONTENT_TYPE",
    "JSON_CONTENT_TYPE",
    "WWW_AUTHENTICATE",
    "Answer",
    "echo_extensions",
    "error_headers",
    "json_response",
    "unexpected",
]
