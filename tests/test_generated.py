"""``gen/`` is exactly what ``buf generate`` writes, offline, from ``proto/``."""

from __future__ import annotations

import filecmp
import hashlib
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import google.api
import pytest

ROOT = Path(__file__).resolve().parents[1]
#: The checksums of the schemas as published (the A2A 1.0 spec's a2a.proto, the SDK's 0.3
#: proto), kept in the repository: this test reads nothing outside it.
CHECKSUMS = ROOT / "proto" / "SHA256SUMS"


def _files(folder: Path) -> dict[str, bytes]:
    return {
        p.relative_to(folder).as_posix(): p.read_bytes()
        for p in sorted(folder.rglob("*"))
        if p.is_file() and "__pycache__" not in p.parts
    }


def test_buf_generate_reproduces_gen_exactly(tmp_path: Path) -> None:
    venv_bin = Path(sys.executable).parent
    empty = tmp_path / "empty-path"
    empty.mkdir()
    env = {
        **os.environ,
        # No venv activated and no `python` anywhere on PATH: buf.gen.yaml names the
        # project venv's programs itself.
        "PATH": str(empty),
        # buf must not reach the network: no BSR, no remote plugins, no cache warm-up.
        "BUF_CACHE_DIR": str(tmp_path / "buf-cache"),
        "HTTPS_PROXY": "http://127.0.0.1:9",
        "HTTP_PROXY": "http://127.0.0.1:9",
    }
    result = subprocess.run(
        [str(venv_bin / "buf"), "generate", "--output", str(tmp_path / "out")],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    generated = _files(tmp_path / "out" / "gen")
    committed = _files(ROOT / "gen")
    assert sorted(generated) == sorted(committed)
    drift = [name for name in generated if generated[name] != committed[name]]
    assert drift == [], f"gen/ differs from buf generate output: {drift}"


def _recorded_checksums() -> dict[str, str]:
    lines = CHECKSUMS.read_text(encoding="ascii").splitlines()
    return {name: digest for digest, name in (line.split() for line in lines if line.strip())}


@pytest.mark.parametrize("name", ["lf/a2a/v1/a2a.proto", "lf/a2a/v0_3/a2a.proto"])
def test_schema_is_the_published_one_byte_for_byte(name: str) -> None:
    digest = hashlib.sha256((ROOT / "proto" / name).read_bytes()).hexdigest()
    assert _recorded_checksums()[name] == digest


def test_generated_code_needs_the_protobuf_floor_of_pyproject() -> None:
    # The generated modules refuse an older protobuf runtime at import: the floor in
    # pyproject's dependencies is exactly the version they check.
    text = (ROOT / "gen/lf/a2a/v1/a2a_pb2.py").read_text(encoding="utf-8")
    found = re.search(r"Domain\.PUBLIC,\s*(\d+),\s*(\d+),\s*(\d+),", text)
    assert found is not None
    floor = ".".join(found.groups())
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    assert f"protobuf>={floor},<8" in pyproject["project"]["dependencies"]


def test_google_api_protos_are_vendored_from_the_wheel() -> None:
    wheel = Path(google.api.__path__[0])
    vendored = ROOT / "proto" / "google" / "api"
    names = sorted(p.name for p in vendored.glob("*.proto"))
    assert names
    mismatch = [n for n in names if not filecmp.cmp(vendored / n, wheel / n, shallow=False)]
    assert mismatch == []


SDK_V03_PROTO = ROOT / ".venv-peer/lib/python3.11/site-packages/a2a/compat/v0_3/a2a_v0_3.proto"


def test_v03_schema_is_the_sdk_copy_byte_for_byte() -> None:
    # The 0.3 schema is the official SDK's, vendored under our own path; the peer venv
    # is where that copy lives (``make peer``).
    if not SDK_V03_PROTO.is_file():
        pytest.skip(f"the SDK's 0.3 proto is expected at {SDK_V03_PROTO} (make peer)")
    assert (ROOT / "proto/lf/a2a/v0_3/a2a.proto").read_bytes() == SDK_V03_PROTO.read_bytes()


def test_both_schemas_share_one_descriptor_pool() -> None:
    # 0.3 keeps its wire package (a2a.v1); 1.0 is lf.a2a.v1: no name clashes.
    from google.protobuf import descriptor_pool

    from lf.a2a.v0_3 import a2a_pb2 as pb03
    from lf.a2a.v1 import a2a_pb2 as pb

    pool = descriptor_pool.Default()
    assert pool.FindServiceByName("a2a.v1.A2AService").file.name == "lf/a2a/v0_3/a2a.proto"
    assert pool.FindServiceByName("lf.a2a.v1.A2AService").file.name == "lf/a2a/v1/a2a.proto"
    assert pb03.Task.DESCRIPTOR.full_name == "a2a.v1.Task"
    assert pb.Task.DESCRIPTOR.full_name == "lf.a2a.v1.Task"
