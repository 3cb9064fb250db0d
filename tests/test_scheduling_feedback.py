"""What a waiting gang tells its users and the cluster autoscaler: ``PodScheduled=False`` / ``Unschedulable`` on
each pod that waits (what cluster-autoscaler and Karpenter read to scale out), a ``FailedScheduling`` Warning
Event on it and an ``Unschedulable`` one on the PodGroup — once per change, not once per cycle — and once it
fits, the pods bound (``PodScheduled=True``) and a ``Scheduled`` Event. The Events sink that sends these to
an API server aggregates and rate-limits them as client-go's recorder does.

The same against a real kube-apiserver: ``tests/test_kubernetes.py``."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from hetsched.api.objects import Pod
from hetsched.cluster import events as sink_module
from hetsched.cluster.events import EventSink
from tests.builders import gang, harness, node

pytestmark = pytest.mark.timeout(60)


def scheduled(h: Any, name: str) -> tuple[str, str, str] | None:
    pod = h.cluster.get("Pod", f"default/{name}")
    assert isinstance(pod, Pod)
    found = next((c for c in pod.status.conditions if c.type == "PodScheduled"), None)
    return (found.status, found.reason, found.message) if found else None


def events(h: Any, reason: str) -> list[tuple[str, str]]:
    return [(e.key, e.message) for e in h.cluster.events if e.reason == reason]


def test_a_gang_that_cannot_fit_says_so_on_every_pod_once_then_is_scheduled() -> None:
    h = harness([node("n0", cpu="4"), *gang("train", 3, cpu="2")])
    h.cycle()
    for i in range(3):
        status, reason, message = scheduled(h, f"train-{i}") or ("", "", "")
        assert (status, reason) == ("False", "Unschedulable")
        # two of three fit on the one node: the gang is one pod short, and why
        assert message.startswith("1/3 tasks in gang unschedulable") and "Insufficient cpu" in message, message
    assert sorted(key for key, _ in events(h, "FailedScheduling")) == [f"default/train-{i}" for i in range(3)]
    assert [key for key, _ in events(h, "Unschedulable")] == ["default/train"]
    for _ in range(3):  # nothing changed: no new condition write, no new Event
        h.cycle()
    assert len(events(h, "FailedScheduling")) == 3 and len(events(h, "Unschedulable")) == 1

    h.cluster.create(node("n1", cpu="4"))
    h.cycle()
    assert set(h.bindings()) == {"train-0", "train-1", "train-2"}
    for i in range(3):
        assert (scheduled(h, f"train-{i}") or ("",))[0] == "True"
    assert [key for key, _ in events(h, "Scheduled")] == ["default/train"]


def test_a_job_that_fits_is_never_marked_unschedulable() -> None:
    h = harness([node("n0", cpu="8"), *gang("fits", 2, cpu="2")])
    h.cycle()
    assert not events(h, "FailedScheduling") and not events(h, "Unschedulable")
    assert all((scheduled(h, f"fits-{i}") or ("",))[0] == "True" for i in range(2))


class Server:
    """What the sink sends, as the API server would answer it (POST names the Event)."""

    def __init__(self, fail_patch: bool = False) -> None:
        self.requests: list[tuple[str, str, dict[str, Any]]] = []
        self.fail_patch = fail_patch
        self.gate = threading.Event()
        self.gate.set()

    def __call__(self, method: str, path: str, body: dict[str, Any], content_type: str | None = None) -> Any:
        self.gate.wait(10)
        self.requests.append((method, path, body))
        if method == "PATCH" and self.fail_patch:
            raise RuntimeError("404 Not Found")
        return {"metadata": {"name": f"e{len(self.requests)}"}}


def involved(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "name": name, "namespace": "team", "uid": f"uid-{name}"}


def test_the_sink_folds_repeats_into_a_count_and_limits_each_object() -> None:
    server = Server()
    now = [1000.0]
    sink = EventSink(server, clock=lambda: now[0])
    for _ in range(5):
        sink.record(involved("a"), "FailedScheduling", "0/3 nodes are available", "Warning")
    assert sink.flush(10)
    methods = [(m, p.rsplit("/", 1)[-1]) for m, p, _ in server.requests]
    assert methods[0] == ("POST", "events") and methods[1:] == [("PATCH", "e1")] * 4
    assert server.requests[-1][2]["count"] == 5 and sink.aggregated == 4

    for i in range(sink_module.BURST + 10):  # distinct messages: no folding, the per-object budget applies
        sink.record(involved("b"), "FailedScheduling", f"attempt {i}", "Warning")
    assert sink.flush(10)
    posted_b = [b for m, _, b in server.requests if m == "POST" and b["involvedObject"]["name"] == "b"]
    assert len(posted_b) == sink_module.BURST and sink.dropped == 10
    now[0] += sink_module.REFILL_SECONDS  # one more after the refill period
    sink.record(involved("b"), "FailedScheduling", "later", "Warning")
    sink.record(involved("c"), "Scheduled", "pod group is ready", "Normal")  # another object: its own budget
    assert sink.flush(10)
    assert [b["message"] for m, _, b in server.requests[-2:] if m == "POST"] == ["later", "pod group is ready"]
    assert sink.stop(5)


def test_the_sink_never_blocks_and_sends_anew_when_the_folded_event_is_gone() -> None:
    server = Server(fail_patch=True)
    server.gate.clear()  # the API server hangs: recording must not
    sink = EventSink(server, capacity=3)
    for i in range(10):
        sink.record(involved(f"p{i}"), "FailedScheduling", "x" * 5000, "Warning")
    assert sink.dropped >= 6  # the queue holds 3, one may be in flight
    server.gate.set()
    assert sink.flush(10)
    assert all(len(b["message"]) == sink_module.MESSAGE_LIMIT for _, _, b in server.requests)
    server.requests.clear()
    sink.record(involved("p0"), "FailedScheduling", "same", "Warning")
    sink.record(involved("p0"), "FailedScheduling", "same", "Warning")  # PATCH fails (expired): POST again
    assert sink.flush(10)
    assert [m for m, _, _ in server.requests] == ["POST", "PATCH", "POST"]
    assert sink.stop(5)


def test_a_volcano_job_reports_its_phases_and_why_its_gang_waits() -> None:
    """The Job as ``kubectl describe vcjob`` shows it: ``PodGroupPending`` (Volcano's Warning) while its gang
    does not fit, then ``Running`` once it runs."""
    from hetsched.api.manifest import load_text
    from hetsched.controllers.job import JobController
    from tests.test_job_lifecycle import JOB

    h = harness([node("n0", cpu="2")])
    jobs = JobController(h.cluster, h.clock, events=h.cluster)
    (job,) = load_text(JOB.format(job_policies=[], master_policies=[], max_retry=3).replace("'", '"'))
    h.cluster.create(job)

    def settle() -> None:
        for _ in range(3):
            jobs.process()
            h.cycle()
            jobs.process()

    settle()
    pending = events(h, "PodGroupPending")
    assert pending and pending[0][0] == "default/train", h.cluster.events
    assert pending[0][1] == ("PodGroup default/train unschedulable, reason: 3/3 tasks in gang unschedulable: "
                             "the gang is larger than the whole cluster: cpu 3 > 2")
    settle()
    assert len(events(h, "PodGroupPending")) == 1  # said once, not once per cycle
    h.cluster.create(node("n1", cpu="2"))
    settle()
    pods = [p for p in h.cluster.list("Pod") if isinstance(p, Pod)]
    for pod in pods:  # the simulated kubelet's part: the bound pods start
        h.cluster.update(pod.model_copy(update={"status": pod.status.model_copy(update={"phase": "Running"})}))
    settle()
    assert [key for key, _ in events(h, "Running")] == ["default/train"]


def test_a_huge_gang_is_told_a_bounded_number_of_pods_per_cycle(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each pod's condition is a status write: a cycle writes at most CONDITIONS_PER_CYCLE of them, and the
    rest follow in the next cycles, so a 10,000-pod gang never stalls one."""
    from hetsched.scheduler.engine import runner

    monkeypatch.setattr(runner, "CONDITIONS_PER_CYCLE", 3)
    h = harness([node("n0", cpu="4"), *gang("wide", 5, cpu="2")])
    h.cycle()
    told = [i for i in range(5) if (scheduled(h, f"wide-{i}") or ("",))[0] == "False"]
    assert len(told) == 3
    h.cycle()
    assert all((scheduled(h, f"wide-{i}") or ("",))[0] == "False" for i in range(5))
    assert len(events(h, "FailedScheduling")) == 5


def test_a_sink_stopped_after_sigterm_drops_what_is_queued_without_sending() -> None:
    server = Server()
    server.gate.clear()  # the first Event is in flight: the rest wait in the queue
    sink = EventSink(server)
    for i in range(5):
        sink.record(involved(f"q{i}"), "FailedScheduling", "x", "Warning")
    stopped: list[bool] = []
    stopper = threading.Thread(target=lambda: stopped.append(sink.stop(5, send=False)))
    stopper.start()  # stop() says "drop" at once, then waits for the queue to empty
    while not sink._dropping:
        stopper.join(0.01)
    server.gate.set()
    stopper.join(10)
    assert stopped == [True]
    assert len(server.requests) <= 1 and sink.dropped >= 4  # at most the one already in flight was sent
