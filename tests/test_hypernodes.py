"""HyperNodes (Volcano's ``topology.volcano.sh/v1alpha1``): the objects, the tree checked as a whole, a Job's
``networkTopology`` and a task's ``partitionPolicy`` — every bad input an error naming the object and field.
(Issue 20's API; placement inside the tree comes with the scheduler's part.)"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from hetsched.api import hypernodes
from hetsched.api.manifest import ManifestError, load_text
from hetsched.api.objects import HyperNode, Job, Node, PodGroup
from hetsched.cli.main import app
from hetsched.cluster.memory import MemoryCluster
from hetsched.controllers.job import JobController
from hetsched.sim.kernel import SimClock
from tests.builders import node


def hypernode(name: str, tier: int, *members: dict[str, Any], tier_name: str = "") -> HyperNode:
    return HyperNode.model_validate({"metadata": {"name": name},
                                     "spec": {"tier": tier, "tierName": tier_name, "members": list(members)}})


def nodes_(*names: str) -> dict[str, Any]:
    return {"type": "Node", "selector": {"regexMatch": {"pattern": "|".join(names)}}}


def child(name: str) -> dict[str, Any]:
    return {"type": "HyperNode", "selector": {"exactMatch": {"name": name}}}


def servers(count: int) -> list[Node]:
    return [node(f"s{i}", labels={"rack": f"r{i // 2}"}) for i in range(count)]


def test_a_three_tier_tree_gives_each_server_its_domain_per_tier() -> None:
    tree = [hypernode("leaf-0", 1, {"type": "Node", "selector": {"labelMatch": {"matchLabels": {"rack": "r0"}}}}),
            hypernode("leaf-1", 1, nodes_("s2", "s3")),
            hypernode("leaf-2", 1, {"type": "Node", "selector": {"exactMatch": {"name": "s4"}}}),
            hypernode("spine-0", 2, child("leaf-0"), child("leaf-1"), tier_name="spine"),
            hypernode("spine-1", 2, child("leaf-2"), tier_name="spine"),
            hypernode("core", 3, child("spine-0"), child("spine-1"))]
    topology, problems = hypernodes.build(tree, servers(5))
    assert problems == []
    assert topology.tiers == [1, 2, 3] and topology.tier_named("spine") == 2
    assert topology.domain[1] == {"s0": "leaf-0", "s1": "leaf-0", "s2": "leaf-1", "s3": "leaf-1", "s4": "leaf-2"}
    assert topology.domain[2]["s3"] == "spine-0" and topology.domain[2]["s4"] == "spine-1"
    assert topology.servers["core"] == ["s0", "s1", "s2", "s3", "s4"] and topology.parent["leaf-1"] == "spine-0"


@pytest.mark.parametrize(("tree", "message"), [
    ([hypernode("spine", 2, child("nowhere"))], "HyperNode spine: spec.members[0].selector.exactMatch.name: no "
                                                "HyperNode named nowhere"),
    ([hypernode("a", 2, child("b")), hypernode("b", 2, nodes_("s0"))], "HyperNode a: spec.members[0]: HyperNode b "
                                                                       "is tier 2: a member must be of a lower tier"),
    ([hypernode("leaf", 1, nodes_("s0")), hypernode("x", 2, child("leaf")), hypernode("y", 2, child("leaf"))],
     "HyperNode y: spec.members[0]: HyperNode leaf is already a member of x"),
    ([hypernode("l0", 1, nodes_("s0", "s1")), hypernode("l1", 1, nodes_("s1", "s2"))],
     "HyperNode l1: spec.members: node(s) s1 also in HyperNode l0; a node is in one HyperNode per tier (tier 1)"),
    ([hypernode("l0", 1, {"type": "Node", "selector": {"exactMatch": {"name": "s9"}}})],
     "HyperNode l0: spec.members[0].selector.exactMatch.name: no node named s9"),
])
def test_a_bad_tree_names_the_hypernode_and_the_field(tree: list[HyperNode], message: str) -> None:
    _, problems = hypernodes.build(tree, servers(4))
    assert any(message in str(p) for p in problems), [str(p) for p in problems]


def test_a_cycle_is_impossible_and_said_so() -> None:
    """a ⊃ b ⊃ a cannot be written: a member's tier is below its parent's, so one of the two is refused."""
    _, problems = hypernodes.build([hypernode("a", 2, child("b")), hypernode("b", 1, child("a"))], servers(1))
    assert [str(p) for p in problems] == ["HyperNode b: spec.members[0]: HyperNode a is tier 2: a member must be "
                                          "of a lower tier than 1"]


HYPERNODE = """apiVersion: topology.volcano.sh/v1alpha1
kind: HyperNode
metadata: {{name: {name}}}
spec:
  tier: {tier}
  members:
  - type: {type}
    selector: {selector}
