"""The 0.3 version names. The rule itself (which ``A2A-Version`` a 0.3 operation takes)
is :mod:`a2a_gateway.protocol.versioning`'s, the one rule of every binding."""

from __future__ import annotations

from ..versioning import LEGACY_VERSION, is_legacy_version, negotiate_legacy_version

#: Card-level ``protocolVersion`` of the 0.3 keys of the hybrid card (0.3 used semver).
LEGACY_CARD_VERSION = "0.3.0"

__all__ = [
    "LEGACY_CARD_VERSION",
    "LEGACY_VERSION",
    "is_legacy_version",
    "negotiate_legacy_version",
]
