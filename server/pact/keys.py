"""The key that signs delegation tokens and receipts: ``<workspace>/.a2a/pact-signing-key.json``.

A private ES256 JWK, made on first use (mode 0600, published by a hard link so two
processes starting together keep one key) and read once per process after that. Only
its public half leaves the process (``jwks.json``); the file is never logged, served
or quoted in an error.
"""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path
from typing import Any

from joserfc import jws
from joserfc.jwk import ECKey, Key

from a2a_gateway.local.atomic_files import removed_on_failure, temp_path, write_file
from a2a_gateway.local.layout import RELATIVE
from a2a_gateway.protocol.card_signature import load_signing_key

SIGNING_KEY_FILE = RELATIVE.pact_signing_key
ALGORITHM = "ES256"


class SigningKey:
    """One workspace's PACT signing key (its ``kid`` is the JWK thumbprint)."""

    def __init__(self, key: Key) -> None:
        self._key = key
        self.kid = key.thumbprint()
        public = {**key.as_dict(private=False), "kid": self.kid, "alg": ALGORITHM, "use": "sig"}
        self.jwks: dict[str, Any] = {"keys": [public]}
        #: The JWKS as canonical JSON text (what a :class:`KeySource` takes).
        self.jwks_text = json.dumps(self.jwks, sort_keys=True, separators=(",", ":"))

    def __repr__(self) -> str:  # never the private part
        return f"SigningKey(kid={self.kid!r})"

    def sign(self, claims: dict[str, Any], typ: str) -> str:
        """A compact JWS of ``claims`` (JSON) with ``typ`` in its header."""
        header = {"alg": ALGORITHM, "kid": self.kid, "typ": typ}
        payload = json.dumps(claims, separators=(",", ":"), ensure_ascii=False).encode()
        return jws.serialize_compact(header, payload, self._key, [ALGORITHM])


def load_or_create(workspace: Path) -> SigningKey:
    """The workspace's key, made now when it has none (blocking: call it in a thread)."""
    path = workspace / SIGNING_KEY_FILE
    try:
        return SigningKey(load_signing_key(path.read_bytes()))
    except FileNotFoundError:
        pass
    key = ECKey.generate_key("P-256", private=True)
    data = json.dumps(key.as_dict(private=True)).encode()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = temp_path(str(path.parent), path.name)
    with removed_on_failure(tmp):
        write_file(tmp, data, os.O_WRONLY | os.O_CREAT | os.O_EXCL, fsync=True)
        with contextlib.suppress(FileExistsError):  # never over a key made meanwhile
            os.link(tmp, path)
    os.unlink(tmp)
    return SigningKey(load_signing_key(path.read_bytes()))


__all__ = ["ALGORITHM", "SIGNING_KEY_FILE", "SigningKey", "load_or_create"]
