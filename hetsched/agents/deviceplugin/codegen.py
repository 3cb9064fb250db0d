"""Generate the Python code of the kubelet Device Plugin API (``api.proto``) with grpcio-tools.

Who calls it: the build — ``scripts/env.sh`` after installing (``python -m
hetsched.agents.deviceplugin.codegen``) and setuptools' ``build_py`` (``setup.py``) for wheels. It writes
``api_pb2.py``, ``api_pb2.pyi`` and ``api_pb2_grpc.py`` next to the proto (not committed). Exits non-zero
with protoc's message when generation fails.
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
PROTO = HERE / "api.proto"
OUTPUTS = ("api_pb2.py", "api_pb2.pyi", "api_pb2_grpc.py")


def generate(root: Path = ROOT) -> None:
    """Run protoc so the generated modules import each other as ``hetsched.agents.deviceplugin.*``."""
    from grpc_tools import protoc  # a build-time tool, not needed to run the plugin

    code = protoc.main(["grpc_tools.protoc", f"-I{root}", f"--python_out={root}", f"--pyi_out={root}",
                        f"--grpc_python_out={root}", str(PROTO)])
    if code != 0:
        raise SystemExit(f"protoc failed ({code}) on {PROTO}")


def up_to_date() -> bool:
    return all((HERE / name).exists() and (HERE / name).stat().st_mtime >= PROTO.stat().st_mtime
               for name in OUTPUTS)


if __name__ == "__main__":
    if "--if-needed" not in sys.argv or not up_to_date():
        generate()
