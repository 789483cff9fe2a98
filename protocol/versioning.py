"""Service parameters: ``A2A-Version`` negotiation and ``A2A-Extensions`` parsing."""

from __future__ import annotations

from collections.abc import Iterable

from .context import PROTOCOL_VERSION
from .errors import VersionNotSupportedError

VERSION_HEADER = "A2A-Version"
EXTENSIONS_HEADER = "A2A-Extensions"
LEGACY_EXTENSIONS_HEADER = "X-A2A-Extensions"

#: Major.Minor versions this gateway serves.
SUPPORTED_VERSIONS: frozenset[str] = frozenset({PROTOCOL_VERSION})


def negotiate_version(value: str | None) -> str:
    """The version to serve for a request's ``A2A-Version`` value.

    A 1.0 method name or route already tells us the caller speaks 1.0, so a missing or
    empty header is served as 1.0 (curl users forget headers). ``1.0`` and ``1.0.x``
    (patch ignored) are accepted; anything else is VersionNotSupported.
    """
    if value is None or not value.strip():
        return PROTOCOL_VERSION
    text = value.strip()
    parts = text.split(".")
    if len(parts) in (2, 3) and all(p.isascii() and p.isdigit() for p in parts):  # not "²"
        major_minor = f"{int(parts[0])}.{int(parts[1])}"
        if major_minor in SUPPORTED_VERSIONS:
            return major_minor
    supported = ", ".join(sorted(SUPPORTED_VERSIONS))
    raise VersionNotSupportedError(
        f"A2A-Version {text[:32]!r} is not supported (supported: {supported})",
        metadata={"supportedVersions": supported},
    )


def parse_extensions(values: Iterable[str]) -> frozenset[str]:
    """Extension URIs from one or more comma-separated header values."""
    uris: set[str] = set()
    for value in values:
        for item in value.split(","):
            uri = item.strip()
            if uri:
                uris.add(uri)
    return frozenset(uris) if uris else _NO_EXTENSIONS


_NO_EXTENSIONS: frozenset[str] = frozenset()


def format_extensions(uris: Iterable[str]) -> str:
    return ", ".join(sorted(uris))
