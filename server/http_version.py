"""The version rule (:mod:`a2a_gateway.protocol.versioning`) on the two HTTP bindings.

:func:`~.http_request.call_context` judges ``A2A-Version`` before any body is read, as
for a 1.0 operation; a 0.3 value is set aside first (:func:`set_aside_legacy_version`),
and judged once the operation is known (:func:`check_version`): JSON-RPC knows it only
after reading the envelope, HTTP+JSON from the path.
"""

from __future__ import annotations

from aiohttp import web

from a2a_gateway.protocol import versioning


def set_aside_legacy_version(request: web.Request) -> tuple[web.Request, str | None]:
    """A 0.3 ``A2A-Version`` value set aside: call_context would refuse it before the
    operation is known. Returns the request without it (a clone) and the value, or the
    request itself and None (any other value stays for call_context to judge). The
    value is read where call_context reads it: the header, else the query."""
    name = versioning.VERSION_HEADER
    value = request.headers.get(name)
    if value is None or not value.strip():
        if not request.query_string:  # no header, no query: nothing to set aside
            return request, None
        value = request.query.get(name) or request.query.get(name.lower())
        if value is None or not versioning.is_legacy_version(value):
            return request, None
        return request.clone(
            rel_url=request.rel_url.without_query_params(name, name.lower())
        ), value
    if not versioning.is_legacy_version(value):
        return request, None
    headers = request.headers.copy()
    del headers[name]
    return request.clone(headers=headers), value


def check_version(request: web.Request, legacy: str | None, set_aside: str | None) -> None:
    """The version rule once the operation is known. A 1.0 operation (``legacy`` None)
    never takes a 0.3 value (``set_aside``); the 0.3 operation named ``legacy`` takes
    none, or a 0.3 value only (anything else: VersionNotSupported)."""
    if legacy is None:
        if set_aside is not None:
            versioning.negotiate_version(set_aside)  # raises VersionNotSupported
        return
    if set_aside is not None:
        return
    name = versioning.VERSION_HEADER
    given = request.headers.get(name) or request.query.get(name) or request.query.get(name.lower())
    versioning.negotiate_legacy_version(given, legacy)
