"""Compile ``function_rpc.proto`` with grpcio-tools (``python -m functions_host.protos``).

Output goes next to the .proto (``function_rpc_pb2.py``; no .pyi: protoc's stub is not valid
Python where the protocol names enum values ``None`` or ``in``, so mypy sees the module as Any).
The files are written to a temporary folder and moved into place, so a host and its
worker importing at the same moment never see half a file.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

PROTO = Path(__file__).with_name("function_rpc.proto")
# protoc's include root is the folder that holds the functions_host package (src/), so the
# generated module registers as functions_host/protos/function_rpc.proto and imports as
# functions_host.protos.function_rpc_pb2 wherever the package is installed.
ROOT = PROTO.parents[2]
OUTPUTS = ("function_rpc_pb2.py",)


class ProtoCompileError(RuntimeError):
    """grpcio-tools is missing or protoc rejected the .proto file."""


def is_stale() -> bool:
    source_time = PROTO.stat().st_mtime
    for name in OUTPUTS:
        target = PROTO.with_name(name)
        if not target.exists() or target.stat().st_mtime < source_time:
            return True
    return False


def compile_protos() -> None:
    try:
        import grpc_tools
        from grpc_tools import protoc
    except ImportError as error:
        raise ProtoCompileError(
            "grpcio-tools is needed to compile the FunctionRpc protocol: run `make bootstrap`"
        ) from error
    well_known = Path(grpc_tools.__file__).parent / "_proto"
    relative = PROTO.relative_to(ROOT)
    with tempfile.TemporaryDirectory(dir=PROTO.parent) as scratch:
        status = protoc.main(
            [
                "protoc",
                f"-I{ROOT}",
                f"-I{well_known}",
                f"--python_out={scratch}",
                str(relative),
            ]
        )
        if status != 0:
            raise ProtoCompileError(f"protoc failed on {PROTO} (exit {status})")
        for name in OUTPUTS:
            os.replace(Path(scratch) / relative.parent / name, PROTO.with_name(name))


def ensure_compiled() -> None:
    if is_stale():
        compile_protos()
