"""The admission webhook cannot be tricked or blocked (issue 17): over real HTTPS on loopback, malformed
reviews are a 400 or a denial (never ``allowed: true`` for what it could not read), unknown paths 404, an
oversized body is refused before it is read, deep JSON is a 400, idle connections do not delay anyone,
keep-alive works, and metric labels stay bounded whatever the requests say."""

from __future__ import annotations

import http.client
import json
import socket
import ssl
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from hetsched.cluster.webhook import MAX_BODY, WebhookServer
from hetsched.cluster.webhook_tls import generate
from hetsched.metrics.agents import WebhookMetrics

JOB = {"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job", "metadata": {"name": "train", "namespace": "default"},
       "spec": {"tasks": [{"name": "w", "replicas": 1,
                           "template": {"spec": {"containers": [{"name": "w", "image": "x"}]}}}]}}


@pytest.fixture
def webhook(tmp_path: Path) -> Iterator[tuple[WebhookServer, ssl.SSLContext, WebhookMetrics]]:
    tls = generate(["127.0.0.1"])
    cert, key = tmp_path / "tls.crt", tmp_path / "tls.key"
    cert.write_bytes(tls.cert)
    key.write_bytes(tls.key)
    metrics = WebhookMetrics()
    server = WebhookServer(str(cert), str(key), port=0, metrics=metrics)
    server.start()
    context = ssl.create_default_context(cadata=tls.ca.decode())
    try:
        yield server, context, metrics
    finally:
        server.stop()


def connect(server: WebhookServer, context: ssl.SSLContext) -> http.client.HTTPSConnection:
    return http.client.HTTPSConnection("127.0.0.1", server.port, context=context, timeout=30)


def post(connection: http.client.HTTPSConnection, path: str, body: bytes | Any) -> tuple[int, dict[str, Any]]:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    connection.request("POST", path, body=data, headers={"Content-Type": "application/json"})
    response = connection.getresponse()
    payload = response.read()
    return response.status, json.loads(payload) if payload else {}


def review(obj: Any, operation: str = "CREATE", **extra: Any) -> dict[str, Any]:
    request: dict[str, Any] = {"uid": "u-1", "operation": operation, "kind": {"kind": "Job"}, **extra}
    if obj is not None:
        request["object"] = obj
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}


def test_malformed_reviews_are_refused_never_allowed(webhook: Any) -> None:
    server, context, _ = webhook
    connection = connect(server, context)  # one keep-alive connection for every request below
    try:
        malformed_and_good(connection)
    finally:
        connection.close()


def malformed_and_good(connection: http.client.HTTPSConnection) -> None:
    for body in ({}, {"request": None}, {"request": {"object": JOB}}, [], "x", {"request": {"uid": 7}}):
        status, answer = post(connection, "/validate", body)
        assert status == 400 and "malformed AdmissionReview" in answer["error"], (body, status, answer)
    for path in ("/validate", "/mutate"):
        status, answer = post(connection, path, review(None))
        assert status == 200 and answer["response"]["allowed"] is False  # nothing to judge: denied
    status, answer = post(connection, "/validate", review(None, "DELETE", oldObject=JOB))
    assert status == 200 and answer["response"]["allowed"] is True  # a deletion carries no object
    status, answer = post(connection, "/elsewhere", review(JOB))
    assert status == 404
    status, answer = post(connection, "/validate", b"{" * 100_000)
    assert status == 400  # nested too deep or not JSON: a clear 400, the thread survives
    status, answer = post(connection, "/validate", b"\xff\xfe")
    assert status == 400
    status, answer = post(connection, "/validate", review(JOB))
    assert status == 200 and answer["response"] == {"uid": "u-1", "allowed": True}
    bad = {**JOB, "spec": {**JOB["spec"], "tasks": [{**JOB["spec"]["tasks"][0], "replicas": -1}]}}
    status, answer = post(connection, "/validate", review(bad))
    assert answer["response"]["allowed"] is False and "replicas: must not be negative" in \
        answer["response"]["status"]["message"]


