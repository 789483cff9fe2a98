"""Server configuration: one dataclass, filled from flags, environment and TOML by the CLI."""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field
from pathlib import Path

from .limits import RateLimits, TaskCaps


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


@dataclass(slots=True)
class CardConfig:
    name: str = "a2a-gateway agent"
    description: str = ""  # empty: first non-empty line of <workspace>/PERSONA.md, else a default
    version: str = "1.0.0"
    provider_organization: str = ""
    provider_url: str = ""
    documentation_url: str = ""


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
    task_caps: TaskCaps = field(default_factory=TaskCaps)  # per caller: runs, contexts
    max_body_bytes: int = 24 * 1024 * 1024
    body_read_timeout_s: float = 30.0  # a body not fully arrived by then is refused
    keepalive_interval_s: float = 15.0  # SSE comment cadence on idle streams
    card_max_age_s: int = 300  # Cache-Control max-age of the public card
    max_hops: int = 3
    shutdown_grace_s: float = 5.0
