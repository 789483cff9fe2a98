"""Secrets a test uses that are in no ``callers.json`` or ``agents.json``: the suite's
log scan (``tests/conftest.py``) looks for them too."""

from __future__ import annotations

import threading

#: Secrets shorter than this are not scanned for (they would match ordinary words).
MIN_SECRET_CHARS = 8

_registered: set[str] = set()
_registered_lock = threading.Lock()


def use_secret(*secrets: str) -> None:
    """Declare secrets this test uses that are in no callers.json / agents.json."""
    with _registered_lock:
        _registered.update(s for s in secrets if len(s) >= MIN_SECRET_CHARS)


def registered_secrets() -> set[str]:
    """Every secret declared with :func:`use_secret` so far."""
    with _registered_lock:
        return set(_registered)
