"""The aiohttp application: the public card, JSON-RPC and HTTP+JSON at their mounts.

Mounts are configurable; JSON-RPC at ``/`` and HTTP+JSON at the root can be combined
(then ``POST /`` is JSON-RPC and everything else under ``/`` is HTTP+JSON, the card
path excepted). Anything that escapes a handler, and aiohttp's own 404/405, becomes the
REST error shape (:func:`_guarded`, :func:`_no_route`), so no response ever carries a
traceback.
"""

from __future__ import annotations

import ipaddress
import logging
from collections.abc import Callable, Coroutine, MutableMapping
from typing import Any

from aiohttp import hdrs, web
from aiohttp.http_exceptions import HttpProcessingError
from aiohttp.typedefs import Handler
from aiohttp.web_protocol import RequestPayloadError

from a2a_gateway.protocol.context import ANONYMOUS
from a2a_gateway.protocol.errors import (
    A2AError,
    InternalError,
    InvalidRequestError,
    MethodNotAllowedError,
    MethodNotFoundError,
    PermissionDeniedError,
)
from a2a_gateway.protocol.service import A2AService

from . import health, jsonrpc, push_receiver, rest
from .auth import Authenticator, single_values
from .card import CARDS, JWKS_PATH, CardProvider, mount_path
from .config import ServerConfig
from .http_request import AUTHENTICATOR, CONFIG, METRICS, SERVICE
from .http_response import unexpected
from .http_sse import STREAM_WATCH, StreamWatch
from .icon import icon_path
from .metrics import CONTENT_TYPE, NULL_METRICS, Metrics, MetricsLike
from .pact import mount as pact_mount
from .secret_links import SecretLinks

log = logging.getLogger(__name__)

#: The longest request line or header line accepted (aiohttp's default is 8190 bytes):
#: a long tenant or a 1,000-URI ``A2A-Extensions`` header fits; a longer one is a 400
#: that echoes nothing of the request (see :class:`MalformedHttpLog`).
MAX_LINE_BYTES = 16 * 1024


class MalformedHttpLog(logging.LoggerAdapter[logging.Logger]):
    """aiohttp's connection-level logger, so that malformed HTTP is one WARNING line.

    aiohttp logs a request it cannot parse (a broken request line, header or chunked
    body, a line over :data:`MAX_LINE_BYTES`) with ``logger.exception``: an ERROR and a
    traceback for what is the client's mistake. Here such an exception becomes one
    line naming its kind, never the request's bytes (they may hold a key): a WARNING
    (DEBUG where aiohttp chose DEBUG: a first line that is not HTTP at all, such as TLS
    on the plain port, is internet noise). Any other exception keeps its traceback.
    """

    def log(self, level: int, msg: object, *args: object, **kwargs: Any) -> None:
        exc = kwargs.get("exc_info")
        if isinstance(exc, (HttpProcessingError, RequestPayloadError)):
            self.logger.log(min(level, logging.WARNING), "malformed HTTP request: %s", _kind(exc))
            return
        if isinstance(exc, ConnectionError):  # the client left mid-request: no fault
            self.logger.debug("client connection lost: %s", type(exc).__name__)
            return
        self.logger.log(level, msg, *args, **kwargs)

    def process(self, msg: Any, kwargs: MutableMapping[str, Any]) -> tuple[Any, Any]:
        return msg, kwargs


def _kind(exc: BaseException) -> str:
    """What went wrong, without the request's bytes: the class and, for a line over the
    limit, the limit."""
    name = type(exc).__name__
    if isinstance(exc, HttpProcessingError) and exc.code:
        return f"{name} ({exc.code})"
    return name


class _RequestHandler(web.RequestHandler):
    """aiohttp's connection handler, answering malformed HTTP with a fixed text: its
    own answer quotes up to 100 bytes of the offending line (which may be a header
    carrying a key).

    No ``__dict__``: aiohttp's handler has slots, and a held stream keeps its
    connection's handler (a dict of its own would be ~200 bytes a connection)."""

    __slots__ = ()

    def handle_error(
        self,
        request: web.BaseRequest,
        status: int = 500,
        exc: BaseException | None = None,
        message: str | None = None,
    ) -> web.StreamResponse:
        if isinstance(exc, HttpProcessingError):
            message = f"malformed HTTP request ({type(exc).__name__})"
        return super().handle_error(request, status, exc, message)


class _DrainingRequestHandler(_RequestHandler):
    """A connection of a draining server: its next answer (a call in flight, or the
    refusal of a new call on a kept-alive connection) closes it (``Connection:
    close``), so that the client's next call goes to another replica."""

    __slots__ = ()

    async def finish_response(
        self, request: web.BaseRequest, resp: web.StreamResponse, start_time: float | None
    ) -> tuple[web.StreamResponse, bool]:
        resp.force_close()
        return await super().finish_response(request, resp, start_time)


