"""An installed Deployment's container run as a local process, as a kubelet would run it, for tests against a
real kube-apiserver that has no kubelets (tests/test_docs_commands.py).

- :func:`run_deployment` reads the Deployment from the API server and starts its container's command with its
  args and env, the token of its own ServiceAccount (the TokenRequest API, as kubelet's projected token), its
  ConfigMap volumes written to local folders at their mount paths' place, and loopback addresses where the pod
  would listen on all of them (tests listen on 127.0.0.1 only).
- :class:`EgressProxy` is the cluster network as the API server sees it: kube-apiserver's egress selector sends
  each connection to a Service (a webhook) as an HTTP CONNECT to this Unix socket, and the proxy joins the
  Service's cluster IP and port to the local process that serves it. A connection to anything else is
  refused: nothing leaves the machine.
"""

from __future__ import annotations

import contextlib
import os
import re
import select
import socket
import subprocess
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hetsched.cluster.kubernetes import KubeClient

HETSCHED = Path(__file__).resolve().parents[1] / ".venv" / "bin" / "hetsched"


@dataclass
class LocalPod:
    process: subprocess.Popen[bytes]
    log: Path
    port: int | None = None
    """The port that stands for the container's ``--port`` (a webhook's), if it has one."""


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def run_deployment(admin: KubeClient, server: str, ca: str, namespace: str, name: str, work: Path,
                   env: dict[str, str]) -> LocalPod:
    """Start Deployment ``namespace/name``'s first container here (see the module's docstring)."""
    deployment = admin.request("GET", f"/apis/apps/v1/namespaces/{namespace}/deployments/{name}")
    spec = deployment["spec"]["template"]["spec"]
    container = spec["containers"][0]
    folder = work / name
    folder.mkdir(parents=True, exist_ok=True)
    account = spec.get("serviceAccountName") or "default"
    token = admin.request("POST", f"/api/v1/namespaces/{namespace}/serviceaccounts/{account}/token", body={
        "apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {"expirationSeconds": 3600}})
    (folder / "token").write_text(token["status"]["token"])
    mounts: dict[str, Path] = {}
    volumes = {volume["name"]: volume for volume in spec.get("volumes") or []}
    for mount in container.get("volumeMounts") or []:
        source = volumes[mount["name"]].get("configMap")
        assert source, f"{name}: only ConfigMap volumes are run here, not {volumes[mount['name']]}"
        data = admin.request("GET", f"/api/v1/namespaces/{namespace}/configmaps/{source['name']}").get("data") or {}
        local = folder / mount["name"]
        local.mkdir(exist_ok=True)
        for key, text in data.items():
            (local / key).write_text(text)
        mounts[mount["mountPath"].rstrip("/")] = local
    variables = dict(env)
    for entry in container.get("env") or []:
        if "value" in entry:
            variables[entry["name"]] = entry["value"]
        elif (entry.get("valueFrom") or {}).get("fieldRef", {}).get("fieldPath") == "metadata.name":
            variables[entry["name"]] = f"{name}-local"
    # the pod's own identity and address, here: its token, the API server by URL, no listener on 0.0.0.0
    variables.update({"HETSCHED_SERVER": server, "HETSCHED_TOKEN_FILE": str(folder / "token"), "HETSCHED_CA_FILE": ca,
                      "HETSCHED_METRICS_ADDRESS": "off", "HETSCHED_HEALTH_ADDRESS": f"127.0.0.1:{free_port()}"})
    port = None
    args = []
    for arg in [*(container.get("command") or []), *(container.get("args") or [])]:
        for path, local in mounts.items():
            arg = arg.replace(path + "/", f"{local}/")
        if arg.startswith("--host="):
            arg = "--host=127.0.0.1"
        elif arg.startswith("--port="):
            port = free_port()
            arg = f"--port={port}"
        args.append(arg)
    log = folder / "log"
    with log.open("ab") as out:  # the child keeps its own descriptor
        process = subprocess.Popen([str(HETSCHED), *args], env=variables, stdout=out, stderr=out,
                                   stdin=subprocess.DEVNULL, cwd=folder)
    return LocalPod(process, log, port)


@dataclass
class EgressProxy:
    """HTTP CONNECT on a Unix socket; ``routes``: (cluster IP, port) → a local port on 127.0.0.1."""

    path: Path
    routes: dict[tuple[str, int], int] = field(default_factory=dict)
    refused: list[str] = field(default_factory=list)
    _listener: socket.socket | None = None
    _stop: threading.Event = field(default_factory=threading.Event)
    _threads: list[threading.Thread] = field(default_factory=list)

    def start(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)
        self._listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._listener.bind(str(self.path))
        self._listener.listen(64)
        self._listener.settimeout(0.2)
        self._spawn(self._accept)

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(5)
        if self._listener is not None:
            self._listener.close()

    def _spawn(self, target: Any, *args: Any) -> None:
        thread = threading.Thread(target=target, args=args, daemon=True)
        self._threads.append(thread)
        thread.start()

    def _accept(self) -> None:
        assert self._listener is not None
        while not self._stop.is_set():
            try:
                client, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            self._spawn(self._serve, client)

    def _serve(self, client: socket.socket) -> None:
        with client:
            client.settimeout(10)
            head = b""
            while b"\r\n\r\n" not in head and len(head) < 8192:
                chunk = client.recv(1024)
                if not chunk:
                    return
                head += chunk
            found = re.match(rb"CONNECT \[?([^\]\s]+?)\]?:(\d+) HTTP/1\.[01]\r\n", head)
            local = self.routes.get((found.group(1).decode(), int(found.group(2)))) if found else None
            if local is None:
                self.refused.append(head.split(b"\r\n")[0].decode(errors="replace"))
                client.sendall(b"HTTP/1.1 503 Service Unavailable\r\n\r\n")
                return
            try:
                upstream = socket.create_connection(("127.0.0.1", local), timeout=10)
            except OSError:
                client.sendall(b"HTTP/1.1 503 Service Unavailable\r\n\r\n")
                return
            with upstream:
                client.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
                self._relay(client, upstream)

    def _relay(self, one: socket.socket, other: socket.socket) -> None:
        peers = {one: other, other: one}
        while not self._stop.is_set():
            ready, _, _ = select.select(list(peers), [], [], 0.2)
            for source in ready:
                try:
                    data = source.recv(65536)
                except OSError:
                    return
                if not data:
                    return
                peers[source].sendall(data)