"""


@pytest.mark.parametrize(("fields", "message"), [
    ({"tier": 0}, "spec.tier: Input should be greater than or equal to 1"),
    ({"selector": "{exactMatch: {name: a}, regexMatch: {pattern: b}}"},
     "give exactly one of exactMatch, regexMatch, labelMatch (got exactMatch, regexMatch)"),
    ({"selector": "{}"}, "give exactly one of exactMatch, regexMatch, labelMatch (got none)"),
    ({"type": "HyperNode", "selector": "{regexMatch: {pattern: leaf-.*}}"}, "a HyperNode member is named with "
                                                                            "exactMatch"),
    ({"selector": r"{regexMatch: {pattern: '(a)\1'}}"}, "RE2, as Volcano reads it): invalid escape sequence"),
    ({"selector": "{regexMatch: {pattern: '(?=a)b'}}"}, "invalid perl operator"),
    ({"selector": "{regexMatch: {pattern: '[unclosed'}}"}, "not a regular expression"),
    ({"type": "Switch"}, "spec.members[0].type: Input should be 'Node' or 'HyperNode'"),
])
def test_a_malformed_hypernode_is_refused_naming_the_field(fields: dict[str, Any], message: str) -> None:
    values = {"name": "h", "tier": 1, "type": "Node", "selector": "{exactMatch: {name: s0}}", **fields}
    with pytest.raises(ManifestError) as info:
        load_text(HYPERNODE.format(**values))
    assert message in str(info.value) and "HyperNode/h" in str(info.value), str(info.value)


JOB = """apiVersion: batch.volcano.sh/v1alpha1
kind: Job
metadata: {{name: train}}
spec:
  minAvailable: 4
  {topology}
  tasks:
  - name: w
    replicas: 4
    {partition}
    template:
      spec:
        containers: [{{name: c, image: x, resources: {{limits: {{huawei.com/Ascend910: 8}}}}}}]
"""


@pytest.mark.parametrize(("topology", "partition", "message"), [
    ("networkTopology: {mode: hard}", "", "mode hard needs highestTierAllowed"),
    ("networkTopology: {mode: hard, highestTierAllowed: 2, highestTierName: spine}", "",
     "give highestTierAllowed or highestTierName, not both"),
    ("networkTopology: {mode: hard, highestTierAllowed: 0}", "", "highestTierAllowed: Input should be greater"),
    ("networkTopology: {mode: strict, highestTierAllowed: 1}", "", "networkTopology.mode: Input should be 'hard' "
                                                                    "or 'soft'"),
    ("", "partitionPolicy: {totalPartitions: 3, partitionSize: 2}", "totalPartitions × partitionSize (3 × 2) must "
                                                                     "equal replicas (4)"),
    ("", "partitionPolicy: {totalPartitions: 2, partitionSize: 2, minPartitions: 3}", "minPartitions (3) is "
                                                                                      "greater than totalPartitions"),
])
def test_a_bad_network_topology_is_refused_naming_the_field(topology: str, partition: str, message: str) -> None:
    with pytest.raises(ManifestError) as info:
        load_text(JOB.format(topology=topology, partition=partition))
    assert message in str(info.value) and "Job/train" in str(info.value), str(info.value)


def test_the_job_controller_hands_the_jobs_network_topology_to_its_podgroup() -> None:
    text = JOB.format(topology="networkTopology: {mode: hard, highestTierAllowed: 2}",
                      partition="partitionPolicy: {totalPartitions: 2, partitionSize: 2, networkTopology: "
                                "{mode: hard, highestTierAllowed: 1}}")
    (job,) = load_text(text)
    assert isinstance(job, Job) and job.spec.tasks[0].partitionPolicy is not None
    clock = SimClock()
    cluster = MemoryCluster(clock)
    controller = JobController(cluster, clock, events=cluster)
    cluster.create(job)
    controller.process()
    podgroup = cluster.get("PodGroup", "default/train")
    assert isinstance(podgroup, PodGroup) and podgroup.spec.networkTopology is not None
    assert (podgroup.spec.networkTopology.mode, podgroup.spec.networkTopology.highestTierAllowed) == ("hard", 2)


def _cluster_spec(path: Path) -> Path:
    path.write_text("""apiVersion: hetsched.io/v1alpha1
kind: ClusterSpec
metadata: {name: racks}
pools:
- name: s
  count: 4
  cpu: "8"
  memory: 32Gi
""")
    return path


def test_validate_and_simulate_check_the_tree_against_the_cluster(tmp_path: Path) -> None:
    tree = tmp_path / "tree.yaml"
    tree.write_text(HYPERNODE.format(name="leaf-0", tier=1, type="Node", selector="{regexMatch: {pattern: 's-0[01]'}}")
                    + "---\n" + HYPERNODE.format(name="leaf-1", tier=1, type="Node",
                                                 selector="{regexMatch: {pattern: 's-0[12]'}}"))
    runner = CliRunner()
    assert runner.invoke(app, ["validate", str(tree)]).exit_code == 0  # alone: only checked against each other
    ran = runner.invoke(app, ["simulate", "--cluster", str(_cluster_spec(tmp_path / "c.yaml")), str(tree),
                              "--until", "1"])
    assert ran.exit_code == 2, ran.output
    assert "the cluster (HyperNode/leaf-1): spec.members: node(s) s-01 also in HyperNode leaf-0" in ran.output
    tree.write_text(HYPERNODE.format(name="leaf-0", tier=1, type="Node", selector="{regexMatch: {pattern: 's-0[01]'}}"))
    fine = runner.invoke(app, ["simulate", "--cluster", str(tmp_path / "c.yaml"), str(tree), "--until", "1"])
    assert fine.exit_code == 0, fine.output


TOPOLOGY_SPEC = """apiVersion: hetsched.io/v1alpha1
kind: ClusterSpec
metadata: {name: fabric}
pools:
- name: a3
  count: 8
  cpu: "192"
  memory: 1Ti
  accelerators: [{kind: ascend, model: Ascend910, count: 8}]
  topology:
  - {tier: 1, size: 2, prefix: supernode}
  - {tier: 2, size: 2, prefix: spine}
