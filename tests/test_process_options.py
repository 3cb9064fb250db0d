"""The long-running commands' options: ``--config FILE`` (YAML of option values, under flags and
environment variables) read before anything starts, and bad files refused as usage errors naming them."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from hetsched.cli.main import app


def test_a_bad_config_file_is_a_usage_error_naming_it(tmp_path: Path) -> None:
    listed = tmp_path / "list.yaml"
    listed.write_text("- period\n- 1\n")
    broken = tmp_path / "broken.yaml"
    broken.write_text("period: [1\n")
    for path, message in ((listed, "expected a mapping of option names to values"), (broken, "cannot read"),
                          (tmp_path / "missing.yaml", "cannot read")):
        result = CliRunner().invoke(app, ["scheduler", "--config", str(path)])
        assert result.exit_code == 2 and message in result.output and path.name in result.output, result.output


def test_config_values_reach_the_command(tmp_path: Path) -> None:
    config = tmp_path / "scheduler.yaml"
    config.write_text("server: https://127.0.0.1:1\n")  # --server without --token-file: the error names it
    result = CliRunner().invoke(app, ["scheduler", "--config", str(config), "--metrics-address", "off"])
    assert result.exit_code == 2 and "--server needs --token-file" in result.output, result.output

