"""The Kubernetes adapter's informer logic without a server: a fake client whose watch ends, fails, or
answers 410 Gone. The informer resumes from the last resourceVersion, re-lists on 410 (delivering the
deletions it missed), backs off on errors, and delivers only when pumped, in order."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Mapping
from typing import Any

from hetsched.api.objects import Queue
from hetsched.cluster.kubernetes import RESOURCES, KubeCluster, OpenStreams, from_api, to_api
from hetsched.ports import WatchEvent


def queue(name: str, version: str, weight: int = 1) -> dict[str, Any]:
    return {"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "Queue",
            "metadata": {"name": name, "resourceVersion": version, "creationTimestamp": "2026-12-02T10:00:00Z"},
            "spec": {"weight": weight}}


class FakeClient:
    """Lists and watch streams scripted by the test."""

    def __init__(self) -> None:
        self.lists: list[tuple[list[dict[str, Any]], str]] = []
        self.streams: list[list[dict[str, Any]] | Exception] = []
        self.watched_from: list[str] = []

    def request(self, method: str, path: str, **kwargs: Any) -> dict[str, Any]:
        items, version = self.lists.pop(0) if self.lists else ([], "999")
        return {"items": items, "metadata": {"resourceVersion": version}}

    def stream(self, path: str, query: Mapping[str, Any], timeout: float,
               streams: OpenStreams | None = None) -> Iterator[dict[str, Any]]:
        self.watched_from.append(str(query["resourceVersion"]))
        script = self.streams.pop(0) if self.streams else []
        if isinstance(script, Exception):
            raise script
        yield from script
        if not self.streams:
            time.sleep(0.05)


def settle(cluster: KubeCluster, seen: list[WatchEvent], until: int, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while len(seen) < until and time.monotonic() < deadline:
        cluster.pump()
        time.sleep(0.01)


def test_resume_relist_on_410_and_backoff_on_errors() -> None:
    client = FakeClient()
    client.lists = [([queue("a", "10"), queue("b", "11")], "11"),   # first list
                    ([queue("a", "30", weight=5)], "30")]             # the re-list after 410: b is gone
    client.streams = [
        [{"type": "MODIFIED", "object": queue("a", "12", weight=2)}],  # then the watch ends: resume from 12
        ConnectionError("connection reset"),                            # an error: back off, resume from 12
        [{"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "20"}}},
         {"type": "ERROR", "object": {"code": 410, "message": "too old resource version"}}],
    ]
    cluster = KubeCluster(client)  # type: ignore[arg-type]
    seen: list[WatchEvent] = []
    cluster.watch(("Queue",), seen.append)
    assert cluster.wait_synced(5)
    assert seen == []  # nothing is delivered before pump
    settle(cluster, seen, 5)
    cluster.stop()
    kinds = [(e.type, e.object.metadata.name, e.object.metadata.resourceVersion) for e in seen]
    assert kinds[:3] == [("ADDED", "a", "10"), ("ADDED", "b", "11"), ("MODIFIED", "a", "12")]
    assert ("DELETED", "b", "11") in kinds[3:] and ("MODIFIED", "a", "30") in kinds[3:]
    assert client.watched_from[:3] == ["11", "12", "12"]
    assert cluster.relists == 1
    assert cluster.get("Queue", "a").spec.weight == 5  # type: ignore[union-attr]


def test_conversion_round_trip_keeps_times_and_omits_unset_fields() -> None:
    obj = from_api("Queue", queue("a", "7"))
    assert isinstance(obj, Queue) and obj.metadata.creationTimestamp == 1796205600.0
    body = to_api(obj, RESOURCES["Queue"])
    assert body["metadata"]["resourceVersion"] == "7" and "creationTimestamp" not in body["metadata"]
    assert "parent" not in body["spec"] and body["spec"]["weight"] == 1


def test_managed_fields_are_trimmed_as_kube_schedulers_informers_trim_them() -> None:
    """Nothing reads them and they are most of a small pod's bytes: the cache never holds them (a PUT
    without them keeps the server's, checked against a real API server in test_kubernetes)."""
    raw = queue("a", "7")
    raw["metadata"]["managedFields"] = [{"manager": "kubectl", "operation": "Update", "apiVersion": "v1",
                                         "time": "2026-12-01T10:00:00Z", "fieldsV1": {"f:spec": {"f:weight": {}}}}]
    obj = from_api("Queue", raw)
    assert "managedFields" not in obj.metadata.model_dump() and obj.metadata.creationTimestamp == 1796205600.0
    assert "managedFields" in raw["metadata"]  # the caller's data is not changed


class IdleResponse:
    """A watch response on which nothing happens: reading blocks until its socket is shut down."""

    def __init__(self) -> None:
        self.cut = threading.Event()

    def shutdown(self) -> None:
        self.cut.set()


