"""The CANN ↔ Ascend driver check (issue 32; the seed's first war story): the table and how versions
compare, what the node agent publishes (the driver from a real ``npu-smi`` header, the host's CANN from its
toolkit's install record), and doctor's ``cann-driver-match`` on nodes and on pods that declare their
image's CANN."""

from __future__ import annotations

import json
import os
import shlex
import stat
from pathlib import Path

import pytest

from hetsched.agents import npu_smi
from hetsched.agents.backends.ascend import AscendBackend, toolkit_version
from hetsched.agents.backends.fake import FakeBackend
from hetsched.agents.node_agent import NodeAgent
from hetsched.api.objects import Node
from hetsched.cluster.memory import MemoryCluster
from hetsched.devices.cann import CANN_ANNOTATION, DRIVER_ANNOTATION, DRIVER_LABEL, release, verdict
from hetsched.diagnose.checks import ClusterFacts, run_checks
from hetsched.sim.kernel import SimClock
from tests.builders import node, pod, running_on

FIXTURES = Path(__file__).resolve().parents[2] / "shared" / "fixtures"


@pytest.mark.parametrize(("cann", "driver", "fits"), [
    ("8.0.RC1", "24.1.rc1.b030", True),   # npu-smi's spelling: lower case, a build suffix
    ("8.0.rc1", "24.1.RC1", True),
    ("8.2.RC1", "24.1.0", True),
    ("8.2.RC1", "23.0.3", False),         # CANN upgraded, driver left behind
    ("8.5.0", "25.3.1", True),            # 25.3.X
    ("8.5.0", "25.1.0", False),
    ("8.1.RC1", "24.1.0", False),
    ("7.0.0", "23.0.0", None),            # not in the table: unknown, never assumed to fit
    ("8.0.RC1", "<script>", None),        # garbage is no version
])
def test_the_table_answers_by_release(cann: str, driver: str, fits: bool | None) -> None:
    answer, why = verdict(cann, driver)
    assert answer is fits, why
    if fits is False:
        assert "needs Ascend HDK driver" in why and ("release notes" in why or "README" in why)


def test_release_strips_the_build_and_refuses_text_that_is_no_version() -> None:
    assert release("24.1.rc1.b030") == "24.1.RC1" and release(" 25.2.0 ") == "25.2.0"
    assert release("") == release("v" * 100) == release("24.1 0") == ""


@pytest.mark.skipif(not FIXTURES.is_dir(), reason="vendor-tool fixtures not found at ../shared/fixtures")
def test_the_driver_release_is_read_from_real_npu_smi_headers() -> None:
    read = {name: npu_smi.parse_version((FIXTURES / "npu-smi" / name).read_text())
            for name in ("ascend-910b3-8chip.txt", "ascend-910prob-8chip.txt")}
    assert read == {"ascend-910b3-8chip.txt": "24.1.rc1.b030", "ascend-910prob-8chip.txt": "24.1.0"}
    assert npu_smi.parse_version("garbage\n| npu-smi |\n") == ""


def test_the_host_toolkit_release_comes_from_its_install_record(tmp_path: Path) -> None:
    (tmp_path / "aarch64-linux").mkdir()
    (tmp_path / "aarch64-linux" / "ascend_toolkit_install.info").write_text(
        "package_name=Ascend-cann-toolkit\nversion=8.0.RC1\ninnerversion=V100R001C17\n")
    assert toolkit_version(tmp_path) == "8.0.RC1"
    assert toolkit_version(tmp_path / "absent") == ""