def test_an_oversized_body_is_refused_before_it_is_read(webhook: Any) -> None:
    server, context, _ = webhook
    with socket.create_connection(("127.0.0.1", server.port), timeout=30) as raw, \
            context.wrap_socket(raw, server_hostname="127.0.0.1") as tls:
        tls.sendall(f"POST /validate HTTP/1.1\r\nHost: x\r\nContent-Length: {MAX_BODY + 1}\r\n\r\n".encode())
        head = tls.recv(4096).decode()  # answered at once: nothing of the body was sent, none is awaited
    assert head.startswith("HTTP/1.1 413")


def test_idle_connections_do_not_delay_reviews(webhook: Any) -> None:
    server, context, _ = webhook
    idle = [socket.create_connection(("127.0.0.1", server.port), timeout=30) for _ in range(20)]
    try:
        for _ in range(5):
            connection = connect(server, context)
            status, answer = post(connection, "/validate", review(JOB))
            connection.close()
            assert status == 200 and answer["response"]["allowed"] is True
    finally:
        for sock in idle:
            sock.close()


def test_metric_labels_stay_bounded_whatever_the_requests_say(webhook: Any) -> None:
    server, context, metrics = webhook
    connection = connect(server, context)
    for i in range(60):
        post(connection, f"/validate-{i}", review(JOB))
        post(connection, "/validate", review({**JOB, "kind": f"Kind{i}"}, kind={"kind": f"Kind{i}"}))
    connection.close()
    series = {tuple(sorted(sample.labels.items())) for family in metrics.registry.collect()
              for sample in family.samples if sample.name.startswith("hetsched_webhook_reviews")}
    assert len(series) <= 6, series


# ----------------------------------------------------------------------------------- /restrict

AGENT = "system:serviceaccount:hetsched:hetsched-node-agent"
CONTROLLER = "system:serviceaccount:hetsched:hetsched-controller"
BOUND = {"authentication.kubernetes.io/pod-name": ["agent-x"], "authentication.kubernetes.io/pod-uid": ["u1"]}


def restrict(request: dict[str, Any], lookups: list[tuple[str, str, str]] | None = None) -> dict[str, Any]:
    from hetsched.cluster.restriction import Restriction
    from hetsched.cluster.webhook import review

    def pod_node(namespace: str, name: str, uid: str) -> str:
        if lookups is not None:
            lookups.append((namespace, name, uid))
        return "node-a" if (namespace, name, uid) == ("hetsched", "agent-x", "u1") else ""

    body = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {"uid": "r", **request}}
    return review(body, "/restrict", Restriction("hetsched", pod_node))["response"]  # type: ignore[no-any-return]


def nodes(name: str, user: Any, sub: str = "") -> dict[str, Any]:
    return {"operation": "UPDATE", "name": name, "resource": {"group": "", "version": "v1", "resource": "nodes"},
            "subResource": sub, "userInfo": user, "object": {"metadata": {"name": name}}}


def test_restrict_lets_the_node_agent_write_only_its_own_node_and_configmap() -> None:
    agent = {"username": AGENT, "extra": BOUND}
    assert restrict(nodes("node-a", agent))["allowed"] is True
    assert restrict(nodes("node-a", agent, "status"))["allowed"] is True
    other = restrict(nodes("node-b", agent, "status"))
    assert other["allowed"] is False and other["status"]["code"] == 403
    assert "may write only Node node-a, not Node node-b" in other["status"]["message"]
    configmap = {"operation": "CREATE", "namespace": "kube-system", "resource": {"resource": "configmaps"},
                 "userInfo": agent}
    assert restrict({**configmap, "name": "mindx-dl-deviceinfo-node-a"})["allowed"] is True
    for namespace, name in (("kube-system", "mindx-dl-deviceinfo-node-b"), ("default", "mindx-dl-deviceinfo-node-a"),
                            ("kube-system", "coredns")):
        answer = restrict({**configmap, "namespace": namespace, "name": name})
        assert answer["allowed"] is False and answer["status"]["code"] == 403, (namespace, name)


@pytest.mark.parametrize("extra", [None, {}, "x", {"authentication.kubernetes.io/pod-name": ["agent-x"]},
                                   {**BOUND, "authentication.kubernetes.io/pod-uid": ["other"]},
                                   {**BOUND, "authentication.kubernetes.io/pod-name": ["agent-x", "agent-y"]},
                                   {**BOUND, "authentication.kubernetes.io/pod-name": [7]}])
