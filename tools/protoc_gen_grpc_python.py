"""protoc plugin shim: runs grpcio-tools' built-in grpc_python generator for buf.

buf has no builtin for grpc_python and grpcio-tools ships no standalone plugin binary,
so this plugin hands the request's descriptors to ``grpc_tools.protoc`` (offline) and
returns what it writes. It is the only hand-written step of code generation.
"""

from __future__ import annotations

import pathlib
import sys
import tempfile

from google.protobuf import descriptor_pb2
from google.protobuf.compiler import plugin_pb2
from grpc_tools import protoc


def main() -> int:
    request = plugin_pb2.CodeGeneratorRequest.FromString(sys.stdin.buffer.read())
    response = plugin_pb2.CodeGeneratorResponse()
    response.supported_features = plugin_pb2.CodeGeneratorResponse.FEATURE_PROTO3_OPTIONAL
    with tempfile.TemporaryDirectory() as tmp:
        root = pathlib.Path(tmp)
        descriptor_set = descriptor_pb2.FileDescriptorSet(file=request.proto_file)
        (root / "in.pb").write_bytes(descriptor_set.SerializeToString())
        out = root / "out"
        out.mkdir()
        option = f"{request.parameter}:" if request.parameter else ""
        argv = [
            "grpc_tools.protoc",
            f"--descriptor_set_in={root / 'in.pb'}",
            f"--grpc_python_out={option}{out}",
            *request.file_to_generate,
        ]
        if protoc.main(argv) != 0:
            response.error = "grpc_tools.protoc failed for " + ", ".join(request.file_to_generate)
        else:
            for path in sorted(out.rglob("*")):
                if path.is_file():
                    response.file.add(
                        name=path.relative_to(out).as_posix(), content=path.read_text()
                    )
    sys.stdout.buffer.write(response.SerializeToString())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