@pytest.mark.skipif(not FIXTURES.is_dir(), reason="vendor-tool fixtures not found at ../shared/fixtures")
def test_the_node_agent_publishes_the_driver_and_host_cann(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    tool = bin_dir / "npu-smi"
    tool.write_text(f"#!/bin/sh\nexec cat {shlex.quote(str(FIXTURES / 'npu-smi' / 'ascend-910b3-8chip.txt'))}\n")
    tool.chmod(tool.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    (tmp_path / "toolkit").mkdir()
    (tmp_path / "toolkit" / "ascend_toolkit_install.info").write_text("version=8.2.RC1\n")
    backend = AscendBackend()
    backend.toolkit = tmp_path / "toolkit"
    cluster = MemoryCluster(SimClock())
    cluster.create(node("n0", cpu="64"))
    NodeAgent(cluster, "n0", backend, now=lambda: 1.0).sync()
    found = cluster.get("Node", "n0")
    assert isinstance(found, Node)
    assert found.metadata.annotations[DRIVER_ANNOTATION] == "24.1.rc1.b030"
    assert found.metadata.labels[DRIVER_LABEL] == "24.1.rc1.b030"  # what the scheduler and nodeSelectors read
    assert found.metadata.annotations[CANN_ANNOTATION] == "8.2.RC1"
    (tmp_path / "toolkit" / "ascend_toolkit_install.info").unlink()  # the toolkit removed from the host
    NodeAgent(cluster, "n0", backend, now=lambda: 2.0).sync()
    found = cluster.get("Node", "n0")
    assert isinstance(found, Node) and CANN_ANNOTATION not in found.metadata.annotations


def versioned(name: str, driver: str, cann: str = "") -> Node:
    made = node(name, cpu="64")
    notes = {DRIVER_ANNOTATION: driver, **({CANN_ANNOTATION: cann} if cann else {})}
    return made.model_copy(update={"metadata": made.metadata.model_copy(update={"annotations": notes})})


def test_doctor_flags_a_mismatched_host_and_pod_and_says_what_it_does_not_know(tmp_path: Path) -> None:
    config = tmp_path / "chips.yaml"
    config.write_text(json.dumps({"like": "ascend", "model": "Ascend910", "resource": "huawei.com/Ascend910",
                                  "driverVersion": "23.0.3", "cannVersion": "8.2.RC1",
                                  "chips": [{"id": 0}]}))
    assert FakeBackend(config).versions() == {"driver": "23.0.3", "cann": "8.2.RC1"}
    old = versioned("old", "23.0.3", "8.2.RC1")            # the war story, on the host
    fine = versioned("fine", "24.1.rc1.b030", "8.0.RC1")
    declared = pod("train-0", annotations={CANN_ANNOTATION: "8.5.0"})
    mystery = pod("eval-0", annotations={CANN_ANNOTATION: "6.3.0"})
    objects = [old, fine, running_on(declared, "fine"), running_on(mystery, "fine")]
    findings = {f.object: f for f in run_checks(ClusterFacts(objects=objects), ["cann-driver-match"])}
    assert set(findings) == {"Node/old", "Pod/default/train-0", "Pod/default/eval-0"}
    assert findings["Node/old"].severity == "error" and "23.0.3" in findings["Node/old"].evidence
    train = findings["Pod/default/train-0"]
    assert train.severity == "error" and "node fine" in train.evidence
    assert findings["Pod/default/eval-0"].severity == "info" and "not in hetsched's table" in \
        findings["Pod/default/eval-0"].evidence
    clean = run_checks(ClusterFacts(objects=[fine, running_on(pod("ok-0", annotations={
        CANN_ANNOTATION: "8.0.RC1"}), "fine")]), ["cann-driver-match"])
    assert [f.severity for f in clean] == ["ok"]


def driver_node(name: str, driver: str | None) -> Node:
    made = node(name, cpu="16")
    labels = {**made.metadata.labels, **({DRIVER_LABEL: driver} if driver else {})}
    return made.model_copy(update={"metadata": made.metadata.model_copy(update={"labels": labels})})


def test_the_scheduler_never_puts_a_declared_cann_on_a_driver_that_does_not_support_it() -> None:
    """The war story prevented, not only reported: a pod that declares CANN 8.2.RC1 goes to the node whose
    driver supports it; with no such node it waits, saying why; an unknown pair or an unlabelled node is not
    refused (the table never guesses against a user)."""
    from tests.builders import gang, harness

    def placed(objects: list[object], **pod_args: object) -> tuple[dict[str, str], str]:
        h = harness([*objects, *gang("train", 1, cpu="1", annotations={CANN_ANNOTATION: "8.2.RC1"}, **pod_args)])
        h.cycle()
        return h.bindings(), h.condition("train")

    bound, _ = placed([driver_node("old", "23.0.3"), driver_node("new", "24.1.0")])
    assert bound == {"train-0": "new"}
    bound, why = placed([driver_node("old", "23.0.3")])
    assert bound == {} and "1 node(s) had an Ascend driver that CANN 8.2.RC1 does not support" in why, why
    bound, _ = placed([driver_node("plain", None)])  # no driver published: not refused
    assert bound == {"train-0": "plain"}
    h = harness([driver_node("old", "23.0.3"), *gang("legacy", 1, cpu="1", annotations={CANN_ANNOTATION: "6.3.0"})])
    h.cycle()
    assert h.bindings() == {"legacy-0": "old"}  # not in the table: doctor says so, the scheduler does not refuse
