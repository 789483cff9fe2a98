"""The tracing seam: spans that follow a task across agents (OpenTelemetry, W3C context).

One small surface, used the same way by the server (a span per inbound call and per
run), the runtime (the model's calls and each tool call) and the client (a span per
outbound call, and ``traceparent``/``tracestate`` on its headers or metadata):

- :func:`span` opens a child of the current span *if this call is traced*, else does
  nothing. "Traced" means a gateway with tracing on (``--otlp-endpoint``) started the
  call: its :class:`Tracer` rides in a context variable, so the engine, the runtime and
  the client need no tracer handed to them, and a gateway with tracing off (the
  default) pays one context-variable read per would-be span.
- :func:`inject` writes the current span's W3C ``traceparent`` (and ``tracestate``)
  into outgoing headers, so the next agent's spans join the same trace. It writes
  nothing when there is no valid current span.
- :func:`extract` reads them from an inbound call's headers or metadata.

Each gateway has its own ``TracerProvider`` (never OpenTelemetry's global one): several
gateways in one process (tests, a host) each export with their own settings, and a
gateway with tracing off never records a span that another one started.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Callable, Iterator, Mapping, MutableMapping
from contextvars import ContextVar, Token
from typing import Any, Final

from opentelemetry import context as otel_context
from opentelemetry.context.contextvars_context import ContextVarsRuntimeContext
from opentelemetry.trace import Span, SpanContext, SpanKind, Status, StatusCode, Tracer
from opentelemetry.trace.propagation import _SPAN_KEY
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

#: The header (and lower-case gRPC metadata key) names of W3C trace context.
TRACEPARENT: Final = "traceparent"
TRACESTATE: Final = "tracestate"
TRACE_HEADERS: Final = (TRACEPARENT, TRACESTATE)

_PROPAGATOR: Final = TraceContextTextMapPropagator()


def _runtime_var() -> ContextVar[otel_context.Context] | None:
    """The context variable behind OpenTelemetry's current context, when the runtime
    context is the standard one (``contextvars``): setting it directly spares
    ``attach``/``detach``'s two calls each way on every span entered. Another runtime
    context (``OTEL_PYTHON_CONTEXT``) is used through ``attach``/``detach``."""
    runtime = getattr(otel_context, "_RUNTIME_CONTEXT", None)
    if type(runtime) is not ContextVarsRuntimeContext:
        return None
    var = getattr(runtime, "_current_context", None)
    return var if isinstance(var, ContextVar) else None


_OTEL_CONTEXT: Final = _runtime_var()
#: The tracer of the gateway whose call this is; ``None``: not traced.
_TRACER: ContextVar[Tracer | None] = ContextVar("a2a_tracer", default=None)
_dict_set: Final = dict.__setitem__  # a Context refuses item assignment once made
#: Types of values found under the current-span key that are spans (``isinstance`` on
#: the API's abstract ``Span`` is a Python-level call; a type seen once is known).
_SPAN_TYPES: dict[type, bool] = {}

Attributes = Mapping[str, str | int | bool]


def current_tracer() -> Tracer | None:
    """The tracer of the traced call this code runs in, or ``None``."""
    return _TRACER.get()


def current_context() -> otel_context.Context:
    """OpenTelemetry's current context (``get_current()``, read from its variable)."""
    if _OTEL_CONTEXT is not None:
        return _OTEL_CONTEXT.get()
    return otel_context.get_current()


def parent_context(context: otel_context.Context | None = None) -> SpanContext | None:
    """The span context of the current span (of ``context``'s, given one) if valid, else
    ``None``: ``get_current_span(context).get_span_context()``, without its four calls."""
    found: Any = (current_context() if context is None else context).get(_SPAN_KEY)
    if found is None:
        return None
    kind = type(found)
    if kind not in _SPAN_TYPES:
        if not isinstance(found, Span):
            return None  # get_current_span's rule: not a span, no current span
        if len(_SPAN_TYPES) >= 64:  # a tracer's span class each: bounded
            _SPAN_TYPES.clear()
        _SPAN_TYPES[kind] = True
    span_context: SpanContext = found.get_span_context()
    return span_context if span_context.is_valid else None


def with_span(span: Span, context: otel_context.Context | None = None) -> otel_context.Context:
    """``trace.set_span_in_context(span, context)``: ``context`` (the current one if not
    given) with ``span`` as its span; the API's steps without its three nested calls."""
    made = otel_context.Context(current_context() if context is None else context)
    _dict_set(made, _SPAN_KEY, span)  # a new context, not yet seen: set by dict's own method
    return made


def sampled_here() -> bool:
    """Whether a span started here would be recorded: the call is traced and its current
    span is sampled (or there is none yet: a new trace's root is the sampler's to decide).
    Lets a caller skip even the wrapper of a span :func:`span` would not make."""
    if _TRACER.get() is None:
        return False
    parent = parent_context()
    return parent is None or bool(parent.trace_flags.sampled)


@contextlib.contextmanager
def traced_by(tracer: Tracer) -> Iterator[None]:
    """Mark the code inside as part of a call traced by ``tracer``."""
    token = _TRACER.set(tracer)
    try:
        yield
    finally:
        _TRACER.reset(token)


