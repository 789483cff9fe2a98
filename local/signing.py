"""Optional per-caller request signing: HMAC-SHA256 over a timestamp and the raw body.

A caller whose ``callers.json`` entry has a ``signing_secret`` must sign every request,
in the style of Stripe's webhook signatures::

    X-A2A-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256(secret, "<t>." + body)>

- HTTP (JSON-RPC and HTTP+JSON): ``body`` is the raw request body exactly as sent
  (empty for GET and DELETE). gRPC: the header is the ``x-a2a-signature`` metadata and
  ``body`` is the serialized request message exactly as sent (the gRPC message bytes,
  without the 5-byte length prefix), i.e. what the client's serializer produced.
- ``t`` must be within :data:`TOLERANCE_S` (5 minutes) of the server's clock, either
  way; an older signature is a replay and is refused. Several ``v1=`` values may be
  given (e.g. while rotating the secret); one matching is enough. Other keys (``v0=``,
  future schemes) are ignored.
- Comparison is constant-time. The method, path and query are not covered (as with
  webhook signatures): for requests without a body the signature proves only that the
  sender holds the secret, within the window.

Every failure is UNAUTHENTICATED (401) with a message naming the header; neither the
secret nor the expected signature ever appears in a message or a log.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import time
from dataclasses import dataclass

from a2a_gateway.protocol.errors import UnauthenticatedError

SIGNATURE_HEADER = "X-A2A-Signature"
#: The same header as gRPC metadata (gRPC metadata keys are lower-case).
SIGNATURE_METADATA_KEY = SIGNATURE_HEADER.lower()
SCHEME = "v1"
#: How far ``t`` may be from the server's clock, in seconds (either way).
TOLERANCE_S = 300

_MAX_HEADER_CHARS = 1024
_MAX_SIGNATURES = 8
_TIMESTAMP = re.compile(r"^[0-9]{1,12}$")
_HEX_DIGEST = re.compile(r"^[0-9a-fA-F]{64}$")


@dataclass(frozen=True, slots=True)
class Signature:
    """A parsed ``X-A2A-Signature`` value: its timestamp and the ``v1`` digests."""

    timestamp: int
    digests: tuple[str, ...]


def sign(secret: str, body: bytes, timestamp: int) -> str:
    """The ``v1`` digest (hex) of ``body`` at ``timestamp``."""
    payload = str(timestamp).encode() + b"." + body
    return hmac.new(secret.encode(), payload, hashlib.sha256).hexdigest()


def signature_header(secret: str, body: bytes, *, timestamp: int | None = None) -> str:
    """The ``X-A2A-Signature`` value a client sends with ``body`` (now, by default)."""
    t = int(time.time()) if timestamp is None else timestamp
    return f"t={t},{SCHEME}={sign(secret, body, t)}"


def _malformed(why: str) -> UnauthenticatedError:
    return UnauthenticatedError(f"{SIGNATURE_HEADER} is malformed: {why}")


def parse(value: str | None, *, now: float | None = None) -> Signature:
    """Parse and time-check a header value; raise UnauthenticatedError when it is missing,
    malformed, or outside the window."""
    if value is None or not value.strip():
        raise UnauthenticatedError(f"{SIGNATURE_HEADER} is required for this caller")
    if len(value) > _MAX_HEADER_CHARS:
        raise _malformed(f"longer than {_MAX_HEADER_CHARS} characters")
    timestamp: int | None = None
    digests: list[str] = []
    for item in value.split(","):
        key, sep, val = item.strip().partition("=")
        key, val = key.strip(), val.strip()
        if not sep or not key:
            raise _malformed("expected t=<unix seconds>,v1=<hex>")
        if key == "t":
            if timestamp is not None:
                raise _malformed("t is given twice")
            if not _TIMESTAMP.match(val):
                raise _malformed("t must be a Unix time in seconds")
            timestamp = int(val)
        elif key == SCHEME:
            if not _HEX_DIGEST.match(val):
                raise _malformed("v1 must be 64 hex digits (HMAC-SHA256)")
            digests.append(val.lower())
            if len(digests) > _MAX_SIGNATURES:
                raise _malformed(f"more than {_MAX_SIGNATURES} v1 values")
    if timestamp is None:
        raise _malformed("t is missing")
    if not digests:
        raise _malformed("v1 is missing")
    current = time.time() if now is None else now
    if abs(current - timestamp) > TOLERANCE_S:
        raise UnauthenticatedError(
            f"{SIGNATURE_HEADER} timestamp is more than {TOLERANCE_S // 60} minutes away "
            "from the server's time (a stale or replayed request, or a skewed clock)"
        )
    return Signature(timestamp, tuple(digests))


def verify(secret: str, signature: Signature, body: bytes) -> None:
    """Raise UnauthenticatedError unless one ``v1`` digest signs ``body``."""
    expected = sign(secret, body, signature.timestamp).encode()
    matched = False
    for digest in signature.digests:  # no early exit: every candidate is compared
        matched |= hmac.compare_digest(expected, digest.encode())
    if not matched:
        raise UnauthenticatedError(f"{SIGNATURE_HEADER} does not match the request body")


def check(secret: str, value: str | None, body: bytes, *, now: float | None = None) -> None:
    """:func:`parse` then :func:`verify`."""
    verify(secret, parse(value, now=now), body)


class PendingSignature:
    """A parsed signature waiting for the body it must cover (HTTP: the header is
    checked before the body is read, the digest once it has been)."""

    __slots__ = ("_secret", "signature", "verified")

    def __init__(self, secret: str, signature: Signature) -> None:
        self._secret = secret
        self.signature = signature
        self.verified = False

    def __repr__(self) -> str:  # never show the secret
        return f"PendingSignature(t={self.signature.timestamp}, verified={self.verified})"

    def verify(self, body: bytes) -> None:
        verify(self._secret, self.signature, body)
        self.verified = True


__all__ = [
    "SCHEME",
    "SIGNATURE_HEADER",
    "SIGNATURE_METADATA_KEY",
    "TOLERANCE_S",
    "PendingSignature",
    "Signature",
    "check",
    "parse",
    "sign",
    "signature_header",
    "verify",
]
