"""Opaque page tokens for ListTasks and ListTaskPushNotificationConfigs.

A token is ``base64url(mac || cursor)`` where the MAC (HMAC-SHA256, truncated to 16
bytes) covers the cursor and the query it belongs to (caller, filters). A forged
token, one issued for another query or caller, or one from an earlier server process
(the key is random per engine, unless ``shared`` gives one: a store shared by several
processes, so a token from one is read by the others) is refused with InvalidParams,
never read as "no token".
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import os
from collections.abc import Callable

from a2a_gateway.protocol.errors import FieldViolation, InvalidParamsError

_MAC_BYTES = 16


class PageTokens:
    def __init__(
        self, key: bytes | None = None, *, shared: Callable[[], bytes | None] | None = None
    ) -> None:
        self._key = key or os.urandom(32)
        self._shared = shared  # the key of every process on a shared store, once known

    def issue(self, cursor: str, query: str) -> str:
        payload = cursor.encode()
        return base64.urlsafe_b64encode(self._mac(payload, query) + payload).decode().rstrip("=")

    def read(self, token: str, query: str, *, field: str = "pageToken") -> str:
        """The cursor inside ``token``; InvalidParams when it is not ours for ``query``."""
        try:
            raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
        except (binascii.Error, ValueError):
            raw = b""
        mac, payload = raw[:_MAC_BYTES], raw[_MAC_BYTES:]
        if len(mac) != _MAC_BYTES or not hmac.compare_digest(mac, self._mac(payload, query)):
            raise InvalidParamsError(
                f"{field} is not a valid page token for this query",
                violations=[FieldViolation(field, "unknown, stale or forged page token")],
            )
        return payload.decode()

    def _mac(self, payload: bytes, query: str) -> bytes:
        key = (self._shared() if self._shared is not None else None) or self._key
        mac = hmac.new(key, payload + b"\x00" + query.encode(), hashlib.sha256)
        return mac.digest()[:_MAC_BYTES]
