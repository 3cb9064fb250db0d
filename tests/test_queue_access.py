"""Who may use a queue (issue 35): a Queue's ``hetsched.io/namespaces`` annotation lists the namespaces that
may submit to it (``api.queue_access``). A job of any other namespace naming it is never admitted, placed or
allowed to evict, and says why; a parent queue bounds its children; a malformed list is refused by
``hetsched validate`` naming the field, and one that got in anyway admits nobody."""

from __future__ import annotations

from typing import Any

import pytest

from hetsched.api.manifest import ManifestError, load_text
from hetsched.api.objects import AnyObject, Pod, Queue
from hetsched.api.queue_access import NAMESPACES, SELECTOR, admitted
from tests.builders import Harness, harness, node, pod, podgroup, priority_class, queue, running_on

pytestmark = pytest.mark.timeout(120)


def limited(name: str, namespaces: str, parent: str = "") -> Queue:
    made = queue(name)
    return made.model_copy(update={
        "metadata": made.metadata.model_copy(update={"annotations": {NAMESPACES: namespaces}}),
        "spec": made.spec.model_copy(update={"parent": parent})})


def team_job(name: str, namespace: str, queue_name: str, size: int = 1, phase: str = "Pending",
             **pod_args: Any) -> list[AnyObject]:
    group = podgroup(name, size, queue=queue_name, phase=phase, namespace=namespace,
                     min_resources={"cpu": str(size)})
    return [group, *(pod(f"{name}-{i}", name, namespace=namespace, **pod_args) for i in range(size))]


def bound(h: Harness, namespace: str, job: str) -> list[str]:
    return [p.spec.nodeName for p in h.cluster.list("Pod") if isinstance(p, Pod)
            and p.metadata.namespace == namespace and p.metadata.name.startswith(f"{job}-") and p.spec.nodeName]


def test_the_annotation_lists_names_or_every_namespace() -> None:
    assert admitted({}) is None and admitted({NAMESPACES: "*"}) is None
    listed = admitted({NAMESPACES: "search-ranking, ads"})
    assert listed is not None and listed.names == {"search-ranking", "ads"} and listed.selector is None
    for bad, message in (("search,", "an empty name"), ("Search", "'Search' is not a namespace name"),
                         ("a" * 64, "is not a namespace name"), (",".join(["a"] * 1001), "at most 1000")):
        with pytest.raises(ValueError, match=message):
            admitted({NAMESPACES: bad})


def test_validate_refuses_a_malformed_list_naming_the_field() -> None:
    text = f"""apiVersion: scheduling.volcano.sh/v1beta1
kind: Queue
metadata: {{name: search, annotations: {{{NAMESPACES}: "search-ranking,<b>ads</b>"}}}}
"""
    with pytest.raises(ManifestError) as error:
        load_text(text)
    assert f'metadata.annotations["{NAMESPACES}"]' in str(error.value) and "'<b>ads</b>'" in str(error.value)
    assert load_text(text.replace(",<b>ads</b>", ""))  # a good list loads


def test_a_namespace_not_listed_waits_with_the_reason_and_a_listed_one_runs() -> None:
    h = harness([limited("search", "search-ranking"), node("n1", cpu="8"),
                 *team_job("rank", "search-ranking", "search"), *team_job("sneak", "ads", "search")])
    h.cycle()
    h.cycle()
    assert bound(h, "search-ranking", "rank") == ["n1"] and bound(h, "ads", "sneak") == []
    message = h.condition("sneak", namespace="ads")
    assert "namespace ads may not submit to queue search" in message
    assert h.podgroup("sneak", namespace="ads").status.phase == "Pending"  # never admitted


def test_a_parent_queue_bounds_every_child_under_it() -> None:
    """Business line "search" admits search-ranking only; its child queue "search-train" lists nobody of its
    own, so the parent's list applies: team "ads" cannot reach the line's capacity through the child."""
    h = harness([limited("search", "search-ranking"), queue_with_parent("search-train", "search"),
                 node("n1", cpu="8"), *team_job("train", "search-ranking", "search-train"),
                 *team_job("sneak", "ads", "search-train")])
    h.cycle()
    h.cycle()
    assert bound(h, "search-ranking", "train") == ["n1"] and bound(h, "ads", "sneak") == []
    assert "may not submit to queue search " in h.condition("sneak", namespace="ads")


