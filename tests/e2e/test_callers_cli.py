"""``a2a-gateway callers add|rotate|remove|list``: keys printed once and stored hashed by
default, atomic writes, and listings that never show more than a short part of a key."""

from __future__ import annotations

import asyncio
import hashlib
import io
import json
import stat
import subprocess
import sys
import threading
from pathlib import Path

import aiohttp
import pytest

from a2a_gateway.cli import main
from a2a_gateway.local.layout import WorkspaceLayout
from a2a_gateway.serve import Gateway
from a2a_gateway.server.auth import read_callers
from a2a_gateway.server.identity import verify_password
from a2a_gateway.settings import resolve
from tests.support.processes import GATEWAY

SHORT_KEY = "short-k1"  # under 12 characters: nothing of it may be shown
LONG_KEY = "listed-key-0a1b2c3d4e5f"


def callers_file(workspace: Path) -> Path:
    return WorkspaceLayout(workspace).callers


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_add_prints_a_strong_key_once_and_stores_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["callers", "add", "travel-bot", "--workspace", str(tmp_path), "--plaintext"]
    code, out, err = run(capsys, *argv)
    assert code == 0
    (key,) = out.splitlines()
    assert key.startswith("a2a_") and len(key) >= 40
    assert "shown only once" in err and key not in err
    path = callers_file(tmp_path)
    assert json.loads(path.read_text()) == [{"name": "travel-bot", "key": key, "mode": "isolated"}]
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert not [p.name for p in path.parent.iterdir() if p.name.endswith(".tmp")]
    # A second caller is appended; the first is kept as it was.
    code, out, _ = run(capsys, *argv[:2], "second", *argv[3:])
    assert code == 0 and out.strip() != key
    assert [e["name"] for e in json.loads(path.read_text())] == ["travel-bot", "second"]


def test_add_hashed_and_signing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["callers", "add", "bot", "--workspace", str(tmp_path), "--hashed", "--signing"]
    code, out, err = run(capsys, *argv, "--note", "Alice's bot")
    assert code == 0
    key, secret = out.splitlines()
    (entry,) = json.loads(callers_file(tmp_path).read_text())
    assert entry["key"] == "sha256:" + hashlib.sha256(key.encode()).hexdigest()
    assert key not in callers_file(tmp_path).read_text()
    assert entry["signing_secret"] == secret and len(secret) == 64
    assert entry["note"] == "Alice's bot"
    assert "only its SHA-256 hash is stored" in err


@pytest.mark.parametrize("name", ["Bad_Name", "", "x" * 41, "under_score"])
def test_add_refuses_bad_names(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str
) -> None:
    code, out, err = run(capsys, "callers", "add", name, "--workspace", str(tmp_path))
    assert code == 1 and out == "" and "name must match" in err
    assert not callers_file(tmp_path).exists()


def test_add_refuses_a_duplicate_name_and_a_malformed_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run(capsys, "callers", "add", "bot", "--workspace", str(tmp_path))[0] == 0
    before = callers_file(tmp_path).read_bytes()
    code, out, err = run(capsys, "callers", "add", "bot", "--workspace", str(tmp_path))
    assert code == 1 and out == "" and "already exists" in err
    assert callers_file(tmp_path).read_bytes() == before
    for content in ("{not json", '{"name": "x"}'):
        callers_file(tmp_path).write_text(content)
        code, out, err = run(capsys, "callers", "add", "other", "--workspace", str(tmp_path))
        assert code == 1 and out == "" and "was not changed" in err
        assert callers_file(tmp_path).read_text() == content


def test_concurrent_adds_lose_nothing(tmp_path: Path) -> None:
    from a2a_gateway.callers_cli import add_caller

    names = [f"bot-{index}" for index in range(8)]
    threads = [threading.Thread(target=add_caller, args=(tmp_path, name)) for name in names]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=10)
    stored = json.loads(callers_file(tmp_path).read_text())
    assert sorted(e["name"] for e in stored) == names


def test_list_shows_only_the_last_four_characters_of_long_keys(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    hashed = "sha256:" + hashlib.sha256(b"some-hashed-key").hexdigest()
    entries = [
        {"name": "long", "key": LONG_KEY, "note": "has a\nnewline"},
        {"name": "short", "key": SHORT_KEY},
        {"name": "hashed", "key": hashed, "signing_secret": "list-signing-secret-0011223344"},
        {"name": "Bad", "key": "bad-entry-key-99887766"},
    ]
    callers_file(tmp_path).parent.mkdir(parents=True)
    callers_file(tmp_path).write_text(json.dumps(entries))
    code, out, err = run(capsys, "callers", "list", "--workspace", str(tmp_path))
    assert code == 0
    lines = out.splitlines()
    assert lines[0].split() == ["NAME", "MODE", "KEY", "SIGNED", "NOTE"]
    rows = {line.split()[0]: line for line in lines[1:]}
    assert set(rows) == {"long", "short", "hashed"}
    assert rows["long"].split()[2] == "..." + LONG_KEY[-4:] and "has a newline" in rows["long"]
    assert LONG_KEY[-5:] not in out
    assert "(sha256 hash)" in rows["hashed"] and " yes" in rows["hashed"]
    everything = out + err
    for secret in (LONG_KEY[:-4], SHORT_KEY, hashed[7:], "bad-entry-key", "list-signing"):
        assert secret not in everything
    for short_part in (SHORT_KEY[-4:], SHORT_KEY[-3:], hashed[-4:]):
        assert short_part not in out
    assert "entry 3" in err  # the bad entry is reported, without its key


def test_list_without_a_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "callers", "list", "--workspace", str(tmp_path))
    assert code == 0 and out == "" and "does not exist" in err


