"""Helpers of the delegation tests: a faux gateway in-process (the remote agent), and
workspaces whose agents.json points at it."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from a2a_gateway.serve import Gateway
from a2a_gateway.settings import resolve

#: The key workspace B presents to gateway A (written to both sides' files).
REMOTE_KEY = "k_b_0123456789abcdef"


@asynccontextmanager
async def faux_gateway(
    folder: Path, *, key: str = REMOTE_KEY, **settings: Any
) -> AsyncIterator[Gateway]:
    """``serve --faux`` in-process on a free port, one caller (``assistant-b``), no gRPC."""
    (folder / ".a2a").mkdir(parents=True, exist_ok=True)
    (folder / ".a2a" / "callers.json").write_text(json.dumps([{"name": "assistant-b", "key": key}]))
    values = {"workspace": [str(folder)], "port": 0, "grpc_port": -1, "faux": True}
    values.update(settings)
    gateway = Gateway(resolve(values, environ={}))
    await gateway.start()
    try:
        yield gateway
    finally:
        await gateway.stop()


def base_url(gateway: Gateway) -> str:
    return f"http://127.0.0.1:{gateway.http_port}"


def write_agents(workspace: Path, entries: list[dict[str, Any]] | str) -> Path:
    path = workspace / ".a2a" / "agents.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(entries if isinstance(entries, str) else json.dumps(entries))
    return path
