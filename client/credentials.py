"""How a key is presented to an agent, read from its card's security schemes.

``Authorization: Bearer <key>`` when every scheme the card declares is HTTP bearer;
otherwise the header the card's API-key scheme names (``X-API-Key`` when it names none).
"""

from __future__ import annotations

from dataclasses import dataclass

import lf.a2a.v1.a2a_pb2 as pb

DEFAULT_API_KEY_HEADER = "X-API-Key"


@dataclass(frozen=True, slots=True)
class Credentials:
    """One header carrying the key. ``repr`` never shows the key."""

    header: str
    value: str

    def __repr__(self) -> str:
        return f"Credentials(header={self.header!r}, value=[redacted])"

    def headers(self) -> dict[str, str]:
        return {self.header: self.value}

    def grpc_metadata(self) -> tuple[tuple[str, str], ...]:
        # gRPC metadata keys must be lower case.
        return ((self.header.lower(), self.value),)


def credentials_for(card: pb.AgentCard, key: str | None) -> Credentials | None:
    """The header to send ``key`` in, for this card (None without a key)."""
    if not key:
        return None
    schemes = list(card.security_schemes.values())
    if schemes and all(_is_bearer(s) for s in schemes):
        return Credentials("Authorization", f"Bearer {key}")
    for scheme in schemes:
        if scheme.WhichOneof("scheme") != "api_key_security_scheme":
            continue
        api_key = scheme.api_key_security_scheme
        name = api_key.name.strip()
        if not name:
            break
        if api_key.location.lower() == "cookie":
            return Credentials("Cookie", f"{name}={key}")
        # "header", or "query" which we still send as a header: keys in URLs leak into
        # logs and error texts along the way.
        return Credentials(name, key)
    return Credentials(DEFAULT_API_KEY_HEADER, key)


def _is_bearer(scheme: pb.SecurityScheme) -> bool:
    if scheme.WhichOneof("scheme") != "http_auth_security_scheme":
        return False
    return scheme.http_auth_security_scheme.scheme.strip().lower() == "bearer"
