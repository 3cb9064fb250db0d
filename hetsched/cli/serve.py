"""``hetsched scheduler`` and ``hetsched controller``: the long-running processes of Kubernetes mode.

Who calls it: ``cli.main`` registers both; the Helm chart runs them (two replicas each, one active).

Both connect with a kubeconfig (``--kubeconfig``/``KUBECONFIG``, else the in-cluster service account) or a
server URL and bearer-token file; take every setting as a flag, an environment variable
(``HETSCHED_<OPTION>``) or a key of ``--config FILE`` (YAML, option names as keys), in that order of
precedence; elect a leader on a Lease (``--leader-elect``, default on); and stop cleanly on SIGTERM or
SIGINT (the Lease is released so a standby replica takes over at once). A replica that loses the Lease
exits (status 1) and is restarted by its Deployment, as kube-scheduler does. An API server that does not
answer makes the loop log, back off (up to 30 s) and resume; binds already made are never repeated (the
Binding API refuses a second bind, and the cache starts from what the server says).
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import threading
import time
from pathlib import Path
from types import FrameType
from typing import Annotated, Any

import click
import typer
import yaml

from hetsched.cluster.kubernetes import KubeClient, KubeCluster, WallClock
from hetsched.cluster.leader import LeaderElector

log = logging.getLogger("hetsched")


def _load_config(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """``--config FILE``: its keys become the defaults of the other options (flags and env still win)."""
    if value:
        try:
            data = yaml.safe_load(Path(value).read_text(encoding="utf-8")) or {}
        except (OSError, yaml.YAMLError) as exc:
            raise click.BadParameter(f"cannot read {value}: {exc}") from None
        if not isinstance(data, dict):
            raise click.BadParameter(f"{value}: expected a mapping of option names to values")
        ctx.default_map = {str(k).replace("-", "_"): v for k, v in data.items()}
    return value


ConfigOption = Annotated[str | None, typer.Option("--config", is_eager=True, callback=_load_config,
                                                  help="YAML file of option values")]
Kubeconfig = Annotated[str | None, typer.Option(envvar="KUBECONFIG", help="kubeconfig file")]
Server = Annotated[str | None, typer.Option(envvar="HETSCHED_SERVER", help="API server URL (with --token-file)")]
TokenFile = Annotated[Path | None, typer.Option(envvar="HETSCHED_TOKEN_FILE", help="bearer token file")]
CaFile = Annotated[Path | None, typer.Option(envvar="HETSCHED_CA_FILE", help="CA of the API server")]
LeaderElect = Annotated[bool, typer.Option(envvar="HETSCHED_LEADER_ELECT", help="elect a leader on a Lease")]
LeaseNamespace = Annotated[str, typer.Option(envvar="HETSCHED_LEASE_NAMESPACE")]
LeaseDuration = Annotated[float, typer.Option(envvar="HETSCHED_LEASE_DURATION", help="seconds")]
RetryPeriod = Annotated[float, typer.Option(envvar="HETSCHED_RETRY_PERIOD", help="seconds between Lease rounds")]
Identity = Annotated[str | None, typer.Option("--id", envvar="HETSCHED_ID", help="this replica's name")]


def _client(kubeconfig: str | None, server: str | None, token_file: Path | None, ca_file: Path | None) -> KubeClient:
    try:
        return KubeClient.connect(kubeconfig, server, str(token_file) if token_file else None,
                                  str(ca_file) if ca_file else None)
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None


class _Stop:
    def __init__(self) -> None:
        self.event = threading.Event()
        signal.signal(signal.SIGTERM, self._set)
        signal.signal(signal.SIGINT, self._set)

    def _set(self, signum: int, frame: FrameType | None) -> None:
        self.event.set()


def _run(name: str, client: KubeClient, step: Any, setup: Any, period: float, leader_elect: bool,
         lease_namespace: str, lease_duration: float, retry_period: float, identity: str | None) -> None:
    """The shared loop: hold the Lease (when electing), set up once leading, then ``step`` every period."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    stop = _Stop()
    me = identity or f"{socket.gethostname()}_{os.getpid()}"
    elector = LeaderElector(client, lease_namespace, f"hetsched-{name}", me, duration=lease_duration) \
        if leader_elect else None
    state: Any = None
    renewed = 0.0
    backoff = 0.5
    try:
        while not stop.event.is_set():
            try:
                if elector is not None and time.monotonic() - renewed >= retry_period:
                    if not elector.try_acquire_or_renew():
                        if state is not None:
                            log.error("%s lost the lease to %s; exiting", me, elector.holder())
                            raise typer.Exit(1)
                        stop.event.wait(retry_period)
                        continue
                    renewed = time.monotonic()
                if state is None:
                    log.info("%s leading %s", me, name)
                    state = setup()
                step(state)
                backoff = 0.5
                stop.event.wait(period)
            except typer.Exit:
                raise
            except Exception as exc:  # an API server away: wait, then resume from fresh state
                # a standby keeps its Lease rounds regular, so it can take over on time
                wait = backoff if state is not None else min(backoff, retry_period)
                log.warning("%s: %s; retrying in %.1fs", name, exc, wait)
                stop.event.wait(wait)
                backoff = min(backoff * 2, 30.0)
    finally:
        if elector is not None:
            elector.release()
        if state is not None:
            state[0].stop()
    log.info("%s stopped", me)


