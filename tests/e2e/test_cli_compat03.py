"""``a2a-gateway send`` (a real subprocess) against an agent that speaks only A2A 0.3: the
official SDK started with ``--only-0.3`` (it refuses any call announcing A2A 1.x)."""

from __future__ import annotations

import pytest

from .conftest import LEGACY_PEER_KEY
from .test_cli import cli, summary


@pytest.mark.parametrize("transport", [None, "rest"])
async def test_send_to_a_0_3_agent(legacy_sdk_url: str, transport: str | None) -> None:
    forced = ("--transport", transport) if transport else ()
    run = await cli("send", legacy_sdk_url, "hi", *forced, key=LEGACY_PEER_KEY)
    assert run.code == 0, run.stderr
    assert run.stdout.startswith("hi\ntask ")
    assert summary(run.stdout).split(": ", 1)[1].startswith("completed (context ")
    assert LEGACY_PEER_KEY not in run.stdout + run.stderr


async def test_list_is_refused_naming_the_version(legacy_sdk_url: str) -> None:
    run = await cli("list", legacy_sdk_url, key=LEGACY_PEER_KEY)
    assert run.code == 1, run.stderr
    assert "ListTasks does not exist in A2A 0.3" in run.stderr