class IdleClient(FakeClient):
    """Every watch stays open and silent (as the API server's do between changes) until cut."""

    def __init__(self) -> None:
        super().__init__()
        self.opened: list[IdleResponse] = []

    def stream(self, path: str, query: Mapping[str, Any], timeout: float,
               streams: OpenStreams | None = None) -> Iterator[dict[str, Any]]:
        response = IdleResponse()
        self.opened.append(response)
        assert streams is not None
        streams.add(response)
        try:
            response.cut.wait()  # as recv blocks on an idle socket
            yield from ()
        finally:
            streams.discard(response)


def test_stop_cuts_idle_watches_and_joins_every_informer() -> None:
    """Without the cut, each informer would sit in its idle watch until the server's timeout (minutes)."""
    client = IdleClient()
    cluster = KubeCluster(client)  # type: ignore[arg-type]
    cluster.start(["Queue", "Node", "Pod", "PodGroup"])
    assert cluster.wait_synced(30)
    while len(client.opened) < 4:  # every informer is inside its watch
        time.sleep(0.01)
    assert cluster.stop(timeout=60)  # True: every thread ended, none left waiting out the deadline
    assert all(response.cut.is_set() for response in client.opened)


def test_a_stream_opened_after_close_is_cut_at_once() -> None:
    streams = OpenStreams()
    early, late = IdleResponse(), IdleResponse()
    streams.add(early)
    streams.close()
    assert early.cut.is_set()
    streams.add(late)  # an informer that opened its watch while the cluster was stopping
    assert late.cut.is_set()
    assert streams.discard(late) and streams.discard(early)
    assert not streams.discard(early)  # each cut response is reported once


def test_wait_synced_gives_up_when_cancelled() -> None:
    client = FakeClient()
    cluster = KubeCluster(client)  # type: ignore[arg-type]
    cluster._synced["Queue"] = threading.Event()  # an informer that never lists (a server not answering)
    cancel = threading.Event()
    cancel.set()
    assert cluster.wait_synced(3600, cancel=cancel) is False  # at once, not after an hour


class BindingClient(FakeClient):
    def __init__(self) -> None:
        super().__init__()
        self.bindings: list[dict[str, Any]] = []
        self.lock = threading.Lock()

    def request(self, method: str, path: str, **kwargs: Any) -> dict[str, Any]:
        if path.endswith("/binding"):
            with self.lock:
                self.bindings.append(kwargs["body"])
            if kwargs["body"]["metadata"]["name"] == "gone":
                from hetsched.ports import NotFound
                raise NotFound("pod gone")
            return {}
        return super().request(method, path, **kwargs)


def test_each_nodes_binds_go_in_order_stamped_with_their_bind_order() -> None:
    """A device plugin tells which pod kubelet is admitting by this order (agents.deviceplugin._handoff);
    pods without chips need no order."""
    client = BindingClient()
    cluster = KubeCluster(client, bind_workers=4)  # type: ignore[arg-type]
    chips = {"hetsched.io/allocation": '{"huawei.com/Ascend910": [0]}'}
    binds = [(f"default/w-{i}", f"node-{i % 3}", chips) for i in range(30)]
    binds.insert(5, ("default/gone", "node-0", chips))
    binds.append(("default/plain", "node-1", None))
    failures = cluster.bind_all(binds)
    assert [pod for pod, _ in failures] == ["default/gone"]  # reported; the node's later pods still bound
    for node in ("node-0", "node-1", "node-2"):
        wanted = [pod.split("/")[1] for pod, target, handoff in binds if target == node and handoff]
        sent = [b for b in client.bindings if b["target"]["name"] == node and b["metadata"]["annotations"]]
        assert [b["metadata"]["name"] for b in sent] == wanted  # pods with chips: in the order given
        stamps = [int(b["metadata"]["annotations"]["predicate-time"]) for b in sent
                  if "hetsched.io/allocation" in b["metadata"]["annotations"]]
        assert stamps == sorted(stamps) and len(set(stamps)) == len(stamps)
    plain = next(b for b in client.bindings if b["metadata"]["name"] == "plain")
    assert plain["metadata"]["annotations"] == {}  # no chips: no stamp


def test_a_renewed_token_file_is_read_again(tmp_path: Any, monkeypatch: Any) -> None:
    """kubelet renews a projected ServiceAccount token in place: the client sends the new one (read again
    once ``TOKEN_REREAD`` has passed), and keeps the last one while the file cannot be read."""
    from hetsched.cluster import kubernetes

    token = tmp_path / "token"
    token.write_text("first\n")
    client = kubernetes.KubeClient.connect(server="https://127.0.0.1:1", token_file=str(token),
                                           ca_file=None, insecure=True)
    configuration = client.api.configuration
    assert configuration.get_api_key_with_prefix("BearerToken") == "Bearer first"
    token.write_text("second\n")
    assert configuration.get_api_key_with_prefix("BearerToken") == "Bearer first"  # not yet time to look
    monkeypatch.setattr(kubernetes, "TOKEN_REREAD", 0.0)
    assert configuration.get_api_key_with_prefix("BearerToken") == "Bearer second"
    token.unlink()
    assert configuration.get_api_key_with_prefix("BearerToken") == "Bearer second"
