"""The OTLP protobuf encoding of finished spans, leaner than the SDK's.

The OTLP/HTTP exporter's own encoder (``encode_spans``) builds every span as a separate
message and copies it into its parent, groups spans by hashing their ``Resource`` (a
``json.dumps`` of its attributes, per span), and encodes each attribute through a
generic value function: ~21 us per span on the 2-core machine of docs/performance.md,
on the exporter's thread, more than the span itself cost to make. This encoder writes
each span in place (``spans.add()``), groups by the resource and scope objects' identity
(a provider has one resource; its tracers one scope each), and encodes the attribute
types spans carry (str, bool, int, float) directly; anything else (sequences, events,
links) goes through the SDK's own encoder for that span, so the output is the same
``ExportTraceServiceRequest`` either way (tests/e2e/test_tracing.py decodes it with
``opentelemetry-proto``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import (
    ResourceSpans,
    ScopeSpans,
    Span,
    SpanFlags,
    Status,
)
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import SpanKind, StatusCode

_KINDS: Final = {
    SpanKind.INTERNAL: Span.SpanKind.SPAN_KIND_INTERNAL,
    SpanKind.SERVER: Span.SpanKind.SPAN_KIND_SERVER,
    SpanKind.CLIENT: Span.SpanKind.SPAN_KIND_CLIENT,
    SpanKind.PRODUCER: Span.SpanKind.SPAN_KIND_PRODUCER,
    SpanKind.CONSUMER: Span.SpanKind.SPAN_KIND_CONSUMER,
}
_STATUS: Final = {
    StatusCode.OK: Status.StatusCode.STATUS_CODE_OK,
    StatusCode.ERROR: Status.StatusCode.STATUS_CODE_ERROR,
}
_LOCAL: Final = SpanFlags.SPAN_FLAGS_CONTEXT_HAS_IS_REMOTE_MASK
_REMOTE: Final = _LOCAL | SpanFlags.SPAN_FLAGS_CONTEXT_IS_REMOTE_MASK


def _simple(attributes: Any) -> bool:
    """Whether every value is one this encoder writes itself."""
    return all(type(v) in (str, bool, int, float) for v in attributes.values())


def _value(target: AnyValue, value: str | bool | int | float) -> None:
    kind = type(value)
    if kind is str:
        target.string_value = value  # type: ignore[assignment]
    elif kind is bool:
        target.bool_value = value  # type: ignore[assignment]
    elif kind is int:
        target.int_value = value  # type: ignore[assignment]
    else:
        target.double_value = value  # type: ignore[assignment]


def _attributes(target: Any, attributes: Any) -> None:
    add = target.add
    for key, value in attributes.items():
        item: KeyValue = add(key=key)
        _value(item.value, value)


def _span(target: Span, span: ReadableSpan) -> None:
    context = span.context
    assert context is not None  # a finished SDK span always has one
    target.trace_id = context.trace_id.to_bytes(16, "big")
    target.span_id = context.span_id.to_bytes(8, "big")
    if context.trace_state:
        target.trace_state = ",".join(f"{k}={v}" for k, v in context.trace_state.items())
    parent = span.parent
    if parent is not None:
        target.parent_span_id = parent.span_id.to_bytes(8, "big")
        target.flags = _REMOTE if parent.is_remote else _LOCAL
    else:
        target.flags = _LOCAL
    target.name = span.name
    target.kind = _KINDS[span.kind]
    target.start_time_unix_nano = span.start_time or 0
    target.end_time_unix_nano = span.end_time or 0
    if span.attributes:
        _attributes(target.attributes, span.attributes)
    if span.dropped_attributes:
        target.dropped_attributes_count = span.dropped_attributes
    status = span.status
    if status.status_code is StatusCode.UNSET:
        target.status.SetInParent()  # present and empty, as the SDK writes it
    else:
        target.status.code = _STATUS[status.status_code]
        if status.description:
            target.status.message = status.description


def encode(spans: Sequence[ReadableSpan]) -> bytes:
    """``spans`` as the body of one OTLP/HTTP ``ExportTraceServiceRequest``."""
    request = ExportTraceServiceRequest()
    groups = _Groups(request)
    for span in spans:
        scope = groups.scope_of(span)
        if span.events or span.links or not _simple(span.attributes or {}):
            # What this encoder does not write itself: the SDK's encoding of the span.
            scope.spans.append(encode_spans([span]).resource_spans[0].scope_spans[0].spans[0])
        else:
            _span(scope.spans.add(), span)
    return request.SerializeToString()


class _Groups:
    """The request's ResourceSpans and ScopeSpans, by the identity of the span's
    resource and scope objects (one provider has one resource, each tracer one scope;
    the spans being encoded keep them alive, so their ids stay theirs)."""

    def __init__(self, request: ExportTraceServiceRequest) -> None:
        self.request = request
        self.resources: dict[int, ResourceSpans] = {}
        self.scopes: dict[tuple[int, int], ScopeSpans] = {}

    def scope_of(self, span: ReadableSpan) -> ScopeSpans:
        key = (id(span.resource), id(span.instrumentation_scope))
        found = self.scopes.get(key)
        if found is not None:
            return found
        resource = self.resources.get(key[0])
        if resource is None:
            resource = self.resources[key[0]] = self.request.resource_spans.add()
            if _simple(span.resource.attributes):
                _attributes(resource.resource.attributes, span.resource.attributes)
            else:
                whole = encode_spans([span]).resource_spans[0].resource
                resource.resource.CopyFrom(whole)
            if span.resource.schema_url:
                resource.schema_url = span.resource.schema_url
        found = self.scopes[key] = resource.scope_spans.add()
        scope = span.instrumentation_scope
        if scope is not None:
            found.scope.name = scope.name
            if scope.version:
                found.scope.version = scope.version
            if scope.schema_url:
                found.schema_url = scope.schema_url
        return found
