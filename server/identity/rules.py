"""The identities a callers.json entry may name besides a key, and what each matches.

An entry carries exactly one identity: ``key`` (auth.py), or one of::

    "jwt":   {"issuer": "https://idp.example", "audience": "a2a-gateway",
              "sub": "travel-bot"}                 # or "claims": {"azp": "x", ...}
    "basic": {"username": "travel-bot", "password_hash": "scrypt$15$8$1$..."}
    "introspection": {"sub": "travel-bot"}        # or {"client_id": "..."}
    "mtls":  {"sha256": "<hex>"}                  # or {"subject": "CN=..."}, {"san": "..."}

Each parser returns the rule or the reason the entry is skipped (never a secret).
"""

from __future__ import annotations

import hashlib
import hmac
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from cryptography import x509

from .basic import hash_problem
from .jwt import audience_contains

MAX_FIELD_CHARS = 1024
MAX_CLAIMS = 16
_SHA256 = re.compile(r"^[0-9a-f]{64}$")
_USERNAME = re.compile(r"^[^\x00-\x1f\x7f:]{1,128}$")


@dataclass(frozen=True, slots=True)
class JwtRule:
    """Tokens of ``issuer`` for ``audience`` whose ``sub`` (or ``claims``) match."""

    issuer: str
    audience: str
    sub: str | None = None
    claims: tuple[tuple[str, Any], ...] = ()
    allow_private: bool = False  # the issuer may be on a private address (owner's network)

    def matches_audience(self, claims: Mapping[str, Any]) -> bool:
        return audience_contains(claims, self.audience)

    def matches(self, claims: Mapping[str, Any]) -> bool:
        if not self.matches_audience(claims):
            return False
        if self.sub is not None and claims.get("sub") != self.sub:
            return False
        return all(name in claims and claims[name] == value for name, value in self.claims)


@dataclass(frozen=True, slots=True)
class IntrospectionRule:
    """Opaque tokens the introspection endpoint calls active, whose ``sub`` or
    ``client_id`` (``claim``) is ``value``."""

    claim: str
    value: str

    def matches(self, claims: Mapping[str, Any]) -> bool:
        return claims.get(self.claim) == self.value


@dataclass(frozen=True, slots=True)
class MtlsRule:
    """A client certificate (verified by the TLS handshake against the client CA) with
    this SHA-256 fingerprint, or this subject (RFC 4514), or this DNS/URI SAN."""

    claim: str  # "sha256", "subject" or "san"
    value: str

    def matches(self, certificate: PresentedCertificate) -> bool:
        if self.claim == "sha256":
            return hmac.compare_digest(certificate.sha256, self.value)
        if self.claim == "subject":
            return certificate.subject == self.value
        return self.value in certificate.sans


@dataclass(frozen=True, slots=True)
class PresentedCertificate:
    """What a rule can match in a client certificate (from its DER)."""

    sha256: str  # lower-case hex, no colons
    subject: str
    sans: frozenset[str]

    @classmethod
    def from_der(cls, der: bytes) -> PresentedCertificate:
        certificate = x509.load_der_x509_certificate(der)
        try:
            extension = certificate.extensions.get_extension_for_class(x509.SubjectAlternativeName)
            names = extension.value.get_values_for_type(x509.DNSName)
            names += extension.value.get_values_for_type(x509.UniformResourceIdentifier)
        except x509.ExtensionNotFound:
            names = []
        return cls(
            hashlib.sha256(der).hexdigest(),
            certificate.subject.rfc4514_string(),
            frozenset(names),
        )


@dataclass(frozen=True, slots=True)
class BasicRule:
    username: str
    password_hash: str


def _text(value: Any) -> bool:
    return isinstance(value, str) and 0 < len(value) <= MAX_FIELD_CHARS


def parse_jwt(value: Any) -> JwtRule | str:
    if not isinstance(value, dict):
        return "jwt must be an object"
    unknown = sorted(set(value) - {"issuer", "audience", "sub", "claims", "allow_private"})
    if unknown:
        return f"jwt has an unknown field {unknown[0][:40]!r}"
    issuer: Any = value.get("issuer")
    audience: Any = value.get("audience")
    if not _text(issuer) or not str(issuer).startswith(("https://", "http://")):
        return "jwt.issuer must be the issuer's URL"
    if not _text(audience):
        return "jwt.audience must be a non-empty string"
    allow_private = value.get("allow_private", False)
    if not isinstance(allow_private, bool):
        return "jwt.allow_private must be true or false"
    sub, claims = value.get("sub"), value.get("claims")
    if (sub is None) == (claims is None):
        return "jwt needs exactly one of sub and claims"
    if sub is not None:
        if not _text(sub):
            return "jwt.sub must be a non-empty string"
        return JwtRule(issuer, audience, sub=sub, allow_private=allow_private)
    if not isinstance(claims, dict) or not claims or len(claims) > MAX_CLAIMS:
        return f"jwt.claims must be an object of 1 to {MAX_CLAIMS} claims"
    if not all(isinstance(v, str | int | bool) for v in claims.values()):
        return "jwt.claims values must be strings, integers or booleans"
    return JwtRule(
        issuer, audience, claims=tuple(sorted(claims.items())), allow_private=allow_private
    )


def parse_introspection(value: Any) -> IntrospectionRule | str:
    if not isinstance(value, dict) or len(value) != 1:
        return "introspection must be an object with one of sub and client_id"
    ((claim, wanted),) = value.items()
    if claim not in ("sub", "client_id"):
        return "introspection must be an object with one of sub and client_id"
    if not _text(wanted):
        return f"introspection.{claim} must be a non-empty string"
    return IntrospectionRule(claim, wanted)


def parse_mtls(value: Any) -> MtlsRule | str:
    if not isinstance(value, dict) or len(value) != 1:
        return "mtls must be an object with one of sha256, subject and san"
    ((claim, wanted),) = value.items()
    if claim not in ("sha256", "subject", "san") or not _text(wanted):
        return "mtls must be an object with one of sha256, subject and san"
    if claim == "sha256":
        wanted = wanted.replace(":", "").lower()
        if not _SHA256.match(wanted):
            return "mtls.sha256 must be 64 hex digits (colons allowed)"
    return MtlsRule(claim, wanted)


def parse_basic_rule(value: Any) -> BasicRule | str:
    if not isinstance(value, dict):
        return "basic must be an object"
    unknown = sorted(set(value) - {"username", "password_hash"})
    if unknown:
        return f"basic has an unknown field {unknown[0][:40]!r}"
    username = value.get("username")
    if not isinstance(username, str) or not _USERNAME.match(username):
        return "basic.username must be 1 to 128 characters without ':' or control characters"
    problem = hash_problem(value.get("password_hash"))
    if problem is not None:
        return f"basic.{problem}"
    return BasicRule(username, value["password_hash"])


__all__ = [
    "BasicRule",
    "IntrospectionRule",
    "JwtRule",
    "MtlsRule",
    "PresentedCertificate",
    "parse_basic_rule",
    "parse_introspection",
    "parse_jwt",
    "parse_mtls",
]
