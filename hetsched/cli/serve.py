"""``hetsched scheduler`` and ``hetsched controller``: the long-running processes of Kubernetes mode.

Who calls it: ``cli.main`` registers both; the Helm chart runs them (two replicas each, one active).

Both connect with a kubeconfig (``--kubeconfig``/``KUBECONFIG``, else the in-cluster service account) or a
server URL and bearer-token file; take every setting as a flag, an environment variable
(``HETSCHED_<OPTION>``) or a key of ``--config FILE`` (YAML, option names as keys), in that order of
precedence; elect a leader on a Lease (``--leader-elect``, default on); and stop cleanly on SIGTERM or
SIGINT within 2 s (``cli.shutdown``; the Lease is released so a standby replica takes over at once). The
Lease is renewed on the elector's own thread, and every write is fenced by it (``cluster.leader``): a
replica that loses the Lease, or cannot renew it within the renew deadline, writes nothing more, exits
(status 1) and is restarted by its Deployment, as kube-scheduler does.
``hetsched webhook`` serves admission reviews until the same signals. An API server that does not
answer makes the loop log, back off (up to 30 s) and resume; binds already made are never repeated (the
Binding API refuses a second bind, and the cache starts from what the server says).
"""

from __future__ import annotations

import logging
import socket
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, TypeVar

import typer
import yaml
from prometheus_client import CollectorRegistry

from hetsched.api.hypernodes import TIER_LABEL
from hetsched.api.priority_policy import PriorityPolicy
from hetsched.api.priority_policy import parse as parse_priority_policy
from hetsched.api.yamlsafe import YamlLimitError, read_text, safe_load
from hetsched.cli.health import Health, HealthServer
from hetsched.cli.logs import LogFormat, LogLevel, configure
from hetsched.cli.shutdown import Shutdown
from hetsched.cluster.backoff import Backoff
from hetsched.metrics.gc_pauses import CollectionSchedule, PauseMeter
from hetsched.metrics.serve import PORTS, MetricsServer, leader_gauge
from hetsched.ports import CYCLE_BUDGET_MS

if TYPE_CHECKING:  # imported where they run: `hetsched --help` and the replay commands never load the client
    from hetsched.cluster.kubernetes import KubeClient, KubeCluster

log = logging.getLogger("hetsched")
S = TypeVar("S")
STANDBY_POLL = 0.1
MAX_CONFIG_BYTES = 1 << 20
"""Bytes of a ``--config`` file (a mapping of option names to values)."""
"""Seconds between a standby's looks at its elector: it starts work within this of taking the Lease, and
stops within this of SIGTERM."""


def _load_config(ctx: typer.Context, param: typer.CallbackParam, value: str | None) -> str | None:
    """``--config FILE``: its keys become the defaults of the other options (flags and env still win)."""
    if value:
        try:
            data = safe_load(read_text(value, MAX_CONFIG_BYTES)) or {}
        except (OSError, UnicodeDecodeError, yaml.YAMLError, YamlLimitError) as exc:
            raise typer.BadParameter(f"cannot read {value}: {exc}") from None
        if not isinstance(data, dict):
            raise typer.BadParameter(f"{value}: expected a mapping of option names to values")
        ctx.default_map = {str(k).replace("-", "_"): v for k, v in data.items()}
    return value


ConfigOption = Annotated[str | None, typer.Option("--config", is_eager=True, callback=_load_config,
                                                  help="YAML file of option values")]
Kubeconfig = Annotated[str | None, typer.Option(envvar="KUBECONFIG", help="kubeconfig file")]
Server = Annotated[str | None, typer.Option(envvar="HETSCHED_SERVER", help="API server URL (with --token-file)")]
TokenFile = Annotated[Path | None, typer.Option(envvar="HETSCHED_TOKEN_FILE", help="bearer token file")]
CaFile = Annotated[Path | None, typer.Option(envvar="HETSCHED_CA_FILE", help="CA of the API server")]
Insecure = Annotated[bool, typer.Option(
    "--insecure", envvar="HETSCHED_INSECURE",
    help="do not verify the API server's certificate (without --ca-file it is checked against the system's CAs)")]
