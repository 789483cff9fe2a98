"""Server configuration: one dataclass, filled from flags, environment and TOML by the CLI."""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field
from pathlib import Path

from a2a_gateway.protocol.codec import MAX_BODY_BYTES
from lf.a2a.v1 import a2a_pb2 as pb

from .limits import RateLimits, TaskCaps
from .tls import TlsConfig


def is_loopback(host: str) -> bool:
    """Whether ``host`` (a listen address) is reachable from this machine only.

    ``localhost`` and loopback literals are; everything else (``0.0.0.0``, ``::``,
    ``""``, any other name or address) counts as reachable from outside.
    """
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


@dataclass(slots=True)
class Mounts:
    """Where each binding is mounted on the HTTP server. ``""`` means the root."""

    jsonrpc: str = "/a2a"
    rest: str = "/a2a/v1"
    card: str = "/.well-known/agent-card.json"


#: How the public card is served: ``auto`` (pure 1.0 to a request declaring A2A-Version
#: 1.x, else the hybrid with the 0.3 keys), or always ``1.0`` or ``hybrid``.
CARD_FORMATS = ("auto", "1.0", "hybrid")


@dataclass(slots=True)
class CardConfig:
    """What the public card says (each empty value: the hosted agent's own profile,
    else a default). Nothing here comes from a workspace: PERSONA.md and card.json feed
    only the extended card."""

    name: str = ""
    description: str = ""
    skills: list[pb.AgentSkill] = field(default_factory=list)
    extensions: list[pb.AgentExtension] = field(default_factory=list)
    format: str = "auto"  # one of CARD_FORMATS
    version: str = "1.0.0"
    provider_organization: str = ""
    provider_url: str = ""
    documentation_url: str = ""
    #: List the resumable-streams extension (the local engine's streams resume).
    resumable_streams: bool = False


#: The longest a personal agent's token may live (``exp - iat``) on the PACT URL.
DEFAULT_PACT_MAX_LIFETIME_S = 300.0


@dataclass(frozen=True, slots=True)
class IdentityConfig:
    """How callers' tokens are checked beyond keys (server/identity/)."""

    jwt_leeway_s: float = 60.0  # clock skew allowed on a JWT caller's exp/nbf/iat
    fetch_timeout_s: float = 5.0  # an identity provider's discovery, JWKS, introspection
    introspection_url: str = ""  # RFC 7662 endpoint; empty: no introspection callers
    introspection_client_id: str = ""
    introspection_client_secret: str = field(default="", repr=False)
    introspection_cache_s: float = 60.0
    oauth2_token_url: str = ""  # named by the card for introspection callers
    pact_max_lifetime_s: float = DEFAULT_PACT_MAX_LIFETIME_S  # exp - iat (server/pact)


@dataclass(slots=True)
class ServerConfig:
    host: str = "127.0.0.1"
    port: int = 8080
    grpc_port: int | None = 8081  # None: no gRPC server
    public_url: str = ""  # external base URL for card interfaces; empty: from the request
    grpc_public_address: str = ""  # host:port advertised for gRPC; empty: derived
    mounts: Mounts = field(default_factory=Mounts)
    card: CardConfig = field(default_factory=CardConfig)
    workspaces: list[Path] = field(default_factory=list)
    allow_anonymous: bool = False  # serve unauthenticated callers (loopback binds only)
    allow_private_urls: bool = False  # outbound guard off (tests, private networks)
    rate_limits: RateLimits = field(default_factory=RateLimits)  # requests per minute
    identity: IdentityConfig = field(default_factory=IdentityConfig)
    tls: TlsConfig | None = None  # serve HTTP and gRPC over TLS
    task_caps: TaskCaps = field(default_factory=TaskCaps)  # per caller: runs, contexts
    max_body_bytes: int = MAX_BODY_BYTES  # requests on every binding (gRPC: binary)
    body_read_timeout_s: float = 30.0  # a body (gRPC: request message) not arrived by then
    grpc_default_deadline_s: float = 300.0  # a unary gRPC call whose client set no deadline
    grpc_stream_idle_s: float = 300.0  # a gRPC stream with no event for this long ends
    keepalive_interval_s: float = 15.0  # SSE comment cadence on idle streams
    card_max_age_s: int = 300  # Cache-Control max-age of the public card
    max_hops: int = 3
    shutdown_grace_s: float = 10.0  # SIGTERM: how long calls in flight may go on
