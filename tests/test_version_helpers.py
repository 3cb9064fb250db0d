"""The real-cluster helpers choose flags and API versions from the versions the binaries and the server
report, so the same suites run the 1.20 components provisioned here and current releases (issue 32: a by-hand
run on current releases failed only on flags 1.20 took and on a hard-coded policy/v1beta1)."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from hetsched.benchmark.apiserver import binary_version, policy_version, server_version
from tests.realnodes import (
    controller_manager_flags_for,
    kubelet_config_for,
    kubelet_flags_for,
    scheduler_flags_for,
)


def fake_binary(tmp_path: Path, said: str) -> Path:
    path = tmp_path / "kubelet"
    path.write_text(f"#!/bin/sh\necho '{said}'\n")
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return path


def test_versions_are_read_from_what_binaries_and_servers_say(tmp_path: Path) -> None:
    assert binary_version(fake_binary(tmp_path, "Kubernetes v1.31.4")) == (1, 31)
    other = tmp_path / "other"
    other.mkdir()
    with pytest.raises(RuntimeError, match="said no version"):
        binary_version(fake_binary(other, "garbage"))
    assert server_version({"major": "1", "minor": "29+"}) == (1, 29)
    assert policy_version((1, 20)) == "policy/v1beta1" and policy_version((1, 21)) == "policy/v1"


def test_flags_a_release_removed_are_not_given_to_it() -> None:
    assert "--container-runtime=remote" in kubelet_flags_for((1, 20)) and not kubelet_flags_for((1, 29))
    assert kubelet_config_for((1, 20)) == {} and kubelet_config_for((1, 33)) == {"failCgroupV1": False}
    assert controller_manager_flags_for((1, 20)) == ["--port=0", "--pod-eviction-timeout=5m"]
    assert controller_manager_flags_for((1, 25)) == ["--pod-eviction-timeout=5m"]
    assert controller_manager_flags_for((1, 30)) == []
    assert scheduler_flags_for((1, 23)) == ["--port=0"] and scheduler_flags_for((1, 24)) == []
