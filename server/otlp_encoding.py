"""The OTLP protobuf encoding of finished spans, leaner than the SDK's.

The OTLP/HTTP exporter's own encoder (``encode_spans``) builds every span as a separate
message and copies it into its parent, groups spans by hashing their ``Resource`` (a
``json.dumps`` of its attributes, per span), and encodes each attribute through a
generic value function: ~21 us per span on the 2-core machine of docs/performance.md,
on the exporter's thread, more than the span itself cost to make.

This encoder writes the protobuf wire format of each span itself (its fields are
few and fixed: ids, name, kind, times, attributes, status, flags), with the bytes of
what repeats from span to span kept: a span name's field, and each attribute's
``KeyValue`` (key and value: the method, the binding, the caller's name repeat; a
task id does not, and costs one encoding). Spans are grouped by the identity of their
resource and scope objects (a provider has one resource; its tracers one scope each),
whose messages are built with ``opentelemetry-proto`` once per batch. A span with
events, links or attribute values other than str, bool, int and float goes through the
SDK's own encoder, so the output is the same ``ExportTraceServiceRequest`` either way
(tests/server/test_otlp_encoding.py compares them; tests/e2e/test_tracing.py decodes
it with ``opentelemetry-proto``).
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import Any, Final, Protocol

from opentelemetry.attributes import BoundedAttributes
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.common.v1.common_pb2 import InstrumentationScope
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import SpanContext, SpanKind, Status, StatusCode, TraceState

# Field tags (field number << 3 | wire type) of opentelemetry/proto/trace/v1/trace.proto
# and common.proto, as bytes.
_TRACE_ID: Final = b"\x0a\x10"  # 1, bytes, 16 long
_SPAN_ID: Final = b"\x12\x08"  # 2, bytes, 8 long
_TRACE_STATE: Final = b"\x1a"  # 3, string
_PARENT_ID: Final = b"\x22\x08"  # 4, bytes, 8 long
_NAME: Final = b"\x2a"  # 5, string
_ATTRIBUTE: Final = b"\x4a"  # 9, KeyValue
_DROPPED_ATTRIBUTES: Final = b"\x50"  # 10, uint32
_STATUS_UNSET: Final = b"\x7a\x00"  # 15, Status, present and empty (as the SDK writes it)
_STATUS: Final = b"\x7a"
_FLAGS: Final = b"\x85\x01"  # 16, fixed32
_SPAN: Final = b"\x12"  # ScopeSpans.spans = 2
_KINDS: Final = {  # 6, enum: Span.SpanKind is the API's value + 1
    kind: b"\x30" + bytes((kind.value + 1,)) for kind in SpanKind
}
#: The same by the member's identity: hashing an enum member is a Python-level call
#: (``Enum.__hash__``), an ``id`` is not. Members live as long as their class.
_KINDS_BY_ID: Final = {id(kind): field for kind, field in _KINDS.items()}
_STATUS_CODES: Final = {StatusCode.OK: 1, StatusCode.ERROR: 2}
# SpanFlags: the context's remote flag is known (0x100), and set (0x200).
_LOCAL: Final = _FLAGS + struct.pack("<I", 0x100)
_REMOTE: Final = _FLAGS + struct.pack("<I", 0x300)
_SIMPLE: Final = (str, bool, int, float)
_times: Final = struct.Struct("<BQBQ").pack  # start (7) and end (8), fixed64, with tags
# Trace id (1, 16 bytes: its high and low halves), span id (2) and parent's span id (4),
# with their tags and lengths as big-endian shorts: the ids are big-endian bytes.
_root_ids: Final = struct.Struct(">HQQHQ").pack
_child_ids: Final = struct.Struct(">HQQHQHQ").pack
_IDS_TAGS: Final = 0x0A10
_SPAN_ID_TAG: Final = 0x1208
_PARENT_TAG: Final = 0x2208
_LOW_64: Final = (1 << 64) - 1
#: An empty trace state and an unset status that spans share (the encoder knows them by
#: identity, which spares it the calls telling it they are empty).
NO_TRACE_STATE: Final = TraceState()
UNSET_STATUS: Final = Status(StatusCode.UNSET)
_double: Final = struct.Struct("<d").pack
#: Past this many entries a cache is emptied (task ids would otherwise fill it).
_CACHE_BOUND: Final = 4096


class FinishedSpan(Protocol):
    """What is read of an ended span: the SDK's ``ReadableSpan`` by these names (our
    :class:`~a2a_gateway.server.lean_spans.LeanSpan` has the same fields)."""

    @property
    def name(self) -> str: ...
    @property
    def context(self) -> SpanContext | None: ...
    @property
    def parent(self) -> SpanContext | None: ...
    @property
    def kind(self) -> SpanKind: ...
    @property
    def start_time(self) -> int | None: ...
    @property
    def end_time(self) -> int | None: ...
    @property
    def attributes(self) -> Any: ...
    @property
    def dropped_attributes(self) -> int: ...
    @property
    def status(self) -> Status: ...
    @property
    def events(self) -> Sequence[Any]: ...
    @property
    def links(self) -> Sequence[Any]: ...
    @property
    def resource(self) -> Any: ...
    @property
    def instrumentation_scope(self) -> Any: ...


def _varint(value: int) -> bytes:
    if value < 0:
        value += 1 << 64  # int64: two's complement, ten bytes
    if value < 0x80:
        return bytes((value,))
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _field(tag: bytes, payload: bytes) -> bytes:
    """A length-delimited field."""
    return tag + _varint(len(payload)) + payload


def _any_value(value: str | bool | int | float) -> bytes:
    kind = type(value)
    if kind is str:
        return _field(b"\x0a", value.encode())  # type: ignore[union-attr]
    if kind is bool:
        return b"\x10\x01" if value else b"\x10\x00"
    if kind is int:
        return b"\x18" + _varint(value)  # type: ignore[arg-type]
    return b"\x21" + _double(value)


_attributes_seen: dict[tuple[str, type, Any], bytes] = {}
_names_seen: dict[str, bytes] = {}
_keys_seen: dict[str, bytes] = {}


def _attribute(key: str, value: str | bool | int | float) -> bytes:
    """Span.attributes' field for one attribute (a ``KeyValue``), kept once made (by
    key, type and value: ``True`` and ``1`` are equal keys of a dict)."""
    if len(_attributes_seen) >= _CACHE_BOUND:
        _attributes_seen.clear()
    found = _attributes_seen[(key, type(value), value)] = _attribute_field(key, value)
    return found


def _attribute_field(key: str, value: str | bool | int | float) -> bytes:
    named = _keys_seen.get(key)
    if named is None:
        if len(_keys_seen) >= _CACHE_BOUND:
            _keys_seen.clear()
        named = _keys_seen[key] = _field(b"\x0a", key.encode())
    if type(value) is str:
        text = value.encode()
        size = len(text)
        if size < 0x7E:  # every length below in one byte
            pair = named + bytes((0x12, size + 2, 0x0A, size)) + text
            return bytes((0x4A, len(pair))) + pair if len(pair) < 0x80 else _field(_ATTRIBUTE, pair)
    return _field(_ATTRIBUTE, named + _field(b"\x12", _any_value(value)))


def _name(name: str) -> bytes:
    found = _names_seen.get(name)
    if found is None:
        if len(_names_seen) >= _CACHE_BOUND:
            _names_seen.clear()
        found = _names_seen[name] = _field(_NAME, name.encode())
    return found


def _simple(attributes: Any) -> bool:
    """Whether every value is one this encoder writes itself."""
    return all(type(v) in _SIMPLE for v in attributes.values())


def _span(span: FinishedSpan) -> bytes | None:
    """One span's ``Span`` message (the field, tag and length, in ``ScopeSpans``), or
    ``None`` for a span with what only the SDK's encoder writes. A ``SpanContext`` is
    read as the tuple it is (its properties are Python calls; see
    tests/server/test_lean_spans.py, which pins the SDK versions this was checked on)."""
    if span.events or span.links:
        return None
    context: Any = span.context
    trace_id, span_id, _, _, state, _ = context
    parent: Any = span.parent
    if state is NO_TRACE_STATE or not state:
        # The ids' fields (trace, span, parent's span) in one packing, tags included.
        high, low = trace_id >> 64, trace_id & _LOW_64
        if parent is None:
            parts = [_root_ids(_IDS_TAGS, high, low, _SPAN_ID_TAG, span_id)]
        else:
            parts = [
                _child_ids(_IDS_TAGS, high, low, _SPAN_ID_TAG, span_id, _PARENT_TAG, parent[1])
            ]
    else:
        parts = [_TRACE_ID, trace_id.to_bytes(16, "big"), _SPAN_ID, span_id.to_bytes(8, "big")]
        text = ",".join(f"{k}={v}" for k, v in state.items())
        parts.append(_field(_TRACE_STATE, text.encode()))
        if parent is not None:
            parts += (_PARENT_ID, parent[1].to_bytes(8, "big"))
    name = _names_seen.get(span.name)
    kind_field = _KINDS_BY_ID.get(id(span.kind))
    parts += (
        name if name is not None else _name(span.name),
        kind_field if kind_field is not None else _KINDS[span.kind],
        _times(0x39, span.start_time or 0, 0x41, span.end_time or 0),
    )
    attributes = span.attributes
    if attributes:
        seen = _attributes_seen
        append = parts.append
        for key, value in attributes.items():
            kind = type(value)
            if kind not in _SIMPLE:
                return None
            field = seen.get((key, kind, value))
            append(field if field is not None else _attribute(key, value))
    if span.dropped_attributes:
        parts.append(_DROPPED_ATTRIBUTES + _varint(span.dropped_attributes))
    status = span.status
    if status is UNSET_STATUS or status.status_code is StatusCode.UNSET:
        parts.append(_STATUS_UNSET)
    else:
        payload = b"\x18" + bytes((_STATUS_CODES[status.status_code],))
        if status.description:
            payload = _field(b"\x12", status.description.encode()) + payload
        parts.append(_field(_STATUS, payload))
    parts.append(_REMOTE if parent is not None and parent[2] else _LOCAL)
    payload = b"".join(parts)
    size = len(payload)
    if size < 0x4000:  # the length in two bytes at most
        head = bytes((0x12, size)) if size < 0x80 else bytes((0x12, size & 0x7F | 0x80, size >> 7))
        return head + payload
    return _field(_SPAN, payload)


def _sdk_span(span: FinishedSpan) -> bytes:
    """The SDK's encoding of one span (events, links, sequence values): the field."""
    attributes = span.attributes
    if attributes and not isinstance(attributes, BoundedAttributes):
        # A plain mapping (a LeanSpan's): the SDK's encoder expects cleaned values.
        attributes = BoundedAttributes(None, attributes)
    if isinstance(span, ReadableSpan):
        return _field(
            _SPAN,
            encode_spans([span]).resource_spans[0].scope_spans[0].spans[0].SerializeToString(),
        )
    copy = ReadableSpan(
        name=span.name,
        context=span.context,
        parent=span.parent,
        resource=span.resource,
        attributes=attributes,
        events=span.events,
        links=span.links,
        kind=span.kind,
        status=span.status,
        start_time=span.start_time,
        end_time=span.end_time,
        instrumentation_scope=span.instrumentation_scope,
    )
    encoded = encode_spans([copy]).resource_spans[0].scope_spans[0].spans[0]
    if span.dropped_attributes:
        encoded.dropped_attributes_count = span.dropped_attributes
    dropped_events = getattr(span, "dropped_events", 0)
    dropped_links = getattr(span, "dropped_links", 0)
    if dropped_events:
        encoded.dropped_events_count = dropped_events
    if dropped_links:
        encoded.dropped_links_count = dropped_links
    return _field(_SPAN, encoded.SerializeToString())