LeaderElect = Annotated[bool, typer.Option(envvar="HETSCHED_LEADER_ELECT", help="elect a leader on a Lease")]
LeaseNamespace = Annotated[str, typer.Option(envvar="HETSCHED_LEASE_NAMESPACE")]
LeaseDuration = Annotated[float, typer.Option(envvar="HETSCHED_LEASE_DURATION", help="seconds")]
RetryPeriod = Annotated[float, typer.Option(envvar="HETSCHED_RETRY_PERIOD", help="seconds between Lease rounds")]
RenewDeadline = Annotated[float, typer.Option(
    envvar="HETSCHED_RENEW_DEADLINE",
    help="seconds: a leader that could not renew its Lease for this long stops writing and exits (0: two "
         "thirds of --lease-duration; must be shorter than it)")]
Identity = Annotated[str | None, typer.Option("--id", envvar="HETSCHED_ID",
                                              help="this replica's name (the Lease holder is NAME_<8 hex>, new "
                                                   "for every start)")]


MetricsAddress = Annotated[str, typer.Option(envvar="HETSCHED_METRICS_ADDRESS",
                                             help="serve Prometheus /metrics on HOST:PORT (off or empty: none)")]
HealthAddress = Annotated[str, typer.Option(envvar="HETSCHED_HEALTH_ADDRESS",
                                            help="serve /healthz and /readyz on HOST:PORT for kubelet's probes "
                                                 "(off or empty: none)")]


def serve_health(address: str, period: float) -> Health:
    """The loop's health, served on ``address`` unless off; a loop silent for 10 periods (at least 120 s:
    the first sync of a large cluster takes a while) is not alive."""
    health = Health(stale=max(120.0, 10 * period))
    if address and address != "off":
        try:
            server = HealthServer(health, address)
        except ValueError as exc:
            raise typer.BadParameter(str(exc)) from None
        except OSError as exc:
            raise typer.BadParameter(f"--health-address {address}: cannot listen: {exc.strerror or exc}") from None
        log.info("health on http://%s/healthz and /readyz", f"{address.rpartition(':')[0]}:{server.port}")
    return health


def serve_metrics(registry: CollectorRegistry, address: str) -> MetricsServer | None:
    """Start /metrics (a daemon thread) before anything else, so a standby replica is scraped too; a bad
    address or a port in use is a usage error naming the option (every process command uses this). ``off``
    (or empty, where the flag allows it) serves none: an empty environment variable counts as unset."""
    if not address or address == "off":
        return None
    try:
        server = MetricsServer(registry, address)
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None
    except OSError as exc:
        raise typer.BadParameter(f"--metrics-address {address}: cannot listen: {exc.strerror or exc}") from None
    log.info("metrics on http://%s:%d/metrics", server.host, server.port)
    return server


def _client(kubeconfig: str | None, server: str | None, token_file: Path | None, ca_file: Path | None,
            insecure: bool = False) -> KubeClient:
    from hetsched.cluster.kubernetes import KubeClient

    try:
        return KubeClient.connect(kubeconfig, server, str(token_file) if token_file else None,
                                  str(ca_file) if ca_file else None, insecure)
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None


def _start(make: Callable[[], KubeCluster], setup: Callable[[KubeCluster], S],
           shutdown: Shutdown) -> tuple[KubeCluster, S] | None:
    """A fresh connection and what watches it, synced and delivered; None when told to stop meanwhile. On a
    failure the connection is stopped before the error goes up (the next round starts over)."""
    cluster = make()
    try:
        state = setup(cluster)
        if cluster.wait_synced(60, cancel=shutdown.event):
            cluster.pump()
            return cluster, state
        if not shutdown.event.is_set():
            raise RuntimeError("informers did not sync within 60 s")
    except BaseException:
        cluster.stop(timeout=shutdown.remaining())
        raise
    cluster.stop(timeout=shutdown.remaining())
    return None


