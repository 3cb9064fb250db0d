"""A real Kubernetes cluster on this one machine, for the real-node tests (tests/test_realnodes.py): etcd,
kube-apiserver (ServiceAccount tokens, privileged pods allowed), kube-controller-manager, kube-scheduler
(for the Deployments' and DaemonSets' own pods) and nodes — each a real kubelet with its own containerd —
following the verified recipe in ../shared/reference/real-nodes.md.

Each node lives in a mount namespace of its own (a holder process made with ``unshare --mount``), where
its directories are bound over the paths kubelet and the manifests use: ``/var/lib/kubelet`` (the kubelet's
root, its ``device-plugins/`` socket folder — kubelet 1.20 hard-codes it — and ``config.yaml``),
``/var/log/pods`` and ``/var/log/containers`` (what containers print) and ``/etc/hetsched/fake`` (the fake
vendor's chips file and device files). containerd and kubelet run inside it (``nsenter``), so a hostPath
in a pod resolves to that node's directory. Pods use the host network (nothing listens beyond loopback);
the CNI configuration is loopback only. Images come from scripts/build-image.sh, imported into each
containerd (no registry).

Stopping: kubelet, then containerd, then every process left in the node's mount namespace and the
containers' processes (by PID, SIGKILL: a container's PID 1 ignores SIGTERM), then the holder — the
namespace and every mount in it go with it. Only processes this module started (and their children) are
stopped.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from hetsched.benchmark.apiserver import (
    ADMIN_TOKEN,
    CACHE,
    ApiServer,
    _free_port,
    binary_version,
    real_apiserver,
    stop_process,
)
from hetsched.cluster.kubernetes import KubeClient

BIN = CACHE / "bin"
IMAGES = Path(os.environ.get("HETSCHED_IMAGE_CACHE", "/var/cache/hetsched-image"))
PAUSE = "docker.io/local/busybox:pause"
BUSYBOX = "docker.io/local/busybox:1.35"
BOUND = {"varlib": "/var/lib/kubelet", "pods": "/var/log/pods", "containers": "/var/log/containers",
         "fake": "/etc/hetsched/fake"}
"""Node directory → the path it is bound over inside the node's mount namespace."""


def image_path(name: str) -> Path:
    """The OCI archive scripts/build-image.sh NAME writes (``hetsched`` or ``hetsched-node``)."""
    import importlib.metadata

    return IMAGES / f"{name}-{importlib.metadata.version('hetsched')}.oci.tar"



def missing() -> str:
    """Why real nodes cannot run here ("" when they can)."""
    if os.geteuid() != 0:
        return "real nodes need root (mount namespaces, containerd)"
    for binary in ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubelet"):
        if not (BIN / binary).exists():
            return f"{binary} not built at {BIN} (run scripts/provision-kube.sh, as .ci/run does)"
    for tool in ("etcd", "containerd", "runc", "ctr", "unshare", "nsenter"):
        if shutil.which(tool) is None:
            return f"{tool} not installed (scripts/provision-kube.sh installs it)"
    for image in (IMAGES / "busybox.oci.tar", image_path("hetsched"), image_path("hetsched-node")):
        if not image.exists():
            return (f"image {image} not built (run scripts/build-image.sh hetsched, hetsched-node and test-images, "
                    "as .ci/run does)")
    return ""


def kubeconfig(api: ApiServer, path: Path) -> Path:
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "test",
        "clusters": [{"name": "test", "cluster": {"server": api.url, "certificate-authority": api.ca}}],
        "users": [{"name": "admin", "user": {"token": ADMIN_TOKEN}}],
        "contexts": [{"name": "test", "context": {"cluster": "test", "user": "admin"}}]}))
    return path


