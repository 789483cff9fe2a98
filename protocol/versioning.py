"""Service parameters: the ``A2A-Version`` rule of every binding (1.0 and 0.3) and
``A2A-Extensions`` parsing."""

from __future__ import annotations

from collections.abc import Iterable

from .context import PROTOCOL_VERSION
from .errors import VersionNotSupportedError

VERSION_HEADER = "A2A-Version"
EXTENSIONS_HEADER = "A2A-Extensions"
LEGACY_EXTENSIONS_HEADER = "X-A2A-Extensions"

#: Major.Minor versions the 1.0 operations take.
SUPPORTED_VERSIONS: frozenset[str] = frozenset({PROTOCOL_VERSION})
#: The version a 0.3 operation is served as (``CallContext.version``).
LEGACY_VERSION = "0.3"
#: Every version this gateway serves, newest first: every version error lists them.
SERVED_VERSIONS: tuple[str, ...] = (PROTOCOL_VERSION, LEGACY_VERSION)
_SERVED = ", ".join(SERVED_VERSIONS)

# The version rule of every binding (JSON-RPC, HTTP+JSON, gRPC), once the operation is
# known: a 1.0 operation takes no A2A-Version or 1.0[.x]; a 0.3 operation (a 0.3 method
# name, path or gRPC service) takes none or 0.3[.x]. A missing version follows the
# operation: 0.3 and 1.0 method names and paths never collide, so a header-less 1.0
# call is 1.0 (curl users forget headers) and a header-less 0.3 call is 0.3 (0.3
# clients send none). Every refusal is VersionNotSupported listing every version
# served, answered in the binding's 1.0 vocabulary (0.3 has no code for it).


def _major_minor(text: str) -> str | None:
    parts = text.split(".")
    if len(parts) in (2, 3) and all(p.isascii() and p.isdigit() for p in parts):  # not "²"
        return f"{int(parts[0])}.{int(parts[1])}"
    return None


class VersionRefused(VersionNotSupportedError):
    """VersionNotSupported from the version rule itself (the caller's ``A2A-Version``),
    as opposed to one an agent or an upstream raised: every binding answers it in its
    1.0 vocabulary, on 0.3 operations too (0.3 has no code for it)."""


def _refuse(text: str, why: str) -> VersionRefused:
    return VersionRefused(
        f"A2A-Version {text[:32]!r} {why} (served: {_SERVED})",
        metadata={"supportedVersions": _SERVED},
    )


def is_legacy_version(value: str) -> bool:
    """Whether an ``A2A-Version`` value names 0.3 (``0.3`` or ``0.3.x``)."""
    if not value.lstrip().startswith("0"):  # "1.0" leaves here (checked on every request)
        return False
    return _major_minor(value.strip()) == LEGACY_VERSION


def negotiate_version(value: str | None) -> str:
    """The version to serve a 1.0 operation for a request's ``A2A-Version`` value.

    A missing or empty value is 1.0; ``1.0`` and ``1.0.x`` (patch ignored) are
    accepted; anything else (0.3 included) is VersionNotSupported.
    """
    if value == PROTOCOL_VERSION:  # (what clients send: no parse on every call)
        return PROTOCOL_VERSION
    if value is None or not value.strip():
        return PROTOCOL_VERSION
    text = value.strip()
    major_minor = _major_minor(text)
    if major_minor in SUPPORTED_VERSIONS:
        assert major_minor is not None
        return major_minor
    if major_minor == LEGACY_VERSION:
        raise _refuse(text, "does not match a 1.0 operation: 0.3 calls use the 0.3 names")
    raise _refuse(text, "is not supported")


def negotiate_legacy_version(value: str | None, operation: str) -> str:
    """The version to serve the 0.3 ``operation`` for an ``A2A-Version`` value: none,
    ``0.3`` or ``0.3.x``; anything else is VersionNotSupported naming the operation."""
    if value is None or not value.strip() or is_legacy_version(value):
        return LEGACY_VERSION
    text = value.strip()
    if _major_minor(text) in SUPPORTED_VERSIONS:
        why = f"does not match the 0.3 operation {operation!r}: send no A2A-Version, or 0.3"
        raise _refuse(text, why)
    raise _refuse(text, "is not supported")


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
