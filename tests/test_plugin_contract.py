"""The plugin contract: each extension point is a protocol a plugin declares and implements, checked at
load; out-of-tree plugins come from the ``hetsched.plugins`` entry-point group of installed distributions.

The example plugin in ``examples/plugins/hetsched-nodecost`` is installed (pip, into a temporary target)
and schedules a simulation; broken distributions (a plugin that cannot be imported, one with a misspelt
point) fail the configuration with the entry point and the distribution named.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from hetsched.scheduler.contract.arrays import BoolArray, FloatArray, IntArray
from hetsched.scheduler.contract.framework import (
    EXTENSION_POINTS,
    Arguments,
    JobOrder,
    NodeFilter,
    NodeScore,
    Plugin,
    PluginContractError,
    check_plugin,
)
from hetsched.scheduler.contract.reasons import Reason
from hetsched.scheduler.contract.snapshot import JobInfo, TaskGroup
from hetsched.scheduler.contract.view import SessionView
from hetsched.scheduler.engine.session import Session
from hetsched.scheduler.plugins.registry import IN_TREE

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "plugins" / "hetsched-nodecost"
HETSCHED = Path(sys.executable).with_name("hetsched")


class Good(Plugin, JobOrder, NodeScore):
    NAME = "good"

    def job_order_key(self, job: JobInfo) -> float:
        return 0.0

    def node_score(self, session: object, group: TaskGroup, nodes: IntArray, placed: IntArray) -> FloatArray:
        raise AssertionError("not called")

    def _helper(self) -> int:  # private helpers are the plugin's own business
        return 1


def test_every_in_tree_plugin_keeps_the_contract_and_a_good_one_passes() -> None:
    for cls in IN_TREE.values():
        check_plugin(cls)
    check_plugin(Good)


def test_a_point_declared_but_not_implemented_is_an_error() -> None:
    class Declares(Plugin, NodeFilter):
        NAME = "declares"

    with pytest.raises(PluginContractError, match=r"plugin declares.*declares NodeFilter but does not define "
                                                  r"node_filter\(\)"):
        check_plugin(Declares)


def test_a_misspelt_point_is_an_error_with_the_right_name_suggested() -> None:
    class Misspelt(Plugin, NodeScore):
        NAME = "misspelt"

        def node_score(self, session: object, group: TaskGroup, nodes: IntArray, placed: IntArray) -> FloatArray:
            raise AssertionError

        def job_order_keys(self, job: JobInfo) -> float:
            return 0.0

    with pytest.raises(PluginContractError, match=r"job_order_keys\(\) is not an extension point.*did you mean "
                                                  r"job_order_key\(\)"):
        check_plugin(Misspelt)


def test_a_point_implemented_but_not_declared_is_an_error() -> None:
    class Undeclared(Plugin):
        NAME = "undeclared"

        def job_order_key(self, job: JobInfo) -> float:
            return 0.0

    with pytest.raises(PluginContractError, match=r"defines job_order_key\(\) but does not declare JobOrder"):
        check_plugin(Undeclared)


def test_a_wrong_signature_is_an_error() -> None:
    class Wrong(Plugin, NodeFilter):
        NAME = "wrong"

        def node_filter(self, group: TaskGroup) -> list[tuple[Reason, BoolArray]]:  # type: ignore[override]
            return []

    with pytest.raises(PluginContractError, match=r"node_filter\(self, group\) must take \(session, group\)"):
        check_plugin(Wrong)


def test_not_a_plugin_or_without_a_name_is_an_error() -> None:
    class Nameless(Plugin, JobOrder):
        def job_order_key(self, job: JobInfo) -> float:
            return 0.0

    with pytest.raises(PluginContractError, match="NAME must be"):
        check_plugin(Nameless)
    with pytest.raises(PluginContractError, match="is not a subclass"):
        check_plugin(object)
    Nameless(Arguments("x"))  # building one is not the check's business


def test_docs_list_the_extension_points_of_the_code() -> None:
    """docs/scheduler.md's table is the code's: every point, its methods, switch and combination."""
    text = (ROOT / "docs" / "scheduler.md").read_text(encoding="utf-8")
    rows = re.findall(r"^\| `(\w+)` \| (.+?) \| `(\w+)` \| (.+?) \| (.+?) \|$", text, re.M)
    documented = {name: (methods, switch, used, combination) for name, methods, switch, used, combination in rows}
    assert list(documented) == list(EXTENSION_POINTS), "docs/scheduler.md lists other points than the code"
    for name, point in EXTENSION_POINTS.items():
        methods, switch, used, combination = documented[name]
        assert re.findall(r"`(\w+)`", methods) == list(point.methods), name
        assert (switch, used, combination) == (point.switch, point.used_by, point.combination), name


# ------------------------------------------------------------------------------------ entry points

def _run(args: list[str], path: Path | None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(path) if path else ""}
    return subprocess.run([str(HETSCHED), *args], capture_output=True, text=True, env=env, timeout=300, check=False)


def _cluster(tmp_path: Path) -> Path:
    path = tmp_path / "cluster.yaml"
    pools = "".join(f"""- name: {name}
  count: 1
  cpu: "8"
  memory: 32Gi
  labels: {{hetsched.example/cost: "{cost}"}}
