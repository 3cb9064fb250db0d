"""A real kube-apiserver and etcd (not a mock), for the integration tests and the live benchmark: started
from the binaries ``scripts/provision-kube.sh`` builds and caches (the recipe in
../shared/reference/real-kube-apiserver.md), on free loopback ports, stopped by PID when done.

Version-aware: the flags and API versions the helpers use are chosen from the version the binaries and the
server report (:func:`binary_version`, :func:`server_version`, :func:`policy_version`), so the same helpers
run the 1.20 components provisioned here and current releases (1.29+: no ``policy/v1beta1``, kubelet and
controller-manager flags removed; ``tests/realnodes.py`` chooses those).

Who calls it: ``tests/test_kubernetes.py`` (which skips, saying why, when the binaries are not there;
``.ci/run`` provisions them) and ``hetsched bench live``."""

from __future__ import annotations

import functools
import os
import random
import re
import shutil
import socket
import ssl
import subprocess
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

CACHE = Path(os.environ.get("HETSCHED_KUBE_CACHE", "/var/cache/hetsched-kube"))
APISERVER = CACHE / "bin" / "kube-apiserver"
KUBE_SCHEDULER = CACHE / "bin" / "kube-scheduler"
ADMIN_TOKEN = "hetsched-admin-token"


@functools.cache
def binary_version(path: Path) -> tuple[int, int]:
    """(major, minor) a Kubernetes binary says it is (``--version``: ``Kubernetes v1.20.2``); a binary that
    does not say is an error naming it (a helper never guesses the flags to give it)."""
    said = subprocess.run([str(path), "--version"], capture_output=True, text=True, timeout=60, check=False)
    found = re.search(r"v(\d+)\.(\d+)", said.stdout + said.stderr)
    if found is None:
        raise RuntimeError(f"{path} --version said no version: {(said.stdout + said.stderr)[:200]!r}")
    return int(found.group(1)), int(found.group(2))


def server_version(version: dict[str, object]) -> tuple[int, int]:
    """(major, minor) from an API server's ``/version`` answer (``minor`` may end in ``+``)."""
    return int(str(version["major"]).rstrip("+")), int(str(version["minor"]).rstrip("+"))


def policy_version(version: tuple[int, int]) -> str:
    """The PodDisruptionBudget API a server of ``version`` serves: policy/v1 from 1.21 (v1beta1 went in 1.25)."""
    return "policy/v1" if version >= (1, 21) else "policy/v1beta1"


def missing() -> str:
    """Why the real apiserver cannot run here ("" when it can)."""
    if not APISERVER.exists():
        return f"kube-apiserver not built at {APISERVER} (run scripts/provision-kube.sh, as .ci/run does)"
    if shutil.which("etcd") is None:
        return "etcd not installed (scripts/provision-kube.sh installs Debian's etcd-server)"
    return ""


LISTEN_PORTS = (20000, 32767)
"""Where listeners for the test servers are placed: below the kernel's ephemeral range (32768–60999 by
default), from which every outgoing connection takes its local port — a port picked from that range (bind to
0, close) can be taken by kube-apiserver's own connections to etcd before it listens there ("address
already in use", seen under load)."""
_handed_out: set[int] = set()


def _free_port() -> int:
    """A loopback port free now, outside the ephemeral range, never handed out before by this process."""
    for _ in range(1000):
        port = random.randint(*LISTEN_PORTS)
        if port in _handed_out:
            continue
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                continue
        _handed_out.add(port)
        return port
    raise RuntimeError(f"no free loopback port in {LISTEN_PORTS[0]}–{LISTEN_PORTS[1]}")


@dataclass
class ApiServer:
    url: str
    token: str
    directory: Path
    restart: Callable[[], None]
    """Stop kube-apiserver and start it again on the same port and etcd (an API server outage)."""

    @property
    def ca(self) -> str:
        """The self-signed serving certificate the apiserver wrote (clients verify against it)."""
        return str(self.directory / "certs" / "apiserver.crt")


