"""Signed agent cards: ``serve --card-signing-key`` signs the public and the extended
card (RFC 8785 canonical JSON, detached JWS), publishes its key at
``/.well-known/jwks.json``, our client verifies when told to and refuses a changed card,
and the official SDK's signer and verifier agree with ours (peer venv, subprocess)."""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from google.protobuf import json_format
from joserfc.jwk import ECKey, KeySet, OKPKey, RSAKey

from a2a_gateway.client import CardError, connect
from a2a_gateway.local.layout import WorkspaceLayout
from a2a_gateway.protocol.card_signature import (
    CardSignatureError,
    public_jwks,
    sign_card,
    trusted_keys,
    verify_card,
)
from a2a_gateway.serve import Gateway
from a2a_gateway.settings import resolve
from lf.a2a.v1 import a2a_pb2 as pb
from tests.support.processes import PEER_PYTHON, PEERS, require_peer_venv
from tests.support.secrets import use_secret
from tests.support.workspace import write_callers

KEY = "signing-carol-key-5a4b3c2d1e0f"


@pytest.fixture
async def gateway(tmp_path: Path) -> AsyncIterator[Gateway]:
    use_secret(KEY)
    private = ec.generate_private_key(ec.SECP256R1())
    pem = private.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    use_secret(*pem.decode().splitlines()[1:-1])
    (tmp_path / "card-key.pem").write_bytes(pem)
    workspace = tmp_path / "ws"
    write_callers(workspace, [{"name": "carol", "key": KEY}])
    WorkspaceLayout(workspace).card.write_text(json.dumps({"name": "Carol's card"}))
    settings = {
        "workspace": [str(workspace)],
        "port": 0,
        "grpc_port": 0,
        "faux": True,
        "card_signing_key": str(tmp_path / "card-key.pem"),
    }
    server = Gateway(resolve(settings, environ={}))
    await server.start()
    try:
        yield server
    finally:
        await server.stop()


async def get_json(url: str, **headers: str) -> Any:
    async with (
        aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as http,
        http.get(url, headers=headers) as response,
    ):
        assert response.status == 200
        return await response.json()


def card_of(data: dict[str, Any]) -> pb.AgentCard:
    return json_format.ParseDict(data, pb.AgentCard(), ignore_unknown_fields=True)


async def test_cards_are_signed_and_verify_in_our_client(gateway: Gateway) -> None:
    base = f"http://127.0.0.1:{gateway.http_port}"
    data = await get_json(base + "/.well-known/agent-card.json")
    again = await get_json(base + "/.well-known/agent-card.json")
    assert data["signatures"] == again["signatures"]  # one signature per card content
    header = json.loads(base64.urlsafe_b64decode(data["signatures"][0]["protected"] + "=="))
    assert header["alg"] == "ES256" and header["jku"] == base + "/.well-known/jwks.json"
    jwks = await get_json(base + "/.well-known/jwks.json")
    assert [key["kid"] for key in jwks["keys"]] == [header["kid"]]
    assert "d" not in jwks["keys"][0]  # never the private half
    keys = trusted_keys(jwks)
    card = card_of(data)
    assert verify_card(card, keys) == header["kid"]
    changed = pb.AgentCard()
    changed.CopyFrom(card)
    changed.description += "."
    with pytest.raises(CardSignatureError, match="does not match the card"):
        verify_card(changed, keys)
    async with await connect(base, key=KEY, card_keys=keys) as agent:
        assert agent.card.name == "Carol's card"  # the extended card, signed too
        assert verify_card(agent.card, keys) == header["kid"]
    stranger = trusted_keys(public_jwks(ECKey.generate_key("P-256"), "stranger"))
    with pytest.raises(CardError, match="signature does not verify: no signature verifies"):
        await connect(base, card_keys=stranger)


@pytest.mark.parametrize(
    "key",
    [ECKey.generate_key("P-256"), RSAKey.generate_key(2048), OKPKey.generate_key("Ed25519")],
    ids=["ES256", "RS256", "EdDSA"],
)
def test_what_no_signature_may_be(key: Any) -> None:
    card = pb.AgentCard(name="a", description="ü", version="1")
    signed = sign_card(card, key, kid="k")
    keys = trusted_keys(public_jwks(key, "k"))
    assert verify_card(signed, keys) == "k"
    with pytest.raises(CardSignatureError, match="not signed"):
        verify_card(card, keys)
    none = pb.AgentCard()
    none.CopyFrom(card)
    none.signatures.add(protected="eyJhbGciOiJub25lIiwia2lkIjoiayJ9", signature="")
    with pytest.raises(CardSignatureError, match="algorithm that is not allowed"):
        verify_card(none, keys)
    with pytest.raises(ValueError, match="public keys"):
        trusted_keys({"keys": [{"kty": "oct", "k": "c2VjcmV0", "kid": "k"}]})
    deep: dict[str, Any] = {}
    for _ in range(70):
        deep = {"x": deep or {"y": 1}}
    nested = pb.AgentCard()
    nested.CopyFrom(signed)
    nested.capabilities.extensions.add(uri="urn:x").params.update(deep)
    with pytest.raises(CardSignatureError, match="nests deeper"):
        verify_card(nested, keys)


async def test_the_sdk_signer_and_verifier_agree_with_ours(gateway: Gateway) -> None:
    require_peer_venv()
    base = f"http://127.0.0.1:{gateway.http_port}"
    # The pure 1.0 card (without A2A-Version a 0.3 reader gets the hybrid, whose 0.3
    # keys a strict 1.0 parser refuses; the signature covers the 1.0 form either way).
    ours = await get_json(base + "/.well-known/agent-card.json", **{"A2A-Version": "1.0"})
    jwks = await get_json(base + "/.well-known/jwks.json")
    sdk_key = ECKey.generate_key("P-256")
    use_secret(str(sdk_key.as_dict(private=True)["d"]))
    unsigned = {k: v for k, v in ours.items() if k != "signatures"}
    tampered = {**ours, "name": ours["name"] + "!"}
    request = {
        "sign": {
            "card": unsigned,
            "jwk": {**sdk_key.as_dict(private=True), "kid": "sdk"},
            "kid": "sdk",
            "alg": "ES256",
        },
        "verify": [{"card": ours, "jwks": jwks}, {"card": tampered, "jwks": jwks}],
    }
    peer = await asyncio.create_subprocess_exec(
        str(PEER_PYTHON),
        str(PEERS / "sdk_card_signing.py"),
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(peer.communicate(json.dumps(request).encode()), 60)
    assert peer.returncode == 0, err.decode()[-2000:]
    answer = json.loads(out)
    assert answer["verified"] == [{"ok": True}, {"error": "InvalidSignaturesError"}]
    sdk_signed = card_of(answer["signed"])
    sdk_keys = KeySet.import_key_set(public_jwks(sdk_key, "sdk"))
    assert verify_card(sdk_signed, sdk_keys) == "sdk"
