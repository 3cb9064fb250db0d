"""Where a running pod's bytes go: ``hetsched bench memory``, the breakdown behind the per-pod memory target.

Who calls it: the CLI (``hetsched bench memory``) and its test. It fills the latency benchmark's synthetic
cluster (``benchmark.latency``: the same nodes, jobs and first cycles) with ``pods`` bound pods and measures,
by walking the objects each part holds (``sys.getsizeof`` over ``gc.get_referents``, every object counted
once, shared ones — types, functions, modules — not at all), three parts:

- **store**: the embedded cluster's pods and PodGroups (the simulator's and the benchmarks' API server);
- **cache**: what the scheduler's cache holds beyond them (per-pod records, per-PodGroup counts, indexes);
- **informer**: the same pods as the ``hetsched scheduler`` process holds them against a real API server —
  each stored pod written out as the API returns it (with the fields its defaulting adds: tolerations,
  termination and DNS settings, QoS class), encoded and decoded as JSON (every string its own, as read from
  the wire), and read back as the informer does: ``from_api``, then its ``Interner`` (equal parts held once;
  the interner's table is counted here too).

The scheduler process holds informer + cache; the embedded scheduler store + cache. Figures are bytes per
bound pod, with the nodes' share left out (they are the same whatever the pods), and what reading a pod
costs (microseconds: the same pods read and kept with the interner, then without it).
"""

from __future__ import annotations

import gc
import json
import sys
import time
import types
from collections.abc import Iterable
from typing import Any

from hetsched.api.objects import Pod
from hetsched.benchmark.latency import MAX_NODES, MAX_PODS, LatencyRun, status_kb
from hetsched.cluster.interning import Interner
from hetsched.cluster.kubernetes import RESOURCES, from_api, to_api

_SHARED = (type, types.ModuleType, types.FunctionType, types.BuiltinFunctionType, types.CodeType,
           types.MethodType, types.WrapperDescriptorType, types.MethodDescriptorType)

SERVER_DEFAULTS: dict[str, Any] = {
    "spec": {"restartPolicy": "Always", "terminationGracePeriodSeconds": 30, "dnsPolicy": "ClusterFirst",
             "securityContext": {}, "enableServiceLinks": True, "preemptionPolicy": "PreemptLowerPriority",
             "tolerations": [{"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute",
                              "tolerationSeconds": 300},
                             {"key": "node.kubernetes.io/unreachable", "operator": "Exists",
                              "effect": "NoExecute", "tolerationSeconds": 300}]},
    "container": {"terminationMessagePath": "/dev/termination-log", "terminationMessagePolicy": "File",
                  "imagePullPolicy": "IfNotPresent", "image": "registry.local/train:1"},
    "status": {"qosClass": "Burstable"},
}
"""What kube-apiserver 1.20's defaulting and admission (DefaultTolerationSeconds) add to a pod this benchmark
creates, as read back from a real one."""


def deep_size(roots: Iterable[Any], seen: set[int]) -> int:
    """Bytes of everything reachable from ``roots`` not yet in ``seen`` (which it extends)."""
    total = 0
    stack = list(roots)
    while stack:
        obj = stack.pop()
        key = id(obj)
        if key in seen or isinstance(obj, _SHARED):
            continue
        seen.add(key)
        total += sys.getsizeof(obj)
        stack.extend(gc.get_referents(obj))
    return total


def as_served(pod: Pod) -> dict[str, Any]:
    """``pod`` as the API server returns it: its JSON with the server's defaults, decoded afresh."""
    data = to_api(pod, RESOURCES["Pod"])
    spec = data["spec"]
    for key, value in SERVER_DEFAULTS["spec"].items():
        if key == "tolerations":
            spec["tolerations"] = [*spec.get("tolerations", []), *value]
        else:
            spec.setdefault(key, value)
    for container in spec.get("containers", []):
        for key, value in SERVER_DEFAULTS["container"].items():
            container.setdefault(key, value)
    data.setdefault("status", {}).update(SERVER_DEFAULTS["status"])
    decoded: dict[str, Any] = json.loads(json.dumps(data))
    return decoded


def _read(stored: list[tuple[str, Pod]], interner: Interner | None) -> tuple[dict[str, Any], float]:
    """The informer's map of ``stored`` as served and read back (with ``interner`` when given), and the
    seconds the reading took (the serving, in batches of 1,000, not counted)."""
    informer: dict[str, Any] = {}
    seconds = 0.0
    for start in range(0, len(stored), 1000):
        batch = [(key, as_served(pod)) for key, pod in stored[start:start + 1000]]
        begun = time.perf_counter()
        for key, raw in batch:
            obj = from_api("Pod", raw)
            informer[key] = obj if interner is None else interner.share(obj)
        seconds += time.perf_counter() - begun
    return informer, seconds


def check_memory_sizes(nodes: int, pods: int) -> None:
    """A ValueError naming the option when a size is out of range."""
    if not 10 <= nodes <= MAX_NODES:
        raise ValueError(f"bench memory: --nodes must be between 10 and {MAX_NODES:,}, not {nodes}")
    if not 1 <= pods <= MAX_PODS:
        raise ValueError(f"bench memory: --pods must be between 1 and {MAX_PODS:,}, not {pods}")


def run_memory_benchmark(nodes: int, pods: int, seed: int = 1) -> dict[str, Any]:
    check_memory_sizes(nodes, pods)
    started = time.perf_counter()
    run = LatencyRun(nodes, pods, 1000.0, 0.001, seed)
    bound = run.fill()
    if bound == 0:
        raise ValueError("bench memory: no pod was bound; give more --nodes for the --pods")
    gc.collect()
    store = run.cluster._objects  # the embedded API server's own maps: what it holds
    seen: set[int] = set()
    deep_size([store["Node"], run.nodes], seen)  # the nodes' share: left out of every figure below
    store_bytes = deep_size([store["Pod"], store["PodGroup"]], seen)
    cache_bytes = deep_size([run.scheduler.cache], seen)
    interner = Interner()
    stored = [(key, pod) for key, pod in store["Pod"].items() if isinstance(pod, Pod)]
    informer, interned_seconds = _read(stored, interner)
    informer |= {f"podgroup:{key}": interner.share(from_api("PodGroup", json.loads(json.dumps(
        to_api(group, RESOURCES["PodGroup"]))))) for key, group in store["PodGroup"].items()}
    informer_bytes = deep_size([informer, interner], set())
    rss_kb = status_kb("VmRSS")
    del informer, interner
    gc.collect()
    _, plain_seconds = _read(stored, None)  # the same pods read and kept without the interner, for its cost
    per_pod = {name: round(value / bound) for name, value in
               (("store", store_bytes), ("cache", cache_bytes), ("informer", informer_bytes))}
    return {"nodes": nodes, "pods_bound": bound, "bytes_per_pod": per_pod,
            "scheduler_process_bytes_per_pod": per_pod["informer"] + per_pod["cache"],
            "embedded_bytes_per_pod": per_pod["store"] + per_pod["cache"],
            "read_us_per_pod": {"plain": round(plain_seconds / len(stored) * 1e6, 1),
                                "interned": round(interned_seconds / len(stored) * 1e6, 1)},
            "rss_mb": round(rss_kb / 1024, 1) if rss_kb is not None else None,
            "seconds": round(time.perf_counter() - started, 1)}
