"""How a key is presented to an agent, read from its card's security schemes.

``Authorization: Bearer <key>`` when every scheme the card declares is HTTP bearer;
otherwise the header the card's API-key scheme names (``X-API-Key`` when it names none).
With a signing secret every request also carries ``X-A2A-Signature`` over its body
(``x-a2a-signature`` metadata on gRPC), as :mod:`a2a_gateway.server.signing` checks.
"""

from __future__ import annotations

from dataclasses import dataclass

import lf.a2a.v1.a2a_pb2 as pb
from a2a_gateway.server.signing import SIGNATURE_HEADER, signature_header

DEFAULT_API_KEY_HEADER = "X-API-Key"


@dataclass(frozen=True, slots=True)
class Credentials:
    """One header carrying the key (none when ``header`` is empty), and the secret that
    signs each request body when the agent asks for signatures. ``repr`` shows neither."""

    header: str
    value: str
    signing_secret: str | None = None

    def __repr__(self) -> str:
        signed = ", signed" if self.signing_secret else ""
        return f"Credentials(header={self.header!r}, value=[redacted]{signed})"

    def headers(self) -> dict[str, str]:
        return {self.header: self.value} if self.header else {}

    def signature(self, body: bytes) -> dict[str, str]:
        """The signature header for ``body`` (the exact bytes sent; empty without one)."""
        if not self.signing_secret:
            return {}
        return {SIGNATURE_HEADER: signature_header(self.signing_secret, body)}

    def grpc_metadata(self, body: bytes = b"") -> tuple[tuple[str, str], ...]:
        """Metadata for a gRPC call whose serialized request is ``body``."""
        # gRPC metadata keys must be lower case.
        pairs = {**self.headers(), **self.signature(body)}
        return tuple((key.lower(), value) for key, value in pairs.items())


def credentials_for(
    card: pb.AgentCard, key: str | None, signing_secret: str | None = None
) -> Credentials | None:
    """The header to send ``key`` in, for this card, and the signing secret (None
    without either)."""
    found = _key_credentials(card, key)
    if not signing_secret:
        return found
    if found is None:
        return Credentials("", "", signing_secret)
    return Credentials(found.header, found.value, signing_secret)


def _key_credentials(card: pb.AgentCard, key: str | None) -> Credentials | None:
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
