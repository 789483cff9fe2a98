"""joserfc against PyJWT: microseconds per JWT signature check, RS256 and ES256.

    .venv/bin/pip install pyjwt   # only for this comparison; the gateway uses joserfc
    .venv/bin/python -P tools/compare_jose.py [--rounds 3000]

Both verify the same token with the same public key; PyJWT's figure includes its claim
checks (iss, aud, exp), joserfc's is the signature only (the gateway checks claims itself,
a few microseconds). A measurement for docs/performance.md, never a test.
"""

from __future__ import annotations

import argparse
import time

import jwt as pyjwt
from joserfc import jwt as jose_jwt
from joserfc.jwk import ECKey, Key, KeySet, RSAKey


def per_verify_us(rounds: int, verify: object) -> float:
    started = time.perf_counter()
    for _ in range(rounds):
        verify()  # type: ignore[operator]
    return (time.perf_counter() - started) / rounds * 1e6


def compare(alg: str, key: Key, rounds: int) -> str:
    now = int(time.time())
    claims = {"iss": "https://idp", "aud": "a2a", "sub": "bot", "exp": now + 3600, "iat": now}
    token = jose_jwt.encode({"alg": alg, "kid": "k1"}, claims, key, algorithms=[alg])
    public = {**key.as_dict(private=False), "kid": "k1"}
    jose_keys = KeySet.import_key_set({"keys": [public]})  # type: ignore[list-item]
    py_key = pyjwt.PyJWK(public).key
    jose = per_verify_us(rounds, lambda: jose_jwt.decode(token, jose_keys, algorithms=[alg]))
    py = per_verify_us(
        rounds,
        lambda: pyjwt.decode(token, py_key, algorithms=[alg], audience="a2a", issuer="https://idp"),
    )
    return f"{alg}: joserfc {jose:.1f} us/verify, PyJWT {py:.1f} us/verify"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3000)
    rounds = parser.parse_args().rounds
    print(compare("RS256", RSAKey.generate_key(2048), rounds))
    print(compare("ES256", ECKey.generate_key("P-256"), rounds))


if __name__ == "__main__":
    main()
