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
from hetsched.scheduler.contract.typical import COMMON
from hetsched.scheduler.engine.conf import DEFAULT_CONF_YAML
from hetsched.scheduler.plugins.fgd import FGD, Shape, typical
from tests.builders import accel_node, gang, harness
from tests.test_sharing import GPU, MILLI, chips_of

FGD_CONF = DEFAULT_CONF_YAML + "  - name: fgd\n"
BLEND_CONF = DEFAULT_CONF_YAML + "  - name: fgd\n    arguments:\n      fgd.common: 0.5\n"


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
    counts: dict[Shape, int] = {}
    for pod in pods:
        shape = Shape(GPU, pod.gpu_milli, pod.num_gpu, pod.cpu_milli)
        counts[shape] = counts.get(shape, 0) + 1
    free = np.array([gpus for gpus, _ in nodes], dtype=np.int64)
    cpu = np.array([c for _, c in nodes], dtype=np.int64)
    # the full distribution, the published cut, and the blend of the two the plugin uses
    for typical_pods, common in ((TypicalPods.from_pods(pods, popularity=100.0), 0.0),
                                 (TypicalPods.from_pods(pods), 1.0),
                                 (TypicalPods.from_pods(pods, common=COMMON), COMMON)):
        plugin = FGD(Arguments("fgd"))
        plugin.typical = typical(counts, common)
        vectorised = plugin._fragmentation(GPU, free, cpu)
        for row, (gpus, cpu_free) in enumerate(nodes):
            scalar = typical_pods.fragmentation(cpu_free, "", tuple(gpus))
            assert vectorised[row] == pytest.approx(scalar, rel=1e-9, abs=1e-6), (common, row, gpus, cpu_free)


def test_the_blend_counts_the_common_shapes_more_and_still_sums_to_one() -> None:
    counts = {Shape(GPU, 500, 1, 1000): 90, Shape(GPU, 1000, 1, 2000): 8, Shape(GPU, 1000, 8, 8000): 2}
    shares = dict(typical(counts, COMMON)[GPU])
    assert sum(shares.values()) == pytest.approx(1.0)
    rare = Shape(GPU, 1000, 8, 8000)  # outside the 95 % cut: half its frequency
    assert shares[rare] == pytest.approx(0.5 * 2 / 100)
    common = Shape(GPU, 500, 1, 1000)  # inside: half its share within the cut, half its frequency
    assert shares[common] == pytest.approx(0.5 * 90 / 98 + 0.5 * 90 / 100)
    assert dict(typical(counts, 0.0)[GPU])[rare] == pytest.approx(2 / 100)  # the full distribution
    assert rare not in dict(typical(counts, 1.0)[GPU])  # the published cut drops it


@pytest.mark.parametrize(("cpu", "rare_share"), [("1", 0.5 / 40), ("16", 1 / 40)])
def test_with_fgd_common_the_plugin_blends_while_chips_run_out_first_and_counts_every_shape_once_cpu_does(
        cpu: str, rare_share: float) -> None:
    """``fgd.common: 0.5`` (the replay's fgd-adaptive). 39 one-GPU pods and one rare half-GPU pod queued on an
    8-GPU, 64-CPU node. Asking 1 CPU each, the queue
    would run out of GPUs first: the rare shape, outside the 95 % cut, counts half its frequency (the blend).
    Asking 16 CPUs each it would run out of CPU first (CPU asked 2.0): every shape at its frequency, as the
    replay's fgd-adaptive does."""
    from hetsched.scheduler.engine.session import Session

    objects: list[AnyObject] = [accel_node("n", GPU, "generic", 8, share=MILLI, cpu="64"),
                                *gang("common", 39, limits={GPU: 1}, cpu=cpu), *gang("rare", 1, limits={MILLI: 500},
                                                                                     cpu=cpu)]
    h = harness(objects, BLEND_CONF)
    session = Session(h.scheduler.cache.snapshot(), h.scheduler.conf)
    plugin = next(p for p in session.plugins if isinstance(p, FGD))
    shares = {shape.milli: share for shape, share in plugin.typical[GPU]}
    assert shares[500] == pytest.approx(rare_share)
    assert sum(shares.values()) == pytest.approx(1.0)


@pytest.mark.parametrize(("value", "named"), [(2, "between 0 and 1"), (-0.5, "≥ 0"), ("half", "must be a number")])
def test_a_bad_fgd_common_is_refused_naming_it(value: object, named: str) -> None:
    with pytest.raises(ValueError, match=r"fgd\.common") as refused:
        FGD(Arguments("fgd", {"fgd.common": value}))
    assert named in str(refused.value)