def queue_with_parent(name: str, parent: str) -> Queue:
    made = queue(name)
    return made.model_copy(update={"spec": made.spec.model_copy(update={"parent": parent})})


def test_without_an_enqueue_action_allocate_keeps_the_rule_and_preemption_never_serves_an_intruder() -> None:
    """A high-priority job from a namespace the queue does not list, already Inqueue (admitted before the list
    was set), is neither placed nor allowed to evict the low-priority job of a listed namespace."""
    conf = """actions: "allocate, preempt"
tiers:
- plugins: [{name: priority}, {name: gang}, {name: conformance}]
- plugins: [{name: drf}, {name: predicates}, {name: proportion}, {name: nodeorder}]
"""
    holder = [podgroup("low", 1, queue="search", phase="Running", namespace="search-ranking",
                       priority_class="low"),
              running_on(pod("low-0", "low", cpu="8", namespace="search-ranking"), "n1")]
    h = harness([priority_class("low", 10), priority_class("high", 1000), limited("search", "search-ranking"),
                 node("n1", cpu="8"), *holder, *high_job()], conf)
    h.cycle()
    assert h.cluster.get("Pod", "search-ranking/low-0") is not None  # not evicted
    assert bound(h, "ads", "urgent") == []
    assert "namespace ads may not submit to queue search" in h.condition("urgent", namespace="ads")


def high_job() -> list[AnyObject]:
    group = podgroup("urgent", 1, queue="search", phase="Inqueue", namespace="ads", priority_class="high")
    return [group, pod("urgent-0", "urgent", cpu="8", namespace="ads")]


def test_a_malformed_list_that_got_in_admits_nobody() -> None:
    """Written past admission (no webhook): fail closed, so a typo never opens a business line's queue."""
    h = harness([limited("search", "search-ranking;ads"), node("n1", cpu="8"),
                 *team_job("rank", "search-ranking", "search")])
    h.cycle()
    h.cycle()
    assert bound(h, "search-ranking", "rank") == []
    assert "namespace search-ranking may not submit to queue search" in h.condition("rank",
                                                                                   namespace="search-ranking")


# ------------------------------------------------------------------------------------- at admission

def review_of(obj: dict[str, Any], namespace: str, path: str = "/validate", old: dict[str, Any] | None = None,
              lookup: Any = None) -> dict[str, Any]:
    from hetsched.cluster.webhook import PodAdmission, review

    request = {"uid": "u1", "operation": "UPDATE" if old else "CREATE", "namespace": namespace, "object": obj,
               "userInfo": {"username": "alice"}}
    if old:
        request["oldObject"] = old
    answer: dict[str, Any] = review({"apiVersion": "admission.k8s.io/v1", "request": request}, path,
                                    admission=PodAdmission(queues=lookup))["response"]
    return answer


QUEUES = {"search": ({NAMESPACES: "ranking"}, "business"), "business": ({}, ""),
          "train": ({}, "search"), "typo": ({NAMESPACES: "ranking;ads"}, "")}


def lookup(name: str) -> tuple[dict[str, str], str] | None:
    return QUEUES.get(name)


def volcano_job(queue_name: str, namespace: str) -> dict[str, Any]:
    return {"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job",
            "metadata": {"name": "j", "namespace": namespace},
            "spec": {"queue": queue_name, "minAvailable": 1, "tasks": [{"name": "w", "replicas": 1, "template": {
                "spec": {"containers": [{"name": "w", "image": "busybox"}]}}}]}}


