"""Optional features: a command whose extra is not installed names the extra to install (exit 2), and the
scheduler's start loads no optional dependency (the control-plane image has none of them)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from hetsched.cli import extras
from hetsched.cli.main import app


@pytest.mark.parametrize(("extra", "args", "feature"), [
    ("report", ["simulate", "--cluster", "nowhere.yaml", "--report", "r.html", "w.yaml"], "simulate --report"),
    ("agents", ["device-plugin", "--vendor", "fake"], "the device plugin"),
])
def test_a_command_whose_extra_is_missing_names_the_extra(monkeypatch: pytest.MonkeyPatch, extra: str,
                                                          args: list[str], feature: str) -> None:
    monkeypatch.setitem(extras.EXTRAS, extra, ("hetsched_no_such_module",))
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2, result.output
    assert f"{feature} needs hetsched's '{extra}' extra" in result.output
    assert f"pip install '.[{extra}]'" in result.output and "Traceback" not in result.output


def test_starting_the_scheduler_loads_no_optional_dependency() -> None:
    probe = ("import json, sys; import hetsched.cli.main, hetsched.cli.serve, hetsched.scheduler.engine.runner, "
             "hetsched.cluster.kubernetes; print(json.dumps(sorted(m for m in ('grpc', 'google.protobuf', "
             "'pynvml', 'matplotlib') if m in sys.modules)))")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=120)
    assert json.loads(out.stdout) == []
