"""Run the shell blocks of the README and of the docs pages verbatim, in order, in a copy
of the repository: README.md first, then the pages of :data:`PAGES`, then any other page
of docs/ (so a new page's blocks run even before it is listed).

    python -P tests/e2e/readme_runner.py --repo COPY --report REPORT.json [--ports-as-is]

Used by ``test_readme.py`` inside a private network namespace (``unshare -n``), where the
README's own ports (8080, 8081, 8090, 9000, ...) are free, so nothing is rewritten: each
block runs exactly as a reader would paste it, from the repository folder.

- ``make run`` (the README's first block) is started as its recipe (``make -n run``'s
  serve line), in the background; ``make test`` is not run (it is what runs this).
- A block whose first line is ``# In another terminal (port N)...`` is started in the
  background and waited for until port N accepts connections; it runs until the end.
- Every other ``sh`` block runs in ``bash -euo pipefail`` and must exit 0.
- Each ``# → ...`` line is a claim about what the block printed: every fragment between
  ``...`` must appear in its output (for a background block: by the end of the run).
- A block that cannot run here (it needs a model server, a Telegram bot, a TLS
  certificate, an identity provider...) says so in its fence: ```` ```sh not-run: WHY ````
  (renderers read only the first word of the info string). It is reported as not run,
  with WHY. A page of :data:`TESTED_ELSEWHERE` is run by its own test, not here.

The report lists every ``sh`` block of every page with what happened to it. Without
``--ports-as-is`` (no private namespace could be made) ports are moved to free ones and
the report says so.
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import re
import signal
import socket
import struct
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

#: The pages whose blocks run after the README's, in this order (the README's gateways,
#: ``make run`` among them, serve until the end).
PAGES = (
    "README.md",
    "docs/serving.md",
    "docs/keys.md",
    "docs/proxy.md",
    "docs/push-and-files.md",
    "docs/protocol.md",
    "docs/cli.md",
    "docs/identity.md",
    "docs/assistant.md",
    "docs/telegram.md",
    "docs/replicas.md",
    "docs/observability.md",
    "docs/streams.md",
    "docs/reliability.md",
    "docs/performance.md",
    "docs/configuration.md",
)
#: Pages whose walk-throughs need a scripted model or ports of their own: their own
#: tests run every block, so the runner does not run them twice.
TESTED_ELSEWHERE = {
    "docs/card.md": "tests/e2e/test_docs_card.py",
    "docs/delegation.md": "tests/e2e/test_docs_delegation.py",
    "docs/pact.md": "tests/e2e/test_docs_pact.py",
}
FENCE = re.compile(r"^```sh(?:\s+not-run:\s*(.*))?$")
BACKGROUND = re.compile(r"^# In another terminal \(port (\d+)\)")
START_TIMEOUT_S = 30.0
BLOCK_TIMEOUT_S = 60.0


@dataclass
class Block:
    page: str
    section: str
    line: int
    text: str
    claims: list[str]
    status: str = "not run"
    detail: str = ""
    output: str = field(default="", repr=False)


def page_blocks(page: str, text: str) -> list[Block]:
    """Every ``sh`` block of ``page``; one marked ``not-run: WHY`` is reported as not run."""
    blocks = []
    section = ""
    lines = text.splitlines()
    index = 0
    while index < len(lines):
        line = lines[index]
        if line.startswith("## "):
            section = line[3:].strip()
        fence = FENCE.match(line.strip())
        if fence:
            start = index + 1
            end = lines.index("```", start)
            body = "\n".join(lines[start:end]) + "\n"
            claims = [
                text.split("# → ", 1)[1]
                for text in body.splitlines()
                if text.lstrip().startswith("# → ")
            ]
            block = Block(page, section, start, body, claims)
            if fence[1] is not None:
                block.status = f"not run (marked not-run: {fence[1].strip()})"
            elif page in TESTED_ELSEWHERE:
                block.status = f"not run here (run by {TESTED_ELSEWHERE[page]})"
            blocks.append(block)
            index = end
        index += 1
    return blocks


def all_blocks(repo: Path) -> list[Block]:
    """The blocks of :data:`PAGES` in order, then those of every other page of docs/."""
    pages = list(PAGES)
    pages += sorted(
        p.relative_to(repo).as_posix()
        for p in (repo / "docs").glob("*.md")
        if p.relative_to(repo).as_posix() not in pages
    )
    return [
        block
        for page in pages
        for block in page_blocks(page, (repo / page).read_text(encoding="utf-8"))
    ]


def loopback_up() -> None:
    """Bring ``lo`` up (a new network namespace starts with it down)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        request = struct.pack("16sH", b"lo", 0)
        flags = struct.unpack("16sH", fcntl.ioctl(sock, 0x8913, request)[:18])[1]  # SIOCGIFFLAGS
        fcntl.ioctl(sock, 0x8914, struct.pack("16sH", b"lo", flags | 0x1))  # SIOCSIFFLAGS UP


def wait_for_port(port: int, process: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"exited with {process.returncode} before port {port} opened")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"port {port} did not open within {START_TIMEOUT_S:g} s")


def missing_claims(claims: list[str], output: str) -> list[str]:
    missing = []
    for claim in claims:
        for fragment in claim.split("..."):
            fragment = fragment.strip()
            if fragment and fragment not in output:
                missing.append(fragment)
    return missing


