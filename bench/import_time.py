"""How long ``hetsched scheduler`` takes to start (the CLI and everything the command imports), and which
optional dependencies it loads — this code against the code at a git revision, in one run.

    .venv/bin/python bench/import_time.py [--against REV] [--rounds 15]

Each round starts a fresh interpreter per side (alternating) that imports the CLI and the scheduler
command's modules and reports the seconds that took and whether gRPC, protobuf, NVML or matplotlib were
loaded; the best of the rounds is printed per side with the ratio.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

PROBE = """
import json, sys, time
started = time.perf_counter()
import hetsched.cli.main, hetsched.cli.serve, hetsched.scheduler.engine.runner, hetsched.cluster.kubernetes
seconds = time.perf_counter() - started
heavy = [m for m in ("grpc", "google.protobuf", "pynvml", "matplotlib") if m in sys.modules]
print(json.dumps({"seconds": seconds, "modules": len(sys.modules), "optional": heavy}))
"""


def probe(root: Path | None) -> dict[str, Any]:
    env = {"PYTHONPATH": str(root)} if root is not None else {}
    out = subprocess.run([sys.executable, "-c", PROBE], check=True, capture_output=True, text=True,
                         env={**_base_env(), **env}, cwd=root)
    result: dict[str, Any] = json.loads(out.stdout)
    return result


def _base_env() -> dict[str, str]:
    import os

    return {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--against", help="git revision to compare with")
    parser.add_argument("--rounds", type=int, default=15)
    args = parser.parse_args()
    with contextlib.ExitStack() as stack:
        sides: dict[str, Path | None] = {"this": None}
        if args.against:
            tree = Path(stack.enter_context(tempfile.TemporaryDirectory())) / "base"
            subprocess.run(["git", "worktree", "add", "--detach", str(tree), args.against], check=True,
                           capture_output=True)
            stack.callback(subprocess.run, ["git", "worktree", "remove", "--force", str(tree)], check=False,
                           capture_output=True)
            generated = Path("hetsched/agents/deviceplugin")
            for path in generated.glob("api_pb2*.py"):  # generated in the build, not committed
                shutil.copy(path, tree / generated / path.name)
            sides[args.against] = tree
        best: dict[str, dict[str, Any]] = {}
        for _ in range(args.rounds):
            for name, root in sides.items():
                result = probe(root)
                if name not in best or result["seconds"] < best[name]["seconds"]:
                    best[name] = result
    for name, result in best.items():
        print(f"{name}: {result['seconds'] * 1000:.0f} ms, {result['modules']} modules, optional loaded: "
              f"{', '.join(result['optional']) or 'none'}")
    if args.against:
        ratio = best["this"]["seconds"] / best[args.against]["seconds"]
        print(f"ratio this / {args.against}: {ratio:.2f}")


if __name__ == "__main__":
    main()