def _resource(span: FinishedSpan) -> bytes:
    """``ResourceSpans.resource`` (field 1) and ``schema_url`` (3) of ``span``'s resource."""
    resource = span.resource
    attributes = resource.attributes
    if _simple(attributes):
        message = b"".join(_kv(k, v) for k, v in attributes.items())
    else:
        whole = encode_spans([span]).resource_spans[0].resource  # type: ignore[list-item]
        message = whole.SerializeToString()
    out = _field(b"\x0a", message)
    if resource.schema_url:
        out += _field(b"\x1a", resource.schema_url.encode())
    return out


def _kv(key: str, value: str | bool | int | float) -> bytes:
    """``Resource.attributes``' field (1) for one attribute."""
    pair = _field(b"\x0a", key.encode()) + _field(b"\x12", _any_value(value))
    return _field(b"\x0a", pair)


def _scope(span: FinishedSpan) -> tuple[bytes, bytes]:
    """``ScopeSpans.scope`` (1) and ``schema_url`` (3) of ``span``'s scope."""
    scope = span.instrumentation_scope
    if scope is None:
        return b"", b""
    message = InstrumentationScope(name=scope.name)
    if scope.version:
        message.version = scope.version
    schema = _field(b"\x1a", scope.schema_url.encode()) if scope.schema_url else b""
    return _field(b"\x0a", message.SerializeToString()), schema


def encode(spans: Sequence[FinishedSpan] | Sequence[ReadableSpan]) -> bytes:
    """``spans`` as the body of one OTLP/HTTP ``ExportTraceServiceRequest``."""
    # resource id -> (the resource's fields, scope id -> [scope's fields, spans...])
    groups: dict[int, tuple[bytes, dict[int, list[bytes]]]] = {}
    for span in spans:
        found = groups.get(id(span.resource))
        if found is None:
            found = groups[id(span.resource)] = (_resource(span), {})
        scopes = found[1]
        parts = scopes.get(id(span.instrumentation_scope))
        if parts is None:
            scope, schema = _scope(span)
            parts = scopes[id(span.instrumentation_scope)] = [scope, schema]
        encoded = _span(span)
        parts.append(encoded if encoded is not None else _sdk_span(span))
    request = []
    for resource, scopes in groups.values():
        scope_spans = b"".join(_field(b"\x12", b"".join(parts)) for parts in scopes.values())
        request.append(_field(b"\x0a", resource + scope_spans))
    return b"".join(request)
