"""``hetsched bench latency --apiserver``: arrival-to-bind latency through a real kube-apiserver.

Who calls it: the CLI. The embedded run (``benchmark.latency``) times the scheduler's own work; this one
times what a user sees: from the moment a job's last pod was created on the API server to the moment a
watch sees its gang's last pod bound — informers, the scheduling cycle, the Binding calls and the watch
included. It starts etcd and kube-apiserver from the cached build (``scripts/provision-kube.sh``) and the
``hetsched scheduler`` process, and stops them all when done.

Method: ``nodes`` fake Ready nodes (32 CPUs, no kubelet, as in ``bench live``); ``running`` pods created
already bound (spec.nodeName, 100m CPU each) in PodGroups of the same gang sizes as the embedded run; then
jobs arrive at ``rate`` pods per second (Poisson, gangs of 1–32 pods) for ``seconds``, each finishing an
exponential run time after it was bound (mean ``running / rate``) — and the running fill pods finish the
same way — by a forced delete (no kubelet would ever confirm a graceful one). Jobs are submitted by a pool
of client threads, so a slow create never holds back the next arrival.
"""

from __future__ import annotations

import contextlib
import heapq
import random
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from hetsched.benchmark.apiserver import real_apiserver, stop_process
from hetsched.benchmark.latency import SIZE_WEIGHTS, SIZES, mean_size, stats
from hetsched.benchmark.live import check_provisioned, parallel, setup_cluster, start_scheduler
from hetsched.cluster.kubernetes import KubeClient

NAMESPACE = "het"
PODS = f"/api/v1/namespaces/{NAMESPACE}/pods"
PODGROUPS = f"/apis/scheduling.volcano.sh/v1beta1/namespaces/{NAMESPACE}/podgroups"
GRACE_SECONDS = 30.0


def _podgroup(name: str, size: int) -> dict[str, Any]:
    return {"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "PodGroup",
            "metadata": {"name": name, "namespace": NAMESPACE}, "spec": {"minMember": size, "queue": "default"}}