@dataclass
class RealNode:
    name: str
    directory: Path
    labels: dict[str, str]
    kubeconfig: Path
    port: int = field(default_factory=_free_port)
    healthz: int = field(default_factory=_free_port)
    holder: subprocess.Popen[bytes] | None = None
    containerd: subprocess.Popen[bytes] | None = None
    kubelet: subprocess.Popen[bytes] | None = None

    def path(self, bound: str) -> Path:
        """The host path of a path inside the node (``/var/log/pods/…`` → this node's folder)."""
        for folder, target in BOUND.items():
            if bound == target or bound.startswith(target + "/"):
                return self.directory / folder / bound[len(target):].lstrip("/")
        raise ValueError(f"{bound} is not inside {self.name}'s bound folders")

    @property
    def socket(self) -> Path:
        return self.directory / "ctr" / "containerd.sock"

    def _enter(self, command: list[str], log: str) -> subprocess.Popen[bytes]:
        assert self.holder is not None
        with (self.directory / log).open("ab") as output:
            return subprocess.Popen(["nsenter", f"--target={self.holder.pid}", "--mount", "--", *command],
                                    stdout=output, stderr=output)

    def start(self) -> None:
        for folder in BOUND:
            (self.directory / folder).mkdir(parents=True, exist_ok=True)
        (self.directory / "varlib" / "device-plugins").mkdir(exist_ok=True)
        for target in BOUND.values():
            Path(target).mkdir(parents=True, exist_ok=True)  # a mount point on the host (left, empty)
        binds = " && ".join(f"mount --bind {self.directory / folder} {target}" for folder, target in BOUND.items())
        self.holder = subprocess.Popen(["unshare", "--mount", "--propagation", "private", "sh", "-c",
                                        f"{binds} && echo ready && exec sleep 2147483647"], stdout=subprocess.PIPE)
        assert self.holder.stdout is not None
        ready = self.holder.stdout.readline()
        self.holder.stdout.close()
        assert ready == b"ready\n", f"{self.name}: binding its folders failed"
        self._write_configs()
        self.containerd = self._enter(["containerd", "--config", str(self.directory / "containerd.toml")],
                                      "containerd.log")
        deadline = time.monotonic() + 60
        while not self.socket.exists():
            assert self.containerd.poll() is None, (self.directory / "containerd.log").read_text()[-3000:]
            assert time.monotonic() < deadline, "containerd did not start within 60 s"
            time.sleep(0.1)
        for name, archive in (("docker.io/local/busybox", IMAGES / "busybox.oci.tar"),
                              ("docker.io/library/hetsched", image_path("hetsched")),
                              ("docker.io/library/hetsched-node", image_path("hetsched-node"))):
            subprocess.run(["ctr", "--address", str(self.socket), "-n", "k8s.io", "images", "import",
                            "--base-name", name, str(archive)], check=True, capture_output=True, timeout=300)
        self.start_kubelet()

    def _write_configs(self) -> None:
        ctr = self.directory / "ctr"
        (self.directory / "cni").mkdir(exist_ok=True)
        (self.directory / "cni" / "10-loopback.conflist").write_text(json.dumps(
            {"cniVersion": "0.4.0", "name": "loopback-only", "plugins": [{"type": "loopback"}]}))
        (self.directory / "containerd.toml").write_text(f"""version = 2
root = "{ctr / 'root'}"
state = "{ctr / 'state'}"
[grpc]
  address = "{self.socket}"
[ttrpc]
  address = "{ctr / 'ttrpc.sock'}"
[debug]
  address = ""
[metrics]
  address = ""
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{PAUSE}"
  restrict_oom_score_adj = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "{self.directory / 'cni'}"
""")
        newer = kubelet_config_for(binary_version(BIN / "kubelet"))
        (self.directory / "varlib" / "config.yaml").write_text(yaml.safe_dump({**newer,
            "apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration",
            "address": "127.0.0.1", "port": self.port, "healthzPort": self.healthz, "readOnlyPort": 0,
            "healthzBindAddress": "127.0.0.1", "cgroupDriver": "cgroupfs", "cgroupsPerQOS": False,
            "enforceNodeAllocatable": [], "failSwapOn": False,
            "authentication": {"anonymous": {"enabled": True}, "webhook": {"enabled": False}},
            "authorization": {"mode": "AlwaysAllow"},
            "evictionHard": {"memory.available": "1Mi", "nodefs.available": "0%", "imagefs.available": "0%"},
            "imageGCHighThresholdPercent": 100, "imageGCLowThresholdPercent": 99,
            "nodeStatusUpdateFrequency": "2s", "syncFrequency": "5s", "fileCheckFrequency": "5s",
            "topologyManagerPolicy": "none", "cpuManagerPolicy": "none"}))

    def start_kubelet(self) -> None:
        labels = ",".join(f"{k}={v}" for k, v in self.labels.items())
        older = kubelet_flags_for(binary_version(BIN / "kubelet"))
        self.kubelet = self._enter([
            str(BIN / "kubelet"), f"--kubeconfig={self.kubeconfig}", "--config=/var/lib/kubelet/config.yaml",
            *older, f"--container-runtime-endpoint=unix://{self.socket}", "--root-dir=/var/lib/kubelet",
            f"--hostname-override={self.name}", f"--node-labels={labels}", "--v=1"], "kubelet.log")

    def stop_kubelet(self) -> None:
        if self.kubelet is not None:
            stop_process(self.kubelet)
            self.kubelet = None

    def stop(self) -> None:
        self.stop_kubelet()
        if self.containerd is not None:
            stop_process(self.containerd)
        if self.holder is None:
            return
        namespace = os.readlink(f"/proc/{self.holder.pid}/ns/mnt")
        for pid in _in_namespace_and_below(namespace, keep=self.holder.pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        self.holder.kill()
        self.holder.wait()


def _in_namespace_and_below(namespace: str, keep: int) -> list[int]:
    """Every process in the mount namespace ``namespace`` (the shims, anything nsenter started) and every
    descendant of one (the containers, in namespaces of their own), except ``keep``."""
    parents: dict[int, int] = {}
    inside: set[int] = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        pid = int(entry.name)
        try:
            parents[pid] = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            if os.readlink(entry / "ns" / "mnt") == namespace:
                inside.add(pid)
        except (OSError, ValueError, IndexError):
            continue
    found = set(inside)
    grew = True
    while grew:
        grew = False
        for pid, parent in parents.items():
            if parent in found and pid not in found:
                found.add(pid)
                grew = True
    found.discard(keep)
    return sorted(found)


@dataclass
class RealCluster:
    api: ApiServer
    client: KubeClient
    nodes: dict[str, RealNode]
    kubeconfig: Path
    directory: Path
    control: list[subprocess.Popen[bytes]]

    def logs(self, namespace: str, contains: str = "", tail: int = 3000) -> str:
        """The end of what the containers of matching pods printed (kubelet's log files on every node)."""
        found = []
        for node in self.nodes.values():
            pattern = f"{namespace}_*{contains}*" if contains else f"{namespace}_*"  # never "**" (not a glob)
            for folder in sorted(node.path("/var/log/pods").glob(pattern)):
                for log in sorted(folder.glob("*/*.log")):
                    found.append(f"== {node.name} {folder.name} {log.parent.name}/{log.name}\n"
                                 f"{log.read_text(errors='replace')[-tail:]}")
        return "\n".join(found) or f"(no logs of {namespace} pods matching {contains!r})"

    def node_ready(self, name: str) -> bool:
        try:
            node = self.client.request("GET", f"/api/v1/nodes/{name}")
        except Exception:
            return False
        return any(c.get("type") == "Ready" and c.get("status") == "True"
                   for c in node.get("status", {}).get("conditions", []))


def wait_for(what: str, check: Any, timeout: float, every: float = 0.5, explain: Any = None) -> Any:
    """Poll ``check()`` until it returns something true; fail naming ``what`` (and what ``explain()`` says)
    after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        result = check()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {timeout:.0f} s" + (f"\n{explain()}" if explain else ""))
        time.sleep(every)


def kubelet_flags_for(version: tuple[int, int]) -> list[str]:
    """Flags only kubelets before 1.27 take: --container-runtime (remote became the only runtime) and
    --pod-infra-container-image (the sandbox image is containerd's ``sandbox_image``, set in its config)."""
    return ["--container-runtime=remote", f"--pod-infra-container-image={PAUSE}"] if version < (1, 27) else []


def kubelet_config_for(version: tuple[int, int]) -> dict[str, Any]:
    """Configuration only newer kubelets need: from 1.31 a kubelet refuses a cgroup v1 host unless told."""
    return {"failCgroupV1": False} if version >= (1, 31) else {}


def controller_manager_flags_for(version: tuple[int, int]) -> list[str]:
    """Flags removed from kube-controller-manager: the insecure --port (1.24), --pod-eviction-timeout (1.27)."""
    return [*(["--port=0"] if version < (1, 24) else []), *(["--pod-eviction-timeout=5m"] if version < (1, 27) else [])]


def scheduler_flags_for(version: tuple[int, int]) -> list[str]:
    """kube-scheduler's insecure --port, gone in 1.24."""
    return ["--port=0"] if version < (1, 24) else []


@contextmanager
def real_cluster(directory: Path, nodes: dict[str, dict[str, str]]) -> Iterator[RealCluster]:
    """The control plane and one real node per entry of ``nodes`` (name → node labels), all Ready."""
    with real_apiserver(directory, nodes=True) as api:
        config = kubeconfig(api, directory / "admin.kubeconfig")
        control: list[subprocess.Popen[bytes]] = []
        started: dict[str, RealNode] = {}
        try:
            with (directory / "kube-controller-manager.log").open("ab") as log:
                older = controller_manager_flags_for(binary_version(BIN / "kube-controller-manager"))
                control.append(subprocess.Popen([
                    str(BIN / "kube-controller-manager"), f"--kubeconfig={config}", "--leader-elect=false",
                    f"--service-account-private-key-file={directory / 'sa.key'}", f"--root-ca-file={api.ca}",
                    "--use-service-account-credentials=false", "--bind-address=127.0.0.1", *older,
                    f"--secure-port={_free_port()}", "--controllers=*,-nodeipam,-cloud-node-lifecycle",
                    "--node-monitor-grace-period=20s"], stdout=log, stderr=log))
            with (directory / "kube-scheduler.log").open("ab") as log:
                older = scheduler_flags_for(binary_version(BIN / "kube-scheduler"))
                control.append(subprocess.Popen([
                    str(BIN / "kube-scheduler"), f"--kubeconfig={config}", "--leader-elect=false",
                    "--bind-address=127.0.0.1", *older, f"--secure-port={_free_port()}"], stdout=log, stderr=log))
            client = KubeClient.from_token(api.url, api.token, ca_file=api.ca)
            for name, labels in nodes.items():
                started[name] = RealNode(name, Path(directory / name), labels, config)
                started[name].directory.mkdir()
            with ThreadPoolExecutor(max_workers=len(started)) as pool:  # image imports take a while each
                list(pool.map(RealNode.start, started.values()))
            cluster = RealCluster(api, client, started, config, directory, control)
            for name in nodes:
                wait_for(f"node {name} Ready", lambda name=name: cluster.node_ready(name), 120)
            yield cluster
        finally:
            for node in started.values():
                node.stop()
            for process in control:
                stop_process(process)
