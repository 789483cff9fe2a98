"""``serve --agent module:attr``: load any :class:`~.base.Agent` implementation.

``attr`` may be dotted (``pkg.mod:Factory.default``). It may name an Agent instance,
an Agent subclass (instantiated with no arguments) or a callable returning an Agent.
"""

from __future__ import annotations

import importlib
from typing import Any

from .base import Agent


class AgentLoadError(Exception):
    """The spec does not name a loadable agent; the message says why."""


def load_agent(spec: str) -> Agent:
    """The agent named by ``"module:attr"``."""
    module_name, sep, attr_path = spec.partition(":")
    if not sep or not module_name or not attr_path:
        raise AgentLoadError(f"agent spec {spec!r} must look like 'module:attr'")
    try:
        target: Any = importlib.import_module(module_name)
    except ImportError as exc:
        raise AgentLoadError(f"cannot import module {module_name!r}: {exc}") from exc
    except SyntaxError as exc:
        where = f"{exc.filename}, line {exc.lineno}"
        raise AgentLoadError(f"cannot import module {module_name!r}: {exc.msg} ({where})") from exc
    for name in attr_path.split("."):
        try:
            target = getattr(target, name)
        except AttributeError:
            raise AgentLoadError(f"{module_name!r} has no attribute {attr_path!r}") from None
    if isinstance(target, Agent):
        return target
    if callable(target):
        try:
            made = target()
        except TypeError as exc:
            raise AgentLoadError(f"{spec!r} cannot be called without arguments: {exc}") from exc
        if isinstance(made, Agent):
            return made
        raise AgentLoadError(f"{spec!r} returned {type(made).__name__}, not an Agent")
    raise AgentLoadError(f"{spec!r} is a {type(target).__name__}, not an Agent")