def test_restrict_refuses_a_node_agent_it_cannot_tie_to_its_pod(extra: Any) -> None:
    answer = restrict(nodes("node-a", {"username": AGENT, "extra": extra}))
    assert answer["allowed"] is False and "not bound to one of its running pods" in answer["status"]["message"]


def test_restrict_lets_other_identities_through_without_a_lookup() -> None:
    lookups: list[tuple[str, str, str]] = []
    for user in ({"username": "system:node:node-a"}, {"username": "alice"}, None, "garbage",
                 {"username": "system:serviceaccount:other:hetsched-node-agent", "extra": BOUND}):
        assert restrict(nodes("node-b", user), lookups)["allowed"] is True
    assert lookups == []


def test_restrict_lets_the_controller_touch_only_secrets_a_volcano_job_owns() -> None:
    owner = {"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job", "name": "mpi", "uid": "j1", "controller": True}
    secrets = {"resource": {"resource": "secrets"}, "namespace": "default", "name": "mpi-ssh",
               "userInfo": {"username": CONTROLLER}}
    owned = {"metadata": {"name": "mpi-ssh", "ownerReferences": [owner]}}
    planted = {"metadata": {"name": "mpi-ssh"}}
    assert restrict({**secrets, "operation": "CREATE", "object": owned})["allowed"] is True
    assert restrict({**secrets, "operation": "DELETE", "oldObject": owned})["allowed"] is True
    for operation, key, obj in (("CREATE", "object", planted), ("DELETE", "oldObject", planted),
                                ("DELETE", "oldObject", None), ("CREATE", "object", [1, 2]),
                                ("CREATE", "object", {"metadata": {"ownerReferences": [{**owner, "kind": "Pod"}]}}),
                                ("CREATE", "object", {"metadata": {"ownerReferences": "x"}})):
        answer = restrict({**secrets, "operation": operation, key: obj})
        assert answer["allowed"] is False and "only Secrets owned by a Volcano Job" in answer["status"]["message"]
    pods = {**secrets, "resource": {"resource": "pods"}, "operation": "CREATE", "object": planted}
    assert restrict(pods)["allowed"] is True  # its pods are RBAC's business


def test_restrict_without_a_restriction_configured_refuses_everything() -> None:
    from hetsched.cluster.webhook import review

    body = {"request": {"uid": "r", **nodes("node-a", {"username": "alice"})}}
    answer = review(body, "/restrict")["response"]
    assert answer["allowed"] is False and answer["status"]["code"] == 403


def test_a_hypernode_is_validated_like_every_volcano_object() -> None:
    """A HyperNode whose member gives two selectors, or a pattern Volcano's RE2 refuses (a backreference), is
    refused with the field named; a good one is allowed."""
    from hetsched.cluster.webhook import review as answer

    good = {"apiVersion": "topology.volcano.sh/v1alpha1", "kind": "HyperNode", "metadata": {"name": "leaf-0"},
            "spec": {"tier": 1, "members": [{"type": "Node", "selector": {"regexMatch": {"pattern": "rack0-.*"}}}]}}
    assert answer(review(good, kind={"kind": "HyperNode"}), "/validate")["response"]["allowed"] is True
    for selector, message in (({"exactMatch": {"name": "a"}, "regexMatch": {"pattern": "b"}}, "give exactly one"),
                              ({"regexMatch": {"pattern": "(a)\\1"}}, "invalid escape sequence")):
        bad = {**good, "spec": {"tier": 1, "members": [{"type": "Node", "selector": selector}]}}
        response = answer(review(bad, kind={"kind": "HyperNode"}), "/validate")["response"]
        assert response["allowed"] is False and message in response["status"]["message"]
        assert "HyperNode/leaf-0" in response["status"]["message"] and "spec.members[0].selector" in \
            response["status"]["message"]