class Runner:
    def __init__(self, repo: Path, ports: dict[int, int]) -> None:
        self.repo = repo
        self.ports = ports  # README port -> port used ({} when run as is)
        self.background: list[tuple[Block, subprocess.Popen[bytes], Path]] = []
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("A2A_GATEWAY_")}
        self.env["LC_ALL"] = "C.UTF-8"

    def adapt(self, text: str) -> str:
        for readme_port, port in self.ports.items():
            text = re.sub(rf"(?<![0-9]){readme_port}(?![0-9])", str(port), text)
        return text

    def start(self, block: Block, script: str, port: int) -> None:
        log = self.repo / f".readme-block-{block.page.replace('/', '-')}-{block.line}.log"
        process = subprocess.Popen(
            ["bash", "-c", script],
            cwd=self.repo,
            env=self.env,
            stdin=subprocess.DEVNULL,
            stdout=log.open("wb"),
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self.background.append((block, process, log))
        wait_for_port(self.ports.get(port, port), process)
        block.status = "ran (background)"

    def make_run(self, block: Block) -> None:
        dry = subprocess.run(
            ["make", "-n", "run"], cwd=self.repo, capture_output=True, text=True, check=True
        )
        commands = dry.stdout.replace("\\\n", " ").splitlines()  # join continued lines
        serve = [line for line in commands if " serve " in line][-1]
        self.start(block, self.adapt(serve), 8080)
        block.status = "ran (make run as its recipe; make test not run)"

    def run_block(self, block: Block) -> None:
        script = self.adapt(block.text)
        first = block.text.lstrip().splitlines()[0]
        background = BACKGROUND.match(first)
        try:
            if block.page == "README.md" and block.section == "Start here":
                self.make_run(block)
                return
            if background:
                self.start(block, script, int(background[1]))
                return
            result = subprocess.run(
                ["bash", "-euo", "pipefail", "-c", script],
                cwd=self.repo,
                env=self.env,
                stdin=subprocess.DEVNULL,
                capture_output=True,
                text=True,
                timeout=BLOCK_TIMEOUT_S,
            )
        except (RuntimeError, subprocess.SubprocessError, OSError) as exc:
            block.status, block.detail = "failed", str(exc)
            return
        block.output = self.adapt_back(result.stdout + result.stderr)
        if result.returncode != 0:
            block.status = "failed"
            block.detail = f"exit {result.returncode}: {block.output[-1500:]}"
            return
        missing = missing_claims(block.claims, block.output)
        if missing:
            block.status = "failed"
            block.detail = f"not printed: {missing!r}; output: {block.output[:1500]}"
            return
        block.status = "ran"

    def adapt_back(self, text: str) -> str:
        for readme_port, port in self.ports.items():
            text = re.sub(rf"(?<![0-9]){port}(?![0-9])", str(readme_port), text)
        return text

    def stop(self) -> None:
        for block, process, log in reversed(self.background):
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
                try:
                    process.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    os.killpg(process.pid, signal.SIGKILL)
                    process.wait()
            block.output = self.adapt_back(log.read_text(errors="replace"))
            log.unlink()
            if block.status.startswith("ran"):
                missing = missing_claims(block.claims, block.output)
                if "Traceback" in block.output:
                    block.status, block.detail = "failed", block.output[-1500:]
                elif missing:
                    block.status = "failed"
                    block.detail = f"not printed: {missing!r}; output: {block.output[:1500]}"


def free_ports(count: int) -> list[int]:
    """Free ports (the runner is a script of its own, run in a copy of the repository:
    it cannot import ``tests.support.ports``)."""
    sockets = [socket.socket() for _ in range(count)]
    try:
        for sock in sockets:
            sock.bind(("127.0.0.1", 0))
        return [int(sock.getsockname()[1]) for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repo", type=Path, required=True)
    parser.add_argument("--report", type=Path, required=True)
    parser.add_argument("--ports-as-is", action="store_true")
    args = parser.parse_args()
    blocks = all_blocks(args.repo)
    ports: dict[int, int] = {}
    if args.ports_as_is:
        loopback_up()
    else:
        readme_ports = sorted(
            {int(p) for b in blocks for p in re.findall(r"127\.0\.0\.1:(\d{4,5})", b.text)}
            | {int(m[1]) for b in blocks if (m := BACKGROUND.match(b.text))}
            | {8080, 8081}
        )
        ports = dict(zip(readme_ports, free_ports(len(readme_ports)), strict=True))
    # "Your own agent": the reader saves the Python block as .scratch/shout.py.
    for page in sorted({block.page for block in blocks}):
        text = (args.repo / page).read_text(encoding="utf-8")
        agent = re.search(r"```python\n(.*?class Shout.*?)```", text, re.S)
        if agent:
            (args.repo / ".scratch").mkdir(exist_ok=True)
            (args.repo / ".scratch" / "shout.py").write_text(agent[1])
    runner = Runner(args.repo, ports)
    try:
        for block in blocks:
            if block.status == "not run":
                runner.run_block(block)
    finally:
        runner.stop()
    report = {
        "verbatim": args.ports_as_is,
        "blocks": [{k: v for k, v in asdict(b).items() if k != "output"} for b in blocks],
    }
    args.report.write_text(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
