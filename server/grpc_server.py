"""The gRPC server: the A2A binding plus standard health and reflection, on its own port.

A2A 1.0 (``lf.a2a.v1.A2AService``) and 0.3 (``a2a.v1.A2AService``, :mod:`.grpc03`) are
served side by side (digest §13): different service names, one port.

``build_grpc_server`` binds at once (so port 0 resolves to a real port) and returns the
grpc.aio server and its port; ``await server.start()`` serves.

Graceful stop is grpc's own ``await server.stop(grace)``: new rpcs (health checks
included) are refused at once, rpcs in flight get up to ``grace`` seconds to finish,
then they are cancelled; a cancelled stream closes its service iterator (the engine
sees the subscriber leave). ``grace=None`` cancels everything immediately. Long-lived
subscriptions normally run until the grace expires, so end them first (the engine's
``aclose()``) and keep the grace short (``config.shutdown_grace_s``).
"""

from __future__ import annotations

import errno
import socket
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection, reflection_pb2_grpc

from a2a_gateway.protocol.codec import GRPC_LIMIT_SLACK_BYTES
from a2a_gateway.protocol.errors import MethodNotFoundError
from a2a_gateway.protocol.service import SERVICE_DESCRIPTOR, A2AService

from .auth import Authenticator
from .config import ServerConfig
from .grpc03 import LEGACY_SERVICE_NAME, legacy_rpc_handler
from .grpc_binding import CallWatch, GrpcBounds, a2a_rpc_handler
from .health import Readiness
from .metrics import NULL_METER, UNKNOWN_METHOD, Meter
from .retry_memo import RetryMemo
from .tls import grpc_server_credentials

SERVICE_NAME = SERVICE_DESCRIPTOR.full_name  # "lf.a2a.v1.A2AService"
#: Health entries set to SERVING: the whole server ("") and both A2A services.
HEALTH_SERVICES = ("", SERVICE_NAME, LEGACY_SERVICE_NAME)


#: Total request metadata accepted (gRPC's default hard limit is 16 KiB).
MAX_METADATA_BYTES = 32 * 1024


class GenericHandlersOnly:
    """A grpc.aio server as a generated ``add_*Servicer_to_server`` sees it: the
    servicer's generic handler is added, its registration as methods is not.

    In the grpcio 1.85 health and reflection packages those functions also register
    every method with grpc core. The server's accept loop then keeps one pending
    request future per registered method beside the one for all other methods, and
    waits on all of them (``asyncio.wait``) for every call it accepts: the four health
    and reflection methods made that a wait over five futures for each A2A call, ~2 us
    more per call than over one (docs/performance.md). The generic handler serves the
    same methods.
    """

    __slots__ = ("_server",)

    def __init__(self, server: grpc.aio.Server) -> None:
        self._server = server

    def add_generic_rpc_handlers(
        self, handlers: Sequence[grpc.GenericRpcHandler[Any, Any]]
    ) -> None:
        self._server.add_generic_rpc_handlers(handlers)

    def add_registered_method_handlers(self, service_name: str, handlers: object) -> None:
        """Not passed on: the generic handler added with them serves these methods."""


def grpc_address(host: str, port: int) -> str:
    """``host:port`` for grpc, bracketing IPv6 literals."""
    if ":" in host and not host.startswith("["):
        host = f"[{host}]"
    return f"{host}:{port}"


def check_bindable(host: str, port: int) -> None:
    """OSError (EADDRINUSE...) when no address of ``host`` can be bound on ``port``.

    grpc reports a bind failure as a RuntimeError with no reason, after its C core
    has printed its own line on stderr; a plain socket bound and closed first says why,
    and keeps that line away in the common case (a port in use). SO_REUSEADDR, as grpc
    binds: a port left in TIME_WAIT is free, a listening one is not."""
    if port == 0:
        return
    try:
        infos = socket.getaddrinfo(
            host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )
    except socket.gaierror as exc:
        raise OSError(errno.EADDRNOTAVAIL, f"cannot resolve {host}: {exc.strerror}") from None
    failure: OSError | None = None
    for family, kind, proto, _, address in infos:
        with socket.socket(family, kind, proto) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                probe.bind(address)
            except OSError as exc:
                failure = exc
                continue
            return  # grpc needs one of the addresses only
    if failure is not None:
        raise failure


def max_answer_bytes(config: ServerConfig) -> int:
    """The largest answer or stream event sent over gRPC: twice the request cap, as
    our clients read (``codec.MAX_ANSWER_BYTES`` for the default cap), so a task holding
    a message as large as a request and an answer as large fits."""
    return 2 * config.max_body_bytes


