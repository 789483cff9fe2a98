"""The official SDK's agent card signer and verifier (``a2a-sdk[signing]``), as a
JSON-in/JSON-out oracle (runs in .venv-peer).

Reads one JSON object on stdin::

    {"sign": {"card": <AgentCard ProtoJSON>, "jwk": <private JWK>, "kid": "...",
              "alg": "ES256"},
     "verify": [{"card": <AgentCard ProtoJSON>, "jwks": <JWKS>}, ...]}

and writes one JSON object on stdout: ``signed`` (the card the SDK's
``create_agent_card_signer`` returns, ProtoJSON) and ``verified`` (per verify item
``{"ok": true}`` or ``{"error": <exception class>}`` from ``create_signature_verifier``).
"""

from __future__ import annotations

import json
import sys
from typing import Any

from a2a.types import AgentCard
from a2a.utils.signing import create_agent_card_signer, create_signature_verifier
from google.protobuf import json_format
from jwt import PyJWK

ALGORITHMS = ["ES256", "RS256", "EdDSA"]


def card_of(data: dict[str, Any]) -> AgentCard:
    return json_format.ParseDict(data, AgentCard(), ignore_unknown_fields=False)


def verify(item: dict[str, Any]) -> dict[str, Any]:
    keys = {key["kid"]: PyJWK(key) for key in item["jwks"]["keys"]}

    def key_provider(kid: str | None, jku: str | None) -> PyJWK:
        return keys[kid or ""]

    try:
        create_signature_verifier(key_provider, ALGORITHMS)(card_of(item["card"]))
    except Exception as exc:  # the SDK's verdict, whatever it raised
        return {"error": type(exc).__name__}
    return {"ok": True}


def main() -> None:
    request = json.loads(sys.stdin.read())
    answer: dict[str, Any] = {}
    sign = request.get("sign")
    if sign:
        signer = create_agent_card_signer(
            PyJWK(sign["jwk"]), {"kid": sign["kid"], "alg": sign["alg"], "jku": None, "typ": "JOSE"}
        )
        answer["signed"] = json_format.MessageToDict(signer(card_of(sign["card"])))
    answer["verified"] = [verify(item) for item in request.get("verify", [])]
    print(json.dumps(answer))


if __name__ == "__main__":
    main()
