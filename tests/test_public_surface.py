"""The public surfaces of ``agent``, ``server`` and ``client``: each package's ``__all__``
is pinned here, and the README and docs use nothing from those packages but it.

A change to a list is a change to the library's API: make it on purpose, here.
"""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

SURFACES = {
    "a2a_gateway.agent": [
        "Agent",
        "AgentError",
        "AgentProfile",
        "ArtifactChunk",
        "AuthRequired",
        "Completed",
        "Ending",
        "Failed",
        "File",
        "InputRequired",
        "Output",
        "Progress",
        "Rejected",
        "Signal",
        "TextChunk",
        "Turn",
    ],
    "a2a_gateway.server": [
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
    ],
    "a2a_gateway.client": [
        "DEFAULT_STREAM_IDLE_TIMEOUT",
        "DEFAULT_TIMEOUT",
        "GRPC",
        "HTTP_JSON",
        "JSONRPC",
        "WELL_KNOWN_PATH",
        "AuthRejected",
        "CallOptions",
        "CardError",
        "ClientAuth",
        "Credentials",
        "Grpc03Transport",
        "GrpcTransport",
        "JsonRpc03Transport",
        "JsonRpcTransport",
        "Redactor",
        "RemoteService",
        "Rest03Transport",
        "RestTransport",
        "Timeout",
        "Transport",
        "Unreachable",
        "binding_for",
        "card_url",
        "choose_interface",
        "connect",
        "credentials_for",
        "fetch_card",
        "file_part",
        "make_transport",
        "parse_card",
        "resolve_card",
        "resumable_stream",
        "send_request",
        "task_text",
        "user_message",
    ],
}

# `from a2a_gateway.x import a, (b, c)` and dotted mentions such as `a2a_gateway.x.Name`.
_FROM_IMPORT = re.compile(r"^\s*from\s+(a2a_gateway[\w.]*)\s+import\s+(\([^)]*\)|[^\n]+)", re.M)
_MENTION = re.compile(r"\ba2a_gateway(?:\.\w+)+")


@pytest.mark.parametrize("package", sorted(SURFACES))
def test_the_public_surface_is_pinned(package: str) -> None:
    module = importlib.import_module(package)
    assert module.__all__ == SURFACES[package]
    for name in module.__all__:
        assert getattr(module, name) is not None, name
    assert set(dir(module)) >= set(module.__all__)


def _documents() -> list[Path]:
    return [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]


def _in_scope(dotted: str) -> bool:
    return dotted.split(".")[1:2] in (["agent"], ["server"], ["client"])


def _uses_outside_a_surface(text: str) -> list[str]:
    """What the text takes from agent/server/client other than through their ``__all__``."""
    outside = []
    for match in _FROM_IMPORT.finditer(text):
        package, names = match[1], match[2].strip("() \n").split(",")
        for name in (part.split(" as ")[0].strip() for part in names):
            if name and _in_scope(package) and name not in SURFACES.get(package, ()):
                outside.append(f"from {package} import {name}")
    for mention in _MENTION.findall(_FROM_IMPORT.sub("", text)):
        package, _, name = mention.rpartition(".")
        in_surface = package in SURFACES and name in SURFACES[package]
        if _in_scope(mention) and mention not in SURFACES and not in_surface:
            outside.append(mention)
    return outside


@pytest.mark.parametrize("document", _documents(), ids=lambda path: path.name)
def test_the_docs_use_only_the_public_surfaces(document: Path) -> None:
    assert _uses_outside_a_surface(document.read_text(encoding="utf-8")) == []


def test_a_module_path_in_the_docs_is_reported() -> None:
    text = (
        "```python\nfrom a2a_gateway.agent.base import Agent\n"
        "from a2a_gateway.protocol.errors import A2AError\n"
        "from a2a_gateway.client import (\n    connect,\n    retry_later,\n)\n```\n"
        "See `a2a_gateway.server.task_store.TaskStore` and `a2a_gateway.server`;\n"
        "`a2a_gateway.protocol.codec` has no pinned surface here.\n"
    )
    assert _uses_outside_a_surface(text) == [
        "from a2a_gateway.agent.base import Agent",
        "from a2a_gateway.client import retry_later",
        "a2a_gateway.server.task_store.TaskStore",
    ]
