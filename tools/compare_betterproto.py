"""Protobuf's own classes (what gen/ holds) against betterproto, on A2A messages.

    python3 tools/compare_betterproto.py [--dir build/betterproto-compare] [--rounds 20000]

Reproducible and self-contained: it makes a throwaway venv in ``--dir`` (never touching
the project's venvs), installs the pinned versions below, generates betterproto classes
from ``proto/lf/a2a/v1/a2a.proto``, and times, in that venv, the same work with both:

- binary: serialize a Task (history, artifacts, metadata) and parse it back;
- ProtoJSON: a SendMessageRequest to a dict and back (what JSON-RPC and HTTP+JSON do);
- the cost of importing the generated module.

It prints a Markdown table (microseconds per operation, best of 5 runs of about 0.2 s,
at most ``--rounds`` calls each) and checks that both produce the same bytes for the same
message and whether betterproto reads and writes A2A's ProtoJSON. The import row is one
cold import each, its runtime library included. Needs network access to a package
index once (``pip install``); later runs reuse the venv.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import textwrap
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PINS = (
    "betterproto[compiler]==2.0.0b7",
    "grpcio-tools==1.85.1",
    "protobuf==7.36.2",
    "googleapis-common-protos==1.76.0",
)

BENCH = textwrap.dedent(
    """
    import importlib, json, sys, time

    ROUNDS = int(sys.argv[1])

    def best(fn, repeat=5):
        start = time.perf_counter()
        fn()
        once = time.perf_counter() - start
        # About 0.2 s per run: fast operations get many rounds, slow ones a few.
        rounds = max(3, min(ROUNDS, int(0.2 / max(once, 1e-7))))
        runs = []
        for _ in range(repeat):
            start = time.perf_counter()
            for _ in range(rounds):
                fn()
            runs.append((time.perf_counter() - start) / rounds * 1e6)
        return min(runs)

    def import_us(name):
        start = time.perf_counter()
        importlib.import_module(name)
        return (time.perf_counter() - start) * 1e6

    t_pb = import_us("lf.a2a.v1.a2a_pb2")
    t_bp = import_us("bp.lf.a2a.v1")
    from google.protobuf import json_format
    from lf.a2a.v1 import a2a_pb2 as pb
    import bp.lf.a2a.v1 as bpm

    REQUEST = {
        "message": {
            "role": "ROLE_USER",
            "messageId": "m-1",
            "contextId": "ctx-1",
            "parts": [{"text": "Plan a three-day trip to Lisbon"}, {"data": {"days": 3}}],
            "metadata": {"trace": "t-1"},
        },
        "configuration": {"acceptedOutputModes": ["text/plain"], "historyLength": 4},
    }

    def pb_task():
        task = pb.Task(id="task-1", context_id="ctx-1")
        task.status.state = pb.TASK_STATE_COMPLETED
        for i in range(4):
            task.history.add(role=pb.ROLE_USER, message_id=f"h-{i}").parts.add(text="hello " * 20)
        for i in range(3):
            art = task.artifacts.add(artifact_id=f"a-{i}", name="response")
            art.parts.add(text="chunk " * 50)
        task.metadata.update({"caller": "alice", "turns": 4})
        return task

    task = pb_task()
    data = task.SerializeToString()
    bp_task = bpm.Task().parse(data)
    same_bytes = bytes(bp_task) == data
    request_pb = json_format.ParseDict(REQUEST, pb.SendMessageRequest())
    try:
        bpm.SendMessageRequest().from_dict(REQUEST)
        reads_protojson = True
    except ValueError as exc:  # enum names: betterproto strips the ROLE_ prefix
        reads_protojson = False
        why = str(exc)
    request_bp = bpm.SendMessageRequest().parse(request_pb.SerializeToString())
    bp_dict = request_bp.to_dict()
    writes_protojson = bp_dict == json_format.MessageToDict(request_pb)

    rows = [
        ("import the generated module", t_pb, t_bp),
        ("serialize a Task (%d bytes)" % len(data),
         best(task.SerializeToString), best(lambda: bytes(bp_task))),
        ("parse that Task", best(lambda: pb.Task.FromString(data)),
         best(lambda: bpm.Task().parse(data))),
        ("SendMessageRequest to a ProtoJSON dict",
         best(lambda: json_format.MessageToDict(request_pb)),
         best(lambda: request_bp.to_dict())),
        ("SendMessageRequest from a ProtoJSON dict",
         best(lambda: json_format.ParseDict(REQUEST, pb.SendMessageRequest())),
         best(lambda: bpm.SendMessageRequest().from_dict(bp_dict))),
    ]
    print(json.dumps({
        "rows": rows,
        "same_bytes": same_bytes,
        "reads_protojson": reads_protojson if reads_protojson else why,
        "writes_protojson": writes_protojson,
        "bp_dict": bp_dict,
    }))
    """
)


def run(command: list[str], **kwargs: object) -> None:
    subprocess.run(command, check=True, **kwargs)  # type: ignore[call-overload]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dir", type=Path, default=ROOT / "build" / "betterproto-compare")
    parser.add_argument("--rounds", type=int, default=20000)
    args = parser.parse_args()
    where: Path = args.dir.resolve()
    python = where / "venv" / "bin" / "python"
    if not python.exists():
        venv.EnvBuilder(with_pip=True, clear=True).create(where / "venv")
        run([str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check", *PINS])
    out = where / "bp"
    out.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "PATH": f"{python.parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    run(
        [
            str(python),
            "-m",
            "grpc_tools.protoc",
            f"-I{ROOT / 'proto'}",
            f"--python_betterproto_out={out}",
            str(ROOT / "proto/lf/a2a/v1/a2a.proto"),
        ],
        env=env,
        stdout=subprocess.DEVNULL,
    )
    (out / "__init__.py").touch()
    bench = where / "bench.py"
    bench.write_text(BENCH)
    result = subprocess.run(
        [str(python), str(bench), str(args.rounds)],
        check=True,
        capture_output=True,
        text=True,
        env={**env, "PYTHONPATH": f"{where}{os.pathsep}{ROOT / 'gen'}"},
    )
    import json

    report = json.loads(result.stdout)
    print(f"Python {sys.version.split()[0]}; {', '.join(PINS)}")
    print()
    print("| operation | protobuf (gen/) µs | betterproto µs | ratio |")
    print("|---|---:|---:|---:|")
    for name, ours, theirs in report["rows"]:
        print(f"| {name} | {ours:,.1f} | {theirs:,.1f} | {theirs / ours:.1f}x |")
    print()
    print(f"same bytes for the same Task: {report['same_bytes']}")
    print(f"betterproto reads A2A's ProtoJSON: {report['reads_protojson']}")
    print(f"betterproto writes A2A's ProtoJSON: {report['writes_protojson']}")
    print(f"  (its dict: {json.dumps(report['bp_dict'])[:200]})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
