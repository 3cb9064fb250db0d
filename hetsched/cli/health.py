"""``/healthz`` and ``/readyz`` of the scheduler and controller processes, for kubelet's probes.

Who calls it: ``cli.serve``'s loop (``--health-address``, ``HETSCHED_HEALTH_ADDRESS``; the chart sets
``0.0.0.0:<port>`` when ``probes.enabled``). Plain HTTP on its own port, apart from ``/metrics`` (which may
listen on loopback only or be off).

- ``/healthz``: 200 while the process's loop has come round within ``stale`` seconds (a leader between
  cycles, a standby between looks at its Lease); 503 when it has not — a loop stuck on something the
  process cannot leave, which kubelet ends by restarting the container.
- ``/readyz``: 200 from the first round of the loop until SIGTERM; a standby is ready (it takes over by
  itself), so a Deployment's rollout is never held up by who leads.
Every other path is 404. The server is a daemon thread; nothing a request says reaches the process.
"""

from __future__ import annotations

import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from hetsched.metrics.serve import parse_address


class Health:
    """What the loop reports (:meth:`beat`, :meth:`stopping`) and the endpoint reads."""

    def __init__(self, stale: float) -> None:
        self.stale = stale
        self._last: float | None = None
        self._stopping = False

    def beat(self) -> None:
        self._last = time.monotonic()

    def stopping(self) -> None:
        self._stopping = True

    def alive(self) -> tuple[bool, str]:
        if self._last is None:
            return True, "starting"
        age = time.monotonic() - self._last
        return (True, f"loop ran {age:.1f}s ago") if age <= self.stale else \
            (False, f"loop has not run for {age:.0f}s (limit {self.stale:.0f}s)")

    def ready(self) -> tuple[bool, str]:
        if self._stopping:
            return False, "stopping"
        return (self._last is not None), "ready" if self._last is not None else "starting"


class HealthServer:
    def __init__(self, health: Health, address: str) -> None:
        host, port = parse_address(address, "--health-address")

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                answer = {"/healthz": health.alive, "/readyz": health.ready}.get(self.path.split("?", 1)[0])
                ok, text = answer() if answer is not None else (False, "not found")
                body = (text + "\n").encode()
                self.send_response(200 if ok else (404 if answer is None else 503))
                self.send_header("Content-Type", "text/plain; charset=utf-8")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                pass  # probes every few seconds: not worth a log line each

        self._server = ThreadingHTTPServer((host, port), Handler)
        self._server.daemon_threads = True
        self.port: int = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True, name="health")
        self._thread.start()

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
