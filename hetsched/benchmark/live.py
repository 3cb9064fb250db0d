"""``hetsched bench live``: scheduling throughput on a real kube-apiserver, in one run, for three binders:
hetsched's scheduler process, kube-scheduler v1.20.2 built from the same source tree (same client QPS and
burst), and a raw binder that binds pods to precomputed nodes as fast as the API allows (the ceiling).

Who calls it: the CLI (``hetsched bench live --nodes N --pods M --json OUT``). It starts etcd and
kube-apiserver itself from the cached build (``scripts/provision-kube.sh``), stops them when done, and
never leaves a process behind.

Method (the same for all three): ``nodes`` fake nodes (32 CPUs, Ready, no kubelet — as KWOK-style
benchmarks do); for each binder its own namespace with ``pods`` pending pods (100m CPU each), created
before the binder starts; a watch records the moment each pod is first seen bound; throughput is
(pods − 1) / (last bind − first bind), so start-up and informer sync are not counted. Each binder is its
own process (the raw binder too), so the watching process never competes with it for the interpreter.
Each binder's pods are deleted before the next one's are created, so every binder lists the same cluster.
hetsched's pods come in PodGroups of 10 (minMember 1: not gangs, as kube-scheduler knows none).

Start-up and memory are reported apart for the two schedulers: seconds from the process's start to its first
bind (interpreter start, the paginated LISTs of every node and pod, informer sync, the first cycle), its
RSS at that first bind (mostly what its informers hold) and its peak RSS over the run (Linux's
``/proc/PID/status``; absent elsewhere).
"""

from __future__ import annotations

import contextlib
import math
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from hetsched.benchmark.apiserver import KUBE_SCHEDULER, ApiServer, missing, real_apiserver, stop_process
from hetsched.benchmark.latency import status_kb
from hetsched.cluster.kubernetes import KubeClient, KubeCluster
from hetsched.ports import BindRequest

CRDS = Path(__file__).resolve().parents[2] / "deploy" / "crds"


class BindWatch:
    """Times the first sighting of each pod of a namespace bound to a node."""

    def __init__(self, client: KubeClient, namespace: str, expected: int) -> None:
        self.client, self.namespace, self.expected = client, namespace, expected
        self.bound: dict[str, float] = {}
        self.done = threading.Event()
        listing = client.request("GET", f"/api/v1/namespaces/{namespace}/pods", query={"limit": 1})
        self.version = listing["metadata"]["resourceVersion"]
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        path = f"/api/v1/namespaces/{self.namespace}/pods"
        while not self.done.is_set():
            try:
                for event in self.client.stream(path, {"watch": "true", "resourceVersion": self.version,
                                                       "timeoutSeconds": 120}, 130):
                    obj = event.get("object") or {}
                    self.version = obj.get("metadata", {}).get("resourceVersion", self.version)
                    name = obj.get("metadata", {}).get("name", "")
                    if obj.get("spec", {}).get("nodeName") and name not in self.bound:
                        self.bound[name] = time.monotonic()
                        if len(self.bound) >= self.expected:
                            self.done.set()
                            return
            except Exception:
                time.sleep(0.2)

    def rate(self, timeout: float) -> float:
        if not self.done.wait(timeout):
            raise RuntimeError(f"{self.namespace}: only {len(self.bound)} of {self.expected} pods bound "
                               f"within {timeout:g}s")
        times = sorted(self.bound.values())
        return (len(times) - 1) / max(times[-1] - times[0], 1e-9)


