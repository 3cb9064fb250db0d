"""Peak memory of the admission webhook under many large reviews at once (issue 29: within its pod's limit).

Starts the webhook in a child process on loopback (its own TLS), sends ``--clients`` concurrent reviews of a
Job about ``--size`` MB (a list of small env entries: the worst case, many objects per byte), and reads the
child's peak RSS (VmHWM) after all are answered. Runs it twice in one go: with the shipped body budget
(``BODY_BUDGET``) and with no budget (what the webhook did before), so the two figures are comparable.
Bounded: a fixed number of requests, every one with a timeout; the child is stopped by its PID.

    .venv/bin/python bench/webhook_memory.py [--clients 40] [--size 7]
"""

from __future__ import annotations

import argparse
import http.client
import json
import ssl
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

from hetsched.cluster.webhook import BODY_BUDGET, MAX_BODY
from hetsched.cluster.webhook_tls import generate

CHILD = """
import sys, threading
from hetsched.cluster.webhook import WebhookServer
server = WebhookServer(sys.argv[1], sys.argv[2], port=0, body_budget=int(sys.argv[3]))
server.start()
print(server.port, flush=True)
sys.stdin.read()
server.stop()
"""


def review(size_mb: float) -> bytes:
    entries = int(size_mb * 2**20 / 40)
    env = [{"name": f"E{i}", "value": "v"} for i in range(entries)]
    job = {"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job", "metadata": {"name": "big"},
           "spec": {"tasks": [{"name": "w", "replicas": 1, "template": {"spec": {"containers": [
               {"name": "w", "image": "x", "env": env}]}}}]}}
    body = json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                       "request": {"uid": "u", "operation": "CREATE", "kind": {"kind": "Job"}, "object": job}})
    return body.encode()


def peak_rss(budget: int, clients: int, body: bytes, folder: Path) -> tuple[float, list[int]]:
    tls = generate(["127.0.0.1"])
    (folder / "tls.crt").write_bytes(tls.cert)
    (folder / "tls.key").write_bytes(tls.key)
    child = subprocess.Popen([sys.executable, "-c", CHILD, str(folder / "tls.crt"), str(folder / "tls.key"),
                              str(budget)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None
        port = int(child.stdout.readline())
        context = ssl.create_default_context(cadata=tls.ca.decode())
        statuses: list[int] = []

        def send() -> None:
            connection = http.client.HTTPSConnection("127.0.0.1", port, context=context, timeout=120)
            try:
                connection.request("POST", "/validate", body=body, headers={"Content-Type": "application/json"})
                response = connection.getresponse()
                response.read()
                statuses.append(response.status)
            except (OSError, http.client.HTTPException):
                statuses.append(0)
            finally:
                connection.close()

        threads = [threading.Thread(target=send) for _ in range(clients)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(300)
        status = Path(f"/proc/{child.pid}/status").read_text()
        peak = next(int(line.split()[1]) for line in status.splitlines() if line.startswith("VmHWM:"))
        return peak / 1024, statuses
    finally:
        child.communicate("", timeout=30)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=40)
    parser.add_argument("--size", type=float, default=7.0, help="MB per review (at most MAX_BODY)")
    args = parser.parse_args()
    body = review(args.size)
    assert len(body) <= MAX_BODY, f"a review of {len(body):,} bytes is over MAX_BODY"
    print(f"{args.clients} concurrent reviews of {len(body) / 2**20:.1f} MiB each")
    with tempfile.TemporaryDirectory() as folder:
        for name, budget in (("body budget 24 MiB (shipped)", BODY_BUDGET), ("no budget (before)", 2**40)):
            peak, statuses = peak_rss(budget, args.clients, body, Path(folder))
            answered = sum(1 for s in statuses if s == 200)
            print(f"{name}: peak RSS {peak:.0f} MiB, {answered}/{args.clients} answered 200, "
                  f"others {sorted(s for s in statuses if s != 200)}")


if __name__ == "__main__":
    main()
