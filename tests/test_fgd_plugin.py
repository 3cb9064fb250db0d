"""The ``fgd`` scheduler plugin: a fractional pod goes where it leaves shared chips usable for the pods
still queued, where device-level binpack alone would strand a sliver."""

from __future__ import annotations

from hetsched.api.objects import AnyObject
from hetsched.scheduler.conf import DEFAULT_CONF_YAML
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
