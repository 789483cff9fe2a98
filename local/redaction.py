"""Redaction, in one place: the process's registry of known secrets (log lines), the
per-agent :class:`Redactor` (texts from a remote agent) and :func:`redact_error` (error
texts a model provider or a process writes).

Code that learns a secret (a caller key or signing secret read from callers.json, the
upstream key, a key given to a CLI verb) registers it with :func:`register_secret`;
every log record passing :class:`RedactingFilter` (the handler ``logs.setup_logging``
installs) has each registered secret replaced by ``***``. This is the safety net behind
the rule that secrets are never logged in the first place (push tokens and credentials
are never logged at all: tests scan for them).
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Iterable

# --- the registry (log lines) -----------------------------------------------------------

_MIN_SECRET_LEN = 6
_lock = threading.Lock()
_secrets: set[str] = set()
# Longest first, so a secret containing another is replaced whole; rebuilt on change
# (registration is rare, redaction runs for every record).
_ordered: tuple[str, ...] = ()


def register_secret(secret: str) -> None:
    """Redact ``secret`` from every log line from now on (short values are ignored)."""
    global _ordered
    if len(secret) < _MIN_SECRET_LEN or secret in _secrets:
        return
    with _lock:
        _secrets.add(secret)
        _ordered = tuple(sorted(_secrets, key=len, reverse=True))


def redact(text: str) -> str:
    """``text`` with every registered secret replaced by ``***``."""
    for secret in _ordered:
        if secret in text:
            text = text.replace(secret, "***")
    return text


class RedactingFilter(logging.Filter):
    """Replaces the registered secrets in a record's message, exception and stack."""

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
            if record.stack_info:
                record.stack_info = redact(record.stack_info)
        return True


# --- one agent's secrets (texts from a remote agent) ------------------------------------


class Redactor:
    """Replaces every known secret in a text with ``[redacted]``.

    Keys shorter than 6 characters are only replaced where they stand alone, so a
    one-letter test key does not shred every word that contains the letter.
    """

    REPLACEMENT = "[redacted]"

    def __init__(self, secrets: Iterable[str | None] = ()) -> None:
        self._patterns: list[re.Pattern[str]] = []
        for secret in secrets:
            if secret:
                self.add(secret)

    def add(self, secret: str) -> None:
        if not secret:
            return
        escaped = re.escape(secret)
        if len(secret) < 6:
            escaped = rf"(?<![A-Za-z0-9]){escaped}(?![A-Za-z0-9])"
        self._patterns.append(re.compile(escaped))

    def __call__(self, text: str) -> str:
        for pattern in self._patterns:
            text = pattern.sub(self.REPLACEMENT, text)
        return text


# --- error texts (what looks like a secret) ---------------------------------------------

_MAX_ERROR_CHARS = 500
_UUID = re.compile(r"^[0-9a-fA-F]{8}(-[0-9a-fA-F]{4}){3}-[0-9a-fA-F]{12}$")
_SECRET_PATTERNS: tuple[re.Pattern[str], ...] = (
    # Authorization header values and "Bearer <token>" in messages.
    re.compile(r"(?i)\b(bearer|basic|token)\s+[A-Za-z0-9._~+/=-]{8,}"),
    # key=value / "key": "value" pairs whose name says secret.
    re.compile(
        r"(?i)\b([A-Za-z0-9_-]*(?:api[_-]?key|secret|token|password|passwd|credential)s?)"
        r"(\"?\s*[:=]\s*\"?)[^\s\"'&,;]+"
    ),
    # Well-known key prefixes (OpenAI/Anthropic sk-, GitHub ghp_, Slack xox*, AWS AKIA).
    re.compile(
        r"\b(?:sk-[A-Za-z0-9_-]{8,}|gh[pousr]_[A-Za-z0-9]{16,}|xox[abpr]-[A-Za-z0-9-]{8,}|AKIA[0-9A-Z]{16})"
    ),
)
_LONG_TOKEN = re.compile(r"[A-Za-z0-9_\-+/=]{32,}")


def redact_error(text: str, secrets: Iterable[str] = ()) -> str:
    """``text`` with secrets replaced by ``[redacted]``: the given ``secrets`` values,
    bearer/basic tokens, ``api_key=...``-style pairs, well-known key prefixes and
    long opaque tokens (32+ characters; UUIDs are kept). Capped at 500 characters."""
    for secret in secrets:
        if secret:
            text = text.replace(secret, "[redacted]")
    text = _SECRET_PATTERNS[0].sub(lambda m: f"{m.group(1)} [redacted]", text)
    text = _SECRET_PATTERNS[1].sub(lambda m: f"{m.group(1)}{m.group(2)}[redacted]", text)
    text = _SECRET_PATTERNS[2].sub("[redacted]", text)
    text = _LONG_TOKEN.sub(lambda m: m.group(0) if _UUID.match(m.group(0)) else "[redacted]", text)
    if len(text) > _MAX_ERROR_CHARS:
        text = text[: _MAX_ERROR_CHARS - 1] + "…"
    return text
