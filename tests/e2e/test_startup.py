"""Start-up mistakes through the real command: one line on stderr, never a traceback.

A mistake in how the gateway was started (a port already taken, a workspace, --agent,
the TOML file, a flag) exits 2."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.support.ports import held_port
from tests.support.processes import GATEWAY, run_gateway


@pytest.mark.parametrize("flag", ["--port", "--grpc-port"])
@pytest.mark.parametrize("mode", ["serve", "proxy"])
def test_a_port_in_use_is_one_line_naming_the_port_and_the_flag(flag: str, mode: str) -> None:
    # A gRPC port in use exited 1 with a line of gRPC's C core, an HTTP one exited 1.
    # (Subprocesses: a gateway whose start failed in-process left grpc's aio layer to
    # crash a later test of the session.)
    with held_port(listen=True) as port:
        ports = {"--port": "0", "--grpc-port": "0", flag: str(port)}
        agent = ["--upstream", "http://127.0.0.1:9"] if mode == "proxy" else ["--faux"]
        command = [*GATEWAY, "serve", *agent]
        command += [word for pair in ports.items() for word in pair]
        result = subprocess.run(command, capture_output=True, text=True, timeout=30)
    assert result.returncode == 2, result.stderr
    assert result.stderr.splitlines()[-1] == (
        f"a2a-gateway: cannot listen on 127.0.0.1:{port} ({flag}): address already in use"
    )
    assert "Traceback" not in result.stderr and "add_port" not in result.stderr
    assert " ERROR " not in result.stderr, result.stderr


# --- start-up mistakes: one line on stderr, exit status 2, no traceback ---------------


def _one_line_exit_2(result: subprocess.CompletedProcess[str], needle: str) -> None:
    assert result.returncode == 2, result.stderr
    assert result.stdout == ""
    assert result.stderr.count("\n") == 1, result.stderr
    assert "Traceback" not in result.stderr
    assert needle in result.stderr, result.stderr


NOT_AN_AGENT = "count = 3\n\n\nclass Plain:\n    pass\n"


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (("--workspace", "a-file"), "workspace a-file is not a folder"),
        (("--workspace", "a-file/below"), "cannot create workspace a-file/below: not a directory"),
        (("--workspaces-root", "no-such-root"), "cannot read --workspaces-root no-such-root"),
        (("--agent", "no_such_module:Agent"), "cannot import module 'no_such_module'"),
        (("--agent", "mine:Missing"), "'mine' has no attribute 'Missing'"),
        (("--agent", "mine:count"), "'mine:count' is a int, not an Agent"),
        (("--agent", "mine:Plain"), "'mine:Plain' returned Plain, not an Agent"),
        (("--agent", "broken:Agent"), "cannot import module 'broken': invalid syntax"),
        (("--agent", "no-colon"), "must look like 'module:attr'"),
        (("--config", "bad.toml"), "bad.toml is not valid TOML: Expected"),
        (("--config", "none.toml"), "cannot read none.toml: No such file or directory"),
        (
            ("--prot", "8080"),
            "unrecognized arguments: --prot and 1 value not shown (--prot: did you mean --port?)",
        ),
        (("--max-hops", "many"), "argument --max-hops: invalid int value: 'many'"),
        (("--store", "disk"), "--store: store must be one of: workspace, memory"),
    ],
)
def test_serve_mistakes_are_one_line_and_exit_2(
    tmp_path: Path, args: tuple[str, ...], needle: str
) -> None:
    (tmp_path / "a-file").write_text("not a folder")
    (tmp_path / "mine.py").write_text(NOT_AN_AGENT)
    (tmp_path / "broken.py").write_text("def (:\n")
    (tmp_path / "bad.toml").write_text("[serve\nport = 1\n")
    result = run_gateway("serve", *args, "--port", "0", "--grpc-port", "-1", cwd=tmp_path)
    _one_line_exit_2(result, needle)


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (("sned", "http://x", "hi"), "invalid choice: 'sned'"),
        (("send", "http://x", "hi", "--tiemout", "3"), "--tiemout: did you mean --timeout?"),
        (("send", "http://x", "hi", "--transport", "grcp"), "(did you mean grpc?)"),
        (("callers", "add", "bob", "--workspace", "w", "--hashd"), "did you mean --hashed?"),
        (("send",), "the following arguments are required: URL"),
    ],
)
def test_usage_mistakes_name_the_closest_flag(
    tmp_path: Path, args: tuple[str, ...], needle: str
) -> None:
    _one_line_exit_2(run_gateway(*args, cwd=tmp_path), needle)


def test_help_shows_defaults_without_markup(tmp_path: Path) -> None:
    result = run_gateway("serve", "--help", cwd=tmp_path)
    assert result.returncode == 0
    text = " ".join(result.stdout.split())  # argparse wraps lines
    assert "(default: 127.0.0.1)" in text
    assert "(default: 8080)" in text
    assert "(default: off)" in text
    top = run_gateway("--help", cwd=tmp_path)
    assert "``" not in result.stdout + top.stdout


def test_a_workspace_that_cannot_be_written_is_refused(tmp_path: Path) -> None:
    """As root every permission check passes, so the folder is made read-only the way
    root feels it: a read-only bind mount, in a mount namespace of this command only.
    Any other user can make no mount namespace (the test failed there): the folder's
    mode does it."""
    workspace = tmp_path / "read-only"
    workspace.mkdir()
    if os.geteuid() != 0:
        workspace.chmod(0o500)
        try:
            result = run_gateway(
                "serve", "--workspace", str(workspace), "--port", "0", "--grpc-port", "-1",
                cwd=tmp_path,
            )  # fmt: skip
        finally:
            workspace.chmod(0o700)
        _one_line_exit_2(result, f"workspace {workspace} is not readable and writable")
        return
    serve = " ".join(
        [*GATEWAY, "serve", "--workspace", str(workspace),
         "--port", "0", "--grpc-port", "-1"]
    )  # fmt: skip
    script = (
        f"mount --bind {workspace} {workspace} && "
        f"mount -o remount,bind,ro {workspace} {workspace} && exec {serve}"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("A2A_GATEWAY_")}
    result = subprocess.run(
        ["unshare", "-m", "sh", "-c", script],
        capture_output=True,
        text=True,
        timeout=30,
        cwd=tmp_path,
        env=env,
    )
    _one_line_exit_2(result, f"workspace {workspace} is not readable and writable")