""" for name, cost in (("dear", 5), ("cheap", 1), ("mid", 2)))
    path.write_text(f"apiVersion: hetsched.io/v1alpha1\nkind: ClusterSpec\nmetadata: {{name: priced}}\npools:\n{pools}")
    return path


def _workload(tmp_path: Path, replicas: int) -> Path:
    path = tmp_path / f"job{replicas}.yaml"
    path.write_text(f"""apiVersion: batch.volcano.sh/v1alpha1
kind: Job
metadata: {{name: work}}
spec:
  minAvailable: 1
  schedulerName: volcano
  tasks:
  - name: w
    replicas: {replicas}
    template:
      metadata: {{annotations: {{hetsched.io/duration: "60"}}}}
      spec:
        containers:
        - name: c
          image: busybox
          resources: {{requests: {{cpu: "4"}}}}
""")
    return path


def _conf(tmp_path: Path) -> Path:
    path = tmp_path / "scheduler.conf"
    path.write_text("""actions: "enqueue, allocate, backfill"
tiers:
- plugins:
  - name: priority
  - name: gang
- plugins:
  - name: predicates
  - name: proportion
  - name: nodecost
    arguments: {nodecost.max: 3, nodecost.weight: 2}
""")
    return path


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The example plugin installed by pip from a copy of its source, as a user installs a distribution."""
    root = tmp_path_factory.mktemp("plugin")
    source = shutil.copytree(EXAMPLE, root / "src")
    target = root / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation",
                    "--no-index", "--target", str(target), str(source)], check=True, timeout=300)
    assert (next(target.glob("hetsched_nodecost-*.dist-info")) / "entry_points.txt").is_file()
    return target


def test_the_example_plugin_from_an_installed_distribution_schedules(installed: Path, tmp_path: Path) -> None:
    """Installed, the example's entry point makes ``nodecost`` a plugin: 4 pods of 4 CPUs go to the cheap
    and the mid node (cheapest first), the node above nodecost.max takes none, and the 2 left wait with the
    plugin's own reason."""
    cluster, conf = _cluster(tmp_path), _conf(tmp_path)
    ran = _run(["simulate", "--cluster", str(cluster), "--scheduler-conf", str(conf), "--json", "--until", "30",
                str(_workload(tmp_path, 6))], installed)
    assert ran.returncode in (0, 3), ran.stderr
    (job,) = json.loads(ran.stdout)["jobs"]
    nodes = sorted(p["node"] for p in job["pods"] if p["node"])
    assert nodes == ["cheap-00", "cheap-00", "mid-00", "mid-00"], job
    assert any("2 node(s) cost more than 3 (nodecost)" in r or "1 node(s) cost more than 3 (nodecost)" in r
               for r in job["unschedulableReasons"]), job["unschedulableReasons"]
    first = _run(["simulate", "--cluster", str(cluster), "--scheduler-conf", str(conf), "--json", "--until", "30",
                  str(_workload(tmp_path, 2))], installed)
    (job,) = json.loads(first.stdout)["jobs"]
    assert [p["node"] for p in job["pods"]] == ["cheap-00", "cheap-00"]  # the score prefers the cheapest


def test_without_the_distribution_the_plugin_is_unknown(tmp_path: Path) -> None:
    ran = _run(_check(tmp_path), None)
    assert ran.returncode == 2, ran.stdout + ran.stderr
    assert "tiers[1].plugins[2].name: unknown plugin 'nodecost'" in ran.stdout + ran.stderr


def _check(tmp_path: Path) -> list[str]:
    """A command that loads the configuration and stops at once."""
    return ["simulate", "--cluster", str(_cluster(tmp_path)), "--scheduler-conf", str(_conf(tmp_path)), "--until",
            "1", str(_workload(tmp_path, 1))]


def _fake_distribution(root: Path, name: str, entry: str, module: str, code: str) -> Path:
    """An installed distribution as pip leaves one: a dist-info with METADATA and entry_points.txt."""
    info = root / f"{name}-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(f"[hetsched.plugins]\n{entry}\n")
    (root / f"{module}.py").write_text(code)
    return root


