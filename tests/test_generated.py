"""``gen/`` is exactly what ``buf generate`` writes, offline, from ``proto/``."""

from __future__ import annotations

import filecmp
import os
import subprocess
import sys
from pathlib import Path

import google.api
import pytest

ROOT = Path(__file__).resolve().parents[1]
SHARED_PROTO = ROOT.parent / "shared" / "spec" / "a2a.proto"


def _files(folder: Path) -> dict[str, bytes]:
    return {
        p.relative_to(folder).as_posix(): p.read_bytes()
        for p in sorted(folder.rglob("*"))
        if p.is_file() and "__pycache__" not in p.parts
    }


def test_buf_generate_reproduces_gen_exactly(tmp_path: Path) -> None:
    venv_bin = Path(sys.executable).parent
    env = {
        **os.environ,
        "PATH": f"{venv_bin}{os.pathsep}{os.environ.get('PATH', '')}",
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


def test_schema_is_the_spec_byte_for_byte() -> None:
    assert SHARED_PROTO.is_file(), f"the spec copy is expected at {SHARED_PROTO}"
    assert (ROOT / "proto/lf/a2a/v1/a2a.proto").read_bytes() == SHARED_PROTO.read_bytes()


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
