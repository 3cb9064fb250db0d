"""Supernodes without hand work (issue 20, part 5): the node agent labels each server with the supernode its
hardware reports, the controller's label discovery turns the labels into HyperNodes, and the scheduler keeps
a hard tier-1 gang inside one supernode. On the embedded cluster; the same discovery against the real API
server is in ``test_kubernetes``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hetsched.agents.backends.fake import FakeBackend
from hetsched.agents.node_agent import SUPERNODE_LABEL, NodeAgent
from hetsched.api.objects import HyperNode, NetworkTopology, Node, PodGroup
from hetsched.controllers.hypernode_discovery import OWNER_LABEL, HyperNodeDiscovery, parse_labels
from tests.builders import accel_node, gang, harness, node


def chips_file(path: Path, superpod: int | None) -> Path:
    spec: dict[str, object] = {"resource": "huawei.com/Ascend910", "model": "Ascend910", "like": "ascend",
                               "chips": [{"id": i} for i in range(8)]}
    if superpod is not None:
        spec["superPod"] = superpod
    path.write_text(json.dumps(spec))
    return path


class Devices(FakeBackend):
    """The fake vendor without device files (the agent never hands chips to containers)."""

    def _make_devices(self, chips: object) -> None:
        return None


def labels_of(h: object, name: str) -> dict[str, str]:
    found = h.cluster.get("Node", name)  # type: ignore[attr-defined]
    assert isinstance(found, Node)
    return dict(found.metadata.labels)


def test_agents_label_supernodes_discovery_builds_the_tree_and_a_gang_stays_in_one(tmp_path: Path) -> None:
    """Six A3 servers in two supernodes (0: s0 s2 s4, 1: s1 s3 s5 — interleaved, so placement by index alone
    would mix them); a hard tier-1 gang of 3 lands in one supernode."""
    objects = [accel_node(f"s{i}") for i in range(6)]
    bound = NetworkTopology(mode="hard", highestTierAllowed=1)
    job = gang("train", 3, limits={"huawei.com/Ascend910": 8})
    group = job[0]
    assert isinstance(group, PodGroup)
    job[0] = group.model_copy(update={"spec": group.spec.model_copy(update={"networkTopology": bound})})
    h = harness(objects + job)
    for i in range(6):
        backend = Devices(chips_file(tmp_path / f"s{i}.json", i % 2))
        NodeAgent(h.cluster, f"s{i}", backend, now=lambda: 0.0).sync()
    assert [labels_of(h, f"s{i}")[SUPERNODE_LABEL] for i in range(6)] == ["superpod-0", "superpod-1"] * 3
    discovery = HyperNodeDiscovery(h.cluster)
    result = discovery.sync()
    assert result.created == ["tier1-superpod-0", "tier1-superpod-1"] and not result.conflicts
    made = h.cluster.get("HyperNode", "tier1-superpod-0")
    assert isinstance(made, HyperNode) and made.metadata.labels[OWNER_LABEL] == "node-labels"
    h.cycle()
    placed = sorted(p.spec.nodeName for p in h.cluster.list("Pod") if p.spec.nodeName)  # type: ignore[attr-defined]
    assert placed in (["s0", "s2", "s4"], ["s1", "s3", "s5"]), placed


def test_a_server_that_leaves_its_supernode_loses_only_the_label_the_agent_wrote(tmp_path: Path) -> None:
    h = harness([node("s0", cpu="64"), node("s1", cpu="64", labels={SUPERNODE_LABEL: "rack-7"})])
    config = chips_file(tmp_path / "s0.json", 4)
    agent = NodeAgent(h.cluster, "s0", Devices(config), now=lambda: 0.0)
    agent.sync()
    assert labels_of(h, "s0")[SUPERNODE_LABEL] == "superpod-4"
    chips_file(config, -1)  # the driver now says: in no supernode
    agent.sync()
    assert SUPERNODE_LABEL not in labels_of(h, "s0")
    chips_file(config, None)  # hardware that cannot tell: an operator's label stays as it is
    other = NodeAgent(h.cluster, "s1", Devices(chips_file(tmp_path / "s1.json", None)), now=lambda: 0.0)
    other.sync()
    assert labels_of(h, "s1")[SUPERNODE_LABEL] == "rack-7"
    chips_file(tmp_path / "s1.json", -1)  # says none, but the label is not one the agent wrote: kept
    other.sync()
    assert labels_of(h, "s1")[SUPERNODE_LABEL] == "rack-7"


def test_discovery_follows_label_changes_and_never_touches_a_hypernode_it_does_not_own() -> None:
    h = harness([node(f"n{i}", labels={SUPERNODE_LABEL: f"p{i // 2}"}) for i in range(4)])
    theirs = HyperNode.model_validate({"metadata": {"name": "tier1-p1"}, "spec": {"tier": 1, "members": [
        {"type": "Node", "selector": {"exactMatch": {"name": "n3"}}}]}})
    h.cluster.create(theirs)
    discovery = HyperNodeDiscovery(h.cluster)
    first = discovery.sync()
    assert (first.created, first.conflicts) == (["tier1-p0"], ["tier1-p1"])
    assert discovery.process() == 1 and discovery.process() == 0  # its own writes marked it dirty once
    for name in ("n0", "n1"):
        found = h.cluster.get("Node", name)
        assert isinstance(found, Node)
        h.cluster.update(found.model_copy(update={"metadata": found.metadata.model_copy(
            update={"labels": {SUPERNODE_LABEL: "p9"}})}))
    assert discovery.dirty
    second = discovery.sync()
    assert (second.created, second.deleted) == (["tier1-p9"], ["tier1-p0"])
    stored = h.cluster.get("HyperNode", "tier1-p1")
    assert isinstance(stored, HyperNode) and stored.spec == theirs.spec


@pytest.mark.parametrize(("text", "message"), [
    ("1", "expected TIER=LABEL"), ("0=a", "TIER 1–16"), ("x=a", "TIER 1–16"), ("1=a b", "not a label key"),
    ("1=a,1=b", "tier 1 is given twice"), ("١=a", "TIER 1–16"),
])
def test_bad_discovery_labels_are_refused_with_the_entry_named(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_labels(text)
    assert parse_labels("") == {}
    assert parse_labels("1=example.com/pod, 2=example.com/spine") == {1: "example.com/pod", 2: "example.com/spine"}