def test_a_plugin_that_cannot_be_imported_fails_the_configuration_naming_it(tmp_path: Path) -> None:
    site = _fake_distribution(tmp_path / "site", "broken-plugin", "nodecost = broken_plugin:NodeCost",
                              "broken_plugin", "raise RuntimeError('missing driver library')\n")
    ran = _run(_check(tmp_path), site)
    out = ran.stdout + ran.stderr
    assert ran.returncode == 2 and "Traceback" not in out, out
    assert ("entry point nodecost = broken_plugin:NodeCost (hetsched.plugins, from broken-plugin): cannot be "
            "imported: RuntimeError: missing driver library") in out.replace("\n", " "), out


def test_a_plugin_breaking_the_contract_fails_the_configuration_naming_it(tmp_path: Path) -> None:
    code = '''from hetsched.scheduler.contract.framework import NodeScore, Plugin


class NodeCost(Plugin, NodeScore):
    NAME = "nodecost"

    def node_scroe(self, session, group, nodes, placed):
        return 0
'''
    site = _fake_distribution(tmp_path / "site", "typo-plugin", "nodecost = typo_plugin:NodeCost", "typo_plugin",
                              code)
    ran = _run(_check(tmp_path), site)
    out = " ".join((ran.stdout + ran.stderr).split())
    assert ran.returncode == 2 and "Traceback" not in out, out
    assert "from typo-plugin" in out and "declares NodeScore but does not define node_score()" in out, out


def test_an_entry_point_taking_an_in_tree_name_is_refused(tmp_path: Path) -> None:
    site = _fake_distribution(tmp_path / "site", "shadow-plugin", "gang = shadow_plugin:Gang", "shadow_plugin",
                              "Gang = None\n")
    ran = _run(_check(tmp_path), site)
    out = " ".join((ran.stdout + ran.stderr).split())
    assert ran.returncode == 2 and "gang is an in-tree plugin's name" in out, out


def test_a_plugin_written_against_the_engines_session_is_refused_saying_what_to_use() -> None:
    """Issue 30: plugins see the session through ``SessionView`` (contract version 1). One whose points take
    the engine's ``Session`` would reach into the engine; it fails the check, naming the view and its members."""
    class Old(Plugin, NodeScore):
        NAME = "old"

        def node_score(self, session: Session, group: TaskGroup, nodes: IntArray,  # type: ignore[override]
                       placed: IntArray) -> FloatArray:
            raise AssertionError("not called")

    with pytest.raises(PluginContractError) as info:
        check_plugin(Old)
    message = str(info.value)
    assert "plugin old: node_score() takes the engine's Session" in message
    assert "hetsched.scheduler.contract.SessionView since contract version 1" in message
    assert "bind_annotations" in message and "docs/plugins.md" in message

    class New(Plugin, NodeScore):
        NAME = "new"

        def node_score(self, session: SessionView, group: TaskGroup, nodes: IntArray,
                       placed: IntArray) -> FloatArray:
            raise AssertionError("not called")

    check_plugin(New)


def test_the_public_contract_is_versioned_and_complete() -> None:
    """Everything a plugin needs is one import away, and the example plugin imports nothing else of hetsched."""
    import hetsched.scheduler.contract as contract

    assert contract.CONTRACT_VERSION == 1
    assert all(hasattr(contract, name) for name in contract.__all__)
    assert {"Plugin", "SessionView", "Arguments", "Reason", "ReasonCode", "Status", "Code", "TaskGroup",
            "JobInfo", "check_plugin", *EXTENSION_POINTS} <= set(contract.__all__)
    source = (EXAMPLE / "hetsched_nodecost" / "__init__.py").read_text()
    imported = set(re.findall(r"^from (hetsched[\w.]*) import", source, re.MULTILINE))
    assert imported == {"hetsched.scheduler.contract"}, imported


def test_an_entry_point_importing_a_module_gone_since_version_1_says_where_to_look(tmp_path: Path) -> None:
    code = "from hetsched.scheduler.framework import Plugin\n"
    site = _fake_distribution(tmp_path / "site", "old-plugin", "nodecost = old_plugin:NodeCost", "old_plugin", code)
    ran = _run(_check(tmp_path), site)
    out = " ".join((ran.stdout + ran.stderr).split())
    assert ran.returncode == 2 and "Traceback" not in out, out
    assert "hetsched.scheduler.framework is gone since contract version 1: plugins import " \
           "hetsched.scheduler.contract" in out, out