class _Server(web.Server):
    def __call__(self) -> web.RequestHandler:
        return _RequestHandler(self, loop=self._loop, **self._kwargs)


class AppRunner(web.AppRunner):
    """``web.AppRunner`` whose connections use :class:`_RequestHandler`."""

    async def _make_server(self) -> web.Server:
        server = await super()._make_server()
        # aiohttp builds the Server itself and has no hook for the handler class.
        server.__class__ = _Server
        return server

    async def drain(self) -> None:
        """Stop accepting connections; the open ones stay (their calls go on, a new
        call gets the drain's refusal) and close after their next answer.

        The open connections become :class:`_DrainingRequestHandler`: a class swap, so
        that serving costs nothing for a drain that has not begun (an answer hook would
        run on every answer)."""
        for site in list(self.sites):
            await site.stop()
        if self.server is not None:
            for connection in self.server.connections:
                if isinstance(connection, _RequestHandler):
                    connection.__class__ = _DrainingRequestHandler


#: Keyword arguments of aiohttp's connection handler for every app built here.
HANDLER_ARGS: dict[str, Any] = {
    "logger": MalformedHttpLog(logging.getLogger("aiohttp.server")),
    # Content-Encoding is decoded by read_body (content_coding.py), strictly.
    "auto_decompress": False,
    "max_line_size": MAX_LINE_BYTES,
    "max_field_size": MAX_LINE_BYTES,
}


def build_http_app(
    service: A2AService,
    config: ServerConfig,
    authenticator: Authenticator,
    cards: CardProvider,
    push_waker: push_receiver.PushWaker | None = None,
    *,
    metrics: MetricsLike = NULL_METRICS,
    readiness: health.Readiness | None = None,
    serve_metrics: bool = True,
    pact: pact_mount.PactMount | None = None,
    secret_links: SecretLinks | None = None,
) -> web.Application:
    """The gateway's HTTP app. ``metrics`` is what the bindings report to (off: the
    null one); with ``serve_metrics`` (no ``--metrics-port``) it is also served at
    ``/metrics``, guarded (:func:`handle_guarded_metrics`). ``readiness`` adds
    ``/healthz`` and ``/readyz``; ``pact`` the PACT URL (server/pact); ``secret_links``
    the owner's one-time secret links (``serve --llm``)."""
    # No middleware: with any, aiohttp keeps two more coroutine frames for every call
    # (the middleware's and its own ``_fix_request_current_app``), for a held stream's
    # whole life. The error mapping is in the handlers instead (_guard_routes).
    app = web.Application(client_max_size=config.max_body_bytes, handler_args=HANDLER_ARGS)
    app[SERVICE] = service
    app[CONFIG] = config
    app[AUTHENTICATOR] = authenticator
    app[CARDS] = cards
    app[METRICS] = metrics
    app[STREAM_WATCH] = StreamWatch()  # the one timer of the open SSE streams
    app.on_cleanup.append(_stop_watch)
    # At startup, once every route is in (a caller may add its own, at any path):
    # the error mapping of each route, and the route of the paths no route serves.
    app.on_startup.append(_guard_routes)
    rest_prefix = mount_path(config.mounts.rest)
    app[rest.REST_PREFIX] = rest_prefix

    # Registration order matters where paths overlap: aiohttp tries resources with the
    # same prefix in order, so the card and JSON-RPC come before the REST catch-all.
    app.router.add_get(mount_path(config.mounts.card) or "/", cards.handle)
    # Before the REST catch-all: none of these paths is an HTTP+JSON route.
    if cards.signer is not None:
        app.router.add_get(JWKS_PATH, cards.handle_jwks)
    if readiness is not None:
        health.mount(app, readiness)
    if serve_metrics and isinstance(metrics, Metrics):
        app.router.add_get(METRICS_PATH, handle_guarded_metrics)
    # Pushes for our own client's watches (404 for all without a waker).
    push_receiver.mount(app, push_waker)
    app.router.add_get(icon_path(config.mounts.jsonrpc), cards.handle_icon)
    if secret_links is not None:
        secret_links.mount(app)
    jsonrpc_path = mount_path(config.mounts.jsonrpc) or "/"
    # Some clients join the interface URL and "/": the mount answers both ways.
    for path in {jsonrpc_path, jsonrpc_path.rstrip("/") + "/"}:
        app.router.add_post(path, jsonrpc.handle)
        app.router.add_route(hdrs.METH_ANY, path, jsonrpc.not_post)
    if pact is not None:
        pact_mount.mount(app, pact)
    if rest_prefix:
        app.router.add_route(hdrs.METH_ANY, rest_prefix, rest.handle)
    app.router.add_route(hdrs.METH_ANY, rest_prefix + "/{tail:.*}", rest.handle)
    return app


