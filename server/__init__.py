"""Inbound A2A: the task engine behind the aiohttp and grpc.aio bindings, with identity,
cards and stores. ``a2a-gateway serve`` wires these; an application serving its own
:class:`~a2a_gateway.agent.Agent` in process uses the names below.

The names load on first use (PEP 562): ``client/`` and the hosts import a few server
modules and should not pay for the bindings, the engine and the stores each time.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .auth import AllowAnonymous, Authenticator, WorkspaceCallers
    from .card import CardProvider
    from .config import ServerConfig
    from .engine import TaskEngine
    from .grpc_server import build_grpc_server
    from .http_app import AppRunner, build_http_app
    from .memory_store import MemoryTaskStore
    from .task_store import TaskStore

# Each public name and the module of this package that defines it.
_HOME = {
    "AllowAnonymous": "auth",
    "AppRunner": "http_app",
    "Authenticator": "auth",
    "CardProvider": "card",
    "MemoryTaskStore": "memory_store",
    "ServerConfig": "config",
    "TaskEngine": "engine",
    "TaskStore": "task_store",
    "WorkspaceCallers": "auth",
    "build_grpc_server": "grpc_server",
    "build_http_app": "http_app",
}

__all__ = [
    "AllowAnonymous",
    "AppRunner",
    "Authenticator",
    "CardProvider",
    "MemoryTaskStore",
    "ServerConfig",
    "TaskEngine",
    "TaskStore",
    "WorkspaceCallers",
    "build_grpc_server",
    "build_http_app",
]


def __getattr__(name: str) -> object:
    home = _HOME.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{home}", __name__), name)
    globals()[name] = value  # the next lookup is a plain attribute
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