@pytest.fixture
def added_by_the_command(tmp_path: Path) -> tuple[Path, str, str]:
    """Two callers added by the real console program (plain, then hashed)."""
    workspace = tmp_path / "ws"
    command = [*GATEWAY, "callers", "add"]
    keys = [
        subprocess.run(
            [*command, name, "--workspace", str(workspace), *extra],
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        ).stdout.strip()
        for name, extra in (("plain", ["--plaintext"]), ("hashed", []))
    ]
    return workspace, keys[0], keys[1]


async def test_added_keys_work_against_a_running_gateway(
    added_by_the_command: tuple[Path, str, str],
) -> None:
    workspace, plain_key, hashed_key = added_by_the_command
    settings = resolve(
        {"workspace": [str(workspace)], "port": 0, "grpc_port": -1, "faux": True}, environ={}
    )
    gateway = Gateway(settings)
    await gateway.start()
    try:
        url = f"http://127.0.0.1:{gateway.http_port}/a2a/v1/tasks"
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as http:
            statuses = []
            for key in (plain_key, hashed_key, "a2a_not-a-real-key-000000"):
                async with asyncio.timeout(10):
                    async with http.get(url, headers={"X-API-Key": key}) as response:
                        statuses.append(response.status)
    finally:
        await gateway.stop()
    assert statuses == [200, 200, 401]


def _command(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*GATEWAY, *argv],
        capture_output=True,
        text=True,
        timeout=30,
    )


async def test_hashed_by_default_rotate_and_remove_through_the_command(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    where = ["--workspace", str(workspace)]
    added = _command("callers", "add", "rover", *where)
    assert added.returncode == 0, added.stderr
    key = added.stdout.strip()
    (entry,) = json.loads(callers_file(workspace).read_text())
    assert entry["key"] == "sha256:" + hashlib.sha256(key.encode()).hexdigest()
    assert entry["key_prefix"] == key[:8]
    assert key not in callers_file(workspace).read_text()
    listed = _command("callers", "list", *where)
    assert f"{key[:8]}... (sha256)" in listed.stdout
    assert key[8:12] not in listed.stdout

    settings = resolve(
        {"workspace": [str(workspace)], "port": 0, "grpc_port": -1, "faux": True}, environ={}
    )
    gateway = Gateway(settings)
    await gateway.start()
    url = f"http://127.0.0.1:{gateway.http_port}/a2a/v1/tasks"

    async def status(http: aiohttp.ClientSession, presented: str) -> int:
        async with asyncio.timeout(10), http.get(url, headers={"X-API-Key": presented}) as reply:
            return reply.status

    try:
        async with aiohttp.ClientSession() as http:
            assert await status(http, key) == 200
            rotated = await asyncio.to_thread(_command, "callers", "rotate", "rover", *where)
            assert rotated.returncode == 0, rotated.stderr
            new_key = rotated.stdout.strip()
            assert new_key != key and "shown only once" in rotated.stderr
            (entry,) = json.loads(callers_file(workspace).read_text())
            assert entry["key_prefix"] == new_key[:8]
            assert (await status(http, key), await status(http, new_key)) == (401, 200)
            removed = await asyncio.to_thread(_command, "callers", "remove", "rover", *where)
            assert removed.returncode == 0, removed.stderr
            assert await status(http, new_key) == 401
    finally:
        await gateway.stop()
    assert json.loads(callers_file(workspace).read_text()) == []
    missing = _command("callers", "remove", "rover", *where)
    assert missing.returncode == 1 and "no caller named 'rover'" in missing.stderr
    assert _command("callers", "rotate", "ghost", *where).returncode == 1


def test_add_basic_and_jwt_callers(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    base = ["callers", "add", "--workspace", str(tmp_path)]
    code, out, err = run(capsys, *base, "bob", "--basic", "bob")
    assert code == 0
    (password,) = out.splitlines()
    assert len(password) >= 24 and password not in err and "shown only once" in err
    monkeypatch.setattr(sys, "stdin", io.StringIO("a chosen password 123\n"))
    code, out, err = run(capsys, *base, "dora", "--basic", "dora", "--password-stdin")
    assert code == 0 and out == ""
    issuer = ["--jwt-issuer", "https://idp.example", "--jwt-audience", "gw", "--jwt-sub", "a"]
    assert run(capsys, *base, "alice", *issuer)[0] == 0
    entries, warnings = read_callers(callers_file(tmp_path), str(tmp_path))
    assert warnings == []
    bob, dora, alice = entries
    assert bob.basic is not None and verify_password(password, bob.basic.password_hash)
    assert dora.basic is not None and verify_password(
        "a chosen password 123", dora.basic.password_hash
    )
    assert alice.jwt is not None and (alice.jwt.issuer, alice.jwt.sub) == (
        "https://idp.example",
        "a",
    )
    text = callers_file(tmp_path).read_text()
    assert password not in text and "a chosen password" not in text
    code, out, _ = run(capsys, "callers", "list", "--workspace", str(tmp_path))
    assert "basic user bob" in out and "jwt sub=a of https://idp.example" in out
    assert password not in out
    refused = [
        [*base, "x", "--basic", "x", "--jwt-sub", "a"],
        [*base, "x", "--jwt-issuer", "https://idp.example"],
        [*base, "x", "--jwt-issuer", "idp.example", "--jwt-audience", "gw", "--jwt-sub", "a"],
        ["callers", "rotate", "bob", "--workspace", str(tmp_path)],
    ]
    for argv in refused:
        code, _, err = run(capsys, *argv)
        assert code == 1 and err.startswith("a2a-gateway callers: "), argv
    assert len(json.loads(callers_file(tmp_path).read_text())) == 3
