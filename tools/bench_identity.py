"""Blocking sends/s of a JWT caller against a key caller, on one gateway, in one run.

    .venv/bin/python -P tools/bench_identity.py [--sends 4000] [--concurrency 32] [--rounds 3]

Starts the test identity provider (``tests/support/idp.py``) in this process and
``a2a-gateway serve --faux`` on a fresh workspace with two callers: ``keyed`` (a key)
and ``oidc`` (tokens of the provider, ``sub`` oidc). Each round sends ``--sends``
blocking JSON-RPC SendMessage calls as each caller in turn (the order alternates by
round), every caller reusing one token as a real client does until it expires, and
prints sends/s and the JWT ÷ key ratio. A measurement for docs/performance.md, never a
test.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tools"))  # python -P leaves the script's folder out

from load import free_port, sends, wait_ready  # noqa: E402

from a2a_gateway.local.layout import WorkspaceLayout  # noqa: E402
from tests.support.idp import AUDIENCE, provider_in_thread  # noqa: E402

KEY = "bench-identity-key-0f1e2d3c4b5a"


async def bench(args: argparse.Namespace) -> None:
    with provider_in_thread() as idp, tempfile.TemporaryDirectory(dir=ROOT / "build") as tmp:
        workspace = Path(tmp) / "ws"
        layout = WorkspaceLayout(workspace)
        layout.state.mkdir(parents=True)
        callers = [
            {"name": "keyed", "key": KEY},
            {"name": "oidc", "jwt": {"issuer": idp.issuer, "audience": AUDIENCE, "sub": "oidc"}},
        ]
        layout.callers.write_text(json.dumps(callers))
        port = free_port()
        command = [sys.executable, "-P", "-m", "a2a_gateway", "serve", "--faux"]
        command += ["--workspace", str(workspace), "--port", str(port), "--grpc-port", "-1"]
        command += ["--allow-private-urls"]
        server = await asyncio.create_subprocess_exec(
            *command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        try:
            base = f"http://127.0.0.1:{port}"
            await wait_ready(base + "/.well-known/agent-card.json")
            token = idp.token("oidc", lifetime_s=3600)
            callers_headers = {
                "key": {"X-API-Key": KEY},
                "jwt": {"Authorization": f"Bearer {token}"},
            }
            for headers in callers_headers.values():  # warm up (and fetch the JWKS once)
                await sends(base + "/a2a", headers, 200, args.concurrency)
            for round_number in range(args.rounds):
                order = list(callers_headers.items())
                if round_number % 2:
                    order.reverse()
                rates: dict[str, float] = {}
                for name, headers in order:
                    rates[name] = await sends(base + "/a2a", headers, args.sends, args.concurrency)
                print(
                    f"round {round_number + 1}: key {rates['key']:.0f}/s, "
                    f"jwt {rates['jwt']:.0f}/s, jwt/key {rates['jwt'] / rates['key']:.2f}"
                )
            print(f"JWKS fetches: {idp.jwks_fetches}")
        finally:
            server.terminate()
            await asyncio.wait_for(server.wait(), 10)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sends", type=int, default=4000)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=3)
    asyncio.run(bench(parser.parse_args()))


if __name__ == "__main__":
    main()
