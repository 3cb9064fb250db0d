"""Properties over random clusters and jobs (hypothesis).

1. After every cycle: no PodGroup has 0 < bound pods < minMember (gangs are never half-placed), and no node
   is over-committed in any resource.
2. The vectorised group placement equals placing the same pods one at a time, each on the best-scoring
   feasible node (lowest index on ties), re-scoring from the updated node state after every pod.
"""

from __future__ import annotations

from collections import Counter, defaultdict

import numpy as np
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from hetsched.api.objects import AnyObject, Node, Pod, PodGroup
from hetsched.scheduler.engine.placement import capacity, place_group
from hetsched.scheduler.engine.session import Session
from tests.builders import harness, node, pod, podgroup

CONFS = [
    None,
    "actions: enqueue, allocate, backfill\ntiers:\n- plugins:\n  - name: priority\n  - name: gang\n"
    "- plugins:\n  - name: drf\n  - name: predicates\n  - name: proportion\n  - name: binpack\n",
    "actions: allocate\ntiers:\n- plugins:\n  - name: gang\n  - name: predicates\n  - name: nodeorder\n"
    "    arguments: {mostrequested.weight: 2, leastrequested.weight: 0}\n  - name: binpack\n"
    "    arguments: {binpack.resources: nvidia.com/gpu}\n",
]


@st.composite
def clusters(draw: st.DrawFn) -> list[AnyObject]:
    objects: list[AnyObject] = []
    for i in range(draw(st.integers(1, 8))):
        gpus = draw(st.sampled_from([0, 0, 4, 8]))
        objects.append(node(f"n{i}", cpu=str(draw(st.integers(1, 16))), memory=f"{draw(st.integers(1, 64))}Gi",
                            pods=draw(st.integers(1, 20)), labels={"zone": draw(st.sampled_from("ab"))},
                            unschedulable=draw(st.booleans()) and i > 0, **({"nvidia.com__gpu": gpus} if gpus else {})))
    for j in range(draw(st.integers(1, 8))):
        size = draw(st.integers(1, 6))
        min_member = draw(st.integers(1, size))
        objects.append(podgroup(f"j{j}", min_member, phase=draw(st.sampled_from(["Inqueue", "Pending"])),
                                min_resources={"cpu": str(min_member)}))
        cpu = f"{draw(st.integers(100, 4000))}m"
        gpus = draw(st.sampled_from([0, 0, 1, 2, 8]))
        selector = {"zone": draw(st.sampled_from("ab"))} if draw(st.booleans()) else {}
        for k in range(size):
            objects.append(pod(f"j{j}-{k}", f"j{j}", cpu=cpu, memory="1Gi", selector=selector,
                               limits={"nvidia.com/gpu": gpus} if gpus else None))
    return objects


def check_invariants(objects_now: list[AnyObject]) -> None:
    nodes = {o.metadata.name: o for o in objects_now if isinstance(o, Node)}
    groups = {o.metadata.name: o for o in objects_now if isinstance(o, PodGroup)}
    bound: Counter[str] = Counter()
    usage: dict[str, Counter[str]] = defaultdict(Counter)
    for obj in objects_now:
        if isinstance(obj, Pod) and obj.spec.nodeName:
            bound[obj.metadata.annotations["scheduling.k8s.io/group-name"]] += 1
            for resource, amount in obj.spec.requests.items():
                usage[obj.spec.nodeName][resource] += amount
    for name, group in groups.items():
        assert bound[name] == 0 or bound[name] >= group.spec.minMember, f"gang {name} half-placed: {bound[name]}"
    for name, used in usage.items():
        allocatable = nodes[name].status.allocatable
        for resource, amount in used.items():
            assert amount <= allocatable.get(resource, 0), f"{name} over-committed on {resource}"


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(objects=clusters(), conf=st.sampled_from(CONFS))
def test_no_half_placed_gang_and_no_overcommitted_node_after_any_cycle(objects: list[AnyObject],
                                                                       conf: str | None) -> None:
    h = harness(objects, conf)
    for _ in range(3):
        h.cycle()
        everything = [o for kind in ("Node", "PodGroup", "Pod") for o in h.cluster.list(kind)]
        check_invariants(everything)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(objects=clusters(), conf=st.sampled_from(CONFS), data=st.data())
def test_group_placement_equals_one_pod_at_a_time(objects: list[AnyObject], conf: str | None,
                                                  data: st.DataObject) -> None:
    h = harness(objects, conf)
    snapshot = h.scheduler.cache.snapshot()
    groups = [g for job in snapshot.jobs.values() for g in job.groups]
    assume(groups)
    group = data.draw(st.sampled_from(groups))
    count = data.draw(st.integers(1, 12))
    session = Session(snapshot, h.scheduler.conf)
    fast = place_group(session, group, count).tolist()

    used = session.nodes.used
    original = used.copy()
    slow: list[int] = []
    for _ in range(count):
        feasible = np.flatnonzero(capacity(session, group))
        if feasible.size == 0:
            break
        scores = [float(session.score(group, np.array([n]), np.array([0]))[0]) for n in feasible] \
            if session.scoring else [0.0] * feasible.size
        best = int(feasible[int(np.argmax(scores))])  # argmax: first maximum, i.e. the lowest node index
        slow.append(best)
        used[:, best] += group.request
    used[:] = original
    assert fast == slow
