"""Where a client verb's URL points, in every form people pass.

- the agent's base URL (``http://127.0.0.1:8080``) or its card's URL (``...json``);
- any interface URL its card lists (``http://127.0.0.1:8080/a2a``): when no card is
  found below it, the card of the URL's origin is read and that interface is used;
- ``host:port``: ``http://`` is assumed (the verb says so once on stderr); when no card
  answers there, or with ``--transport grpc``, the agent is called over gRPC at that
  address without a card (a gRPC-only agent publishes none over HTTP).

A string that is none of these is a usage mistake (:class:`ValueError`), never an
"unreachable" one.
"""

from __future__ import annotations

import re
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from joserfc.jwk import KeySet

from a2a_gateway.client import (
    AuthRejected,
    CardError,
    ClientAuth,
    GrpcTransport,
    Redactor,
    RemoteService,
    Unreachable,
    connect,
    credentials_for,
    resolve_card,
)
from a2a_gateway.client.transport import GRPC, HTTP_JSON, JSONRPC
from a2a_gateway.client.wire_log import wired
from lf.a2a.v1 import a2a_pb2 as pb

_HOST_PORT = re.compile(r"^(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9][A-Za-z0-9.-]*):([0-9]{1,5})/?$")
_TRANSPORT_OF = {JSONRPC: "jsonrpc", HTTP_JSON: "rest", GRPC: "grpc"}


@dataclass(frozen=True, slots=True)
class Target:
    """``url``: where to look for the card ('' for gRPC without a card); ``grpc``: the
    ``host:port`` to call over gRPC when there is no card; ``assumed_http``: the user
    gave no scheme."""

    url: str
    grpc: str = ""
    assumed_http: bool = False


def parse_target(text: str, transport: str | None) -> Target:
    """The :class:`Target` for a verb's URL argument; ValueError for anything else."""
    text = text.strip()
    bare = _HOST_PORT.match(text)
    if bare:
        if int(bare[2]) > 65535:
            raise ValueError(f"port out of range in {text[:80]!r}")
        address = text.rstrip("/")
        if transport == "grpc":
            return Target("", grpc=address)
        return Target(f"http://{address}", grpc=address, assumed_http=True)
    parts = urllib.parse.urlsplit(text)
    try:
        parts.port  # noqa: B018 (raises ValueError for a bad port)
    except ValueError:
        raise ValueError(f"bad port in {text[:80]!r}") from None
    if parts.scheme.lower() not in ("http", "https") or not parts.hostname:
        raise ValueError(
            f"not an agent URL: {text[:80]!r} (expected http(s)://host[:port][/path] or host:port)"
        )
    return Target(text)


@dataclass(frozen=True, slots=True)
class CallExtras:
    """What a verb adds to every call: service parameters (``--header``), the tenant
    (``--tenant``, replacing the interface's), extensions (``--extension``, sent in
    ``A2A-Extensions``), and where ``-v`` writes each call and answer."""

    headers: tuple[tuple[str, str], ...] = ()
    tenant: str | None = None
    extensions: tuple[str, ...] = ()
    wire: Callable[[str], None] | None = field(default=None, compare=False)


NO_EXTRAS = CallExtras()

NO_CARD_TO_VERIFY = "a host:port gRPC target has no card to verify: give the agent's URL"


def grpc_direct(
    address: str,
    *,
    key: str | None,
    signing_secret: str | None,
    timeout: float,
    auth: ClientAuth | None = None,
    extras: CallExtras = NO_EXTRAS,
) -> RemoteService:
    """The agent at gRPC ``address`` (``host:port``), called without reading a card."""
    redact = Redactor([key, signing_secret, *(auth.secrets() if auth else ())])
    credentials = credentials_for(pb.AgentCard(), key, signing_secret, auth=auth)
    calls = GrpcTransport(f"grpc://{address}", credentials=credentials, redact=redact)
    return RemoteService(
        wired(calls, extras.wire),
        timeout=timeout,
        stream_idle_timeout=timeout,
        extensions=extras.extensions,
        headers=extras.headers,
        tenant=extras.tenant,
    )