def scheduler(
    config: ConfigOption = None,
    kubeconfig: Kubeconfig = None, server: Server = None, token_file: TokenFile = None, ca_file: CaFile = None,
    scheduler_conf: Annotated[Path | None, typer.Option(envvar="HETSCHED_SCHEDULER_CONF",
                                                        help="Volcano scheduler configuration")] = None,
    period: Annotated[float, typer.Option(envvar="HETSCHED_PERIOD", help="seconds between cycles")] = 1.0,
    qps: Annotated[float, typer.Option(envvar="HETSCHED_QPS")] = 1000.0,
    burst: Annotated[int, typer.Option(envvar="HETSCHED_BURST")] = 2000,
    bind_workers: Annotated[int, typer.Option(envvar="HETSCHED_BIND_WORKERS")] = 16,
    leader_elect: LeaderElect = True, lease_namespace: LeaseNamespace = "kube-system",
    lease_duration: LeaseDuration = 10.0, retry_period: RetryPeriod = 2.0, identity: Identity = None,
) -> None:
    """Run the batch scheduler against a Kubernetes API server (one active replica per Lease)."""
    from hetsched.scheduler.cache import KINDS
    from hetsched.scheduler.conf import default_conf, load_conf
    from hetsched.scheduler.runner import Scheduler

    client = _client(kubeconfig, server, token_file, ca_file)
    conf = load_conf(scheduler_conf) if scheduler_conf else default_conf()

    def setup() -> tuple[KubeCluster, Scheduler]:
        cluster = KubeCluster(client, qps=qps, burst=burst, bind_workers=bind_workers)
        engine = Scheduler(cluster, cluster, cluster, WallClock(), conf, evictor=cluster)
        cluster.start(KINDS)
        if not cluster.wait_synced(60):
            raise RuntimeError("informers did not sync within 60 s")
        return cluster, engine

    def step(state: tuple[KubeCluster, Scheduler]) -> None:
        cluster, engine = state
        cluster.pump()
        result = engine.run_once()
        if result.failed_binds:
            log.warning("%d bind(s) failed, first: %s", len(result.failed_binds), result.failed_binds[0])

    _run("scheduler", client, step, setup, period, leader_elect, lease_namespace, lease_duration, retry_period,
         identity)


def controller(
    config: ConfigOption = None,
    kubeconfig: Kubeconfig = None, server: Server = None, token_file: TokenFile = None, ca_file: CaFile = None,
    period: Annotated[float, typer.Option(envvar="HETSCHED_PERIOD", help="seconds between rounds")] = 0.2,
    leader_elect: LeaderElect = True, lease_namespace: LeaseNamespace = "kube-system",
    lease_duration: LeaseDuration = 10.0, retry_period: RetryPeriod = 2.0, identity: Identity = None,
) -> None:
    """Run the Job, PodGroup and fault controllers against a Kubernetes API server."""
    from hetsched.controllers.fault import FaultController
    from hetsched.controllers.job import JobController
    from hetsched.controllers.podgroup import PodGroupController

    client = _client(kubeconfig, server, token_file, ca_file)

    def setup() -> tuple[KubeCluster, JobController, PodGroupController, FaultController]:
        cluster = KubeCluster(client)
        clock = WallClock()
        controllers = (JobController(cluster, clock, events=cluster), PodGroupController(cluster),
                       FaultController(cluster, clock, events=cluster))
        if not cluster.wait_synced(60):
            raise RuntimeError("informers did not sync within 60 s")
        cluster.pump()
        return (cluster, *controllers)

    def step(state: tuple[KubeCluster, JobController, PodGroupController, FaultController]) -> None:
        cluster, jobs, groups, faults = state
        cluster.pump()
        for clocked in (jobs, faults):
            due = clocked.next_deadline()
            if due is not None and due <= time.time():
                clocked.wake()
        while jobs.process() + groups.process() + faults.process() > 0:
            cluster.pump()

    _run("controller", client, step, setup, period, leader_elect, lease_namespace, lease_duration, retry_period,
         identity)


def webhook(
    cert: Annotated[Path, typer.Option(envvar="HETSCHED_WEBHOOK_CERT", help="TLS certificate (PEM)")],
    key: Annotated[Path, typer.Option(envvar="HETSCHED_WEBHOOK_KEY", help="TLS private key (PEM)")],
    host: Annotated[str, typer.Option(envvar="HETSCHED_WEBHOOK_HOST", help="bind address")] = "127.0.0.1",
    port: Annotated[int, typer.Option(envvar="HETSCHED_WEBHOOK_PORT")] = 9443,
) -> None:
    """Serve the validating (/validate) and mutating (/mutate) admission webhook over HTTPS until SIGTERM."""
    from hetsched.cluster.webhook import WebhookServer

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    stop = _Stop()
    server = WebhookServer(str(cert), str(key), host, port)
    server.start()
    log.info("webhook serving on https://%s:%d", host, server.port)
    stop.event.wait()
    server.stop()
