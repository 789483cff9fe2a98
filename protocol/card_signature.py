"""Signed agent cards (``AgentCard.signatures``): a detached JWS over the card's
canonical JSON, as the A2A spec and the official SDK define it.

The canonical form is the card's ProtoJSON (``MessageToDict``: camelCase names, enums
by name) without ``signatures``, with empty strings, lists and objects removed
recursively, serialized by RFC 8785 (JCS, the ``rfc8785`` package). Each signature is
the compact JWS ``protected.payload.signature`` with the payload left out (RFC 7515
Appendix F); the protected header names ``alg``, ``kid`` and, when the signer publishes
one, ``jku`` (a JWKS URL). A card verifies when at least one of its signatures does, with
a key of the verifier's own key set (never one the card points to by itself) and an
asymmetric algorithm (the same list as JWT callers).
"""

from __future__ import annotations

import base64
import binascii
import json
import warnings
from typing import Any

import rfc8785
from google.protobuf import json_format
from joserfc import jws
from joserfc.errors import JoseError
from joserfc.jwk import ECKey, Key, KeySet, OKPKey, RSAKey
from joserfc.jws import JWSRegistry
from joserfc.registry import HeaderParameter

from lf.a2a.v1 import a2a_pb2 as pb

#: Asymmetric JWS algorithms only (never ``none``, never an HMAC).
ALGORITHMS = (
    "RS256",
    "RS384",
    "RS512",
    "PS256",
    "PS384",
    "PS512",
    "ES256",
    "ES384",
    "ES512",
    "EdDSA",
    "Ed25519",
)
#: Beyond this nesting a card is refused rather than canonicalized (extension params
#: are free-form and nest as deep as a sender likes).
MAX_DEPTH = 64
_REGISTRY = JWSRegistry(
    # The official SDK's signer writes "jku": null when it has no JWKS URL; the header
    # is the signer's to fill, and we never follow a jku, so null is accepted there.
    header_registry={"jku": HeaderParameter("JWK Set URL", lambda value: None)},
    algorithms=list(ALGORITHMS),
    strict_check_header=False,
)


class CardSignatureError(Exception):
    """The card's signatures do not verify; the message says why (no secret in it)."""


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _clean(value: Any, depth: int = 1) -> Any:
    if isinstance(value, dict | list) and depth > MAX_DEPTH:
        raise CardSignatureError(f"the card nests deeper than {MAX_DEPTH} levels")
    if isinstance(value, dict):
        cleaned = {k: c for k, v in value.items() if (c := _clean(v, depth + 1)) is not None}
        return cleaned or None
    if isinstance(value, list):
        items = [c for v in value if (c := _clean(v, depth + 1)) is not None]
        return items or None
    if isinstance(value, str) and not value:
        return None
    return value


def canonical_card(card: pb.AgentCard) -> bytes:
    """The bytes a card signature covers."""
    data = json_format.MessageToDict(card)
    data.pop("signatures", None)
    return rfc8785.dumps(_clean(data) or {})


def algorithm_for(key: Key) -> str:
    """The JWS algorithm a signing key implies (the JWK's own ``alg`` first)."""
    stated = key.get("alg")
    if isinstance(stated, str) and stated in ALGORITHMS:
        return stated
    if isinstance(key, RSAKey):
        return "RS256"
    if isinstance(key, ECKey):
        return {"P-256": "ES256", "P-384": "ES384", "P-521": "ES512"}[str(key.get("crv"))]
    if isinstance(key, OKPKey):
        return "EdDSA"
    raise ValueError(f"a {key.key_type} key cannot sign cards (asymmetric keys only)")


def load_signing_key(data: bytes) -> Key:
    """A private JWK (JSON) or PEM key; ValueError naming what is wrong (never the key)."""
    text = data.strip()
    if text.startswith(b"{"):
        try:
            value = json.loads(text)
            key: Key = KeySet.import_key_set({"keys": [value]}).keys[0]
        except (ValueError, JoseError, TypeError, KeyError):
            raise ValueError("not a usable JWK") from None
    else:
        for kind in (ECKey, RSAKey, OKPKey):
            try:
                key = kind.import_key(text)
                break
            except (ValueError, JoseError, TypeError):
                continue
        else:
            raise ValueError("not a PEM private key of type RSA, EC or OKP")
    if not key.is_private:
        raise ValueError("the key is a public key: signing needs the private key")
    algorithm_for(key)
    return key