def _run(name: str, client: KubeClient, make: Callable[[], KubeCluster], setup: Callable[[KubeCluster], S],
         step: Callable[[S], bool], period: float, leader_elect: bool, lease_namespace: str, lease_duration: float,
         renew_deadline: float, retry_period: float, identity: str | None,
         registry: CollectorRegistry | None = None, health: Health | None = None) -> None:
    """The shared loop: the elector takes and renews the Lease on its own thread (when electing); once this
    replica holds it, ``make`` the cluster connection (its writes fenced by the Lease and the shutdown),
    ``setup`` what watches it, wait for the informers to sync, then ``step`` every period (at once when a
    step says it left work for the next one: a scheduler cycle its time budget cut short). A replica that
    stops holding the Lease after it began work exits (status 1) for its Deployment to restart it, as
    kube-scheduler does. On SIGTERM: writes stop at once (a bind batch under way sends nothing more), the
    Lease is given up, then the cluster stops (its watches cut) within the shutdown's deadline, and the
    process ends (``cli.shutdown``)."""
    from hetsched.cluster.leader import LeaderElector

    shutdown = Shutdown()
    leading = leader_gauge(registry) if registry is not None else None
    # unique per process start, as client-go's hostname_uuid: a replica restarted in place (same pod name)
    # is a new holder, and waits for the Lease its dead predecessor held to expire like any standby
    me = f"{identity or socket.gethostname()}_{uuid.uuid4().hex[:8]}"
    try:
        elector = LeaderElector(client, lease_namespace, f"hetsched-{name}", me, duration=lease_duration,
                                renew_deadline=renew_deadline or None, retry=retry_period) if leader_elect else None
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None
    cluster: KubeCluster | None = None
    state: S | None = None
    backoff = Backoff()
    # collections between rounds, old objects frozen: no long pause inside a cycle (metrics.gc_pauses)
    collections = CollectionSchedule()
    pauses = PauseMeter(registry).install()
    if elector is not None:
        elector.start()
    try:
        while not shutdown.event.is_set():
            if health is not None:
                health.beat()
            try:
                if elector is not None and not elector.holds():
                    if state is not None:
                        log.error("%s lost the lease (last seen holder %r) or could not renew it within %.1f s; "
                                  "exiting", me, elector.last_holder, elector.renew_deadline)
                        raise typer.Exit(1)
                    collections.between_cycles()
                    shutdown.wait(STANDBY_POLL)  # a standby: the elector's thread takes the Lease when it can
                    continue
                if state is None:
                    log.info("%s leading %s", me, name)

                    def fenced() -> KubeCluster:
                        made = make()
                        made.cancel = shutdown.event
                        made.fence = elector.holds if elector is not None else None
                        return made

                    started = _start(fenced, setup, shutdown)
                    if started is None:
                        break
                    cluster, state = started
                    if leading is not None:
                        leading.set(1)
                more = step(state)
                collections.between_cycles()
                backoff.reset()
                if not more:
                    shutdown.wait(period)
            except typer.Exit:
                raise
            except Exception as exc:  # an API server away: wait, then resume from fresh state
                delay = backoff.next()
                wait = delay if state is not None else min(delay, retry_period)
                log.warning("%s: %s; retrying in %.1fs", name, exc, wait)
                shutdown.wait(wait)
    finally:
        stopping = time.perf_counter()
        if health is not None:
            health.stopping()
        if leading is not None:
            leading.set(0)
        if elector is not None:
            elector.stop(timeout=max(0.05, shutdown.remaining() / 4))
            elector.release(timeout=max(0.1, shutdown.remaining() / 2))
        released = time.perf_counter()
        if cluster is not None and not cluster.stop(timeout=shutdown.remaining()):
            log.warning("%s: some informers were still inside a request when it stopped", name)
        log.info("%s stopped (Lease given up in %.3f s, informers stopped in %.3f s)", me, released - stopping,
                 time.perf_counter() - released)
        pauses.uninstall()
    shutdown.exit(0)


QUEUE_TTL = 5.0
"""Seconds the webhook keeps a Queue or Namespace it read (their lists change rarely; the scheduler holds the
queue rule at once anyway)."""


T = TypeVar("T")


def _kept(read: Callable[[str], T], what: str) -> Callable[[str], T | None]:
    """``read`` (an API read by name; NotFound for none) answered from a copy kept ``QUEUE_TTL`` seconds; None
    when there is no such object or it cannot be read now (logged): the webhook then lets the object through."""
    from hetsched.ports import NotFound

    kept: dict[str, tuple[float, T | None]] = {}

    def lookup(name: str) -> T | None:
        now = time.monotonic()
        found = kept.get(name)
        if found is not None and found[0] > now:
            return found[1]
        value: T | None
        try:
            value = read(name)
        except NotFound:
            value = None
        except Exception as exc:  # the API server away: let it through now, ask again next time
            log.warning("webhook: cannot read %s %s: %s", what, name[:100], str(exc)[:200])
            return None
        if len(kept) > 10_000:
            kept.clear()
        kept[name] = (now + QUEUE_TTL, value)
        return value

    return lookup