def test_a_policy_v1beta1_disruption_budget_is_validated_as_policy_v1() -> None:
    """Servers before 1.21 serve PodDisruptionBudgets only as ``policy/v1beta1``, and the install for them
    registers the webhook for that version: such a budget is read as policy/v1 (the same fields), not
    refused as an unknown kind — which refused every budget on those clusters. Found by
    tests/test_docs_commands.py re-applying the documented install on a 1.20 API server."""
    from hetsched.cluster.webhook import review as answer

    budget = {"apiVersion": "policy/v1beta1", "kind": "PodDisruptionBudget",
              "metadata": {"name": "trainers", "namespace": "team-a"},
              "spec": {"maxUnavailable": 1, "selector": {"matchLabels": {"app": "train"}}}}
    kind = {"group": "policy", "version": "v1beta1", "kind": "PodDisruptionBudget"}
    assert answer(review(budget, kind=kind), "/validate")["response"]["allowed"] is True
    bad = {**budget, "spec": {"maxUnavailable": 1, "minAvailable": 1}}
    response = answer(review(bad, kind=kind), "/validate")["response"]
    assert response["allowed"] is False and "cannot both be set" in response["status"]["message"]
    assert "PodDisruptionBudget/trainers" in response["status"]["message"]


def test_queue_deletions_are_refused_as_volcano_refuses_them() -> None:
    """``default`` and ``root`` are never deleted, an Open or Closing queue is not (its jobs would wait
    forever); a Closed queue, or a deletion of another kind, goes through."""
    from hetsched.cluster.webhook import review as answer

    def deleting(name: str, state: str | None, kind: str = "Queue") -> dict[str, Any]:
        old = {"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": kind, "metadata": {"name": name},
               **({"status": {"state": state}} if state else {})}
        return answer(review(None, "DELETE", kind={"kind": kind}, oldObject=old), "/validate")["response"]

    for name, state, message in (("default", "Closed", "Queue default cannot be deleted"),
                                 ("root", "Closed", "Queue root cannot be deleted"),
                                 ("research", "Open", "Queue research is Open: only a Closed queue"),
                                 ("research", None, "is Open"),
                                 ("research", "Closing", "is Closing")):
        response = deleting(name, state)
        assert response["allowed"] is False and message in response["status"]["message"], (name, state, response)
    assert deleting("research", "Closed")["allowed"] is True
    assert deleting("default", None, kind="PodGroup")["allowed"] is True
    assert answer(review(None, "DELETE"), "/validate")["response"]["allowed"] is True  # no old object: not ours


@pytest.mark.parametrize("replicas", [None, [1], {}, "1e400", True, -1, 10**12], ids=str)
def test_odd_replicas_in_mutate_are_denied_naming_the_field_and_the_connection_lives(webhook: Any,
                                                                                     replicas: Any) -> None:
    """Issue 29: ``replicas: null`` (or a list, a mapping, 1e400) dropped the connection with a traceback; now
    a denial naming the field, and the same keep-alive connection serves the next review."""
    server, context, _ = webhook
    connection = connect(server, context)
    job = json.loads(json.dumps(JOB))
    job["spec"]["tasks"][0]["replicas"] = replicas
    body = json.dumps(review(job)).replace('"1e400"', "1e400").encode()  # JSON's 1e400: infinity once parsed
    status, answer = post(connection, "/mutate", body)
    assert status == 200 and answer["response"]["allowed"] is False, answer
    assert "Job/train: spec.tasks[0].replicas: must be an integer from 0 to 100,000" in \
        answer["response"]["status"]["message"]
    status, answer = post(connection, "/mutate", review(JOB))
    assert status == 200 and answer["response"]["allowed"] is True
    connection.close()


