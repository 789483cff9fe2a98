"""Identity schemes at the authenticator: JWT/OIDC against a real local identity
provider (discovery, JWKS rotation, the refetch bound, a provider that is down), HTTP
Basic with scrypt hashes, and callers.json entries naming each."""

from __future__ import annotations

import asyncio
import base64
import secrets
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from a2a_gateway.protocol.errors import UnauthenticatedError
from a2a_gateway.server.auth import CALLERS_FILE, SchemesInUse, WorkspaceCallers, read_callers
from a2a_gateway.server.identity import JwtVerifier, TokenRefused, hash_password, verify_password
from a2a_gateway.server.identity.introspection import Introspector
from a2a_gateway.server.identity.jwt import MIN_REFETCH_INTERVAL_S
from a2a_gateway.server.outbound import OutboundClient
from tests.support.clocks import FakeClock
from tests.support.idp import (
    AUDIENCE,
    IdentityProvider,
    hs256_with_public_key,
    running_provider,
    unsigned_token,
)
from tests.support.secrets import use_secret
from tests.support.workspace import write_callers

PASSWORD = "correct horse battery staple"
#: Test hashes use a small N (the stored parameters say how to check them).
FAST_HASH = hash_password(PASSWORD, log2_n=10)
use_secret(PASSWORD)


@pytest.fixture
async def idp() -> AsyncIterator[IdentityProvider]:
    async with running_provider() as provider:
        yield provider


@pytest.fixture
async def outbound() -> AsyncIterator[OutboundClient]:
    async with OutboundClient(allow_private_urls=True, timeout_s=2) as client:
        yield client


def headers(**values: str) -> Any:
    lowered = {k.lower().replace("_", "-"): v for k, v in values.items()}
    return lambda name: lowered.get(name.lower())


def bearer(token: str) -> Any:
    return headers(authorization=f"Bearer {token}")


def basic(username: str, password: str) -> Any:
    pair = base64.b64encode(f"{username}:{password}".encode()).decode()
    return headers(authorization=f"Basic {pair}")


def jwt_entry(name: str, issuer: str, **rule: Any) -> dict[str, Any]:
    return {"name": name, "jwt": {"issuer": issuer, "audience": AUDIENCE, **rule}}


# --- JWT --------------------------------------------------------------------------------


async def test_each_bad_token_is_refused_and_a_good_one_is_the_caller(
    tmp_path: Path, idp: IdentityProvider, outbound: OutboundClient
) -> None:
    write_callers(
        tmp_path,
        [
            jwt_entry("alice", idp.issuer, sub="alice"),
            jwt_entry("ops", idp.issuer, claims={"azp": "ops-console", "admin": True}),
        ],
    )
    callers = WorkspaceCallers([tmp_path], verifier=JwtVerifier(outbound, leeway_s=5))
    alice = await callers.identify(bearer(idp.token("alice")))
    assert alice.caller.name == "alice" and alice.caller.workspace == str(tmp_path)
    ops = await callers.identify(bearer(idp.token("x", azp="ops-console", admin=True)))
    assert ops.caller.name == "ops"
    listed = await callers.identify(bearer(idp.token("alice", audience=["other", AUDIENCE])))
    assert listed.caller.name == "alice"
    other_issuer = idp.token(issuer="https://elsewhere.example")
    bad: dict[str, tuple[str, str]] = {
        "expired": (idp.token(lifetime_s=-60), "The token has expired"),
        "not yet valid": (idp.token(not_before_s=60), "The token is not valid yet"),
        "wrong issuer": (other_issuer, "The token's issuer is not accepted"),
        "wrong audience": (idp.token(audience="someone-else"), "audience is not accepted"),
        "unknown subject": (idp.token("mallory"), "The token's subject is not a caller"),
        "partial claims": (idp.token("x", azp="ops-console"), "subject is not a caller"),
        "unknown kid": (idp.token(header={"kid": "nobody"}), "key id is not one of"),
        "alg none": (unsigned_token(idp), "algorithm none is not allowed"),
        "HS256 with the public key": (hs256_with_public_key(idp), "HS256 is not allowed"),
        "bad signature": (idp.token()[:-4] + "AAAA", "signature is not valid"),
        "no exp": (idp.token(exp=None), "The token has no exp claim"),
        "exp NaN (never expiring)": (idp.token(exp=float("nan")), "The token has no exp claim"),
    }
    for case, (token, message) in bad.items():
        with pytest.raises(TokenRefused) as caught:
            await callers.identify(bearer(token))
        assert message in caught.value.message, case
        assert caught.value.challenge is not None
        assert caught.value.challenge.startswith('Bearer realm="a2a", error="invalid_token"')
        assert token not in caught.value.message