def _pod(name: str, namespace: str, scheduler: str, group: str | None = None) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": name, "namespace": namespace}
    if group:
        metadata["annotations"] = {"scheduling.k8s.io/group-name": group}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata,
            "spec": {"schedulerName": scheduler, "containers": [
                {"name": "c", "image": "busybox", "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}}}]}}


def parallel(work: list[Any], fn: Any, workers: int = 16) -> None:
    with ThreadPoolExecutor(max_workers=workers) as pool:
        list(pool.map(fn, work))


def setup_cluster(client: KubeClient, nodes: int) -> None:
    for path in sorted(CRDS.glob("*.yaml")):
        client.request("POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
                       body=yaml.safe_load(path.read_text()))
    deadline = time.monotonic() + 30
    while True:
        try:
            client.request("GET", "/apis/scheduling.volcano.sh/v1beta1/queues")
            break
        except Exception:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)
    client.request("POST", "/apis/scheduling.volcano.sh/v1beta1/queues", body={
        "apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "Queue", "metadata": {"name": "default"},
        "spec": {"weight": 1}})

    def node(index: int) -> None:
        name = f"node-{index:05d}"
        client.request("POST", "/api/v1/nodes", body={"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}})
        resources = {"cpu": "32", "memory": "256Gi", "pods": "110"}
        client.request("PATCH", f"/api/v1/nodes/{name}/status", content_type="application/merge-patch+json",
                       body={"status": {"allocatable": resources, "capacity": resources,
                                        "conditions": [{"type": "Ready", "status": "True", "reason": "Bench"}]}})
        client.request("PATCH", f"/api/v1/nodes/{name}", content_type="application/merge-patch+json",
                       body={"spec": {"taints": None}})

    parallel(list(range(nodes)), node)
    for namespace in ("raw", "kube", "het"):
        client.request("POST", "/api/v1/namespaces", body={"apiVersion": "v1", "kind": "Namespace",
                                                           "metadata": {"name": namespace}})


def clear(client: KubeClient, namespace: str, pods: int) -> None:
    """Delete the pods of a binder's namespace at once (no kubelet would confirm a graceful deletion) and
    wait until they are gone, so that each binder lists the same cluster: the nodes and its own pods."""
    timeout = max(300.0, pods / 50)
    deadline = time.monotonic() + timeout
    path = f"/api/v1/namespaces/{namespace}/pods"
    while client.request("GET", path, query={"limit": 1})["items"]:
        if time.monotonic() > deadline:
            raise RuntimeError(f"{namespace}: pods still there {timeout:g}s after deleting them")
        # the server gives up on a large collection after its request timeout, having deleted part: again
        with contextlib.suppress(Exception):  # a 500 or a read timeout: the loop looks again
            client.request("DELETE", path, timeout=120.0,
                           body={"apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": 0})


def _raw(api: ApiServer, client: KubeClient, nodes: int, pods: int, qps: float, burst: int, workers: int,
         directory: Path) -> float:
    """The ceiling: a separate process binds every pod to a precomputed node from ``workers`` threads."""
    parallel(list(range(pods)), lambda i: client.request("POST", "/api/v1/namespaces/raw/pods",
                                                          body=_pod(f"p{i:06d}", "raw", "nobody")))
    watch = BindWatch(client, "raw", pods)
    token = directory / "token"
    token.write_text(api.token)
    done = subprocess.run([sys.executable, "-m", "hetsched.benchmark.live", api.url, str(token), api.ca, str(nodes),
                           str(pods), f"{qps:g}", str(burst), str(workers)], capture_output=True, text=True,
                          check=False)
    if done.returncode != 0:
        raise RuntimeError(f"raw binder: {done.stderr.strip()[-500:]}")
    return watch.rate(max(60.0, pods / 100))


def raw_bind(url: str, token: str, ca: str, nodes: int, pods: int, qps: float, burst: int, workers: int) -> None:
    """Bind pods ``raw/p000000…`` round-robin to ``node-00000…`` (the raw binder's process)."""
    cluster = KubeCluster(KubeClient.from_token(url, token, ca_file=ca), qps=qps, burst=burst, bind_workers=workers)
    failures = cluster.bind_all([BindRequest(f"raw/p{i:06d}", f"node-{i % nodes:05d}") for i in range(pods)])
    if failures:
        raise SystemExit(f"{len(failures)} binds failed, first: {failures[0].pod}: {failures[0].error}")


def _kube_scheduler(api: ApiServer, client: KubeClient, pods: int, qps: float, burst: int,
                    directory: Path) -> Binder:
    parallel(list(range(pods)), lambda i: client.request("POST", "/api/v1/namespaces/kube/pods",
                                                          body=_pod(f"p{i:06d}", "kube", "default-scheduler")))
    kubeconfig = directory / "kubeconfig"
    kubeconfig.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "bench",
        "clusters": [{"name": "bench", "cluster": {"server": api.url, "certificate-authority": api.ca}}],
        "users": [{"name": "admin", "user": {"token": api.token}}],
        "contexts": [{"name": "bench", "context": {"cluster": "bench", "user": "admin"}}]}))
    watch = BindWatch(client, "kube", pods)
    launched = time.monotonic()
    with (directory / "kube-scheduler.log").open("w") as log:
        process = subprocess.Popen([str(KUBE_SCHEDULER), f"--kubeconfig={kubeconfig}", "--leader-elect=false",
                                    f"--kube-api-qps={qps:g}", f"--kube-api-burst={burst}", "--port=0",
                                    "--secure-port=0"], stdout=log, stderr=log)
    try:
        return _observe(process, watch, launched)
    finally:
        stop_process(process)


def _hetsched(api: ApiServer, client: KubeClient, pods: int, qps: float, burst: int, workers: int,
              directory: Path) -> Binder:
    groups = (pods + 9) // 10

    def submit(group: int) -> None:
        name = f"g{group:05d}"
        client.request("POST", "/apis/scheduling.volcano.sh/v1beta1/namespaces/het/podgroups", body={
            "apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "PodGroup",
            "metadata": {"name": name, "namespace": "het"}, "spec": {"minMember": 1, "queue": "default"}})
        for member in range(group * 10, min(pods, group * 10 + 10)):
            client.request("POST", "/api/v1/namespaces/het/pods", body=_pod(f"p{member:06d}", "het", "volcano", name))

    parallel(list(range(groups)), submit)
    watch = BindWatch(client, "het", pods)
    launched = time.monotonic()
    process = start_scheduler(api, directory, qps, burst, workers)
    try:
        return _observe(process, watch, launched)
    finally:
        stop_process(process)


@dataclass(frozen=True)
class Binder:
    """What one scheduler process did: its throughput, how long from its start to its first bind, its RSS
    then and at its peak (MB; None where ``/proc`` is absent)."""

    rate: float
    first_bind_seconds: float
    rss_at_first_bind_mb: float | None
    peak_rss_mb: float | None


def _mb(kb: int | None) -> float | None:
    return round(kb / 1024, 1) if kb is not None else None


def _observe(process: subprocess.Popen[bytes], watch: BindWatch, launched: float) -> Binder:
    """Wait for ``watch``'s pods, reading ``process``'s memory at its first bind and before it stops."""
    deadline = launched + bind_timeout(watch.expected)
    while not watch.bound and time.monotonic() < deadline and process.poll() is None:
        time.sleep(0.02)
    if process.poll() is not None:  # it should serve until stopped: a crash is not a slow binder
        raise RuntimeError(f"{watch.namespace}: the scheduler process exited ({process.returncode}) after "
                           f"{len(watch.bound)} of {watch.expected} binds; see its log")
    at_first = status_kb("VmRSS", process.pid)
    rate = watch.rate(max(deadline - time.monotonic(), 0.0))
    return Binder(rate, round(min(watch.bound.values()) - launched, 2), _mb(at_first),
                  _mb(status_kb("VmHWM", process.pid)))


def bind_timeout(pods: int) -> float:
    """How long a binder may take for ``pods`` pods: 600 s, or 20 pods/s where that is longer (kube-scheduler
    at 5,000 nodes is slow; a binder that never finishes still ends the run)."""
    return max(600.0, pods / 20)


def start_scheduler(api: ApiServer, directory: Path, qps: float, burst: int,
                    workers: int = 16) -> subprocess.Popen[bytes]:
    """The ``hetsched scheduler`` process against ``api`` (a 10 ms period, no leader election), logging into
    ``directory``; the caller stops it (``stop_process``)."""
    token = directory / "token"
    token.write_text(api.token)
    with (directory / "hetsched-scheduler.log").open("w") as log:
        return subprocess.Popen([sys.executable, "-m", "hetsched.cli.main", "scheduler", "--server", api.url,
                                 "--token-file", str(token), "--ca-file", api.ca, "--no-leader-elect",
                                 "--period", "0.01", "--qps", f"{qps:g}", "--burst", str(burst),
                                 "--bind-workers", str(workers)], stdout=log, stderr=log)


def check_provisioned(command: str, kube_scheduler: bool = False) -> None:
    """A RuntimeError naming ``command`` when the binaries or the CRDs a live benchmark needs are absent."""
    why = missing() or ("" if not kube_scheduler or KUBE_SCHEDULER.exists()
                        else f"kube-scheduler not built at {KUBE_SCHEDULER}")
    if why:
        raise RuntimeError(f"{command} needs the provisioned binaries: {why}")
    if not CRDS.is_dir():
        raise RuntimeError(f"{command} needs the CRDs at {CRDS} (run it from a source checkout)")


MAX_NODES, MAX_PODS = 50_000, 500_000


def check_live_sizes(nodes: int, pods: int, qps: float, burst: int, workers: int) -> None:
    """A ValueError naming the option when a size is out of range (a throughput needs two binds; more than
    this would hold the API server's memory hostage)."""
    for option, value, low, high in (("--nodes", nodes, 1, MAX_NODES), ("--pods", pods, 2, MAX_PODS),
                                     ("--burst", burst, 1, 100_000), ("--workers", workers, 1, 256)):
        if not low <= value <= high:
            raise ValueError(f"bench live: {option} must be between {low:,} and {high:,}, not {value}")
    if not (qps > 0 and math.isfinite(qps)):
        raise ValueError(f"bench live: --qps must be a positive number, not {qps}")


def run_live_benchmark(nodes: int, pods: int, *, qps: float = 1000.0, burst: int = 1000,
                       workers: int = 16) -> dict[str, Any]:
    check_provisioned("bench live", kube_scheduler=True)
    with tempfile.TemporaryDirectory(prefix="hetsched-live-") as tmp:
        directory = Path(tmp)
        with real_apiserver(directory) as api:
            client = KubeClient.from_token(api.url, api.token, ca_file=api.ca)
            started = time.monotonic()
            setup_cluster(client, nodes)
            raw = _raw(api, client, nodes, pods, qps, burst, workers, directory)
            clear(client, "raw", pods)
            kube = _kube_scheduler(api, client, pods, qps, burst, directory)
            clear(client, "kube", pods)
            het = _hetsched(api, client, pods, qps, burst, workers, directory)
            with contextlib.suppress(Exception):
                client.api.close()  # type: ignore[no-untyped-call]
    return {"nodes": nodes, "pods": pods, "qps": qps, "burst": burst, "bindWorkers": workers,
            "hetsched_pods_per_second": round(het.rate, 1), "kube_scheduler_pods_per_second": round(kube.rate, 1),
            "raw_binds_per_second": round(raw, 1), "hetsched_vs_kube_scheduler": round(het.rate / kube.rate, 3),
            "hetsched_vs_raw_binder": round(het.rate / raw, 3),
            "first_bind_seconds": {"hetsched": het.first_bind_seconds, "kube_scheduler": kube.first_bind_seconds},
            "rss_at_first_bind_mb": {"hetsched": het.rss_at_first_bind_mb, "kube_scheduler": kube.rss_at_first_bind_mb},
            "peak_rss_mb": {"hetsched": het.peak_rss_mb, "kube_scheduler": kube.peak_rss_mb},
            "seconds": round(time.monotonic() - started, 1)}


if __name__ == "__main__":  # the raw binder's process: URL TOKEN_FILE CA NODES PODS QPS BURST WORKERS
    url, token_file, ca, node_count, pod_count, rate, bursts, threads = sys.argv[1:9]
    raw_bind(url, Path(token_file).read_text().strip(), ca, int(node_count), int(pod_count), float(rate), int(bursts),
             int(threads))