def _pod(name: str, group: str, node: str = "") -> dict[str, Any]:
    spec: dict[str, Any] = {"schedulerName": "volcano", "containers": [
        {"name": "c", "image": "busybox", "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}}}]}
    if node:
        spec["nodeName"] = node
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": NAMESPACE, "annotations": {"scheduling.k8s.io/group-name": group}},
            "spec": spec}


class BindTimes:
    """Watches the namespace's pods and notes when each is first seen bound."""

    def __init__(self, client: KubeClient) -> None:
        self.client = client
        self.bound: dict[str, float] = {}
        self.lock = threading.Lock()
        self.stopped = threading.Event()
        listing = client.request("GET", PODS, query={"limit": 1})
        self.version = listing["metadata"]["resourceVersion"]
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.stopped.is_set():
            try:
                for event in self.client.stream(PODS, {"watch": "true", "resourceVersion": self.version,
                                                       "timeoutSeconds": 60}, 70):
                    obj = event.get("object") or {}
                    self.version = obj.get("metadata", {}).get("resourceVersion", self.version)
                    name = obj.get("metadata", {}).get("name", "")
                    if obj.get("spec", {}).get("nodeName"):
                        with self.lock:
                            self.bound.setdefault(name, time.monotonic())
                    if self.stopped.is_set():
                        return
            except Exception:
                time.sleep(0.2)

    def seen(self, names: list[str]) -> float | None:
        """When the last of ``names`` was seen bound (None while one is not)."""
        with self.lock:
            times = [self.bound.get(name) for name in names]
        return None if any(t is None for t in times) else max(t for t in times if t is not None)


class LiveRun:
    def __init__(self, client: KubeClient, nodes: int, running: int, rate: float, seconds: float, seed: int) -> None:
        self.client, self.nodes, self.running, self.rate, self.seconds = client, nodes, running, rate, seconds
        self.rng = random.Random(seed)
        self.mean_duration = running / rate
        self.index = 0
        self.finishes: list[tuple[float, str, int]] = []
        """(due, job, size): forced deletes, by the finisher thread."""
        self.lock = threading.Lock()
        self.arrived: dict[str, tuple[float, list[str]]] = {}
        """Job → (when its last pod was created, its pod names)."""
        self.deleted = 0
        self.latencies: list[tuple[int, float]] = []
        """(gang size, seconds from arrival to bound) per job bound."""

    def _names(self, job: str, size: int) -> list[str]:
        return [f"{job}-{i}" for i in range(size)]

    def _size(self) -> int:
        return self.rng.choices(SIZES, SIZE_WEIGHTS)[0]

    def fill(self) -> int:
        jobs: list[tuple[str, int]] = []
        pods = 0
        while pods < self.running:
            size = self._size()
            jobs.append((f"fill-{len(jobs):06d}", size))
            pods += size
        slots = iter(range(pods))
        placed = [(job, size, [f"node-{next(slots) % self.nodes:05d}" for _ in range(size)]) for job, size in jobs]

        def create(item: tuple[str, int, list[str]]) -> None:
            job, size, nodes = item
            self.client.request("POST", PODGROUPS, body=_podgroup(job, size))
            for name, node in zip(self._names(job, size), nodes, strict=True):
                self.client.request("POST", PODS, body=_pod(name, job, node))
            # as a scheduler that has been running a while left it: Running, its gang Scheduled (else the
            # first cycles would spend seconds writing 1,000s of statuses while the first jobs arrive)
            self.client.request("PATCH", f"{PODGROUPS}/{job}/status", content_type="application/merge-patch+json",
                                body={"status": {"phase": "Running", "running": size, "conditions": [
                                    {"type": "Scheduled", "status": "True", "reason": "tasks in gang are ready",
                                     "lastTransitionTime": "2026-01-01T00:00:00Z"}]}})

        parallel(placed, create)
        now = time.monotonic()
        for job, size in jobs:
            heapq.heappush(self.finishes, (now + self.rng.expovariate(1.0 / self.mean_duration), job, size))
        return pods

    def submit(self, job: str, size: int, *, measured: bool = True) -> None:
        self.client.request("POST", PODGROUPS, body=_podgroup(job, size))
        names = self._names(job, size)
        for name in names:
            self.client.request("POST", PODS, body=_pod(name, job))
        if measured:
            with self.lock:
                self.arrived[job] = (time.monotonic(), names)

    def finish(self, stop: threading.Event) -> None:
        """Force-delete jobs as their run times end (the finisher thread)."""
        while not stop.is_set():
            with self.lock:
                due = [heapq.heappop(self.finishes) for _ in range(len(self.finishes))
                       if self.finishes and self.finishes[0][0] <= time.monotonic()]
            for _, job, size in due:
                for name in self._names(job, size):
                    with contextlib.suppress(Exception):
                        self.client.request("DELETE", f"{PODS}/{name}", query={"gracePeriodSeconds": 0})
                with contextlib.suppress(Exception):
                    self.client.request("DELETE", f"{PODGROUPS}/{job}")
                self.deleted += size
            stop.wait(0.05)

    def probe(self, watch: BindTimes, timeout: float = 120.0) -> None:
        """Submit one pod and wait until it is bound: the scheduler process is up and synced (its start is
        not part of any job's latency)."""
        self.submit("probe", 1, measured=False)
        deadline = time.monotonic() + timeout
        while watch.seen(["probe-0"]) is None:
            if time.monotonic() > deadline:
                raise RuntimeError(f"the scheduler bound nothing within {timeout:g}s (see its log)")
            time.sleep(0.05)

    def collect(self, watch: BindTimes, stop: threading.Event) -> None:
        """Note each arrived job's latency once its gang is bound, and hand it to the finisher (the collector
        thread)."""
        finishing = random.Random(self.rng.random())
        done: set[str] = set()
        while not stop.is_set():
            with self.lock:
                waiting = [(job, entry) for job, entry in self.arrived.items() if job not in done]
            for job, (arrived, names) in waiting:
                seen = watch.seen(names)
                if seen is None:
                    continue
                done.add(job)
                with self.lock:
                    self.latencies.append((len(names), max(seen - arrived, 0.0)))
                    heapq.heappush(self.finishes, (seen + finishing.expovariate(1.0 / self.mean_duration), job,
                                                   len(names)))
            stop.wait(0.02)

    def arrive(self, pool: ThreadPoolExecutor) -> int:
        """Submit jobs on a Poisson schedule for ``seconds``; returns the pods submitted."""
        started = time.monotonic()
        at, pods = 0.0, 0
        while True:
            at += self.rng.expovariate(self.rate / mean_size())
            if at >= self.seconds:
                return pods
            delay = started + at - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            size = self._size()
            self.index += 1
            pool.submit(self.submit, f"job-{self.index:06d}", size)
            pods += size


def run_live_latency_benchmark(nodes: int, running: int, rate: float, *, seconds: float = 20.0,
                               seed: int = 1) -> dict[str, Any]:
    check_provisioned("bench latency --apiserver")
    with tempfile.TemporaryDirectory(prefix="hetsched-latency-") as tmp:
        directory = Path(tmp)
        with real_apiserver(directory) as api:
            client = KubeClient.from_token(api.url, api.token, ca_file=api.ca)
            setup_cluster(client, nodes)
            run = LiveRun(client, nodes, running, rate, seconds, seed)
            filled = run.fill()
            watch = BindTimes(client)
            stop = threading.Event()
            threads = [threading.Thread(target=run.finish, args=(stop,), daemon=True),
                       threading.Thread(target=run.collect, args=(watch, stop), daemon=True)]
            process = start_scheduler(api, directory, qps=1000, burst=1000)
            try:
                for thread in threads:
                    thread.start()
                run.probe(watch)
                with ThreadPoolExecutor(max_workers=16) as pool:
                    submitted = run.arrive(pool)
                deadline = time.monotonic() + GRACE_SECONDS
                while len(run.latencies) < len(run.arrived) and time.monotonic() < deadline:
                    time.sleep(0.1)
            finally:
                stop.set()
                watch.stopped.set()
                stop_process(process)
                for thread in threads:
                    thread.join(timeout=5)
            with contextlib.suppress(Exception):
                client.api.close()  # type: ignore[no-untyped-call]
        with run.lock:
            latencies = list(run.latencies)
    return {"mode": "apiserver", "nodes": nodes, "running_target": running, "running_at_start": filled,
            "arrival_rate": rate, "seconds": seconds, "seed": seed, "jobs_arrived": len(run.arrived),
            "pods_arrived": submitted, "jobs_not_bound": len(run.arrived) - len(latencies),
            "latency_ms": stats([wait for _, wait in latencies]),
            "latency_8_pod_gangs_ms": stats([wait for size, wait in latencies if size == 8]),
            "pods_deleted": run.deleted}