async def test_rotation_costs_one_fetch_and_random_kids_cost_at_most_one(
    idp: IdentityProvider, outbound: OutboundClient
) -> None:
    clock = FakeClock()
    verifier = JwtVerifier(outbound, clock=clock)
    await verifier.verify(idp.token(), {idp.issuer: False})
    assert idp.jwks_fetches == 1
    await verifier.verify(idp.token(), {idp.issuer: False})  # cached keys: no fetch
    assert idp.jwks_fetches == 1
    clock.now += MIN_REFETCH_INTERVAL_S
    new_kid = idp.rotate("ES256")
    await verifier.verify(idp.token(kid=new_kid), {idp.issuer: False})
    assert idp.jwks_fetches == 2
    clock.now += MIN_REFETCH_INTERVAL_S
    floods = [idp.token(header={"kid": secrets.token_hex(8)}) for _ in range(1000)]
    results = await asyncio.gather(
        *(verifier.verify(token, {idp.issuer: False}) for token in floods), return_exceptions=True
    )
    assert all(isinstance(result, TokenRefused) for result in results)
    assert idp.jwks_fetches == 3  # one fetch for the whole flood
    idp.rotate("EdDSA", keep_old=False)
    with pytest.raises(TokenRefused, match="key id"):  # within the interval: no fetch
        await verifier.verify(idp.token(), {idp.issuer: False})
    assert idp.jwks_fetches == 3
    clock.now += MIN_REFETCH_INTERVAL_S
    assert (await verifier.verify(idp.token(), {idp.issuer: False}))["sub"] == "alice"
    assert idp.jwks_fetches == 4


@pytest.mark.parametrize("failure", ["hang", "fail"])
async def test_a_provider_that_is_down_is_a_bounded_refusal(
    idp: IdentityProvider, outbound: OutboundClient, failure: str
) -> None:
    setattr(idp, failure, True)
    verifier = JwtVerifier(outbound, fetch_timeout_s=0.3, clock=FakeClock())
    token = idp.token()
    for _ in range(3):  # the first waits out the bound; the rest do not ask again
        with pytest.raises(TokenRefused, match="could not be verified"):
            await asyncio.wait_for(verifier.verify(token, {idp.issuer: False}), 5)
    assert verifier.issuer_keys(idp.issuer).fetches == 1


async def test_a_verified_token_is_remembered_until_it_expires(
    idp: IdentityProvider, outbound: OutboundClient
) -> None:
    wall = FakeClock()
    wall.now = time.time()
    verifier = JwtVerifier(outbound, leeway_s=0, wall_clock=wall)
    token = idp.token(lifetime_s=60)
    await verifier.verify(token, {idp.issuer: False})
    idp.fail = True  # a remembered token needs no keys
    await verifier.verify(token, {idp.issuer: False})
    wall.now += 61
    with pytest.raises(TokenRefused, match="expired"):
        await verifier.verify(token, {idp.issuer: False})


async def test_the_issuer_must_be_reached_through_the_outbound_guard(
    idp: IdentityProvider, tmp_path: Path
) -> None:
    async with OutboundClient(allow_private_urls=False) as guarded:
        verifier = JwtVerifier(guarded, clock=FakeClock())
        with pytest.raises(TokenRefused, match="could not be verified"):
            await verifier.verify(idp.token(), {idp.issuer: False})
        assert idp.jwks_fetches == 0
        # An entry's allow_private vouches for its issuer only (the owner's network).
        assert (await verifier.verify(idp.token(), {idp.issuer: True}))["sub"] == "alice"
        assert idp.jwks_fetches == 1
        await verifier.aclose()


# --- Basic ------------------------------------------------------------------------------


def test_password_hashes_check_in_constant_form() -> None:
    stored = hash_password(PASSWORD, log2_n=10)
    assert stored.startswith("scrypt$10$8$1$") and PASSWORD not in stored
    assert verify_password(PASSWORD, stored)
    assert not verify_password(PASSWORD + "!", stored)
    assert hash_password(PASSWORD, log2_n=10) != stored  # salted


async def test_basic_callers(tmp_path: Path) -> None:
    write_callers(
        tmp_path,
        [
            {"name": "bob", "basic": {"username": "bob", "password_hash": FAST_HASH}},
            {"name": "carol", "key": "identity-carol-key-4f1e2d"},
        ],
    )
    callers = WorkspaceCallers([tmp_path])
    assert (await callers.identify(basic("bob", PASSWORD))).caller.name == "bob"
    assert (await callers.identify(basic("bob", PASSWORD))).caller.name == "bob"  # remembered
    for username, password in [("bob", "wrong"), ("nobody", PASSWORD), ("bob", "")]:
        with pytest.raises(UnauthenticatedError) as caught:
            await callers.identify(basic(username, password))
        assert caught.value.challenge == 'Basic realm="a2a", charset="UTF-8"'
        assert caught.value.message == "The username or password is not valid"
    with pytest.raises(UnauthenticatedError) as missing:
        await callers.identify(headers())
    assert missing.value.challenge == 'Bearer realm="a2a", Basic realm="a2a", charset="UTF-8"'
    assert callers.schemes() == SchemesInUse(keys=True, basic=True)
    off_loopback = WorkspaceCallers([tmp_path], basic_allowed=False)
    with pytest.raises(UnauthenticatedError, match="needs TLS"):
        await off_loopback.identify(basic("bob", PASSWORD))