def test_the_webhook_refuses_a_job_or_podgroup_naming_a_queue_its_namespace_may_not_use() -> None:
    refused = review_of(volcano_job("search", "ads"), "ads", lookup=lookup)
    assert not refused["allowed"] and refused["status"]["code"] == 400
    assert "Job/j: spec.queue: namespace ads may not submit to queue search" in refused["status"]["message"]
    assert review_of(volcano_job("search", "ranking"), "ranking", lookup=lookup)["allowed"]
    below = review_of(volcano_job("train", "ads"), "ads", lookup=lookup)  # a child of search: its rule holds
    assert not below["allowed"] and "queue search" in below["status"]["message"]
    assert not review_of(volcano_job("typo", "ranking"), "ranking", lookup=lookup)["allowed"]  # fail closed
    assert review_of(volcano_job("gone", "ads"), "ads", lookup=lookup)["allowed"]  # unknown: the scheduler decides
    assert review_of(volcano_job("search", "ads"), "ads")["allowed"]  # no lookup (no cluster connection)
    # an update that leaves the queue alone is never refused for it (the list may have changed since)
    assert review_of(volcano_job("search", "ads"), "ads", old=volcano_job("search", "ads"), lookup=lookup)["allowed"]
    group = {"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "PodGroup",
             "metadata": {"name": "g", "namespace": "ads"}, "spec": {"minMember": 1, "queue": "search"}}
    assert "PodGroup/g: spec.queue" in review_of(group, "ads", lookup=lookup)["status"]["message"]


def test_the_webhook_refuses_a_pod_without_a_podgroup_naming_such_a_queue() -> None:
    pod_object = {"apiVersion": "v1", "kind": "Pod", "metadata": {
        "name": "p", "namespace": "ads", "annotations": {"scheduling.volcano.sh/queue-name": "search"}},
        "spec": {"schedulerName": "volcano", "containers": [{"name": "c", "image": "busybox"}]}}
    refused = review_of(pod_object, "ads", path="/pods", lookup=lookup)
    assert not refused["allowed"] and "may not submit to queue search" in refused["status"]["message"]
    other = {**pod_object, "spec": {**pod_object["spec"], "schedulerName": "default-scheduler"}}
    assert review_of(other, "ads", path="/pods", lookup=lookup)["allowed"]  # not ours to judge


def test_a_job_naming_no_queue_gets_its_namespaces_default_queue_at_admission() -> None:
    from hetsched.api.queue_access import DEFAULT_QUEUE, default_queue
    from hetsched.cluster.webhook import PodAdmission, review

    def mutate(spec: dict[str, Any]) -> list[dict[str, Any]]:
        import base64
        import json

        job = {**volcano_job("x", "ranking"), "spec": {**spec, "tasks": volcano_job("x", "ranking")["spec"]["tasks"]}}
        answer = review({"request": {"uid": "u", "operation": "CREATE", "namespace": "ranking", "object": job}},
                        "/mutate", admission=PodAdmission(namespaces={"ranking": (
                            {DEFAULT_QUEUE: "search"}, {})}.get))["response"]
        patch: list[dict[str, Any]] = json.loads(base64.b64decode(answer["patch"]))
        return [p for p in patch if p["path"] == "/spec/queue"]

    assert mutate({}) == [{"op": "add", "path": "/spec/queue", "value": "search"}]
    assert mutate({"queue": ""}) == [{"op": "add", "path": "/spec/queue", "value": "search"}]
    assert mutate({"queue": "other"}) == []  # a queue named is kept (and checked by /validate)
    assert default_queue({DEFAULT_QUEUE: "search"}) == "search"
    assert default_queue({DEFAULT_QUEUE: "<b>x</b>"}) is None and default_queue({}) is None


# ------------------------------------------------------------------------------------- by namespace labels

SEARCH_LINE = '{"matchLabels": {"business-line": "search"}}'


def selecting(name: str, selector: str, names: str | None = None) -> Queue:
    made = queue(name)
    annotations = {SELECTOR: selector, **({NAMESPACES: names} if names is not None else {})}
    return made.model_copy(update={"metadata": made.metadata.model_copy(update={"annotations": annotations})})


