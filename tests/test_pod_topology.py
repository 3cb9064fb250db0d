"""Pod affinity, pod anti-affinity and topology spread constraints (issue 16), with kube-scheduler's
semantics as its own tests state them: replicas spread across servers, a pod joins the zone of the pods it
wants, the first pod of a self-affine group goes anywhere, an existing pod's anti-affinity keeps matching
pods out of its domain, maxSkew holds per zone, and a pending pod says which rule failed."""

from __future__ import annotations

from typing import Any

import pytest

from hetsched.api.manifest import ManifestError, load_text
from hetsched.api.objects import AnyObject, Pod
from tests.builders import accel_node, harness, pod, podgroup

ASCEND = "huawei.com/Ascend910"


def zoned(count: int, zones: int = 2) -> list[AnyObject]:
    return [accel_node(f"n{i}", labels={"kubernetes.io/hostname": f"n{i}", "zone": f"z{i % zones}"})
            for i in range(count)]


def replicas(name: str, count: int, *, labels: dict[str, str], affinity: dict[str, Any] | None = None,
             spread: list[dict[str, Any]] | None = None, chips: int = 1, min_member: int | None = None,
             placed_on: list[str] | None = None) -> list[AnyObject]:
    objects: list[AnyObject] = [podgroup(name, count if min_member is None else min_member,
                                         phase="Running" if placed_on else "Inqueue")]
    for i in range(count):
        made = pod(f"{name}-{i}", name, limits={ASCEND: chips}, affinity=affinity)
        spec = made.spec.model_copy(update={"topologySpreadConstraints": Pod.model_validate(
            {"metadata": {"name": "x"}, "spec": {"containers": [{"name": "c"}],
                                                 "topologySpreadConstraints": spread or []}}
        ).spec.topologySpreadConstraints, **({"nodeName": placed_on[i]} if placed_on else {})})
        objects.append(made.model_copy(update={"metadata": made.metadata.model_copy(update={"labels": labels}),
                                               "spec": spec}))
    return objects


def anti(app: str, key: str = "kubernetes.io/hostname", required: bool = True) -> dict[str, Any]:
    term = {"labelSelector": {"matchLabels": {"app": app}}, "topologyKey": key}
    if required:
        return {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}}
    return {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
        {"weight": 100, "podAffinityTerm": term}]}}


def test_inference_replicas_with_anti_affinity_to_themselves_land_on_different_servers() -> None:
    h = harness([*zoned(4), *replicas("web", 4, labels={"app": "web"}, affinity=anti("web"))])
    h.cycle()
    nodes = [h.bindings()[f"web-{i}"] for i in range(4)]
    assert sorted(nodes) == ["n0", "n1", "n2", "n3"]  # one each, though one server has chips for all four


def test_a_gang_that_cannot_spread_enough_waits_whole_and_names_the_rule() -> None:
    h = harness([*zoned(3), *replicas("web", 4, labels={"app": "web"}, affinity=anti("web"))])
    h.cycle()
    assert h.bindings() == {}
    assert "node(s) didn't match pod anti-affinity rules" in h.condition("web")


def test_preferred_anti_affinity_spreads_but_does_not_block() -> None:
    h = harness([*zoned(2), *replicas("web", 4, labels={"app": "web"}, affinity=anti("web", required=False))])
    h.cycle()
    nodes = [h.bindings()[f"web-{i}"] for i in range(4)]
    assert sorted(nodes) == ["n0", "n0", "n1", "n1"]


def test_pod_affinity_joins_the_zone_of_the_pods_it_wants_and_the_first_pod_goes_anywhere() -> None:
    db = replicas("db", 1, labels={"app": "db"}, placed_on=["n3"])  # zone z1
    affinity = {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {"matchLabels": {"app": "db"}}, "topologyKey": "zone"}]}}
    h = harness([*zoned(4), *db, *replicas("cache", 2, labels={"app": "cache"}, affinity=affinity, chips=4)])
    h.cycle()
    assert {h.bindings()["cache-0"], h.bindings()["cache-1"]} <= {"n1", "n3"}  # zone z1 only
    # a group affine to itself: its first pod may go anywhere, the rest follow it into that zone
    self_affine = {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {"matchLabels": {"app": "mpi"}}, "topologyKey": "zone"}]}}
    h = harness([*zoned(4), *replicas("mpi", 2, labels={"app": "mpi"}, affinity=self_affine, chips=8)])
    h.cycle()
    placed = [h.bindings()[f"mpi-{i}"] for i in range(2)]
    assert len(placed) == 2 and int(placed[0][1]) % 2 == int(placed[1][1]) % 2  # the same zone


