"""0.3 JSON-RPC error objects both ways: a 1.0 error as a 0.3 ``error``, and a 0.3
``error`` read into the 1.0 shape."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..errors import BAD_REQUEST_TYPE_URL, ERROR_INFO_TYPE_URL, A2AError
from .tables import JSON

#: JSON-RPC codes a 0.3 peer knows (standard errors and -32001..-32007).
V03_ERROR_CODES = frozenset({-32700, -32600, -32601, -32602, -32603, *range(-32007, -32000)})
#: What a 1.0 code without a 0.3 equivalent becomes.
V03_FALLBACK_CODE = -32603
#: Our own transport errors (authentication, permission, rate limit) keep their
#: implementation-defined codes: they are not A2A errors in either version.
_GATEWAY_CODES = frozenset({-32000, -32100, -32101})


def error_code(error: A2AError) -> int:
    """The 0.3 JSON-RPC code for ``error``: its own when a 0.3 peer knows it (or it is
    one of our transport errors), else -32603."""
    code = error.spec.jsonrpc_code
    if code in V03_ERROR_CODES or code in _GATEWAY_CODES:
        return code
    return V03_FALLBACK_CODE


def error_object(error: A2AError) -> JSON:
    """A 0.3 JSON-RPC ``error``: ``{code, message, data?}``; ``data`` is free-form in
    0.3, here ``{reason, ...ErrorInfo.metadata, fieldViolations?}``."""
    data: JSON = {"reason": error.spec.reason, **error.metadata}
    if error.violations:
        data["fieldViolations"] = [
            {"field": v.field, "description": v.description} for v in error.violations
        ]
    return {"code": error_code(error), "message": error.message, "data": data}


def error_in(error: Any) -> Any:
    """A 0.3 JSON-RPC ``error`` in the 1.0 shape (``data`` an array of ErrorInfo and
    BadRequest), so one parser reads both. 0.3 ``data`` is free-form: an object with a
    ``reason`` (ours, :func:`error_object`) keeps it and its string members as
    metadata; anything else is dropped and the code alone picks the class."""
    if not isinstance(error, Mapping):
        return error
    out = {k: v for k, v in error.items() if k != "data"}
    data = error.get("data")
    if isinstance(data, list):
        out["data"] = data  # a 1.0-style peer: already the right shape
    elif isinstance(data, Mapping) and isinstance(data.get("reason"), str):
        metadata = {str(k): v for k, v in data.items() if isinstance(v, str) and k != "reason"}
        details: list[JSON] = [
            {"@type": ERROR_INFO_TYPE_URL, "reason": data["reason"], "metadata": metadata}
        ]
        violations = data.get("fieldViolations")
        if isinstance(violations, list):
            details.append({"@type": BAD_REQUEST_TYPE_URL, "fieldViolations": violations})
        out["data"] = details
    return out