"""


def _queue(tmp_path: Path) -> str:
    path = tmp_path / "queue.yaml"
    path.write_text("apiVersion: scheduling.volcano.sh/v1beta1\nkind: Queue\nmetadata: {name: research}\n")
    return str(path)


def test_a_pool_declares_its_place_in_the_network_and_the_hypernodes_are_discovered(tmp_path: Path) -> None:
    """8 servers, 2 per tier-1 domain, 2 tier-1 domains per spine: 4 + 2 HyperNodes, every server in one of
    each tier — the tree a simulation starts with."""
    from hetsched.cluster.dump import load_cluster

    path = tmp_path / "fabric.yaml"
    path.write_text(TOPOLOGY_SPEC)
    start = load_cluster([path])
    made = [obj for obj in start.state if isinstance(obj, HyperNode)]
    assert sorted((h.spec.tier, h.metadata.name) for h in made) == [
        (1, "tier1-supernode-0"), (1, "tier1-supernode-1"), (1, "tier1-supernode-2"), (1, "tier1-supernode-3"),
        (2, "tier2-spine-0"), (2, "tier2-spine-1")]
    topology, problems = hypernodes.build(made, start.nodes)
    assert problems == []
    assert topology.domain[1]["a3-05"] == "tier1-supernode-2" and topology.domain[2]["a3-05"] == "tier2-spine-1"
    assert topology.servers["tier2-spine-0"] == ["a3-00", "a3-01", "a3-02", "a3-03"]
    ran = CliRunner().invoke(app, ["simulate", "--cluster", str(path), "--until", "1", _queue(tmp_path)])
    assert ran.exit_code == 0, ran.output


def test_discovery_names_are_valid_and_distinct_for_any_label_value() -> None:
    odd = [node("n0", labels={"t1": "Rack_A", "t2": "row 1"}), node("n1", labels={"t1": "rack-a", "t2": "row 1"}),
           node("n2", labels={"t2": "row 1"})]  # n2: no tier-1 label, a member of its row by name
    made = hypernodes.discover(odd, {1: "t1", 2: "t2"})
    names = [h.metadata.name for h in made]
    assert len(set(names)) == 3 and "tier1-rack-a" in names
    topology, problems = hypernodes.build(made, odd)
    assert problems == [] and topology.servers[names[-1]] == ["n0", "n1", "n2"]


def test_a_pools_topology_tiers_must_rise(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(TOPOLOGY_SPEC.replace("{tier: 2, size: 2, prefix: spine}", "{tier: 1, size: 2, prefix: spine}"))
    ran = CliRunner().invoke(app, ["simulate", "--cluster", str(path), "--until", "1", _queue(tmp_path)])
    assert ran.exit_code == 2 and "topology: tiers must rise from level to level, got [1, 1]" in ran.output


@pytest.mark.timeout(120)
def test_no_pattern_backtracks_over_many_node_names() -> None:
    """Patterns that backtrack polynomially or exponentially under Python's ``re`` (``.*`` × 30 before a
    missing letter, ``[a-z0-9-]*`` × 25, ``(a+)+$``) are RE2's linear time here: the tree of 2,000 nodes with
    63-character names builds (under Python's ``re`` the first pattern alone runs for hours; the test's
    timeout would fail it)."""
    from hetsched.api.hypernodes import build
    from hetsched.api.objects import HyperNode, Node

    names = [f"{'a' * 50}-{i:012d}" for i in range(2_000)]
    nodes = [Node.model_validate({"metadata": {"name": name}}) for name in names]
    patterns = [".*" * 30 + "x", "[a-z0-9-]*" * 25 + "!", "(a+)+$", "(a|aa)*b"]
    hypernodes = [HyperNode.model_validate({
        "apiVersion": "topology.volcano.sh/v1alpha1", "kind": "HyperNode", "metadata": {"name": f"leaf-{i}"},
        "spec": {"tier": 1, "members": [{"type": "Node", "selector": {"regexMatch": {"pattern": pattern}}}]}})
        for i, pattern in enumerate(patterns)]
    topology, problems = build(hypernodes, nodes)
    assert not problems, problems
    assert all(topology.servers[f"leaf-{i}"] == [] for i in range(len(patterns)))  # none of them names a node