def test_an_existing_pods_anti_affinity_keeps_matching_pods_out_of_its_domain() -> None:
    loner = replicas("loner", 1, labels={"app": "loner"}, affinity=anti("web", key="zone"), placed_on=["n0"])
    h = harness([*zoned(4), *loner, *replicas("web", 2, labels={"app": "web"}, chips=8)])
    h.cycle()
    assert {h.bindings()["web-0"], h.bindings()["web-1"]} == {"n1", "n3"}  # not zone z0 (n0, n2)


def test_topology_spread_keeps_zones_within_max_skew() -> None:
    spread = [{"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "DoNotSchedule",
               "labelSelector": {"matchLabels": {"app": "web"}}}]
    existing = replicas("old", 2, labels={"app": "web"}, placed_on=["n0", "n2"])  # two already in z0
    h = harness([*zoned(4), *existing, *replicas("web", 4, labels={"app": "web"}, spread=spread)])
    h.cycle()
    zones = [int(h.bindings()[f"web-{i}"][1]) % 2 for i in range(4)]
    assert zones.count(1) == 3 and zones.count(0) == 1  # 3 + 3 in the end: z1 catches up first
    # a node without the key is not a domain: with every node unlabelled, DoNotSchedule places nothing
    h = harness([*[accel_node(f"m{i}") for i in range(2)], *replicas("web", 1, labels={"app": "web"},
                                                                     spread=spread)])
    h.cycle()
    assert h.bindings() == {} and "node(s) didn't match pod topology spread constraints" in h.condition("web")


def test_a_namespace_selector_with_labels_looks_in_the_namespaces_it_selects() -> None:
    """kube-scheduler's rule: a term looks in the namespaces its namespaceSelector selects by their labels,
    united with those it lists. The db runs in namespace data (zone z1); the cache wants pods of app=db in
    namespaces labelled team=storage: with data so labelled it joins z1, otherwise nothing matches and it
    waits (it is not the first pod of its own kind)."""
    from hetsched.api.objects import Namespace

    db = [podgroup("db", 1, phase="Running", namespace="data"),
          pod("db-0", "db", namespace="data", limits={ASCEND: 1})]
    db[1] = db[1].model_copy(update={"metadata": db[1].metadata.model_copy(update={"labels": {"app": "db"}}),
                                     "spec": db[1].spec.model_copy(update={"nodeName": "n3"})})
    affinity = {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {"matchLabels": {"app": "db"}}, "topologyKey": "zone",
         "namespaceSelector": {"matchLabels": {"team": "storage"}}}]}}
    for team, expected in (("storage", {"n1", "n3"}), ("web", None)):
        data = Namespace.model_validate({"metadata": {"name": "data", "labels": {"team": team}}})
        h = harness([data, *zoned(4), *db, *replicas("cache", 2, labels={"app": "cache"}, affinity=affinity,
                                                    chips=4)])
        h.cycle()
        if expected is None:
            assert set(h.bindings()) == {"db-0"} and "didn't match pod affinity rules" in h.condition("cache")
        else:
            assert {h.bindings()["cache-0"], h.bindings()["cache-1"]} <= expected


def test_an_empty_topology_key_is_refused() -> None:
    text = """apiVersion: v1
kind: Pod
metadata: {name: p}
spec:
  affinity:
    podAffinity:
      requiredDuringSchedulingIgnoredDuringExecution:
      - {labelSelector: {matchLabels: {app: db}}, topologyKey: zone}
  containers: [{name: c}]
"""
    load_text(text)
    with pytest.raises(ManifestError, match="topologyKey"):
        load_text(text.replace("topologyKey: zone", "topologyKey: ''"))


