"""Peak memory of reading the largest file hetsched accepts (issue 29: bounded memory for a large file).

Writes two files just under the read limit (``hetsched.api.yamlsafe.MAX_BYTES``) into a temporary folder —
one-pod Volcano Jobs as ``hetsched validate`` reads a workload, and a ``kubectl get nodes -o yaml`` List of
Nodes as ``--cluster`` reads a dump — reads each in a fresh process and prints each process's peak RSS
(``ru_maxrss``). A file one byte over the limit is refused before it is read (shown too).

    .venv/bin/python bench/input_memory.py
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

from hetsched.api.yamlsafe import MAX_BYTES

JOB = """apiVersion: batch.volcano.sh/v1alpha1
kind: Job
metadata: {{name: j{i}}}
spec:
  tasks:
  - name: w
    replicas: 1
    template:
      spec:
        containers: [{{name: c, image: busybox}}]
---
"""


def node(i: int) -> dict[str, object]:
    """A Node as kubectl prints it, with the status the kubelet reports (conditions, nodeInfo, images)."""
    name = f"node-{i:05d}"
    return {
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux",
                                              "node.kubernetes.io/instance-type": "ascend-910b"},
                     "annotations": {"node.alpha.kubernetes.io/ttl": "0"}},
        "spec": {"taints": [{"key": "huawei.com/npu", "effect": "NoSchedule"}]},
        "status": {
            "capacity": {"cpu": "192", "memory": "1536Gi", "pods": "110", "huawei.com/Ascend910": "8"},
            "allocatable": {"cpu": "190", "memory": "1500Gi", "pods": "110", "huawei.com/Ascend910": "8"},
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                            "message": "kubelet is posting ready status"}],
            "nodeInfo": {"kubeletVersion": "v1.30.2", "osImage": "EulerOS", "machineID": "m" * 32,
                         "containerRuntimeVersion": "containerd://1.7.1", "architecture": "amd64"},
            "images": [{"names": [f"registry.local/team/image-{k}:v1"], "sizeBytes": 123456789}
                       for k in range(10)]}}


def write_jobs(path: Path) -> int:
    count = 0
    with path.open("w", encoding="utf-8") as handle:
        size = 0
        while True:
            text = JOB.format(i=count)
            if size + len(text) > MAX_BYTES:
                return count
            handle.write(text)
            size += len(text)
            count += 1


def write_nodes(path: Path) -> int:
    per_node = len(yaml.safe_dump({"items": [node(0)]})) + 64
    count = MAX_BYTES // per_node
    text = yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": [node(i) for i in range(count)]})
    while len(text.encode()) > MAX_BYTES:
        count -= count // 50 + 1
        text = yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": [node(i) for i in range(count)]})
    path.write_text(text, encoding="utf-8")
    return count


READ = {
    "jobs": "from hetsched.api.manifest import load_files; print(len(load_files([{path!r}])), end=' ')",
    "nodes": "from pathlib import Path; from hetsched.cluster.dump import load_dump; "
             "print(len(load_dump(Path({path!r})).nodes), end=' ')",
}


def peak(kind: str, path: Path) -> str:
    code = READ[kind].format(path=str(path)) + \
        "; import resource; print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600, check=False)
    return done.stdout.strip() or done.stderr.strip().splitlines()[-1]


def main() -> None:
    with tempfile.TemporaryDirectory() as folder:
        jobs, nodes = Path(folder) / "jobs.yaml", Path(folder) / "nodes.yaml"
        print(f"read limit: {MAX_BYTES:,} bytes")
        count = write_jobs(jobs)
        objects, rss = peak("jobs", jobs).split()
        print(f"workload of {count:,} one-pod Jobs, {jobs.stat().st_size:,} bytes: {objects} objects, "
              f"peak RSS {rss} MB")
        count = write_nodes(nodes)
        objects, rss = peak("nodes", nodes).split()
        print(f"node List of {count:,} Nodes, {nodes.stat().st_size:,} bytes: {objects} nodes, peak RSS {rss} MB")
        with jobs.open("a", encoding="utf-8") as handle:
            handle.write("#" * (MAX_BYTES + 1 - jobs.stat().st_size))
        print(f"one byte over the limit: {peak('jobs', jobs)}")


if __name__ == "__main__":
    main()