async def _listed_interface(
    target: Target,
    transport: str | None,
    timeout: float,  # noqa: ASYNC109 (each call is bounded by it)
) -> str | None:
    """When ``target.url`` is an interface URL of the card at its origin: that origin,
    after which the interface's binding is the transport to use (None otherwise)."""
    parts = urllib.parse.urlsplit(target.url)
    origin = urllib.parse.urlunsplit((parts.scheme, parts.netloc, "", "", ""))
    wanted = target.url.rstrip("/")
    if origin == wanted:
        return None
    try:
        card = await resolve_card(origin, timeout=timeout)
    except (CardError, AuthRejected, Unreachable):
        return None
    for interface in card.supported_interfaces:
        name = _TRANSPORT_OF.get(interface.protocol_binding.upper())
        if interface.url.rstrip("/") == wanted and name and transport in (None, name):
            return name
    return None


async def open_agent(
    target: Target,
    *,
    key: str | None,
    signing_secret: str | None,
    transport: str | None,
    timeout: float,  # noqa: ASYNC109 (each call is bounded by it)
    auth: ClientAuth | None = None,
    card_keys: KeySet | None = None,
    extras: CallExtras = NO_EXTRAS,
) -> RemoteService:
    """Connect to the agent ``target`` names (see the module docstring)."""
    if not target.url and card_keys is not None:
        raise CardError(NO_CARD_TO_VERIFY)

    def direct(address: str) -> RemoteService:
        return grpc_direct(
            address,
            key=key,
            signing_secret=signing_secret,
            timeout=timeout,
            auth=auth,
            extras=extras,
        )

    if not target.url:
        return direct(target.grpc)

    async def attempt(url: str, forced: str | None) -> RemoteService:
        return await connect(
            url,
            key=key,
            signing_secret=signing_secret,
            transport=forced,
            timeout=timeout,
            stream_idle_timeout=timeout,
            extended_card=False,  # one call needs no extended card: save the round trip
            auth=auth,
            card_keys=card_keys,
            extensions=extras.extensions,
            headers=extras.headers,
            tenant=extras.tenant,
            wire=extras.wire,
        )

    try:
        return await attempt(target.url, transport)
    except Unreachable:
        if not target.grpc or transport is not None:
            raise
        # host:port that does not speak HTTP/1.1: the gRPC address a card lists.
        return direct(target.grpc)
    except (CardError, AuthRejected):  # nothing, or a protected route, below the URL
        listed = await _listed_interface(target, transport, timeout)
        if listed is None:
            raise
    parts = urllib.parse.urlsplit(target.url)
    return await attempt(urllib.parse.urlunsplit((parts.scheme, parts.netloc, "", "", "")), listed)


async def agent_card(
    target: Target,
    *,
    key: str | None,
    signing_secret: str | None,
    transport: str | None,
    timeout: float,  # noqa: ASYNC109 (each call is bounded by it)
    card_keys: KeySet | None = None,
    extras: CallExtras = NO_EXTRAS,
) -> pb.AgentCard:
    """The agent's card (the extended one when ``key`` unlocks it); over gRPC without a
    card, what ``GetExtendedAgentCard`` answers. With ``card_keys`` the public card must
    carry a signature by one of them."""

    async def over_grpc(address: str) -> pb.AgentCard:
        if card_keys is not None:
            raise CardError(NO_CARD_TO_VERIFY)
        remote = grpc_direct(
            address, key=key, signing_secret=signing_secret, timeout=timeout, extras=extras
        )
        async with remote:
            return await remote.get_extended_agent_card()

    if not target.url:
        return await over_grpc(target.grpc)
    try:
        return await resolve_card(
            target.url,
            key=key,
            transport=transport,
            timeout=timeout,
            signing_secret=signing_secret,
            card_keys=card_keys,
            **_card_extras(extras),
        )
    except Unreachable:
        if not target.grpc or transport is not None:
            raise
        return await over_grpc(target.grpc)
    except (CardError, AuthRejected):  # nothing, or a protected route, below the URL
        listed = await _listed_interface(target, transport, timeout)
        if listed is None:
            raise
    parts = urllib.parse.urlsplit(target.url)
    origin = urllib.parse.urlunsplit((parts.scheme, parts.netloc, "", "", ""))
    return await resolve_card(
        origin,
        key=key,
        transport=listed,
        timeout=timeout,
        signing_secret=signing_secret,
        card_keys=card_keys,
        **_card_extras(extras),
    )


def _card_extras(extras: CallExtras) -> dict[str, Any]:
    return {
        "headers": extras.headers,
        "tenant": extras.tenant,
        "extensions": extras.extensions,
        "wire": extras.wire,
    }


__all__ = [
    "NO_EXTRAS",
    "CallExtras",
    "Target",
    "agent_card",
    "grpc_direct",
    "open_agent",
    "parse_target",
]
