"""The aiohttp application: the public card, JSON-RPC and HTTP+JSON at their mounts.

Mounts are configurable; JSON-RPC at ``/`` and HTTP+JSON at the root can be combined
(then ``POST /`` is JSON-RPC and everything else under ``/`` is HTTP+JSON, the card
path excepted). A middleware turns anything that escapes a handler, and aiohttp's own
404/405, into the REST error shape, so no response ever carries a traceback.
"""

from __future__ import annotations

import logging

from aiohttp import hdrs, web
from aiohttp.typedefs import Handler

from a2a_gateway.protocol.errors import (
    A2AError,
    InternalError,
    InvalidRequestError,
    MethodNotAllowedError,
    MethodNotFoundError,
)
from a2a_gateway.protocol.service import A2AService

from . import jsonrpc, push_receiver, rest
from .auth import Authenticator
from .card import CARDS, CardProvider, mount_path
from .config import ServerConfig
from .http_context import (
    AUTHENTICATOR,
    CONFIG,
    SERVICE,
    STREAM_WATCH,
    StreamWatch,
    unexpected,
)

log = logging.getLogger(__name__)


def build_http_app(
    service: A2AService,
    config: ServerConfig,
    authenticator: Authenticator,
    cards: CardProvider,
    push_waker: push_receiver.PushWaker | None = None,
) -> web.Application:
    app = web.Application(middlewares=[_errors], client_max_size=config.max_body_bytes)
    app[SERVICE] = service
    app[CONFIG] = config
    app[AUTHENTICATOR] = authenticator
    app[CARDS] = cards
    app[STREAM_WATCH] = StreamWatch()  # the one timer of the open SSE streams
    app.on_cleanup.append(_stop_watch)
    rest_prefix = mount_path(config.mounts.rest)
    app[rest.REST_PREFIX] = rest_prefix

    # Registration order matters where paths overlap: aiohttp tries resources with the
    # same prefix in order, so the card and JSON-RPC come before the REST catch-all.
    app.router.add_get(mount_path(config.mounts.card) or "/", cards.handle)
    # Pushes for our own client's watches (404 for all without a waker).
    push_receiver.mount(app, push_waker)
    app.router.add_post(mount_path(config.mounts.jsonrpc) or "/", jsonrpc.handle)
    if rest_prefix:
        app.router.add_route(hdrs.METH_ANY, rest_prefix, rest.handle)
    app.router.add_route(hdrs.METH_ANY, rest_prefix + "/{tail:.*}", rest.handle)
    return app


async def _stop_watch(app: web.Application) -> None:
    app[STREAM_WATCH].close()


@web.middleware
async def _errors(request: web.Request, handler: Handler) -> web.StreamResponse:
    try:
        return await handler(request)
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        return rest.error_response(_http_error(request, exc))
    except A2AError as exc:
        return rest.error_response(exc)
    except Exception as exc:
        return rest.error_response(unexpected(exc, f"{request.method} {request.path[:200]}"))


def _http_error(request: web.Request, exc: web.HTTPException) -> A2AError:
    """aiohttp's own HTTP errors (router 404/405, size limits) as protocol errors."""
    shown = request.raw_path.split("?", 1)[0][:200]
    if exc.status == 404:
        return MethodNotFoundError(f"no route for {request.method} {shown}")
    if exc.status == 405:
        allow = exc.headers.get(hdrs.ALLOW, "")
        return MethodNotAllowedError(
            f"{request.method} is not allowed here; use {allow}", metadata={"allow": allow}
        )
    if exc.status < 500:
        return InvalidRequestError(f"bad request: {exc.reason}")
    log.error("HTTP %d raised by a handler for %s %s", exc.status, request.method, shown)
    return InternalError()
