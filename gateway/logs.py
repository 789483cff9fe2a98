"""Logging setup: plain or JSON lines, through the redaction filter for known secrets.

Code that learns a secret registers it with
:func:`a2a_gateway.local.redaction.register_secret`; every log record passing the
installed handler has each registered secret replaced by ``***``
(:class:`~a2a_gateway.local.redaction.RedactingFilter`).
"""

from __future__ import annotations

import logging
import sys
import time
from typing import Any

import orjson
from opentelemetry import trace

from a2a_gateway.local.redaction import RedactingFilter


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        # Inside a traced call, the ids that find this line's trace in the OTLP receiver.
        span = trace.get_current_span().get_span_context()
        if span.is_valid:
            entry["trace_id"] = format(span.trace_id, "032x")
            entry["span_id"] = format(span.span_id, "016x")
        if record.exc_info or record.exc_text:
            entry["exception"] = record.exc_text or self.formatException(record.exc_info)  # type: ignore[arg-type]
        return orjson.dumps(entry).decode()


class _GatewayHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """The handler :func:`setup_logging` installs (so a second call replaces it)."""


def setup_logging(level: str = "info", fmt: str = "plain") -> None:
    """Log to stderr, plain or as JSON lines, through the redaction filter.

    Replaces a handler installed by an earlier call and the plain stream handlers of
    ``logging.basicConfig``; other handlers (a test harness's capture) are kept.
    """
    handler = _GatewayHandler(sys.stderr)
    handler.addFilter(RedactingFilter())
    if fmt == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    for old in list(root.handlers):
        if isinstance(old, _GatewayHandler) or type(old) is logging.StreamHandler:
            root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper())
    logging.getLogger("aiohttp.access").setLevel(logging.WARNING)
    logging.getLogger("httpx").setLevel(logging.WARNING)
    logging.getLogger("httpcore").setLevel(logging.WARNING)
    # The model provider's client (serve --llm): one line per request otherwise.
    for name in ("httpx2", "httpcore2", "openai"):
        logging.getLogger(name).setLevel(logging.WARNING)


def log_to_file(handler: logging.Handler, *, keep_stderr: bool = False) -> None:
    """Send log lines to ``handler`` (a terminal program's log file), formatted as
    :func:`setup_logging` formats them; the stderr handler stays only if
    ``keep_stderr``."""
    root = logging.getLogger()
    for old in list(root.handlers):
        if isinstance(old, _GatewayHandler):
            handler.setFormatter(old.formatter)
            if not keep_stderr:
                root.removeHandler(old)
    if handler.formatter is None:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root.addHandler(handler)