def test_entries_name_one_identity(tmp_path: Path) -> None:
    good_jwt = {"issuer": "https://idp.example", "audience": "a", "sub": "s"}
    entries: list[Any] = [
        {"name": "a", "jwt": good_jwt},
        {"name": "b", "key": "identity-b-key-123456", "jwt": good_jwt},
        {"name": "c", "jwt": {**good_jwt, "claims": {"x": 1}}},
        {"name": "d", "jwt": {"issuer": "idp.example", "audience": "a", "sub": "s"}},
        {"name": "e", "jwt": {**good_jwt, "extra": 1}},
        {"name": "f", "basic": {"username": "f:g", "password_hash": FAST_HASH}},
        {"name": "g", "basic": {"username": "g", "password_hash": "plaintext-password"}},
        {"name": "h", "basic": {"username": "h", "password_hash": FAST_HASH}},
        {"name": "i", "jwt": good_jwt, "key_prefix": "a2a_"},
    ]
    write_callers(tmp_path, entries)
    found, warnings = read_callers(tmp_path / CALLERS_FILE, str(tmp_path))
    assert [(e.name, e.scheme) for e in found] == [("a", "jwt"), ("h", "basic")]
    reasons = [w.split(": ", 1)[1] for w in warnings]
    assert reasons == [
        "an entry has one identity, not key and jwt",
        "jwt needs exactly one of sub and claims",
        "jwt.issuer must be the issuer's URL",
        "jwt has an unknown field 'extra'",
        "basic.username must be 1 to 128 characters without ':' or control characters",
        "basic.password_hash must be scrypt$<log2 N>$<r>$<p>$<salt>$<key> (callers add --basic)",
        "key_prefix belongs to an entry with a key",
    ]
    assert "plaintext-password" not in " ".join(warnings)


async def test_one_token_matching_two_callers_is_refused(
    tmp_path: Path, idp: IdentityProvider, outbound: OutboundClient
) -> None:
    one, two = tmp_path / "one", tmp_path / "two"
    write_callers(one, [jwt_entry("alice", idp.issuer, sub="alice")])
    write_callers(two, [jwt_entry("alias", idp.issuer, sub="alice")])
    callers = WorkspaceCallers([one, two], verifier=JwtVerifier(outbound))
    with pytest.raises(TokenRefused, match="subject is not a caller"):
        await callers.identify(bearer(idp.token("alice")))
    assert callers.schemes() == SchemesInUse(keys=False, issuers=(idp.issuer,))


# --- introspection ----------------------------------------------------------------------


async def test_introspection_callers(
    tmp_path: Path, idp: IdentityProvider, outbound: OutboundClient
) -> None:
    secret = "identity-introspector-secret-9a8b7c"
    use_secret(secret)
    idp.introspectors["gateway"] = secret
    write_callers(
        tmp_path,
        [
            {"name": "svc", "introspection": {"client_id": "svc"}},
            {"name": "alice", "introspection": {"sub": "alice"}},
        ],
    )
    clock = FakeClock()
    clock.now = time.time()
    introspector = Introspector(
        idp.issuer + "/introspect", "gateway", secret, outbound, max_cache_s=30, clock=clock
    )
    callers = WorkspaceCallers([tmp_path], introspector=introspector)
    token = idp.opaque_token("svc")
    assert (await callers.identify(bearer(token))).caller.name == "svc"
    assert (await callers.identify(bearer(token))).caller.name == "svc"
    assert idp.introspections == 1  # an active answer is reused
    idp.revoke(token)
    assert (await callers.identify(bearer(token))).caller.name == "svc"  # until max_cache_s
    clock.now += 31
    for _ in range(2):  # a negative answer is never reused
        with pytest.raises(TokenRefused, match="not active"):
            await callers.identify(bearer(token))
    assert idp.introspections == 3
    with pytest.raises(TokenRefused, match="subject is not a caller"):
        await callers.identify(bearer(idp.opaque_token("mallory", client_id="x")))
    assert (
        await callers.identify(bearer(idp.opaque_token("alice", client_id="y")))
    ).caller.name == "alice"
    assert callers.schemes() == SchemesInUse(keys=False, introspection=True)
    wrong = Introspector(idp.issuer + "/introspect", "gateway", "wrong-secret", outbound)
    with pytest.raises(TokenRefused, match="could not be verified"):
        await WorkspaceCallers([tmp_path], introspector=wrong).identify(bearer(token))
    idp.hang = True
    slow = Introspector(idp.issuer + "/introspect", "gateway", secret, outbound, timeout_s=0.3)
    with pytest.raises(TokenRefused, match="could not be verified"):
        await asyncio.wait_for(slow.introspect(idp.opaque_token("svc")), 5)
