"""No secret a test used appears in any log of the suite.

The capture runs for the whole session (``tests/conftest.py``); its final check at the
end of the session covers every test. This module checks the machinery, drives the
gateway through every path that logs about callers (bad entries, ambiguous keys, wrong
keys, bad signatures, malformed files) with secrets in play, and scans what the suite
has logged so far. It sorts after the test folders, so it normally runs last.
"""

from __future__ import annotations

import asyncio
import io
import json
import logging
from pathlib import Path

import aiohttp
import orjson
import pytest

from a2a_gateway.local.layout import WorkspaceLayout
from a2a_gateway.local.redaction import RedactingFilter, register_secret
from a2a_gateway.logs import JsonFormatter, setup_logging
from a2a_gateway.serve import Gateway
from a2a_gateway.settings import resolve
from tests.support.workspace import write_callers

from .conftest import (
    LogCapture,
    captured_logs,
    find_leaks,
    scan,
    secrets_in_files,
    use_secret,
)

KEY = "nolog-key-4d2c9e8b7a61"
DUPLICATE = "nolog-duplicate-0b1c2d3e4f"
SIGNING = "nolog-signing-secret-a1b2c3d4e5f6"
BAD_ENTRY_KEY = "nolog-bad-entry-key-77aa88bb"
PRESENTED = "nolog-presented-wrong-5e6f7a8b"


def test_the_session_capture_is_installed() -> None:
    root = logging.getLogger()
    assert any(isinstance(h, LogCapture) for h in root.handlers)
    logging.getLogger("a2a_gateway.test").debug("capture check")
    assert captured_logs()[-1].endswith("capture check")


def test_leaks_are_found_and_reported_masked() -> None:
    texts = [("record 1", "all good"), ("record 2", f"oops {KEY} leaked")]
    (leak,) = find_leaks(texts, [KEY, "not-present-anywhere"])
    assert "record 2" in leak and KEY not in leak and "<SECRET>" in leak


def test_secrets_are_discovered_in_callers_and_agents_files(tmp_path: Path) -> None:
    WorkspaceLayout(tmp_path / "a").state.mkdir(parents=True)
    write_callers(
        tmp_path / "a",
        [
            {"name": "x", "key": KEY, "signing_secret": SIGNING},
            {"name": "y", "key": "sha256:" + "0" * 64},
        ],
    )
    WorkspaceLayout(tmp_path / "a").agents.write_text(
        json.dumps({"agents": [{"name": "peer", "url": "https://x", "apiKey": DUPLICATE}]})
    )
    (tmp_path / "b.json").write_text("{broken")
    assert secrets_in_files(tmp_path) == {KEY, SIGNING, DUPLICATE}


def test_the_redaction_layer_is_a_safety_net(tmp_path: Path) -> None:
    # A private logger (no propagation): this test logs a secret on purpose.
    logger = logging.getLogger("a2a_gateway.test.redaction")
    logger.propagate = False
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.addFilter(RedactingFilter())
    handler.setFormatter(JsonFormatter())
    logger.addHandler(handler)
    try:
        register_secret(SIGNING)
        logger.warning("token %s in a message", SIGNING)
        try:
            raise ValueError(f"failed with {SIGNING}")
        except ValueError:
            logger.exception("with a traceback")
    finally:
        logger.removeHandler(handler)
    lines = [orjson.loads(line) for line in stream.getvalue().splitlines()]
    assert lines[0]["message"] == "token *** in a message"
    assert "***" in lines[1]["exception"] and SIGNING not in stream.getvalue()


def test_setup_logging_keeps_foreign_handlers() -> None:
    root = logging.getLogger()
    level, handlers = root.level, list(root.handlers)
    try:
        setup_logging("debug", "json")
        setup_logging("debug", "plain")
        ours = [h for h in root.handlers if type(h).__name__ == "_GatewayHandler"]
        assert len(ours) == 1
        assert all(h in root.handlers for h in handlers)  # pytest's and the capture
    finally:
        for handler in list(root.handlers):
            if handler not in handlers:
                root.removeHandler(handler)
        root.setLevel(level)


async def test_caller_paths_log_no_secrets(tmp_path: Path) -> None:
    one, two = tmp_path / "one", tmp_path / "two"
    for workspace, entries in (
        (
            one,
            [
                {"name": "alice", "key": KEY, "signing_secret": SIGNING},
                {"name": "dup-a", "key": DUPLICATE},
                {"name": "Bad", "key": BAD_ENTRY_KEY},
                {"name": "typo", "key": BAD_ENTRY_KEY + "x", "signing_secrt": SIGNING},
            ],
        ),
        (two, [{"name": "dup-b", "key": DUPLICATE}]),
    ):
        write_callers(workspace, entries)
    use_secret(PRESENTED)
    settings = resolve(
        {
            "workspace": [str(one), str(two)],
            "port": 0,
            "grpc_port": -1,
            "faux": True,
            "log_level": "debug",
        },
        environ={},
    )
    gateway = Gateway(settings)
    await gateway.start()
    try:
        url = f"http://127.0.0.1:{gateway.http_port}/a2a"
        body = {"jsonrpc": "2.0", "id": 1, "method": "ListTasks", "params": {}}
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as http:
            for key in (KEY, DUPLICATE, PRESENTED, BAD_ENTRY_KEY, f"{KEY}\t"):
                for sig in ("", "t=1,v1=" + "0" * 64):
                    headers = {"X-API-Key": key, "X-A2A-Signature": sig}
                    async with asyncio.timeout(10), http.post(url, json=body, headers=headers) as r:
                        assert r.status == 401
                        text = await r.text()
                    for secret in (KEY, DUPLICATE, PRESENTED, BAD_ENTRY_KEY, SIGNING):
                        assert secret not in text
            write_callers(one, f'[{{"name": "x", "key": "{KEY}"')
            async with (
                asyncio.timeout(10),
                http.post(url, json=body, headers={"X-API-Key": KEY}) as r,
            ):
                assert r.status == 401
    finally:
        await gateway.stop()
    logged = "\n".join(captured_logs())
    assert "matches 2 callers" in logged and "unknown field 'signing_secrt'" in logged
    assert "not valid JSON" in logged
    for secret in (KEY, DUPLICATE, PRESENTED, BAD_ENTRY_KEY, SIGNING):
        assert secret not in logged


def test_no_secret_in_anything_logged_so_far(tmp_path_factory: pytest.TempPathFactory) -> None:
    leaks = scan(tmp_path_factory.getbasetemp())
    assert not leaks, "\n".join(leaks[:20])
