"""The ``fgd`` scheduler plugin: a fractional pod goes where it leaves shared chips usable for the pods
still queued, where device-level binpack alone would strand a sliver."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hetsched.api.objects import AnyObject
from hetsched.replay.engine import TypicalPods
from hetsched.replay.openb import TracePod
from hetsched.scheduler.contract.framework import Arguments
from hetsched.scheduler.engine.conf import DEFAULT_CONF_YAML
from hetsched.scheduler.plugins.fgd import FGD, Shape
from tests.builders import accel_node, gang, harness
from tests.test_sharing import GPU, MILLI, chips_of

FGD_CONF = DEFAULT_CONF_YAML + "  - name: fgd\n"


def scenario(conf: str | None) -> dict[str, tuple[str, list[int]]]:
    """Node a's chip has 700 milli free, node b's a whole chip; then a 300-milli pod and two 600-milli pods
    arrive together (the small one first)."""
    objects: list[AnyObject] = [accel_node(n, GPU, "generic", 1, share=MILLI) for n in ("a", "b")]
    h = harness(objects, conf)
    for pod in gang("pre", 1, limits={MILLI: 300}, cpu="1"):
        h.cluster.create(pod)
    h.cycle()
    first = chips_of(h)["pre-0"][0]  # call it node a
    for name, milli in (("small", 300), ("big1", 600), ("big2", 600)):
        for pod in gang(name, 1, limits={MILLI: milli}, cpu="1"):
            h.cluster.create(pod)
            h.clock.advance_to(h.clock.now() + 1)
    h.cycle()
    placed = chips_of(h)
    return {name: (("a" if node == first else "b"), chips) for name, (node, chips) in placed.items()}


def test_binpack_alone_strands_a_sliver() -> None:
    placed = scenario(None)
    assert placed["small-0"][0] == "a"  # the tightest chip: 700 → 400, too little for a 600 pod
    assert sum(name.startswith("big") for name in placed) == 1


def test_fgd_keeps_both_chips_usable_for_the_queued_pods() -> None:
    placed = scenario(FGD_CONF)
    assert placed["small-0"][0] == "b"  # 1000 → 700: still room for a 600 pod on each chip
    assert sorted(name for name in placed if name.startswith("big")) == ["big1-0", "big2-0"]


# ------------------------------------------------------------------------------ one FGD, two callers
# The openb replay (``replay.engine``, scalar and memoised per node state, its typical pods the trace's
# shapes) and the ``fgd`` plugin (vectorised over nodes, its typical pods the session's pending ones) compute
# the same fragmentation measure F. Given the same typical shapes they must agree on every node state.

@settings(max_examples=300, derandomize=True, deadline=None)
@given(shapes=st.lists(st.tuples(st.sampled_from([100, 250, 300, 500, 600, 1000]), st.integers(1, 4),
                                 st.integers(0, 32000), st.integers(1, 20)), min_size=1, max_size=8),
       nodes=st.lists(st.tuples(st.lists(st.integers(0, 1000), min_size=8, max_size=8), st.integers(0, 64000)),
                      min_size=1, max_size=6))
def test_the_replay_and_the_plugin_measure_the_same_fragmentation(
        shapes: list[tuple[int, int, int, int]], nodes: list[tuple[list[int], int]]) -> None:
    pods = [TracePod(f"p{i}-{k}", cpu, 0, 1 if milli < 1000 else chips, milli)
            for i, (milli, chips, cpu, count) in enumerate(shapes) for k in range(count)]
    typical = TypicalPods.from_pods(pods, popularity=100.0)
    plugin = FGD(Arguments("fgd"))
    counts: dict[Shape, int] = {}
    for pod in pods:
        shape = Shape(GPU, pod.gpu_milli, pod.num_gpu, pod.cpu_milli)
        counts[shape] = counts.get(shape, 0) + 1
    plugin.typical = {GPU: [(shape, n / len(pods)) for shape, n in counts.items()]}
    free = np.array([gpus for gpus, _ in nodes], dtype=np.int64)
    cpu = np.array([c for _, c in nodes], dtype=np.int64)
    vectorised = plugin._fragmentation(GPU, free, cpu)
    for row, (gpus, cpu_free) in enumerate(nodes):
        scalar = typical.fragmentation(cpu_free, "", tuple(gpus))
        assert vectorised[row] == pytest.approx(scalar, rel=1e-9, abs=1e-6), (row, gpus, cpu_free)
