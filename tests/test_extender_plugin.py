"""The ``extender`` plugin against a real HTTP server on 127.0.0.1 (issue 31), speaking Volcano's extender
protocol (``pkg/scheduler/plugins/extender/argument.go``; cases after ``extender_test.go`` and the user
guide's ``how_to_use_extender.md``): predicate, prioritize, admission, victims, and the failure mode — a
dead or slow extender costs one timeout per cycle, then the ``ignorable`` rule decides.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from hetsched.api.objects import AnyObject
from hetsched.scheduler.defaults import ConfError, parse_conf
from tests.builders import gang, harness, node, pod, podgroup, priority_class, running_on

pytestmark = pytest.mark.timeout(120)

Behaviour = Callable[[dict[str, Any]], Any]


class Extender:
    """A test extender: ``behaviour[verb](body) → answer`` (a dict, or an int for an HTTP status)."""

    def __init__(self) -> None:
        self.behaviour: dict[str, Behaviour] = {}
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.release = threading.Event()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                verb = self.path.rsplit("/", 1)[-1]
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])) or b"{}")
                outer.calls.append((verb, body))
                answer = outer.behaviour.get(verb, lambda _: {})(body)
                if isinstance(answer, int):
                    self.send_response(answer)
                    self.end_headers()
                    return
                data = json.dumps(answer).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def verbs(self, name: str) -> list[dict[str, Any]]:
        return [body for verb, body in self.calls if verb == name]

    def close(self) -> None:
        self.release.set()
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=10)


@pytest.fixture
def extender() -> Iterator[Extender]:
    made = Extender()
    yield made
    made.close()


def conf(url: str, *, ignorable: bool = False, timeout: str = "2s", extra: str = "",
         actions: str = "enqueue, allocate, backfill", verbs: tuple[str, ...] = ("predicate", "prioritize")) -> str:
    lines = "".join(f"      extender.{verb}Verb: {verb}\n" for verb in verbs)
    return f"""\
actions: "{actions}"
tiers:
- plugins:
  - name: priority
  - name: gang
  - name: conformance