def test_explain_names_the_pod_rule_and_what_would_unblock_it() -> None:
    from hetsched.scheduler.engine.why import explain_job

    h = harness([*zoned(3), *replicas("web", 4, labels={"app": "web"}, affinity=anti("web"))])
    h.cycle()
    explanation = explain_job(h.scheduler.cache.snapshot(), h.scheduler.conf, "default/web", h.clock.now())
    reasons = [str(reason) for group in explanation.groups for _, reason in group.nodes]
    assert reasons == ["fits"]  # each node takes one replica now; the gang of four needs a fourth node
    assert "node(s) didn't match pod anti-affinity rules" in explanation.scheduler_says[0]
    loner = replicas("loner", 1, labels={"app": "loner"}, affinity=anti("web", key="zone"), placed_on=["n0"])
    h2 = harness([*zoned(1), *loner, *replicas("web", 1, labels={"app": "web"}, chips=1)])
    h2.cycle()
    explanation = explain_job(h2.scheduler.cache.snapshot(), h2.scheduler.conf, "default/web", h2.clock.now())
    reasons = [str(reason) for group in explanation.groups for _, reason in group.nodes]
    assert reasons == ["node(s) didn't satisfy existing pods anti-affinity rules"]
    assert any("keeps this pod out of their domain" in hint for hint in explanation.unblock)
    assert "node(s) didn't satisfy existing pods anti-affinity rules" in h2.condition("web")


def with_spec(objects: list[AnyObject], **update: Any) -> list[AnyObject]:
    out: list[AnyObject] = []
    for obj in objects:
        if isinstance(obj, Pod):
            data = obj.model_dump(mode="json")
            data["spec"].update(update)
            obj = Pod.model_validate(data)
        out.append(obj)
    return out


def test_host_ports_are_free_per_node_and_scheduling_gates_hold_a_pod_back() -> None:
    ports = [{"name": "main", "ports": [{"containerPort": 29500, "hostPort": 29500}],
              "resources": {"limits": {ASCEND: 1}, "requests": {"cpu": "1"}}}]
    taken = with_spec(replicas("old", 1, labels={"app": "old"}, placed_on=["n0"]), containers=ports)
    h = harness([*zoned(3), *taken, *with_spec(replicas("web", 2, labels={"app": "web"}), containers=ports)])
    h.cycle()
    assert sorted(h.bindings()[f"web-{i}"] for i in range(2)) == ["n1", "n2"]  # not n0, not both on one node
    h = harness([*zoned(1), *taken, *with_spec(replicas("web", 1, labels={"app": "web"}), containers=ports)])
    h.cycle()
    assert "node(s) didn't have free ports for the requested pod ports" in h.condition("web")
    gated = with_spec(replicas("web", 1, labels={"app": "web"}), schedulingGates=[{"name": "quota.example/wait"}])
    h = harness([*zoned(2), *gated])
    h.cycle()
    assert h.bindings() == {}
    assert "the pod has scheduling gates (quota.example/wait)" in h.condition("web")


def test_min_domains_counts_missing_domains_as_empty() -> None:
    """Three replicas, two zones, maxSkew 1: fine (2 + 1). With minDomains 3 the fewest is taken as 0 (a
    third zone is missing), so each zone takes one replica and the third waits — the gang with it."""
    spread = {"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "DoNotSchedule",
              "labelSelector": {"matchLabels": {"app": "web"}}}
    h = harness([*zoned(4), *replicas("web", 3, labels={"app": "web"}, spread=[spread])])
    h.cycle()
    assert len(h.bindings()) == 3
    h = harness([*zoned(4), *replicas("web", 3, labels={"app": "web"}, spread=[{**spread, "minDomains": 3}])])
    h.cycle()
    assert h.bindings() == {} and "node(s) didn't match pod topology spread constraints" in h.condition("web")
    # a pod the selector does not match adds nothing to the skew it is checked against
    h = harness([*zoned(4), *replicas("other", 3, labels={"app": "other"}, spread=[{**spread, "minDomains": 3}])])
    h.cycle()
    assert len(h.bindings()) == 3