def sign_card(card: pb.AgentCard, key: Key, *, kid: str, jku: str = "") -> pb.AgentCard:
    """A copy of ``card`` with one more signature by ``key``."""
    alg = algorithm_for(key)
    header: dict[str, Any] = {"alg": alg, "kid": kid, "typ": "JOSE"}
    if jku:
        header["jku"] = jku
    with warnings.catch_warnings():
        if alg == "EdDSA":
            warnings.simplefilter("ignore")
        compact = jws.serialize_compact(header, canonical_card(card), key, [alg], _REGISTRY)
    protected, _, signature = compact.split(".")
    signed = pb.AgentCard()
    signed.CopyFrom(card)
    signed.signatures.add(protected=protected, signature=signature)
    return signed


def verify_card(card: pb.AgentCard, keys: KeySet) -> str:
    """The ``kid`` of the first signature that verifies with ``keys``; raises
    :class:`CardSignatureError` saying why none does."""
    if not card.signatures:
        raise CardSignatureError("the card is not signed")
    payload = _b64(canonical_card(card))
    reasons: list[str] = []
    for signature in card.signatures:
        try:
            header = json.loads(_unb64(signature.protected))
        except (binascii.Error, ValueError):
            reasons.append("a protected header that is not base64url JSON")
            continue
        if not isinstance(header, dict):
            reasons.append("a protected header that is not a JSON object")
            continue
        alg, kid = header.get("alg"), header.get("kid")
        if alg not in ALGORITHMS:
            reasons.append("an algorithm that is not allowed")
            continue
        try:
            key = keys.get_by_kid(kid if isinstance(kid, str) else None)
        except (JoseError, ValueError):
            reasons.append(f"key id {str(kid)[:40]!r}, which is not one of the trusted keys")
            continue
        try:
            with warnings.catch_warnings():
                if alg == "EdDSA":
                    warnings.simplefilter("ignore")
                jws.deserialize_compact(
                    f"{signature.protected}.{payload}.{signature.signature}", key, [alg], _REGISTRY
                )
        except (JoseError, ValueError, TypeError):
            reasons.append(f"a signature by {str(kid)[:40]!r} that does not match the card")
            continue
        return str(kid)
    raise CardSignatureError("no signature verifies: " + "; ".join(reasons))


def trusted_keys(value: Any) -> KeySet:
    """The public keys a verifier trusts, from a JWKS object (decoded JSON); ValueError
    naming what is wrong. Private members are dropped: a verifier never needs them."""
    if not isinstance(value, dict) or not isinstance(value.get("keys"), list):
        raise ValueError('not a JWKS (an object with a "keys" array)')
    for raw in value["keys"]:
        if not isinstance(raw, dict) or raw.get("kty") not in ("RSA", "EC", "OKP"):
            raise ValueError("the JWKS must hold public keys (RSA, EC or OKP) only")
    try:
        keys = KeySet.import_key_set(value)  # type: ignore[arg-type]
    except (ValueError, JoseError, TypeError, KeyError):
        raise ValueError("the JWKS holds a key that cannot be used") from None
    public: list[dict[str, Any]] = []
    for key in keys.keys:
        if key.key_type == "oct":
            raise ValueError("the JWKS must hold public keys (RSA, EC or OKP) only")
        public.append({**key.as_dict(private=False), "kid": key.kid or key.thumbprint()})
    if not public:
        raise ValueError("the JWKS holds no key")
    return KeySet.import_key_set({"keys": public})


def public_jwks(key: Key, kid: str) -> dict[str, Any]:
    """The JWKS that publishes ``key``'s public half under ``kid``."""
    public = key.as_dict(private=False)
    return {"keys": [{**public, "kid": kid, "alg": algorithm_for(key), "use": "sig"}]}


__all__ = [
    "ALGORITHMS",
    "CardSignatureError",
    "algorithm_for",
    "canonical_card",
    "load_signing_key",
    "public_jwks",
    "sign_card",
    "trusted_keys",
    "verify_card",
]