@pytest.mark.timeout(120)
def test_a_trickling_client_is_cut_off_at_the_deadline(webhook: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """A client that sends its headers a byte at a time never times out a read (each byte comes in time);
    the request's deadline cuts it off long before it could finish (here 2 s against the ~100 s the
    trickle would take), so 2,000 such clients cannot hold 2,000 threads for ever."""
    server, context, _ = webhook
    monkeypatch.setattr(server.server, "DEADLINE", 2.0)
    request = f"POST /validate HTTP/1.1\r\nHost: x\r\nX-Slow: {'a' * 300}\r\nContent-Length: 10\r\n\r\n".encode()
    with socket.create_connection(("127.0.0.1", server.port), timeout=30) as raw, \
            context.wrap_socket(raw, server_hostname="127.0.0.1") as tls:
        cut = False
        for index in range(len(request)):
            try:
                tls.sendall(request[index:index + 1])
                tls.settimeout(0.3)
                if tls.recv(1) == b"":
                    cut = True
                    break
            except TimeoutError:
                continue
            except (OSError, ssl.SSLError):
                cut = True
                break
        assert cut, "the trickled request was served to the end"
        assert index < len(request) - 1


@pytest.mark.timeout(120)
def test_connections_beyond_the_limit_are_closed_at_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """At most ``max_connections`` connections (threads) at once: idle ones hold their slots (their read
    timeout is long here), the next is closed at once instead of getting a thread, and a slot freed serves
    a review again."""
    from hetsched.cluster import webhook as module

    monkeypatch.setattr(module._TLSServer, "TIMEOUT", 300.0)
    monkeypatch.setattr(module._TLSServer, "DEADLINE", 300.0)
    tls = generate(["127.0.0.1"])
    cert, key = tmp_path / "tls.crt", tmp_path / "tls.key"
    cert.write_bytes(tls.cert)
    key.write_bytes(tls.key)
    server = WebhookServer(str(cert), str(key), port=0, max_connections=4)
    server.start()
    context = ssl.create_default_context(cadata=tls.ca.decode())
    idle = [socket.create_connection(("127.0.0.1", server.port), timeout=60) for _ in range(4)]
    try:
        for _ in range(3):  # over the limit: closed without a byte (a read would block 300 s otherwise)
            with socket.create_connection(("127.0.0.1", server.port), timeout=60) as extra:
                assert extra.recv(1) == b""
        idle.pop().close()
        waited = time.monotonic()
        while time.monotonic() - waited < 60:  # the freed slot comes back once its thread has seen the close
            connection = connect(server, context)
            try:
                status, answer = post(connection, "/validate", review(JOB))
                break
            except (OSError, http.client.HTTPException):
                threading.Event().wait(0.05)
            finally:
                connection.close()
        else:
            raise AssertionError("no slot came back after a connection closed")
        assert status == 200 and answer["response"]["allowed"] is True
    finally:
        for sock in idle:
            sock.close()
        server.stop()


def test_large_reviews_wait_for_room_in_the_body_budget(tmp_path: Path) -> None:
    """The bodies judged at once stay within the budget: with room for one maximal review, three sent
    together are all answered (one after the other), none refused and none allowed unread."""
    tls = generate(["127.0.0.1"])
    cert, key = tmp_path / "tls.crt", tmp_path / "tls.key"
    cert.write_bytes(tls.cert)
    key.write_bytes(tls.key)
    server = WebhookServer(str(cert), str(key), port=0, body_budget=MAX_BODY)
    server.server.DEADLINE = 300.0  # waiting for room must not run into the deadline on a slow machine
    server.start()
    context = ssl.create_default_context(cadata=tls.ca.decode())
    job = json.loads(json.dumps(JOB))
    job["metadata"]["annotations"] = {"filler": "x" * (MAX_BODY - 4096)}
    answers: list[Any] = []

    def send() -> None:
        connection = connect(server, context)
        answers.append(post(connection, "/validate", review(job)))
        connection.close()

    threads = [threading.Thread(target=send) for _ in range(3)]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(120)
    finally:
        server.stop()
    assert len(answers) == 3 and all(status == 200 for status, _ in answers), [a[0] for a in answers]
    assert server.server.budget.free == MAX_BODY


SCHEDULER = "system:serviceaccount:hetsched:hetsched-scheduler"


def pod_review(annotations: dict[str, str], *, user: str = "alice", operation: str = "CREATE",
               old: dict[str, str] | None = None, namespace: str = "team-a",
               priority_class: str = "") -> dict[str, Any]:
    def made(notes: dict[str, str]) -> dict[str, Any]:
        spec: dict[str, Any] = {"containers": [{"name": "c", "image": "x"}]}
        if priority_class:
            spec["priorityClassName"] = priority_class
        return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": namespace,
                                                               "annotations": notes}, "spec": spec}

    request: dict[str, Any] = {"uid": "u-1", "operation": operation, "kind": {"kind": "Pod"}, "namespace": namespace,
                               "userInfo": {"username": user}, "object": made(annotations)}
    if old is not None:
        request["oldObject"] = made(old)
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}


HANDOFF = {"hetsched.io/allocation": '{"huawei.com/Ascend910":[0,1]}', "hetsched.io/allocation-for": "x/n1"}