def stop_process(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM, then SIGKILL after 5 s of graceful shutdown; always reaped."""
    process.terminate()
    try:
        process.wait(timeout=5)
    except subprocess.TimeoutExpired:  # a slow graceful shutdown: end it
        process.kill()
        process.wait()


def _wait_ready(url: str, process: subprocess.Popen[bytes], log: Path) -> None:
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    deadline = time.monotonic() + 90
    while True:
        if process.poll() is not None:
            raise RuntimeError(f"kube-apiserver exited: {log.read_text()[-2000:]}")
        try:
            request = urllib.request.Request(f"{url}/readyz", headers={"Authorization": f"Bearer {ADMIN_TOKEN}"})
            with urllib.request.urlopen(request, context=context, timeout=2) as answer:
                if answer.status == 200:
                    return
        except OSError:
            pass
        if time.monotonic() > deadline:
            raise RuntimeError("kube-apiserver not ready within 90 s")
        time.sleep(0.5)


@contextmanager
def real_apiserver(directory: Path, users: dict[str, str] | None = None, *,
                   nodes: bool = False, privileged: bool = False,
                   egress_socket: Path | None = None) -> Iterator[ApiServer]:
    """etcd + kube-apiserver on free loopback ports; ``users``: token → user name (no groups). ``nodes``: for
    a cluster with kubelets (tests/realnodes.py) — pods get ServiceAccount tokens (kube-controller-manager
    makes them, with ``sa.key``) and may be privileged (the node agents). ``privileged`` alone: privileged
    pod templates are accepted (an install's node-agent DaemonSets), without ServiceAccount tokens.
    ``egress_socket``: every connection the API server makes into the cluster (a webhook's Service, an
    aggregated API) goes as an HTTP CONNECT through this Unix socket (its egress selector, as with
    Konnectivity) — never straight to a Service's cluster IP, which nothing on this machine serves."""
    etcd_port, peer_port, api_port = _free_port(), _free_port(), _free_port()
    tokens = [f"{ADMIN_TOKEN},admin,admin,system:masters"]
    tokens += [f"{token},{user},{user}" for token, user in (users or {}).items()]
    (directory / "tokens.csv").write_text("\n".join(tokens) + "\n")
    subprocess.run(["openssl", "genrsa", "-out", str(directory / "sa.key"), "2048"], check=True,
                   capture_output=True)
    log_path = directory / "apiserver.log"
    logs = (directory / "etcd.log").open("w"), log_path.open("w")
    etcd = subprocess.Popen(["etcd", "--data-dir", str(directory / "etcd"),
                             "--listen-client-urls", f"http://127.0.0.1:{etcd_port}",
                             "--advertise-client-urls", f"http://127.0.0.1:{etcd_port}",
                             "--listen-peer-urls", f"http://127.0.0.1:{peer_port}"], stdout=logs[0], stderr=logs[0])
    command = [
        str(APISERVER), f"--etcd-servers=http://127.0.0.1:{etcd_port}", "--bind-address=127.0.0.1",
        f"--secure-port={api_port}", "--service-account-issuer=https://kubernetes.default.svc",
        f"--service-account-key-file={directory / 'sa.key'}",
        f"--service-account-signing-key-file={directory / 'sa.key'}",
        f"--token-auth-file={directory / 'tokens.csv'}", "--authorization-mode=RBAC",
        "--service-cluster-ip-range=10.0.0.0/24", f"--cert-dir={directory / 'certs'}",
        *(["--allow-privileged=true"] if nodes or privileged else []),
        *([] if nodes else ["--disable-admission-plugins=ServiceAccount"])]
    if egress_socket is not None:
        egress = directory / "egress.yaml"
        egress.write_text(
            "apiVersion: apiserver.k8s.io/v1beta1\nkind: EgressSelectorConfiguration\negressSelections:\n"
            "- name: cluster\n  connection:\n    proxyProtocol: HTTPConnect\n"
            f"    transport:\n      uds:\n        udsName: {egress_socket}\n")
        command.append(f"--egress-selector-config-file={egress}")
    url = f"https://127.0.0.1:{api_port}"
    running = [subprocess.Popen(command, stdout=logs[1], stderr=logs[1])]

    def restart() -> None:
        stop_process(running[0])
        running[0] = subprocess.Popen(command, stdout=logs[1], stderr=logs[1])
        _wait_ready(url, running[0], log_path)

    try:
        _wait_ready(url, running[0], log_path)
        yield ApiServer(url, ADMIN_TOKEN, directory, restart)
    finally:
        stop_process(running[0])
        stop_process(etcd)
        for log in logs:
            log.close()
