"""Admission latency under load, with idle connections held open (issue 17): the webhook on loopback with
its own TLS, ``--idle`` TCP connections that connect and say nothing, and ``--clients`` concurrent clients
each sending ``--requests`` Job reviews over one keep-alive HTTPS connection (opened, with its TLS
handshake, before the clock starts: the API server reuses its connections). Prints p50/p90/p99/max in
milliseconds and the throughput; bounded (a fixed number of requests) and stops by itself.

    .venv/bin/python bench/webhook_load.py [--clients 100] [--idle 50] [--requests 20]
"""

from __future__ import annotations

import argparse
import http.client
import json
import socket
import ssl
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

from hetsched.cluster.webhook import WebhookServer
from hetsched.cluster.webhook_tls import generate

JOB = {"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job", "metadata": {"name": "train", "namespace": "default"},
       "spec": {"minAvailable": 8, "tasks": [{"name": "worker", "replicas": 8, "template": {"spec": {"containers": [
           {"name": "w", "image": "x", "resources": {"limits": {"huawei.com/Ascend910": 8}}}]}}}]}}
REVIEW = json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                     "request": {"uid": "u", "operation": "CREATE", "kind": {"kind": "Job"}, "object": JOB}}).encode()


def client(port: int, context: ssl.SSLContext, count: int, latencies: list[float], errors: list[str],
           start: threading.Barrier) -> None:
    connection = http.client.HTTPSConnection("127.0.0.1", port, context=context, timeout=60)
    connection.connect()  # the TLS handshake before the clock starts: the API server keeps its connections
    start.wait()
    try:
        for _ in range(count):
            began = time.perf_counter()
            connection.request("POST", "/validate", body=REVIEW, headers={"Content-Type": "application/json"})
            response = connection.getresponse()
            body = json.loads(response.read())
            latencies.append(time.perf_counter() - began)
            if response.status != 200 or not body["response"]["allowed"]:
                errors.append(f"{response.status} {body}")
    except Exception as exc:  # reported, not raised: one failing client must not hide the others' numbers
        errors.append(repr(exc))
    finally:
        connection.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=100)
    parser.add_argument("--idle", type=int, default=50)
    parser.add_argument("--requests", type=int, default=20, help="per client")
    args = parser.parse_args()
    tls = generate(["127.0.0.1"])
    with tempfile.TemporaryDirectory() as folder:
        cert, key = Path(folder) / "tls.crt", Path(folder) / "tls.key"
        cert.write_bytes(tls.cert)
        key.write_bytes(tls.key)
        server = WebhookServer(str(cert), str(key), port=0)
        server.start()
        idle = [socket.create_connection(("127.0.0.1", server.port), timeout=60) for _ in range(args.idle)]
        context = ssl.create_default_context(cadata=tls.ca.decode())
        latencies: list[float] = []
        errors: list[str] = []
        start = threading.Barrier(args.clients + 1)
        threads = [threading.Thread(target=client, args=(server.port, context, args.requests, latencies, errors,
                                                         start)) for _ in range(args.clients)]
        for thread in threads:
            thread.start()
        start.wait()
        began = time.perf_counter()
        for thread in threads:
            thread.join(timeout=300)
        elapsed = time.perf_counter() - began
        for sock in idle:
            sock.close()
        server.stop()
    ms = np.asarray(latencies) * 1000
    print(f"{len(latencies):,} reviews by {args.clients} clients ({args.idle} idle connections held open) in "
          f"{elapsed:.1f} s: {len(latencies) / elapsed:,.0f}/s; latency ms p50 {np.percentile(ms, 50):.1f}, "
          f"p90 {np.percentile(ms, 90):.1f}, p99 {np.percentile(ms, 99):.1f}, max {ms.max():.1f}; "
          f"{len(errors)} error(s){': ' + errors[0] if errors else ''}")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