def _strings(value: object) -> dict[str, str]:
    return {str(k): str(v) for k, v in value.items()} if isinstance(value, dict) else {}


def queue_lookup(client: KubeClient) -> Callable[[str], tuple[dict[str, str], str] | None]:
    """For the webhook's queue rule: a Queue's (annotations, parent), read through the API server and kept
    ``QUEUE_TTL`` seconds."""
    def read(name: str) -> tuple[dict[str, str], str]:
        queue = client.request("GET", f"/apis/scheduling.volcano.sh/v1beta1/queues/{name}", timeout=5)
        return (_strings((queue.get("metadata") or {}).get("annotations")),
                str((queue.get("spec") or {}).get("parent") or ""))

    return _kept(read, "Queue")


def namespace_lookup(client: KubeClient) -> Callable[[str], tuple[dict[str, str], dict[str, str]] | None]:
    """For the webhook's queue rules: a Namespace's (annotations, labels) — its default queue
    (``hetsched.io/default-queue``) and what a queue's namespace selector matches — read through the API server
    and kept ``QUEUE_TTL`` seconds."""
    def read(namespace: str) -> tuple[dict[str, str], dict[str, str]]:
        data = client.request("GET", f"/api/v1/namespaces/{namespace}", timeout=5)
        metadata = data.get("metadata") or {}
        return _strings(metadata.get("annotations")), _strings(metadata.get("labels"))

    return _kept(read, "Namespace")


def pod_node_lookup(client: KubeClient) -> Callable[[str, str, str], str]:
    """For the webhook's restriction: (namespace, pod, uid) → the node that pod runs on ("" when there is no
    such pod, it has another uid, or it is not on a node yet)."""
    from hetsched.ports import NotFound

    def lookup(namespace: str, name: str, uid: str) -> str:
        try:
            pod = client.request("GET", f"/api/v1/namespaces/{namespace}/pods/{name}", timeout=5)
        except NotFound:
            return ""
        if (pod.get("metadata") or {}).get("uid") != uid:
            return ""
        return str((pod.get("spec") or {}).get("nodeName") or "")

    return lookup


PriorityClassOption = Annotated[list[str] | None, typer.Option(
    "--priority-class", help="CLASS=NAMESPACE[,NAMESPACE…]: only these namespaces may use PriorityClass CLASS "
                             "(repeatable, or several in one ended by ';'; the system classes are kube-system's "
                             "unless given here)")]


def _priority_policy(entries: list[str] | None) -> PriorityPolicy:
    try:
        return parse_priority_policy(entries or [])
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None


