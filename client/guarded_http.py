"""The guarded HTTP client for the a2a tool's calls to the agents of agents.json.

The address policy of the server's outbound client (``server/outbound.py``),
:func:`~a2a_gateway.local.addresses.forbidden_reason`, applied to httpx, which the A2A
transports use: every connection resolves the host itself and connects only to an
address the policy allows, so the address checked is the address connected to (a DNS
answer that changes between a check and the connect cannot reach an internal host).
No redirects are followed and no proxy is taken from the environment (see
:func:`~a2a_gateway.client.http_calls.new_http_client`).

Loopback and private addresses are allowed for an entry with ``"allow_private": true``
or with ``--allow-private-urls``. A gRPC interface (grpc-core connects by itself) has its
host resolved and checked just before the channel opens.
"""

from __future__ import annotations

import asyncio
import socket
import ssl
import typing
import urllib.parse

import httpcore
import httpx
from httpcore._backends.auto import AutoBackend

from a2a_gateway.local.addresses import forbidden_reason, normalise_host
from a2a_gateway.local.redaction import Redactor

from .agents_file import AgentEntry
from .errors import Unreachable
from .remote import RemoteService, connect
from .transport import DEFAULT_TIMEOUT, GRPC


class AddressRefused(httpcore.ConnectError):
    """The host resolves only to addresses the guard refuses."""


async def allowed_addresses(
    host: str,
    port: int,
    *,
    allow_private: bool,
    timeout: float | None,  # noqa: ASYNC109
) -> list[str]:
    """The addresses of ``host`` the guard allows; AddressRefused when none is left.
    The host is resolved in its normal spelling (``LocalHost.`` is ``localhost``)."""
    try:
        host = normalise_host(host)
    except ValueError as exc:
        raise AddressRefused(str(exc)) from None
    loop = asyncio.get_running_loop()
    try:
        async with asyncio.timeout(timeout):
            infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except TimeoutError:
        raise httpcore.ConnectTimeout(f"could not resolve {host}: timed out") from None
    except OSError as exc:
        raise httpcore.ConnectError(f"could not resolve {host}: {exc.strerror or exc}") from None
    allowed: list[str] = []
    refused: list[str] = []
    for info in infos:
        address = str(info[4][0])
        reason = forbidden_reason(address, allow_private=allow_private)
        if reason is None:
            if address not in allowed:
                allowed.append(address)
        else:
            refused.append(f"{address} ({reason})")
    if not allowed:
        found = ", ".join(dict.fromkeys(refused)) or "no address"
        hint = "" if allow_private else "; set allow_private on the entry to allow it"
        raise AddressRefused(f"{host} resolves to addresses that are not allowed: {found}{hint}")
    return allowed


class GuardedBackend(httpcore.AsyncNetworkBackend):
    """httpcore's network backend with the address check at connect time."""

    def __init__(self, *, allow_private: bool) -> None:
        self.allow_private = allow_private
        self._inner = AutoBackend()

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,  # noqa: ASYNC109 (httpcore's signature)
        local_address: str | None = None,
        socket_options: typing.Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        addresses = await allowed_addresses(
            host, port, allow_private=self.allow_private, timeout=timeout
        )
        last: Exception | None = None
        for address in addresses:
            try:
                # TLS still verifies (and sends SNI for) the URL's host name: httpcore
                # takes the server name from the request, not from this address.
                return await self._inner.connect_tcp(
                    address, port, timeout, local_address, socket_options
                )
            except (httpcore.ConnectError, httpcore.ConnectTimeout) as exc:
                last = exc
        assert last is not None
        raise last

    async def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,  # noqa: ASYNC109 (httpcore's signature)
        socket_options: typing.Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        raise httpcore.ConnectError("unix sockets are not allowed")

    async def sleep(self, seconds: float) -> None:
        await self._inner.sleep(seconds)


class GuardedTransport(httpx.AsyncHTTPTransport):
    def __init__(
        self, *, allow_private: bool, limits: httpx.Limits, tls: ssl.SSLContext | None = None
    ) -> None:
        super().__init__(trust_env=False, limits=limits)
        self._pool = httpcore.AsyncConnectionPool(
            ssl_context=tls or httpx.create_ssl_context(trust_env=False),
            max_connections=limits.max_connections,
            max_keepalive_connections=limits.max_keepalive_connections,
            keepalive_expiry=limits.keepalive_expiry,
            network_backend=GuardedBackend(allow_private=allow_private),
        )


def guarded_http_client(
    timeout: float, *, allow_private: bool, tls: ssl.SSLContext | None = None
) -> httpx.AsyncClient:
    """Like :func:`~a2a_gateway.client.http_calls.new_http_client`, but its connections pass
    the address guard."""
    limits = httpx.Limits(max_connections=64, max_keepalive_connections=8)
    return httpx.AsyncClient(
        timeout=httpx.Timeout(timeout),
        follow_redirects=False,
        trust_env=False,
        transport=GuardedTransport(allow_private=allow_private, limits=limits, tls=tls),
    )


async def open_agent(
    entry: AgentEntry,
    *,
    allow_private_urls: bool = False,
    timeout: float = DEFAULT_TIMEOUT,  # noqa: ASYNC109 (each call is bounded by it)
    extended_card: bool = True,
) -> RemoteService:
    """A connected :class:`RemoteService` for an agents.json entry, over the guard.

    Raises what :func:`connect` raises; a refused address is :class:`Unreachable`."""
    allow_private = allow_private_urls or entry.allow_private
    auth = entry.auth
    tls = auth.ssl_context() if auth is not None and auth.has_tls else None
    http = guarded_http_client(timeout, allow_private=allow_private, tls=tls)
    service = await connect(
        entry.url,
        key=entry.key,
        timeout=timeout,
        extended_card=extended_card,
        http=http,
        auth=entry.auth,
        card_keys=entry.card_keys,
        transport=entry.transport,
    )
    if service.binding == GRPC:
        try:
            host, port = _grpc_target(service.interface.url)
            await allowed_addresses(host, port, allow_private=allow_private, timeout=timeout)
        except (httpcore.ConnectError, httpcore.ConnectTimeout, ValueError) as exc:
            await service.aclose()
            redact = Redactor([entry.key])
            raise Unreachable(f"Could not reach {entry.name}: {redact(str(exc))}") from None
    return service


def _grpc_target(target: str) -> tuple[str, int]:
    text = target.strip()
    if "://" not in text:
        text = "grpc://" + text
    parts = urllib.parse.urlsplit(text)
    if not parts.hostname:
        raise ValueError(f"no host in {target[:80]!r}")
    return parts.hostname, parts.port or 443
