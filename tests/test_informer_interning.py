"""The informer's interner (``hetsched.cluster.interning``): the pods of one task hold their equal parts once,
read exactly as they would be without it, stay independent when one is changed, and the table forgets what no
cached object holds any more."""

from __future__ import annotations

import gc
import json
from typing import Any

import pytest

from hetsched.api.objects import Pod
from hetsched.benchmark.memory import as_served, deep_size
from hetsched.cluster.interning import Interner
from hetsched.cluster.kubernetes import RESOURCES, from_api, to_api
from tests.builders import pod, podgroup, running_on

pytestmark = pytest.mark.timeout(120)


def served(name: str, node: str, *, image: str = "train:1", group: str = "g") -> dict[str, Any]:
    made = running_on(pod(name, group, cpu="2", tolerations=[{"key": "team", "value": "a", "effect": "NoSchedule"}],
                          selector={"pool": "a"}), node)
    data = as_served(made)
    data["metadata"]["uid"] = f"uid-{name}"
    data["spec"]["containers"][0]["image"] = image
    return json.loads(json.dumps(data))


def test_pods_of_one_task_share_their_equal_parts_and_read_as_without_it() -> None:
    interner = Interner()
    raws = [served(f"w-{i}", f"node-{i % 2}") for i in range(3)]
    plain = [from_api("Pod", raw) for raw in raws]
    shared = [interner.share(from_api("Pod", raw)) for raw in raws]
    assert [p.model_dump() for p in shared] == [p.model_dump() for p in plain]
    assert [to_api(p, RESOURCES["Pod"]) for p in shared] == [to_api(p, RESOURCES["Pod"]) for p in plain]
    first, second, third = (p for p in shared if isinstance(p, Pod))
    assert first.spec.containers is second.spec.containers
    assert first.spec.tolerations is second.spec.tolerations
    assert first.metadata.annotations is second.metadata.annotations
    assert first.spec.nodeName is third.spec.nodeName  # node-0 twice: one string
    assert first.metadata is not second.metadata and first.metadata.name != second.metadata.name
    assert first.spec is not second.spec and first.spec.nodeName != second.spec.nodeName
    # and it is what makes a pod small: what a second and third pod add beside the first
    seen: set[int] = set()
    deep_size([shared[0], interner], seen)
    added = deep_size([shared[1:]], seen)
    seen = set()
    deep_size([plain[0]], seen)
    assert added < deep_size([plain[1:]], seen) / 3


def test_a_pod_read_with_different_parts_shares_none_of_them() -> None:
    interner = Interner()
    one = interner.share(from_api("Pod", served("a", "n", image="train:1")))
    other = interner.share(from_api("Pod", served("b", "n", image="train:2")))
    assert isinstance(one, Pod) and isinstance(other, Pod)
    assert one.spec.containers is not other.spec.containers
    assert one.spec.containers[0].model_extra == {**(one.spec.containers[0].model_extra or {}), "image": "train:1"}
    assert (other.spec.containers[0].model_extra or {})["image"] == "train:2"
    assert one.spec.tolerations is other.spec.tolerations


def test_changing_one_pod_leaves_the_pods_it_shares_with_unchanged() -> None:
    interner = Interner()
    one, other = (interner.share(from_api("Pod", served(name, "n"))) for name in ("a", "b"))
    assert isinstance(one, Pod) and isinstance(other, Pod)
    labelled = one.model_copy(update={"metadata": one.metadata.model_copy(update={
        "annotations": {**one.metadata.annotations, "x": "y"}})})
    container = one.spec.containers[0]
    renamed = container.model_copy(update={"name": "side", "image": "other"})
    assert "x" in labelled.metadata.annotations and "x" not in other.metadata.annotations
    assert renamed.name == "side" and other.spec.containers[0].name == "main"
    assert (other.spec.containers[0].model_extra or {})["image"] == "train:1"
    assert other.spec.containers[0].model_fields_set == container.model_fields_set
    assert "name" in renamed.model_fields_set


def test_the_table_forgets_what_no_cached_object_holds() -> None:
    interner = Interner()
    held = [interner.share(from_api("Pod", served(f"p-{i}", f"n-{i}", image=f"img:{i}"))) for i in range(3000)]
    peak = len(interner)
    del held
    gc.collect()
    kept = [interner.share(from_api("Pod", served(f"q-{i}", "n", image=f"other:{i}"))) for i in range(3000)]
    # what the first pods alone held is gone; the table is of the order of what the kept pods hold
    assert len(interner) < peak * 1.5
    assert all(isinstance(p, Pod) for p in kept)


def test_podgroups_are_interned_too() -> None:
    interner = Interner()
    groups = [interner.share(from_api("PodGroup", json.loads(json.dumps(to_api(podgroup(f"g{i}", 4),
                                                                                  RESOURCES["PodGroup"])))))
              for i in range(2)]
    assert groups[0].spec is not groups[1].spec  # an object's own parts stay its own
    assert groups[0].metadata.name == "g0" and groups[1].metadata.name == "g1"
    assert groups[0].spec.model_dump() == groups[1].spec.model_dump()


def test_a_part_that_has_no_json_is_still_shared_by_walking_it() -> None:
    interner = Interner()
    made = [interner.share(from_api("Pod", served(name, "n"))) for name in ("a", "b")]
    assert isinstance(made[0], Pod) and isinstance(made[1], Pod)
    odd = [made[i].spec.model_copy(update={"oddity": [object()]}) for i in range(2)]
    shared = [interner.share(made[i].model_copy(update={"spec": odd[i]})) for i in range(2)]
    assert all(isinstance(p, Pod) for p in shared)
    assert shared[0].spec.containers is shared[1].spec.containers  # the rest is shared as before
