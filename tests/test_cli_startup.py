"""What the command line loads to start: ``hetsched --help`` and the trace commands (``replay-openb``,
``sweep``) run without importing the Kubernetes client (issue 33: start-up; only the commands that talk to a
cluster pay for it). Measured as which modules a fresh interpreter loaded — never as a timed test."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.builders import tiny_openb_trace

pytestmark = pytest.mark.timeout(300)
PROBE = """
import json, sys
from hetsched.cli.main import app
try:
    app(sys.argv[1:], standalone_mode=False)
except SystemExit:
    pass
watched = ("kubernetes.", "hetsched.cluster.kube")
print(json.dumps(sorted(m for m in sys.modules if m == "kubernetes" or m.startswith(watched))))
"""


def loaded(*args: str, cwd: Path) -> list[str]:
    done = subprocess.run([sys.executable, "-c", PROBE, *args], capture_output=True, text=True, timeout=240,
                          check=False, cwd=cwd)
    found: list[str] = json.loads(done.stdout.strip().splitlines()[-1])
    return found


def test_help_and_the_trace_commands_never_load_the_kubernetes_client(tmp_path: Path) -> None:
    trace = tiny_openb_trace(tmp_path / "trace")
    assert loaded("--help", cwd=tmp_path) == []
    assert loaded("replay-openb", "--trace-dir", str(trace), "--pods", "tiny", "--policy", "fgd", "--seeds", "1",
                  "--jobs", "1", cwd=tmp_path) == []
    assert loaded("sweep", "--trace-dir", str(trace), "--pods", "tiny", "--policy", "fgd", "--seeds", "1",
                  "--jobs", "1", cwd=tmp_path) == []
    # and a command that talks to a cluster does load it
    assert "kubernetes" in loaded("doctor", "--server", "https://127.0.0.1:1", cwd=tmp_path)
