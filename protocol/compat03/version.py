"""The 0.3 version rule of every binding: which ``A2A-Version`` values a 0.3 operation takes."""

from __future__ import annotations

from ..errors import VersionNotSupportedError

#: The version a 0.3 method is served as (``CallContext.version``).
LEGACY_VERSION = "0.3"
#: Card-level ``protocolVersion`` of the 0.3 keys of the hybrid card (0.3 used semver).
LEGACY_CARD_VERSION = "0.3.0"


def is_legacy_version(value: str) -> bool:
    """Whether an ``A2A-Version`` value names 0.3 (``0.3`` or ``0.3.x``)."""
    if not value.lstrip().startswith("0"):  # "1.0" leaves here (checked on every request)
        return False
    parts = value.strip().split(".")
    return (
        len(parts) in (2, 3)
        and all(p.isascii() and p.isdigit() for p in parts)
        and int(parts[0]) == 0
        and int(parts[1]) == 3
    )


def negotiate_legacy_version(value: str | None, operation: str) -> str:
    """The 0.3 version rule of every binding (digest §13): the 0.3 ``operation`` takes
    no ``A2A-Version``, or ``0.3``/``0.3.x``; anything else is VersionNotSupported."""
    if value is None or not value.strip() or is_legacy_version(value):
        return LEGACY_VERSION
    raise VersionNotSupportedError(
        f"A2A-Version {value.strip()[:32]!r} does not match the 0.3 operation "
        f"{operation!r} (send no A2A-Version, or {LEGACY_VERSION})",
        metadata={"supportedVersions": LEGACY_VERSION},
    )