@pytest.mark.parametrize(("annotations", "user", "operation", "old", "allowed"), [
    (HANDOFF, "alice", "CREATE", None, False),                                   # a tenant forges a hand-off
    ({"huawei.com/Ascend910": "Ascend910-0,Ascend910-1"}, "alice", "CREATE", None, False),  # Ascend's form
    ({"predicate-time": "0"}, "alice", "CREATE", None, False),                   # jumping the bind order
    (HANDOFF, SCHEDULER, "UPDATE", {}, True),                                    # the scheduler's bind
    (HANDOFF, "alice", "UPDATE", HANDOFF, True),                                 # a label change leaves it as is
    ({**HANDOFF, "hetsched.io/allocation": '{"huawei.com/Ascend910":[2,3]}'}, "alice", "UPDATE", HANDOFF, False),
    ({}, "alice", "UPDATE", HANDOFF, True),                                      # removing it hands nothing over
    ({"team": "a"}, "alice", "CREATE", None, True),
], ids=["forged", "ascend-form", "predicate-time", "scheduler", "unchanged", "rewritten", "removed", "plain"])
def test_only_the_scheduler_writes_the_chip_hand_off(annotations: dict[str, str], user: str, operation: str,
                                                     old: dict[str, str] | None, allowed: bool) -> None:
    from hetsched.cluster.webhook import PodAdmission
    from hetsched.cluster.webhook import review as answer

    response = answer(pod_review(annotations, user=user, operation=operation, old=old), "/pods",
                      admission=PodAdmission(SCHEDULER))["response"]
    assert response["allowed"] is allowed, response
    if not allowed:
        assert response["status"]["code"] == 403 and "Pod team-a/p: metadata.annotations[" in \
            response["status"]["message"] and "written only by the scheduler" in response["status"]["message"]


def test_system_priority_classes_are_kube_systems_unless_the_platform_says_otherwise() -> None:
    """A tenant may not give its pods, Jobs or PodGroups system-node-critical (above every workload, and
    never evicted); kube-system may, and so may a namespace the platform team lists."""
    from hetsched.api.priority_policy import parse
    from hetsched.cluster.webhook import PodAdmission
    from hetsched.cluster.webhook import review as answer

    def pod_allowed(namespace: str, admission: PodAdmission | None = None) -> Any:
        return answer(pod_review({}, namespace=namespace, priority_class="system-node-critical"), "/pods",
                      admission=admission)["response"]

    refused = pod_allowed("team-a")
    assert refused["allowed"] is False and "spec.priorityClassName: PriorityClass system-node-critical may be " \
        "used only in namespace(s) kube-system, not in team-a" in refused["status"]["message"]
    assert pod_allowed("kube-system")["allowed"] is True
    listed = PodAdmission(SCHEDULER, parse(["system-node-critical=kube-system,hetsched"]))
    assert pod_allowed("hetsched", listed)["allowed"] is True and pod_allowed("team-a", listed)["allowed"] is False
    job = json.loads(json.dumps(JOB))
    job["spec"]["priorityClassName"] = "system-cluster-critical"
    job_review = review(job)
    job_review["request"]["namespace"] = "team-a"
    response = answer(job_review, "/validate")["response"]
    assert response["allowed"] is False and "Job/train: spec.priorityClassName: PriorityClass " \
        "system-cluster-critical may be used only" in response["status"]["message"]
    with pytest.raises(ValueError, match="expected CLASS=NAMESPACE"):
        parse(["system-node-critical"])


def test_a_job_template_may_not_carry_the_hand_off() -> None:
    from hetsched.cluster.webhook import review as answer

    job = json.loads(json.dumps(JOB))
    job["spec"]["tasks"][0]["template"]["metadata"] = {"annotations": {"hetsched.io/allocation": '{"a":[0]}'}}
    response = answer(review(job), "/validate")["response"]
    assert response["allowed"] is False and "spec.tasks[0].template.metadata.annotations[hetsched.io/allocation]:" \
        " written only by the scheduler" in response["status"]["message"]


# ------------------------------------------------------------- matchConditions: what the API server sends us

def registrations(kube_version: str) -> dict[str, Any]:
    """The ValidatingWebhookConfigurations ``hetsched install --kube-version`` writes, by name."""
    import yaml

    from hetsched.cli.install import read_values, render

    return {d["metadata"]["name"]: d for d in yaml.safe_load_all(render(read_values([], [], kube_version)))
            if d and d["kind"] == "ValidatingWebhookConfiguration"}