def scheduler(
    config: ConfigOption = None,
    kubeconfig: Kubeconfig = None, server: Server = None, token_file: TokenFile = None, ca_file: CaFile = None,
    insecure: Insecure = False,
    scheduler_conf: Annotated[Path | None, typer.Option(envvar="HETSCHED_SCHEDULER_CONF",
                                                        help="Volcano scheduler configuration")] = None,
    period: Annotated[float, typer.Option(envvar="HETSCHED_PERIOD", help="seconds between cycles")] = 1.0,
    cycle_budget: Annotated[float, typer.Option(
        envvar="HETSCHED_CYCLE_BUDGET", min=0.0,
        help="milliseconds after which a cycle starts no new job; the rest go in the next cycle, run at once "
             "(0: no limit)")] = CYCLE_BUDGET_MS,
    qps: Annotated[float, typer.Option(envvar="HETSCHED_QPS")] = 1000.0,
    burst: Annotated[int, typer.Option(envvar="HETSCHED_BURST")] = 2000,
    bind_workers: Annotated[int, typer.Option(envvar="HETSCHED_BIND_WORKERS")] = 16,
    leader_elect: LeaderElect = True, lease_namespace: LeaseNamespace = "kube-system",
    lease_duration: LeaseDuration = 15.0, renew_deadline: RenewDeadline = 0.0, retry_period: RetryPeriod = 2.0,
    identity: Identity = None, metrics_address: MetricsAddress = f"127.0.0.1:{PORTS['scheduler']}",
    priority_class: PriorityClassOption = None, health_address: HealthAddress = "off",
    log_level: LogLevel = "info", log_format: LogFormat = "text",
) -> None:
    """Run the batch scheduler against a Kubernetes API server (one active replica per Lease)."""
    from hetsched.cluster.kubernetes import KubeCluster, WallClock
    from hetsched.metrics.scheduler import SchedulerMetrics
    from hetsched.scheduler.cache import KINDS, SCOPES
    from hetsched.scheduler.defaults import default_conf, load_conf
    from hetsched.scheduler.engine.runner import Scheduler
    from hetsched.scheduler.engine.why import settings_of

    configure(log_level, log_format)
    client = _client(kubeconfig, server, token_file, ca_file, insecure)
    conf = load_conf(scheduler_conf) if scheduler_conf else default_conf()
    for note in conf.notes:
        logging.getLogger("hetsched.scheduler").warning("%s", note)
    policy = _priority_policy(priority_class)
    metrics = SchedulerMetrics(settings=settings_of(conf))
    serve_metrics(metrics.registry, metrics_address)

    def make() -> KubeCluster:
        return KubeCluster(client, qps=qps, burst=burst, bind_workers=bind_workers, scopes=SCOPES)

    def setup(cluster: KubeCluster) -> tuple[KubeCluster, Scheduler]:
        engine = Scheduler(cluster, cluster, cluster, WallClock(), conf, evictor=cluster, stopwatch=time.perf_counter,
                           priority_policy=policy, cycle_budget=cycle_budget / 1000 if cycle_budget > 0 else None)
        engine.observers.append(metrics)
        cluster.start(KINDS)
        return cluster, engine

    def step(state: tuple[KubeCluster, Scheduler]) -> bool:
        cluster, engine = state
        cluster.pump()
        result = engine.run_once()
        decisions = result.decisions
        said = {"binds": len(decisions.binds) - len(result.failed_binds), "evictions": len(decisions.evictions),
                "pipelined": len(decisions.nominations), "unschedulable": len(decisions.unschedulable),
                "deferred": len(decisions.deferred), "seconds": round(result.timings.total, 4)}
        # a cycle that changed something is worth a line; an idle one only at debug level
        log.log(logging.INFO if said["binds"] or said["evictions"] else logging.DEBUG,
                "cycle: %d bind(s), %d eviction(s), %d job(s) unschedulable, %d deferred to the next cycle in %.3fs",
                said["binds"], said["evictions"], said["unschedulable"], said["deferred"], said["seconds"],
                extra=said)
        for key, error in result.set_aside:
            log.warning("set aside %s: %s", key, error, extra={"job": key})
        if result.failed_binds:
            first = result.failed_binds[0]
            log.warning("%d bind(s) failed, first: %s: %s", len(result.failed_binds), first.pod, first.error)
        return result.deferred

    _run("scheduler", client, make, setup, step, period, leader_elect, lease_namespace, lease_duration,
         renew_deadline, retry_period, identity, metrics.registry, serve_health(health_address, period))


DISCOVERY_DEFAULT = ",".join(f"{tier}={TIER_LABEL.format(tier=tier)}" for tier in (1, 2, 3))
"""The node labels HyperNode discovery reads by default: what cluster specs and the node agent write."""