METRICS_PATH = "/metrics"


def build_metrics_app(
    metrics: Metrics, readiness: health.Readiness | None = None
) -> web.Application:
    """The app of ``--metrics-port``: ``/metrics`` unguarded (who reaches that port is
    the operator's choice, as for any exporter), and the health endpoints."""
    app = web.Application(handler_args=HANDLER_ARGS)
    app[METRICS] = metrics
    app.router.add_get(METRICS_PATH, handle_metrics)
    if readiness is not None:
        health.mount(app, readiness)
    return app


async def handle_metrics(request: web.Request) -> web.Response:
    metrics = request.app[METRICS]
    assert isinstance(metrics, Metrics)  # the route exists only with metrics on
    await metrics.refresh()
    return web.Response(body=metrics.exposition(), headers={hdrs.CONTENT_TYPE: CONTENT_TYPE})


async def handle_guarded_metrics(request: web.Request) -> web.StreamResponse:
    """``/metrics`` on the A2A port: from loopback, or for a caller with a key.

    Metrics tell how busy the gateway is and which calls fail, so an anonymous caller
    from elsewhere gets 403 (401 with a challenge for a wrong key), as a 401/403 in the
    REST error shape. Behind a reverse proxy on the same host every request comes from
    loopback: there, leave ``/metrics`` out of the proxied paths or use
    ``--metrics-port`` (docs/observability.md).
    """
    if not _is_loopback(request.remote):
        get = single_values(lambda name: request.headers.getall(name, ()))
        try:
            identity = await request.app[AUTHENTICATOR].admit(get, request.remote)
        except A2AError as exc:  # a wrong key (401), a rate limit (429)
            return rest.error_response(exc)
        if identity.caller == ANONYMOUS:
            return rest.error_response(
                PermissionDeniedError("/metrics needs a caller key away from loopback")
            )
    return await handle_metrics(request)


def _is_loopback(remote: str | None) -> bool:
    if not remote:  # not an IP transport (a unix socket): not known to be local
        return False
    try:
        address = ipaddress.ip_address(remote.split("%", 1)[0])
    except ValueError:
        return False
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped.is_loopback
    return address.is_loopback


async def _stop_watch(app: web.Application) -> None:
    app[STREAM_WATCH].close()


#: Handlers that answer every exception themselves, in the REST or JSON-RPC error shape
#: (the bindings' handlers: they serve the streams, whose frames are held).
_SELF_GUARDED: frozenset[Handler] = frozenset({jsonrpc.handle, rest.handle})


async def _guard_routes(app: web.Application) -> None:
    """At startup (routes are added before it: the app's own and its callers', such as
    the Telegram webhook): a last route for the paths no route serves (:func:`_no_route`;
    none is needed with HTTP+JSON at the root, whose catch-all serves them all), then
    every route's handler with the error mapping of :func:`_guarded`, those of
    sub-applications (PACT) included, except the handlers that answer every exception
    themselves. (A middleware would do the same at the cost of two coroutine frames
    held per stream.)"""
    if app[rest.REST_PREFIX]:
        # Registered last: the router tries the routes of one path in their order.
        app.router.add_route(hdrs.METH_ANY, "/{tail:.*}", _no_route)
    for route in app.router.routes():
        handler = route._handler
        if isinstance(handler, type):  # a class-based view (none here): as it is
            continue
        if handler not in _SELF_GUARDED and not getattr(handler, "_a2a_guarded", False):
            route._handler = _guarded(handler)


def _guarded(handler: Handler) -> Callable[[web.Request], Coroutine[Any, Any, web.StreamResponse]]:
    """``handler`` with anything that escapes it as a REST error: aiohttp's HTTP errors
    of 400 and above (size limits) mapped by :func:`_http_error`, an A2A error as
    itself, any other exception as an internal error (logged, no traceback shown)."""

    async def guarded(request: web.Request) -> web.StreamResponse:
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

    guarded._a2a_guarded = True  # type: ignore[attr-defined]
    return guarded


async def _no_route(request: web.Request) -> web.StreamResponse:
    """A path no route serves (the router's own 404/405, in the REST error shape): 405
    with ``Allow`` when a route serves the path with other methods, else 404."""
    allowed: set[str] = set()
    for resource in request.app.router.resources():
        found, methods = await resource.resolve(request)
        if found is None:  # (this route is the only one that serves the path)
            allowed |= methods
    exc: web.HTTPException = (
        web.HTTPMethodNotAllowed(request.method, allowed) if allowed else web.HTTPNotFound()
    )
    return rest.error_response(_http_error(request, exc))


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