class Current:
    """``span`` as the current span of a call traced by ``tracer`` while a ``with`` body
    runs. One object for both context variables (OpenTelemetry's and ours), entered
    without a generator: ``trace.use_span`` and :func:`traced_by` cost two generator
    context managers per entry. Entered again and again (not nested), it serves a
    stream, which makes each event with its call span current."""

    __slots__ = ("_context", "_otel", "_tracer", "_tracing")

    def __init__(self, current: Span, tracer: Tracer) -> None:
        self._context = with_span(current)
        self._tracer = tracer
        self._otel: Token[otel_context.Context] | object = None
        self._tracing: Token[Tracer | None] | None = None

    def __enter__(self) -> None:
        self._otel = _enter(self._context)
        self._tracing = _TRACER.set(self._tracer)

    def __exit__(self, *_: object) -> None:
        if self._tracing is not None:
            _TRACER.reset(self._tracing)
        if self._otel is not None:
            _leave(self._otel)
        self._otel = self._tracing = None


def _enter(context: otel_context.Context) -> object:
    """Make ``context`` OpenTelemetry's current one; the token to :func:`_leave` with."""
    if _OTEL_CONTEXT is not None:
        return _OTEL_CONTEXT.set(context)
    return otel_context.attach(context)


def _leave(token: Any) -> None:
    if _OTEL_CONTEXT is not None:
        _OTEL_CONTEXT.reset(token)
    else:
        otel_context.detach(token)


def enter_context(
    context: otel_context.Context, tracer: Tracer
) -> tuple[object, Token[Tracer | None]]:
    """What :class:`Current` does on entry, as a function (for a loop that enters and
    leaves per step, without a ``with``): ``context`` made current, traced by
    ``tracer``; the tokens to :func:`leave_context` with."""
    return _enter(context), _TRACER.set(tracer)


def leave_context(tokens: tuple[object, Token[Tracer | None]]) -> None:
    """Undo :func:`enter_context`."""
    _TRACER.reset(tokens[1])
    _leave(tokens[0])


def start_child(
    name: str, *, kind: SpanKind = SpanKind.INTERNAL, attributes: Attributes | None = None
) -> Span | None:
    """The span :func:`span` would open (not yet current), or ``None``: for a caller that
    makes it current with :class:`Current` and ends it itself, without a generator."""
    tracer = _TRACER.get()
    if tracer is None:
        return None
    parent = parent_context()
    if parent is not None and not parent.trace_flags.sampled:
        return None  # as in span(): no child of an unsampled trace
    return tracer.start_span(
        name,
        kind=kind,
        attributes=attributes,
        record_exception=False,
        set_status_on_exception=False,
    )


def start_task_span(
    name: str, attributes: Attributes | None = None
) -> tuple[Span, contextvars.Context | None] | None:
    """For a task about to be created here (``asyncio.create_task``): a child span of
    the current one (as :func:`start_child`: ``None`` when the call is not traced or not
    sampled) and the context to create the task in, a copy of the current one with the
    span current (its ``context=``). The task then starts with its span current, at no
    context switch of its own; the task ends the span. ``None`` for the context: the
    runtime context is not ``contextvars`` (the task enters the span with
    :class:`Current`)."""
    tracer = _TRACER.get()
    if tracer is None:
        return None
    ambient = current_context()
    parent = parent_context(ambient)
    if parent is not None and not parent.trace_flags.sampled:
        return None
    current = tracer.start_span(
        name,
        context=ambient,
        attributes=attributes,
        record_exception=False,
        set_status_on_exception=False,
    )
    if _OTEL_CONTEXT is None:
        return current, None
    made = contextvars.copy_context()
    made.run(_OTEL_CONTEXT.set, with_span(current, ambient))
    return current, made


@contextlib.contextmanager
def span(
    name: str, *, kind: SpanKind = SpanKind.INTERNAL, attributes: Attributes | None = None
) -> Iterator[Span | None]:
    """A child span of the current one while the body runs, if this call is traced.

    Yields the span (to add attributes) or ``None``. An exception leaving the body marks
    the span as an error with the exception's type as its description (never its
    message: messages may quote user input). The span is started, made current and
    ended here directly (not by ``start_as_current_span``, whose two nested generator
    context managers cost more than the rest of our side of a span).
    """
    tracer = _TRACER.get()
    if tracer is None:
        yield None
        return
    parent = parent_context()
    if parent is not None and not parent.trace_flags.sampled:
        # The trace is not sampled: every standard sampler drops its children too
        # (parent-based ones follow the parent, a ratio decides by the same trace id),
        # so no child is made; outbound calls carry the parent's unsampled context.
        # (Not ``is_recording()``: a run outlives its call, whose span has ended.)
        yield None
        return
    current = tracer.start_span(
        name,
        kind=kind,
        attributes=attributes,
        record_exception=False,
        set_status_on_exception=False,
    )
    token = _enter(with_span(current))
    try:
        yield current
    except BaseException as exc:
        mark_failed(current, exc)
        raise
    finally:
        _leave(token)
        current.end()


def mark_failed(current: Span, exc: BaseException) -> None:
    """Record that ``current`` ended with ``exc`` (its type and A2A reason only)."""
    reason = getattr(getattr(exc, "spec", None), "reason", None)
    if reason is not None:
        current.set_attribute("a2a.error", str(reason))
    current.set_status(Status(StatusCode.ERROR, type(exc).__name__))


def inject(headers: MutableMapping[str, str]) -> None:
    """Write the current span's trace context into ``headers`` (if there is one)."""
    if parent_context() is None:
        return
    _PROPAGATOR.inject(headers)


def extract(get: Callable[[str], str | None]) -> otel_context.Context | None:
    """The remote parent named by an inbound call's ``traceparent``, or ``None``."""
    parent = get(TRACEPARENT)
    if not parent:
        return None
    carrier = {TRACEPARENT: parent}
    state = get(TRACESTATE)
    if state:
        carrier[TRACESTATE] = state
    return _PROPAGATOR.extract(carrier)
