"""The processes' health endpoint (kubelet's probes) and their log levels and formats: the pieces, and a real
``hetsched scheduler`` process answering /healthz and /readyz, logging JSON, and stopping on SIGTERM."""

from __future__ import annotations

import json
import logging
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import typer

from hetsched.benchmark.apiserver import _free_port
from hetsched.cli.health import Health, HealthServer
from hetsched.cli.logs import JsonFormatter, configure

pytestmark = pytest.mark.timeout(120)


def get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def test_health_says_alive_while_the_loop_beats_and_ready_until_stopping() -> None:
    health = Health(stale=0.2)
    server = HealthServer(health, "127.0.0.1:0")
    base = f"http://127.0.0.1:{server.port}"
    try:
        assert get(f"{base}/healthz")[0] == 200 and get(f"{base}/readyz")[0] == 503  # starting
        health.beat()
        assert get(f"{base}/healthz")[0] == 200 and get(f"{base}/readyz") == (200, "ready\n")
        deadline = time.monotonic() + 10
        while get(f"{base}/healthz")[0] == 200 and time.monotonic() < deadline:  # the loop went silent
            time.sleep(0.05)
        status, text = get(f"{base}/healthz")
        assert status == 503 and "has not run for" in text
        health.beat()
        health.stopping()
        assert get(f"{base}/readyz") == (503, "stopping\n") and get(f"{base}/metrics")[0] == 404
    finally:
        server.stop()


def test_json_logs_escape_user_text_and_carry_extra_fields() -> None:
    record = logging.LogRecord("hetsched", logging.WARNING, __file__, 1, "set aside %s", ("team/a\n{\"x\": 1}",), None)
    record.job = "team/a"
    line = JsonFormatter().format(record)
    assert "\n" not in line
    entry = json.loads(line)
    assert entry["level"] == "warning" and entry["message"] == "set aside team/a\n{\"x\": 1}"
    assert entry["job"] == "team/a" and entry["time"].endswith("Z")


def test_a_bad_level_or_format_is_a_usage_error() -> None:
    for level, fmt, flag in (("loud", "text", "--log-level"), ("info", "xml", "--log-format")):
        with pytest.raises(typer.BadParameter, match=flag):
            configure(level, fmt)


def healthy_then_stopped(command: list[str], port: int) -> tuple[int, str]:
    """Start ``hetsched <command>``; once its /readyz and /healthz answer 200, SIGTERM it: (exit code,
    stderr)."""
    process = subprocess.Popen([sys.executable, "-m", "hetsched.cli.main", *command], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        status = 0
        while time.monotonic() < deadline and status != 200:
            try:
                status = get(f"http://127.0.0.1:{port}/readyz")[0]
            except OSError:  # not listening yet
                time.sleep(0.2)
        assert status == 200 and get(f"http://127.0.0.1:{port}/healthz")[0] == 200
        process.send_signal(signal.SIGTERM)
        _, err = process.communicate(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(10)
    return process.returncode, err


def test_a_scheduler_process_serves_health_logs_json_and_stops_on_sigterm(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("t")
    port = _free_port()
    code, err = healthy_then_stopped(
        ["scheduler", "--server", "https://127.0.0.1:1", "--token-file", str(token), "--insecure", "--no-leader-elect",
         "--metrics-address", "off", "--health-address", f"127.0.0.1:{port}", "--log-format", "json",
         "--log-level", "debug"], port)
    assert code == 0, err
    lines = [json.loads(line) for line in err.splitlines() if line.startswith("{")]
    assert lines and all({"time", "level", "logger", "message"} <= set(line) for line in lines), err
    assert any(line["message"].startswith("health on http://127.0.0.1:") for line in lines)


def test_a_node_agent_serves_health_while_the_api_server_is_away(tmp_path: Path) -> None:
    """The DaemonSets' probes read this: the agent's loop comes round (and says so) even while every check
    fails to reach the API server, so kubelet does not restart an agent that is only waiting."""
    token = tmp_path / "token"
    token.write_text("t")
    chips = tmp_path / "chips.yaml"
    chips.write_text('{"chips": [{"id": 0}]}')
    port = _free_port()
    code, err = healthy_then_stopped(
        ["node-agent", "--vendor", "fake", "--config", str(chips), "--node", "n0", "--server", "https://127.0.0.1:1",
         "--token-file", str(token), "--insecure", "--period", "0.5", "--metrics-address", "off",
         "--health-address", f"127.0.0.1:{port}"], port)
    assert code == 0, err
