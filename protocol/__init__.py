"""What server and client share: the typed service, errors, ProtoJSON codec, HTTP
routes derived from the schema, SSE framing and version negotiation."""

from . import codec, errors, routes, sse, versioning
from .context import ANONYMOUS, PROTOCOL_VERSION, CallContext, Caller
from .errors import A2AError
from .service import SERVICE_DESCRIPTOR, A2AService, method_name

__all__ = [
    "ANONYMOUS",
    "PROTOCOL_VERSION",
    "SERVICE_DESCRIPTOR",
    "A2AError",
    "A2AService",
    "CallContext",
    "Caller",
    "codec",
    "errors",
    "method_name",
    "routes",
    "sse",
    "versioning",
]
