"""The ``numaaware`` plugin: a pod with exclusive CPUs and chips and a NUMA topology policy lands where one
NUMA node holds both, takes its chips there, is pinned there (``hetsched.io/numa-node``), and the pinned CPU
is charged to that NUMA node in later cycles."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hetsched.api.objects import AnyObject, Pod
from hetsched.devices import numa
from hetsched.devices.inventory import pod_allocation
from hetsched.scheduler.engine.conf import DEFAULT_CONF_YAML
from tests.builders import accel_node, gang, handed_off, harness, pod, podgroup

GPU = "nvidia.com/gpu"
CONF = DEFAULT_CONF_YAML + "  - name: numaaware\n"
CONF_FIRST = DEFAULT_CONF_YAML.replace("  - name: devicetopology\n", "  - name: numaaware\n  - name: devicetopology\n")
POLICY = "volcano.sh/numa-topology-policy"


def node(name: str) -> AnyObject:
    """8 GPUs and 64 CPUs over 2 NUMA nodes: GPUs 0–3 and 32 CPUs on NUMA 0, GPUs 4–7 and 32 CPUs on 1."""
    return accel_node(name, GPU, "generic", 8, cpu="64", numa_nodes=2)


def bound(name: str, on: str, *, cpu: str, annotations: dict[str, str], gpus: int = 0) -> list[AnyObject]:
    """A pod the scheduler bound earlier: a hand-off carries its provenance stamp (its uid, the node)."""
    limits: dict[str, Any] = {GPU: gpus} if gpus else {}
    held = json.loads(annotations.pop("hetsched.io/allocation", "{}"))
    made = pod(f"{name}-0", name, cpu=cpu, limits=limits, annotations=annotations)
    return [podgroup(name, 1, phase="Running"), handed_off(made, on, held)]


def placed(h: Any) -> dict[str, tuple[str, list[int], str | None]]:
    out = {}
    for p in h.cluster.list("Pod"):
        if isinstance(p, Pod) and p.spec.nodeName:
            out[p.metadata.name] = (p.spec.nodeName, pod_allocation(p.metadata.annotations).get(GPU, []),
                                    p.metadata.annotations.get("hetsched.io/numa-node"))
    return out


def crowded(name: str) -> list[AnyObject]:
    """NUMA 0 has its 4 GPUs but only 4 CPUs left; NUMA 1 has CPUs but only 2 GPUs left."""
    return [node(name),
            *bound(f"{name}-cpu", name, cpu="28", annotations={"hetsched.io/numa-node": "0"}),
            *bound(f"{name}-gpu", name, cpu="1", gpus=2,
                   annotations={"hetsched.io/allocation": '{"nvidia.com/gpu":[4,5]}'})]


@pytest.mark.parametrize("policy", ["single-numa-node", "restricted"])
def test_strict_policies_wait_for_a_numa_node_that_holds_cpus_and_chips(policy: str) -> None:
    h = harness([*crowded("a"), *gang("train", 1, cpu="8", limits={GPU: 4}, annotations={POLICY: policy})], CONF)
    h.cycle()
    assert "train-0" not in placed(h)
    assert h.condition("train")
    h.cluster.create(node("b"))
    h.cycle()
    assert placed(h)["train-0"] == ("b", [0, 1, 2, 3], "0")


def test_best_effort_prefers_the_aligned_node_but_runs_anywhere() -> None:
    h = harness([*crowded("a"), *gang("train", 1, cpu="8", limits={GPU: 4}, annotations={POLICY: "best-effort"})],
                CONF)
    h.cycle()
    assert placed(h)["train-0"][0] == "a"  # nothing better exists: it runs, unaligned
    h2 = harness([*crowded("a"), node("b"),
                  *gang("train", 1, cpu="8", limits={GPU: 4}, annotations={POLICY: "best-effort"})], CONF)
    h2.cycle()
    assert placed(h2)["train-0"][0] == "b"


@pytest.mark.parametrize("conf", [CONF, CONF_FIRST], ids=["after-devicetopology", "before-devicetopology"])
def test_chips_are_taken_inside_the_numa_node_with_the_cpus_and_stay_charged(conf: str) -> None:
    """NUMA 0's CPUs are nearly all pinned, so the pod's 2 GPUs come from NUMA 1 (without numaaware the
    policy's order would take GPUs 0 and 1); next cycle a second pod sees NUMA 1's CPUs as used. The
    plugins' order in the configuration does not matter."""
    assert conf.index("numaaware") != conf.index("devicetopology")
    objects = [node("a"), *bound("busy", "a", cpu="30", annotations={"hetsched.io/numa-node": "0"}),
               *gang("infer", 1, cpu="20", limits={GPU: 2}, annotations={POLICY: "single-numa-node"})]
    h = harness(objects, conf)
    h.cycle()
    node_name, chips, numa = placed(h)["infer-0"]
    assert node_name == "a" and set(chips) <= {4, 5, 6, 7} and numa == "1"
    for obj in gang("more", 1, cpu="20", limits={GPU: 2}, annotations={POLICY: "single-numa-node"}):
        h.cluster.create(obj)
    h.cycle()
    assert "more-0" not in placed(h)  # NUMA 0 has 2 CPUs left, NUMA 1 has 12: neither holds 20
    plain = harness([node("a"), *bound("busy", "a", cpu="30", annotations={"hetsched.io/numa-node": "0"}),
                     *gang("infer", 1, cpu="20", limits={GPU: 2})], CONF)
    plain.cycle()
    assert set(placed(plain)["infer-0"][1]) <= {0, 1, 2, 3}  # no policy: chips in the family's order


@settings(max_examples=200, deadline=None)
@given(rows=st.lists(st.tuples(st.lists(st.integers(0, 64_000), min_size=2, max_size=2),
                               st.lists(st.integers(0, 3), min_size=2, max_size=2)), min_size=1, max_size=6),
       cpu=st.sampled_from([0, 1000, 8000, 30_000]))
def test_pick_is_a_numa_node_that_holds_the_pod_and_the_tightest_one(
        rows: list[tuple[list[int], list[int]]], cpu: int) -> None:
    cpu_free = np.array([r[0] for r in rows], dtype=np.int64)
    chips = np.array([r[1] for r in rows], dtype=np.int64)
    per = numa.capacity(cpu_free, cpu, [chips])
    chosen = numa.pick(per, cpu_free)
    for i, n in enumerate(chosen.tolist()):
        fits = [k for k in range(2) if cpu_free[i, k] >= cpu and chips[i, k] >= 1]
        if not fits:
            assert n == -1
        else:
            assert n in fits and cpu_free[i, n] == min(cpu_free[i, k] for k in fits)


def test_numa_masks_follow_the_chip_numa_ids() -> None:
    chip_numa = np.array([[0, 0, 1, 1, 0, 0, 0, 0]], dtype=np.int64)
    present = np.array([0b0000_1111], dtype=np.int64)
    assert numa.masks(chip_numa, present, 2).tolist() == [[0b0011, 0b1100]]