def controller(
    config: ConfigOption = None,
    kubeconfig: Kubeconfig = None, server: Server = None, token_file: TokenFile = None, ca_file: CaFile = None,
    insecure: Insecure = False,
    period: Annotated[float, typer.Option(envvar="HETSCHED_PERIOD", help="seconds between rounds")] = 0.2,
    leader_elect: LeaderElect = True, lease_namespace: LeaseNamespace = "kube-system",
    lease_duration: LeaseDuration = 15.0, renew_deadline: RenewDeadline = 0.0, retry_period: RetryPeriod = 2.0,
    identity: Identity = None, metrics_address: MetricsAddress = f"127.0.0.1:{PORTS['controller']}",
    discover_hypernodes: Annotated[str, typer.Option(
        envvar="HETSCHED_DISCOVER_HYPERNODES",
        help="make HyperNodes from node labels: TIER=LABEL,… (the node agent writes tier 1 for Ascend A3 "
             "supernodes); empty: off")] = DISCOVERY_DEFAULT,
    usage_interval: Annotated[float, typer.Option(
        envvar="HETSCHED_USAGE_INTERVAL", min=1.0,
        help="seconds between the usage accountant's charges of run time to each QueueUsage (budgets also wake "
             "it when they run out)")] = 60.0,
    usage_half_life: Annotated[float, typer.Option(
        envvar="HETSCHED_USAGE_HALF_LIFE", min=60.0,
        help="seconds in which a QueueUsage's decayed usage (the fair-share figure) halves")] = 7 * 86400.0,
    health_address: HealthAddress = "off", log_level: LogLevel = "info", log_format: LogFormat = "text",
) -> None:
    """Run the Job, PodGroup, fault, CronJob, JobFlow, Queue and usage controllers, and HyperNode discovery,
    against a Kubernetes API server."""
    from hetsched.cluster.kubernetes import KubeCluster, WallClock
    from hetsched.controllers.cronjob import CronJobController
    from hetsched.controllers.fault import FaultController
    from hetsched.controllers.hypernode_discovery import HyperNodeDiscovery, parse_labels
    from hetsched.controllers.job import JobController
    from hetsched.controllers.jobflow import JobFlowController
    from hetsched.controllers.podgroup import PodGroupController
    from hetsched.controllers.queue import QueueController
    from hetsched.controllers.usage import UsageController
    from hetsched.metrics.controller import ControllerMetrics

    try:
        labels = parse_labels(discover_hypernodes)
    except ValueError as exc:
        raise typer.BadParameter(f"--discover-hypernodes: {exc}") from None
    configure(log_level, log_format)
    client = _client(kubeconfig, server, token_file, ca_file, insecure)
    metrics = ControllerMetrics()
    serve_metrics(metrics.registry, metrics_address)

    Controllers = tuple[KubeCluster, JobController, PodGroupController, FaultController, HyperNodeDiscovery | None,
                        CronJobController, JobFlowController, QueueController, UsageController]

    def setup(cluster: KubeCluster) -> Controllers:
        clock = WallClock()
        faults = FaultController(cluster, clock, events=cluster, history=False)  # no log kept: it would only grow
        faults.listeners.append(metrics.restarted)
        discovery = HyperNodeDiscovery(cluster, labels) if labels else None
        return (cluster, JobController(cluster, clock, events=cluster), PodGroupController(cluster), faults,
                discovery, CronJobController(cluster, clock, events=cluster),
                JobFlowController(cluster, clock, events=cluster), QueueController(cluster, events=cluster),
                UsageController(cluster, clock, interval=usage_interval, half_life=usage_half_life))

    def step(state: Controllers) -> bool:
        cluster, jobs, groups, faults, discovery, cronjobs, jobflows, queues, usage = state
        started = time.perf_counter()
        cluster.pump()
        for clocked in (jobs, faults, cronjobs, usage):
            due = clocked.next_deadline()
            if due is not None and due <= time.time():
                clocked.wake()
        items = {"job": 0, "podgroup": 0, "fault": 0, "cronjob": 0, "jobflow": 0, "queue": 0, "usage": 0}
        while True:
            done = {"job": jobs.process(), "podgroup": groups.process(), "fault": faults.process(),
                    "cronjob": cronjobs.process(), "jobflow": jobflows.process(), "queue": queues.process(),
                    "usage": usage.process()}
            if discovery is not None:
                discovery.process()
            for key, count in done.items():
                items[key] += count
            if not any(done.values()):
                break
            cluster.pump()
        metrics.observe_round(cluster, time.perf_counter() - started, items)
        return False  # a round runs until nothing is left to do

    _run("controller", client, lambda: KubeCluster(client), setup, step, period, leader_elect, lease_namespace,
         lease_duration, renew_deadline, retry_period, identity, metrics.registry,
         serve_health(health_address, period))