def server_options(config: ServerConfig) -> list[tuple[str, Any]]:
    return [
        # A request may be as large as an HTTP body (binary is smaller than its JSON);
        # grpc's own limit has some slack so that the binding, not grpc, refuses one
        # just over the cap (with the size error and its details).
        ("grpc.max_receive_message_length", config.max_body_bytes + GRPC_LIMIT_SLACK_BYTES),
        # Answers likewise: the binding refuses one over max_answer_bytes with an A2A
        # error (grpc's own refusal is a bare RESOURCE_EXHAUSTED, and a failed write it
        # logs as a crash); grpc's limit, just above, is only the backstop.
        ("grpc.max_send_message_length", max_answer_bytes(config) + GRPC_LIMIT_SLACK_BYTES),
        # Broken grpc-level compression (a message that is not valid gzip, the
        # compressed flag without a grpc-encoding, an unknown encoding) is answered
        # INTERNAL by grpc core, as gRPC's compression spec requires, before the binding
        # reads the message: grpc.aio has no hook there. The one knob,
        # grpc.per_message_decompression=0, hands the binding the raw payload without
        # the message's compressed flag (aio's read() gives bytes only), so compressed
        # and plain messages could not be told apart and valid gzip requests would
        # break (measured); the flag-without-encoding and unknown-encoding cases stay
        # INTERNAL from core either way.
        # Metadata as large as the HTTP bindings' header lines allow (16 KiB each, e.g.
        # a 1,000-URI a2a-extensions value) plus the rest of the request's metadata.
        ("grpc.max_metadata_size", MAX_METADATA_BYTES),
        ("grpc.absolute_max_metadata_size", MAX_METADATA_BYTES),
        # Fail loudly when the port is taken instead of sharing it with another process.
        ("grpc.so_reuseport", 0),
    ]


async def build_grpc_server(
    service: A2AService,
    config: ServerConfig,
    authenticator: Authenticator,
    *,
    meter: Meter = NULL_METER,
    readiness: Readiness | None = None,
    memo: RetryMemo | None = None,
) -> tuple[grpc.aio.Server, int]:
    """A gRPC server for ``service`` bound to ``config.host:config.grpc_port`` (0: any
    free port), and the port it is bound to. Not started: ``await server.start()``.

    Serves ``lf.a2a.v1.A2AService`` (1.0), ``a2a.v1.A2AService`` (0.3),
    ``grpc.health.v1.Health`` (SERVING for ``""`` and both A2A services; with
    ``readiness``, NOT_SERVING while it is not ready) and server reflection for all
    four. Every A2A call is reported to ``meter``. ``memo`` keeps the 1.0 SendMessage's
    answers of retries from the stored task (:mod:`.retry_memo`).
    """
    if config.grpc_port is None:
        raise ValueError("gRPC is disabled (config.grpc_port is None)")
    # Before the server exists: one dropped unstarted and unstopped crashes grpc's core.
    check_bindable(config.host, config.grpc_port)
    server = grpc.aio.server(options=server_options(config))
    bounds = GrpcBounds(
        request_s=config.body_read_timeout_s,
        unary_s=config.grpc_default_deadline_s,
        stream_idle_s=config.grpc_stream_idle_s,
        max_request_bytes=config.max_body_bytes,
        max_answer_bytes=max_answer_bytes(config),
    )
    watch = CallWatch()  # one timer bounds every call of both services
    server.add_generic_rpc_handlers(
        (
            a2a_rpc_handler(
                service, authenticator, bounds=bounds, watch=watch, meter=meter, memo=memo
            ),
            legacy_rpc_handler(service, authenticator, bounds=bounds, watch=watch, meter=meter),
        )
    )
    requested = grpc_address(config.host, config.grpc_port)
    try:
        if config.tls is not None:
            port = server.add_secure_port(requested, grpc_server_credentials(config.tls))
        else:
            port = server.add_insecure_port(requested)
    except RuntimeError as exc:  # grpc reports bind failures as RuntimeError
        await server.stop(None)
        raise OSError(f"cannot bind gRPC server to {requested}: {exc}") from None
    health_servicer = health.aio.HealthServicer()  # type: ignore[attr-defined]
    for name in HEALTH_SERVICES:
        await health_servicer.set(name, health_pb2.HealthCheckResponse.SERVING)
    generic_only = GenericHandlersOnly(server)
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, generic_only)
    if readiness is not None:

        async def follow(ready: bool) -> None:
            status = health_pb2.HealthCheckResponse.SERVING
            if not ready:
                status = health_pb2.HealthCheckResponse.NOT_SERVING
            for name in HEALTH_SERVICES:
                await health_servicer.set(name, status)

        readiness.follow(follow)
    # What reflection.enable_server_reflection does for a grpc.aio server, through the
    # same filter (it picks the asyncio servicer by the server's type).
    reflection_pb2_grpc.add_ServerReflectionServicer_to_server(
        reflection.aio.ReflectionServicer(  # type: ignore[attr-defined]
            (SERVICE_NAME, LEGACY_SERVICE_NAME, health.SERVICE_NAME, reflection.SERVICE_NAME)
        ),
        generic_only,
    )
    # Last: grpc asks it only for a method no handler above serves.
    server.add_generic_rpc_handlers((_UnknownMethods(meter),))
    return server, port


if TYPE_CHECKING:  # generic in grpc-stubs only: not subscriptable at run time
    _GenericHandler = grpc.GenericRpcHandler[Any, Any]
else:
    _GenericHandler = grpc.GenericRpcHandler


class _UnknownMethods(_GenericHandler):
    """Counts a call of a method nobody serves (grpc answers it UNIMPLEMENTED), as the
    HTTP bindings count an unknown method: ``unknown``, ``METHOD_NOT_FOUND``."""

    def __init__(self, meter: Meter) -> None:
        self._meter = meter

    def service(
        self, handler_call_details: grpc.HandlerCallDetails
    ) -> grpc.RpcMethodHandler[Any, Any] | None:
        self._meter.count(UNKNOWN_METHOD, MethodNotFoundError.spec.reason)
        return None


__all__ = [
    "HEALTH_SERVICES",
    "SERVICE_NAME",
    "build_grpc_server",
    "grpc_address",
    "max_answer_bytes",
]