def namespace(name: str, **labels: str) -> AnyObject:
    from hetsched.api.objects import Namespace

    return Namespace.model_validate({"metadata": {"name": name, "labels": labels}})


def test_a_namespace_selector_admits_the_namespaces_whose_labels_it_matches() -> None:
    """Queue search selects namespaces labelled business-line=search: ranking (so labelled) runs, ads waits
    with the reason; relabelling ads lets it in at the next cycle; a name always matches its own
    kubernetes.io/metadata.name label, and a listed name is admitted whatever its labels."""
    h = harness([selecting("search", SEARCH_LINE), node("n1", cpu="8"),
                 namespace("ranking", **{"business-line": "search"}), namespace("ads", **{"business-line": "ads"}),
                 *team_job("rank", "ranking", "search"), *team_job("promo", "ads", "search")])
    h.cycle()
    h.cycle()
    assert bound(h, "ranking", "rank") and bound(h, "ads", "promo") == []
    assert "namespace ads may not submit to queue search" in h.condition("promo", namespace="ads")
    h.cluster.update(namespace("ads", **{"business-line": "search"}))
    h.cycle()
    h.cycle()
    assert bound(h, "ads", "promo")
    by_name = admitted({SELECTOR: '{"matchExpressions": [{"key": "kubernetes.io/metadata.name", '
                                  '"operator": "In", "values": ["infra"]}]}'})
    assert by_name is not None and by_name.allows("infra", dict) and not by_name.allows("ads", dict)
    listed = admitted({SELECTOR: SEARCH_LINE, NAMESPACES: "ops"})
    assert listed is not None and listed.allows("ops", dict) and not listed.allows("ads", lambda: {"x": "y"})


@pytest.mark.parametrize("selector, message", [
    ("{not json", "not JSON"),
    ('["business-line"]', "must be a label selector object"),
    ('{"matchExpressions": [{"key": "a", "operator": "Near"}]}', "matchExpressions.0.operator"),
    ('{"matchLabels": {"a": "b"}, "extra": 1}', "extra"),
    ('{"matchLabels": {"business-line": "<b>x</b>"}}', "is not a label value"),
    ('{"matchExpressions": [{"key": "no such key!", "operator": "Exists"}]}', "is not a label key"),
    ("[" * 20000, "longer than"),
    ("[" * 5000 + "]" * 5000, "not JSON"),
])
def test_a_malformed_selector_is_refused_naming_the_annotation_and_admits_nobody(selector: str, message: str) -> None:
    with pytest.raises(ManifestError) as refused:
        load_text(f"""apiVersion: scheduling.volcano.sh/v1beta1
kind: Queue
metadata:
  name: search
  annotations: {{{SELECTOR}: '{selector.replace("'", "''")}'}}
""")
    assert f'metadata.annotations["{SELECTOR}"]' in str(refused.value) and message in str(refused.value)
    from hetsched.api.queue_access import read

    nobody = read({SELECTOR: selector})
    assert nobody is not None and not nobody.allows("ranking", dict)


def test_the_webhook_applies_a_selector_with_the_namespaces_labels() -> None:
    from hetsched.cluster.webhook import PodAdmission, review

    queues = {"search": ({SELECTOR: SEARCH_LINE}, "")}
    labels = {"ranking": ({}, {"business-line": "search"}), "ads": ({}, {"business-line": "ads"})}

    def check(namespace_name: str) -> dict[str, Any]:
        request = {"uid": "u1", "operation": "CREATE", "namespace": namespace_name,
                   "object": volcano_job("search", namespace_name), "userInfo": {"username": "alice"}}
        answer: dict[str, Any] = review({"request": request}, "/validate", admission=PodAdmission(
            queues=queues.get, namespaces=labels.get))["response"]
        return answer

    assert check("ranking")["allowed"]
    refused = check("ads")
    assert not refused["allowed"] and f"nor matched by its {SELECTOR}" in refused["status"]["message"]
    assert not check("unknown")["allowed"]  # a namespace that cannot be read matches by its name only