def webhook(
    cert: Annotated[Path | None, typer.Option(envvar="HETSCHED_WEBHOOK_CERT", help="TLS certificate (PEM)")] = None,
    key: Annotated[Path | None, typer.Option(envvar="HETSCHED_WEBHOOK_KEY", help="TLS private key (PEM)")] = None,
    tls_secret: Annotated[str | None, typer.Option(
        envvar="HETSCHED_WEBHOOK_TLS_SECRET",
        help="NAMESPACE/NAME: make (or reuse) the CA and certificate in this Secret instead of --cert/--key, "
             "and put the CA into the --registration webhook configurations")] = None,
    service: Annotated[str, typer.Option(envvar="HETSCHED_WEBHOOK_SERVICE", help="with --tls-secret: the "
                                                                                 "Service the certificate names")]
    = "hetsched-webhook",
    registration: Annotated[str, typer.Option(envvar="HETSCHED_WEBHOOK_REGISTRATION",
                                              help="with --tls-secret: comma-separated webhook configurations "
                                                   "whose caBundle to keep")] = "",
    restrict_namespace: Annotated[str | None, typer.Option(
        envvar="HETSCHED_WEBHOOK_RESTRICT_NAMESPACE",
        help="answer /restrict for the node agent and controller ServiceAccounts of this namespace (looks "
             "their pods up through the API server)")] = None,
    scheduler_identity: Annotated[str, typer.Option(
        envvar="HETSCHED_WEBHOOK_SCHEDULER_IDENTITY",
        help="/pods: the only user that may write the chip hand-off annotations (the scheduler's "
             "ServiceAccount)")] = "system:serviceaccount:hetsched:hetsched-scheduler",
    priority_class: PriorityClassOption = None,
    host: Annotated[str, typer.Option(envvar="HETSCHED_WEBHOOK_HOST", help="bind address")] = "127.0.0.1",
    port: Annotated[int, typer.Option(envvar="HETSCHED_WEBHOOK_PORT")] = 9443,
    kubeconfig: Kubeconfig = None, server: Server = None, token_file: TokenFile = None, ca_file: CaFile = None,
    insecure: Insecure = False,
    metrics_address: MetricsAddress = f"127.0.0.1:{PORTS['webhook']}",
    log_level: LogLevel = "info", log_format: LogFormat = "text",
) -> None:
    """Serve the validating (/validate) and mutating (/mutate) admission webhook over HTTPS until SIGTERM."""
    from hetsched.cluster.restriction import Restriction
    from hetsched.cluster.webhook import PodAdmission, WebhookServer
    from hetsched.cluster.webhook_tls import ensure_ca_bundle, ensure_secret, hosts_for, memory_file
    from hetsched.metrics.agents import WebhookMetrics

    configure(log_level, log_format)
    if tls_secret is None and (cert is None or key is None):
        raise typer.BadParameter("give --cert and --key, or --tls-secret NAMESPACE/NAME")
    namespace, sep, name = (tls_secret or "/").partition("/")
    if tls_secret is not None and (not sep or not namespace or not name):
        raise typer.BadParameter(f"--tls-secret {tls_secret!r}: expected NAMESPACE/NAME")
    shutdown = Shutdown()
    metrics = WebhookMetrics()
    serve_metrics(metrics.registry, metrics_address)
    registrations = [name for name in registration.split(",") if name]
    client: KubeClient | None = None
    ca = b""
    if tls_secret is not None or restrict_namespace:
        client = _client(kubeconfig, server, token_file, ca_file, insecure)
    restriction = Restriction(restrict_namespace, pod_node_lookup(client)) \
        if restrict_namespace and client is not None else None
    if tls_secret is not None and client is not None:
        tls = None
        while tls is None:  # the API server may not answer yet: the Deployment's pod waits, then serves
            try:
                tls = ensure_secret(client, namespace, name, hosts_for(service, namespace))
            except Exception as exc:
                log.warning("webhook certificate: %s; retrying in 2 s", exc)
                if shutdown.wait(2):
                    shutdown.exit(0)
        cert_path, key_path, ca = memory_file(tls.cert, "tls.crt"), memory_file(tls.key, "tls.key"), tls.ca
    else:
        cert_path, key_path = str(cert), str(key)
    admission = PodAdmission(scheduler_identity, _priority_policy(priority_class),
                             queue_lookup(client) if client is not None else None,
                             namespace_lookup(client) if client is not None else None)
    webhook_server = WebhookServer(cert_path, key_path, host, port, metrics=metrics, restriction=restriction,
                                   admission=admission)
    webhook_server.start()
    log.info("webhook serving on https://%s:%d", host, webhook_server.port)
    while True:  # keep the registrations' CA bundle (a re-install may have emptied it)
        if client is not None and registrations:
            try:
                missing = ensure_ca_bundle(client, registrations, ca)
                if missing:
                    log.warning("webhook configuration(s) %s not found; setting their caBundle later",
                                ", ".join(missing))
            except Exception as exc:
                log.warning("caBundle: %s; retrying", exc)
        if shutdown.wait(10 if client is not None and registrations else None):
            break
    webhook_server.stop(timeout=shutdown.remaining())
    shutdown.exit(0)
