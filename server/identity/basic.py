"""HTTP Basic callers: password hashes made and checked with scrypt (RFC 7914).

scrypt comes from OpenSSL through :func:`hashlib.scrypt`: a memory-hard KDF from a
well-kept library, nothing written here. A stored hash reads::

    scrypt$<log2 N>$<r>$<p>$<salt, base64url>$<derived key, base64url>

Checking one costs tens of milliseconds of CPU by design, so it runs in a worker
thread (never on the event loop), and a password once verified is remembered by a keyed
digest (bounded), so a caller that sends the same credentials on every request pays
the KDF once. A wrong password is never remembered: each guess pays in full.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import hashlib
import hmac
import re
import secrets
from collections import OrderedDict

from a2a_gateway.protocol.errors import UnauthenticatedError

PREFIX = "scrypt$"
#: N = 2**15, r = 8, p = 1: 32 MiB and about 50 ms per check on one core (OWASP's floor
#: is N = 2**17 with less memory per lane; we keep the check affordable per request).
DEFAULT_LOG2_N = 15
DEFAULT_R = 8
DEFAULT_P = 1
SALT_BYTES = 16
KEY_BYTES = 32
MAX_PASSWORD_CHARS = 1024
MAX_REMEMBERED = 1024
MAX_CONCURRENT_KDFS = 2
_HASH = re.compile(r"^scrypt\$(\d{1,2})\$(\d{1,2})\$(\d{1,2})\$([A-Za-z0-9_-]+)\$([A-Za-z0-9_-]+)$")
CHALLENGE = 'Basic realm="a2a", charset="UTF-8"'
MALFORMED = "The Basic credentials are not valid base64 of user:password"


class BasicRefused(UnauthenticatedError):
    """Basic credentials that do not pass: the challenge names the Basic scheme."""

    def __init__(self, message: str) -> None:
        super().__init__(message, challenge=CHALLENGE)


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _derive(password: str, salt: bytes, log2_n: int, r: int, p: int) -> bytes:
    n = 1 << log2_n
    return hashlib.scrypt(
        password.encode("utf-8", "surrogateescape"),
        salt=salt,
        n=n,
        r=r,
        p=p,
        maxmem=256 * r * n + 1024 * 1024,
        dklen=KEY_BYTES,
    )


def hash_password(password: str, *, log2_n: int = DEFAULT_LOG2_N) -> str:
    """A new stored hash of ``password`` with a random salt."""
    salt = secrets.token_bytes(SALT_BYTES)
    key = _derive(password, salt, log2_n, DEFAULT_R, DEFAULT_P)
    return f"{PREFIX}{log2_n}${DEFAULT_R}${DEFAULT_P}${_b64(salt)}${_b64(key)}"


def hash_problem(stored: object) -> str | None:
    """Why ``stored`` is not a usable hash, or None."""
    if not isinstance(stored, str):
        return "password_hash must be a string"
    match = _HASH.match(stored)
    if match is None:
        return "password_hash must be scrypt$<log2 N>$<r>$<p>$<salt>$<key> (callers add --basic)"
    log2_n, r, p = (int(match.group(i)) for i in (1, 2, 3))
    if not (10 <= log2_n <= 20 and 1 <= r <= 16 and 1 <= p <= 4):
        return "password_hash has scrypt parameters out of range"
    try:
        if len(_unb64(match.group(5))) != KEY_BYTES or len(_unb64(match.group(4))) < 8:
            return "password_hash has a salt or key of the wrong length"
    except (binascii.Error, ValueError):
        return "password_hash is not valid base64url"
    return None


def verify_password(password: str, stored: str) -> bool:
    """Constant-time check of ``password`` against a hash that passed :func:`hash_problem`."""
    match = _HASH.match(stored)
    if match is None or len(password) > MAX_PASSWORD_CHARS:
        return False
    log2_n, r, p = (int(match.group(i)) for i in (1, 2, 3))
    derived = _derive(password, _unb64(match.group(4)), log2_n, r, p)
    return hmac.compare_digest(derived, _unb64(match.group(5)))


def parse_basic(credentials: str) -> tuple[str, str]:
    """``user-id:password`` from the base64 of a Basic ``Authorization`` (RFC 7617)."""
    try:
        decoded = base64.b64decode(credentials.strip(), validate=True).decode("utf-8")
    except (binascii.Error, ValueError):
        raise UnauthenticatedError(MALFORMED) from None
    username, colon, password = decoded.partition(":")
    if not colon or not username:
        raise UnauthenticatedError(MALFORMED)
    return username, password


class PasswordChecker:
    """Checks passwords off the event loop and remembers the ones that passed."""

    def __init__(self) -> None:
        self._pepper = secrets.token_bytes(32)  # remembered digests mean nothing elsewhere
        self._passed: OrderedDict[bytes, None] = OrderedDict()
        # A flood of wrong passwords must not fill the default executor, which DNS
        # lookups (outbound, identity providers) share: at most this many KDFs at once.
        self._kdfs = asyncio.Semaphore(MAX_CONCURRENT_KDFS)

    def _memo(self, password: str, stored: str) -> bytes:
        data = stored.encode() + b"\0" + password.encode("utf-8", "surrogateescape")
        return hmac.new(self._pepper, data, hashlib.sha256).digest()

    async def check(self, password: str, stored: str) -> bool:
        memo = self._memo(password, stored)
        if memo in self._passed:
            self._passed.move_to_end(memo)
            return True
        async with self._kdfs:
            passed = await asyncio.to_thread(verify_password, password, stored)
        if not passed:
            return False
        self._passed[memo] = None
        while len(self._passed) > MAX_REMEMBERED:
            self._passed.popitem(last=False)
        return True


__all__ = [
    "CHALLENGE",
    "BasicRefused",
    "PasswordChecker",
    "hash_password",
    "hash_problem",
    "parse_basic",
    "verify_password",
]