- plugins:
  - name: predicates
  - name: proportion
  - name: extender
    arguments:
      extender.urlPrefix: {url}
      extender.httpTimeout: {timeout}
      extender.ignorable: {str(ignorable).lower()}
{lines}{extra}"""


def three_nodes() -> list[AnyObject]:
    return [node(f"n{i}", cpu="4") for i in range(3)]


def test_predicate_refuses_nodes_and_the_reason_names_the_extender(extender: Extender) -> None:
    extender.behaviour["predicate"] = lambda body: {"status": "" if body["node"]["Name"] == "n2" else "too hot"}
    h = harness([*three_nodes(), *gang("web", 1, cpu="1")], conf(extender.url))
    h.cycle()
    assert h.bindings() == {"web-0": "n2"}
    sent = extender.verbs("predicate")[0]
    assert sent["task"]["Name"] == "web-0" and sent["task"]["Resreq"]["MilliCPU"] == 1000
    assert sent["node"]["Allocatable"]["MilliCPU"] == 4000
    # the fields of Volcano's TaskInfo and NodeInfo (pkg/scheduler/api) that an extender reads
    task, sent_node = sent["task"], sent["node"]
    assert {k: task[k] for k in ("Status", "BestEffort", "SchGated", "Preemptable", "VolumeReady")} == {
        "Status": "Pending", "BestEffort": False, "SchGated": False, "Preemptable": True, "VolumeReady": False}
    assert task["InitResreq"] == task["Resreq"] and task["Pod"]["metadata"]["name"] == "web-0"
    assert sent_node["State"] == {"Phase": "Ready", "Reason": ""}
    assert sent_node["Idle"]["MilliCPU"] == 4000 and sent_node["Releasing"]["MilliCPU"] == 0
    extender.behaviour["predicate"] = lambda body: {"status": "too hot", "code": 2}
    h = harness([*three_nodes(), *gang("web", 1, cpu="1")], conf(extender.url))
    h.cycle()
    assert h.bindings() == {}
    assert "3 node(s) were refused by the extender: too hot (extender)" in h.condition("web")


def test_prioritize_steers_placement(extender: Extender) -> None:
    extender.behaviour["prioritize"] = lambda body: {"nodeScore": {"n1": 1000.0}}
    h = harness([*three_nodes(), *gang("web", 1, cpu="1")], conf(extender.url))
    h.cycle()
    assert h.bindings() == {"web-0": "n1"}
    assert sorted(n["Name"] for n in extender.verbs("prioritize")[0]["nodes"]) == ["n0", "n1", "n2"]


def test_job_enqueueable_reject_keeps_the_job_pending_saying_why(extender: Extender) -> None:
    extender.behaviour["jobEnqueueable"] = lambda body: {"status": -1 if body["job"]["Name"] == "big" else 1}
    objects = [*three_nodes(), podgroup("big", 1, phase="Pending"), pod("big-0", "big"),
               podgroup("small", 1, phase="Pending"), pod("small-0", "small")]
    h = harness(objects, conf(extender.url, verbs=("jobEnqueueable",)))
    h.cycle()
    assert h.podgroup("big").status.phase == "Pending" and h.podgroup("small").status.phase in ("Inqueue", "Running")
    assert "extender jobEnqueueable: the extender refused to admit the job" in h.condition("big")
    job = next(b["job"] for b in extender.verbs("jobEnqueueable") if b["job"]["Name"] == "big")
    assert job["Namespace"] == "default" and job["Queue"] == "default" and job["MinAvailable"] == 1
    assert job["TotalRequest"]["MilliCPU"] == 1000 and job["Allocated"]["MilliCPU"] == 0
    assert job["CreationTimestamp"].endswith("Z") and job["PodGroup"]["metadata"]["name"] == "big"


@pytest.mark.parametrize("ignorable", [True, False])
def test_a_dead_extender_follows_the_ignorable_rule(ignorable: bool) -> None:
    """Nobody listens at the URL (the server is closed first): ignorable lets scheduling go on without it;
    otherwise every node is refused, naming the error — never a traceback."""
    dead = Extender()
    dead.close()
    h = harness([*three_nodes(), *gang("web", 1, cpu="1")], conf(dead.url, ignorable=ignorable))
    h.cycle()
    if ignorable:
        assert "web-0" in h.bindings()
    else:
        assert h.bindings() == {}
        assert "refused by the extender: predicate: ConnectionRefusedError" in h.condition("web")


def test_a_required_extender_that_fails_at_session_open_stops_the_cycle_saying_so() -> None:
    dead = Extender()
    dead.close()
    h = harness([*three_nodes(), *gang("web", 1, cpu="1")],
                conf(dead.url, verbs=("onSessionOpen", "predicate")))
    h.cycle()
    assert h.bindings() == {}
    assert h.condition("web").startswith("PluginError: plugin extender raised")
    assert "the extender is required (extender.ignorable: false) and onSessionOpen: ConnectionRefusedError" \
        in h.condition("web")


def test_a_slow_extender_costs_one_timeout_per_cycle(extender: Extender) -> None:
    """The predicate answer never comes within ``httpTimeout``: the first call times out, the extender is
    taken as down for the rest of the cycle (one call, not one per node), and, ignorable, the pod is placed."""
    extender.behaviour["predicate"] = lambda body: (extender.release.wait(30), {"status": ""})[1]
    h = harness([*three_nodes(), *gang("web", 1, cpu="1")], conf(extender.url, ignorable=True, timeout="100ms"))
    h.cycle()
    assert "web-0" in h.bindings()
    assert len(extender.verbs("predicate")) == 1


def test_victims_are_those_the_extender_permits(extender: Extender) -> None:
    """preemptable: two low-priority pods could make room; the extender permits only ``keep-1``'s."""
    extender.behaviour["preemptable"] = lambda body: {
        "status": 1, "victims": [v for v in body["evictees"] if v["Name"] == "low-1-0"]}
    objects: list[AnyObject] = [priority_class("low", 10), priority_class("high", 1000),
                                node("n0", cpu="1"), node("n1", cpu="1")]
    for i in range(2):
        group = podgroup(f"low-{i}", 1, phase="Running", priority_class="low")
        made = pod(f"low-{i}-0", f"low-{i}", cpu="1")
        objects += [group, running_on(made.model_copy(update={"spec": made.spec.model_copy(
            update={"priorityClassName": "low"})}), f"n{i}")]
    objects += gang("urgent", 1, cpu="1", priority_class="high")
    h = harness(objects, conf(extender.url, actions="enqueue, allocate, preempt, backfill", verbs=("preemptable",)))
    h.cycle()
    assert [e.key for e in h.cluster.events if e.reason == "Evicted"] == ["default/low-1-0"]
    assert h.bindings()["urgent-0"] == "n1"


def test_managed_resources_limit_what_is_asked(extender: Extender) -> None:
    extra = "      extender.managedResources: [nvidia.com/gpu]\n"
    h = harness([*three_nodes(), *gang("web", 1, cpu="1")], conf(extender.url, extra=extra))
    h.cycle()
    assert "web-0" in h.bindings() and extender.verbs("predicate") == []


@pytest.mark.parametrize(("arguments", "message"), [
    ("      extender.urlPrefix: ftp://x\n", "must be an http:// or https:// URL"),
    ("      extender.urlPrefix: http://127.0.0.1:1\n      extender.httpTimeout: soon\n",
     "httpTimeout must be a duration"),
    ("      extender.urlPrefix: http://127.0.0.1:1\n      extender.predicateVerb: a/b\n", "must be a verb"),
    ("      extender.urlPrefix: http://127.0.0.1:1\n      extender.filterVerb: f\n", "unknown argument"),
])
def test_bad_extender_arguments_are_errors(arguments: str, message: str) -> None:
    text = "actions: allocate\ntiers:\n- plugins:\n  - name: extender\n    arguments:\n" + arguments
    with pytest.raises(ConfError, match=message):
        parse_conf(text)