def cel_calls(entry: dict[str, Any], request: dict[str, Any]) -> bool:
    """Whether the API server calls this webhook entry for ``request``: every matchCondition true, evaluated
    as CEL (as kube-apiserver evaluates them, with ``object``, ``oldObject`` and ``request`` bound)."""
    import sys

    import celpy

    limit = sys.getrecursionlimit()  # its parser raises it: other tests keep the interpreter's own
    try:
        environment = celpy.Environment()
        bound = {"request": celpy.json_to_cel(request), "object": celpy.json_to_cel(request.get("object")),
                 "oldObject": celpy.json_to_cel(request.get("oldObject"))}
        for condition in entry.get("matchConditions", []):
            result = environment.program(environment.compile(condition["expression"])).evaluate(bound)
            assert isinstance(result, celpy.celtypes.BoolType), (condition, result)  # never an error
            if not result:
                return False
        return True
    finally:
        sys.setrecursionlimit(limit)


def test_the_hand_off_entry_is_called_for_exactly_the_requests_the_webhook_refuses() -> None:
    """Issue 29: on Kubernetes 1.28+ the hand-off check fails closed. That holds nobody up only because its
    matchConditions let the API server call it for exactly the requests ``/pods`` refuses on hand-off grounds
    (someone other than the scheduler sets or changes a hand-off annotation): evaluated as CEL over 400
    random creates and updates (seeded), the conditions and the webhook's own answer agree every time."""
    import random

    from hetsched.cluster.webhook import PodAdmission, review

    hooks = registrations("1.30")["hetsched-pods"]["webhooks"]
    entry = next(e for e in hooks if e["name"] == "pods-handoff.hetsched.io")
    assert entry["failurePolicy"] == "Fail"
    rng = random.Random(29)
    keys = ["hetsched.io/allocation", "hetsched.io/allocation-for", "predicate-time", "huawei.com/Ascend910",
            "huawei.com/a/b", "team", "hetsched.io/devices"]
    values = ["", "x", '{"huawei.com/Ascend910":[0,1]}', "u/n1", "Ascend910-0"]
    users = ["alice", SCHEDULER, "system:serviceaccount:hetsched:hetsched-controller"]

    def notes() -> dict[str, str]:
        return {rng.choice(keys): rng.choice(values) for _ in range(rng.randint(0, 4))}

    seen = set()
    for _ in range(400):
        new, user = notes(), rng.choice(users)
        old = None if rng.random() < 0.3 else (dict(new) if rng.random() < 0.3 else notes())
        body = pod_review(new, user=user, operation="CREATE" if old is None else "UPDATE", old=old)
        refused = not review(body, "/pods", admission=PodAdmission(SCHEDULER))["response"]["allowed"]
        assert cel_calls(entry, body["request"]) is refused, (new, old, user)
        seen.add(refused)
    assert seen == {True, False}


def test_restrict_and_priority_entries_are_called_only_for_what_they_check() -> None:
    """/restrict fails closed on 1.28+ and is called only for the node agents' and the controller's writes
    (a kubelet's or anyone else's Node write never waits for it); the PriorityClass entry is called only for
    pods that name a class and still fails open; on 1.27 and before, nothing carries matchConditions (the
    API server would drop them) and every check fails open, as before."""
    restrict = registrations("1.28")["hetsched-restrict"]["webhooks"][0]
    assert restrict["failurePolicy"] == "Fail"
    for user, called in (("system:serviceaccount:hetsched:hetsched-node-agent", True),
                         ("system:serviceaccount:hetsched:hetsched-controller", True),
                         ("system:node:n1", False), (SCHEDULER, False), ("admin", False)):
        request = {"userInfo": {"username": user}, "operation": "UPDATE", "object": {"metadata": {"name": "n1"}}}
        assert cel_calls(restrict, request) is called, user
    priority = next(e for e in registrations("1.28")["hetsched-pods"]["webhooks"] if e["name"] == "pods.hetsched.io")
    assert priority["failurePolicy"] == "Ignore"
    assert cel_calls(priority, pod_review({}, priority_class="system-node-critical")["request"])
    assert not cel_calls(priority, pod_review({})["request"])
    old = registrations("1.27")
    for name in ("hetsched-pods", "hetsched-restrict"):
        assert all("matchConditions" not in e and e["failurePolicy"] == "Ignore" for e in old[name]["webhooks"])
