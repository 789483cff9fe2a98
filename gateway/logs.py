"""Logging setup: plain or JSON lines, with a redaction filter for known secrets.

Code that learns a secret (a caller key read from callers.json, an upstream key, a push
token) registers it with :func:`register_secret`; every log record passing the
installed handler has each registered secret replaced by ``***``. This is the safety
net behind the rule that secrets are never logged in the first place.
"""

from __future__ import annotations

import logging
import sys
import threading
import time
from typing import Any

import orjson

_MIN_SECRET_LEN = 6
_lock = threading.Lock()
_secrets: set[str] = set()


def register_secret(secret: str) -> None:
    """Redact ``secret`` from every log line from now on (short values are ignored)."""
    if len(secret) >= _MIN_SECRET_LEN:
        with _lock:
            _secrets.add(secret)


def redact(text: str) -> str:
    with _lock:
        secrets = sorted(_secrets, key=len, reverse=True)
    for secret in secrets:
        if secret in text:
            text = text.replace(secret, "***")
    return text


class RedactingFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        if _secrets:
            message = record.getMessage()
            cleaned = redact(message)
            if cleaned != message:
                record.msg, record.args = cleaned, None
            if record.exc_info and not record.exc_text:
                record.exc_text = logging.Formatter().formatException(record.exc_info)
            if record.exc_text:
                record.exc_text = redact(record.exc_text)
        return True


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        if record.exc_info or record.exc_text:
            entry["exception"] = record.exc_text or self.formatException(record.exc_info)  # type: ignore[arg-type]
        return orjson.dumps(entry).decode()


def setup_logging(level: str = "info", fmt: str = "plain") -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.addFilter(RedactingFilter())
    if fmt == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    logging.getLogger("aiohttp.access").setLevel(logging.WARNING)
