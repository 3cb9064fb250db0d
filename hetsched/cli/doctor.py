"""``hetsched doctor`` and ``hetsched explain``: the operator's checklist and "why is my job pending".

Who calls it: ``cli.main`` registers both; the ``kubectl-hetsched`` console script is the same app, so
``kubectl hetsched doctor`` / ``kubectl hetsched explain JOB`` work once it is on PATH.

Where the facts come from:
- ``--cluster SPEC WORKLOAD…``: an embedded cluster; the workloads run in the simulator (to ``--until``, or
  until nothing more happens) and the checks read the end state;
- otherwise a real API server (``--kubeconfig``/``KUBECONFIG``, the in-cluster account, or ``--server`` +
  ``--token-file``);
- ``doctor --node``: this machine — vendor tools, device files, kubelet's device-plugin directory and
  configuration (and the node's object when the API server is reachable).

Output is a table, or ``--json`` (findings with check, severity, object, evidence, fix). ``doctor`` exits
0 when nothing is worse than ``info``, 1 on a warning, 2 on an error (bad flags or input: also 2, with a
message on stderr).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Annotated, Any

import typer
import yaml

from hetsched.api.manifest import ManifestError, Problem, parse_document
from hetsched.api.objects import AnyObject, Node
from hetsched.api.yamlsafe import YamlLimitError, read_text, safe_load_all
from hetsched.cli.connection import (
    CaFile,
    Connection,
    Context,
    Insecure,
    JsonOut,
    Kubeconfig,
    Namespace,
    Server,
    TokenFile,
)
from hetsched.cli.output import say, stderr_console, stdout_console
from hetsched.diagnose.checks import ClusterFacts, ComponentStatus, run_checks
from hetsched.diagnose.findings import Finding, exit_code
from hetsched.scheduler.defaults import SchedulerConf, default_conf, load_conf

console = stdout_console()
errors = stderr_console()
SEVERITY_STYLE = {"ok": "green", "info": "cyan", "warning": "yellow", "error": "red"}

Cluster = Annotated[list[Path] | None, typer.Option(
    "--cluster", "-c", help="embedded cluster (with WORKLOADS): a ClusterSpec or Node objects; repeat it to add a "
    "dump of what runs there now")]
Workloads = Annotated[list[Path] | None, typer.Argument(help="workload YAML files for the embedded cluster")]
SchedulerConfOpt = Annotated[Path | None, typer.Option(
    envvar="HETSCHED_SCHEDULER_CONF", help="the scheduler's configuration (default: hetsched's built-in one)")]
Until = Annotated[float | None, typer.Option(help="embedded: stop the simulation at this simulated time")]
Faults = Annotated[Path | None, typer.Option(help="embedded: fault file")]


def _fail(message: str) -> typer.Exit:
    say(errors, "error", f"{message}")
    return typer.Exit(2)


def _conf(path: Path | None) -> SchedulerConf:
    try:
        return load_conf(path) if path is not None else default_conf()
    except ValueError as exc:
        raise _fail(str(exc)) from None


def _raw_documents(paths: list[Path]) -> list[tuple[str, int, Any]]:
    documents = []
    for path in paths:
        try:
            text = read_text(path)
            docs = safe_load_all(text)
        except (OSError, UnicodeDecodeError, yaml.YAMLError, YamlLimitError) as exc:
            raise _fail(f"{path}: cannot read: {str(exc).splitlines()[0]}") from None
        documents += [(str(path), i, doc) for i, doc in enumerate(docs, start=1)]
    return documents


def embedded_facts(cluster: list[Path], workloads: list[Path], conf: SchedulerConf, until: float | None,
                   faults: Path | None) -> tuple[ClusterFacts, list[Finding]]:
    """Run the workloads on the embedded cluster; the facts of its end state, and a finding per manifest
    that failed validation for another reason than what ``accelerator-limits`` reports."""
    from hetsched.cluster.dump import load_cluster
    from hetsched.sim.faults import load_faults
    from hetsched.sim.simulator import Simulation

    documents = _raw_documents(workloads)
    objects: list[AnyObject] = []
    invalid: list[Finding] = []
    raw: list[tuple[str, dict[str, Any]]] = []
    for source, index, doc in documents:
        if isinstance(doc, dict) and doc.get("kind") in ("Job", "Pod"):
            raw.append((f"{source} document {index}", doc))
        parsed = parse_document(doc, source, index)
        if isinstance(parsed, list):
            if not any("only in requests" in p.message or "requests must equal limits" in p.message for p in parsed):
                invalid += [Finding("manifests", "error", f"{p.kind or '?'}/{p.name or '?'}", str(p),
                                    "fix the manifest (hetsched validate prints every problem)") for p in parsed]
            continue
        objects.append(parsed)
    try:
        start = load_cluster(cluster)
        simulation = Simulation(start.nodes, [*start.state, *objects], conf, until=until,
                                faults=load_faults(faults) if faults is not None else ())
    except (ManifestError, ValueError) as exc:
        problems: list[Problem | str] = list(exc.problems) if isinstance(exc, ManifestError) else [str(exc)]
        for problem in problems[:-1]:
            say(errors, "error", f"{problem}")
        raise _fail(str(problems[-1])) from None
    simulation.run()
    cycles = simulation.scheduler.cycles
    components = [
        ComponentStatus("scheduler", True, f"embedded: ran {cycles} cycle(s), claims schedulerName "
                        f"{', '.join(simulation.scheduler.cache.scheduler_names)}"),
        ComponentStatus("controller", True, "embedded: the Job, PodGroup and fault controllers run in process"),
        ComponentStatus("webhook", True, "embedded: every manifest is validated on load, as the webhook would"),
    ]
    stored = [obj for kind in ("Node", "Pod", "PodGroup", "Queue", "Job", "ConfigMap", "PriorityClass",
                               "PodDisruptionBudget") for obj in simulation.cluster.list(kind)]
    now = max(simulation.clock.now(), until) if until is not None else simulation.clock.now()
    facts = ClusterFacts(objects=stored, raw=raw, components=components, conf=conf, now=now,
                         final=until is None,
                         scheduler_names=tuple(sorted(simulation.scheduler.cache.scheduler_names)))
    return facts, invalid


def _kube_facts(kubeconfig: str | None, server: str | None, token_file: Path | None, ca_file: Path | None,
                lease_namespace: str | None, probe: bool = True, insecure: bool = False,
                context: str | None = None) -> ClusterFacts:
    from hetsched.cluster.facts import kube_facts
    from hetsched.cluster.kubernetes import KubeClient

    try:
        client = KubeClient.connect(kubeconfig, server, str(token_file) if token_file else None,
                                    str(ca_file) if ca_file else None, insecure, context)
        return kube_facts(client, lease_namespace=lease_namespace, probe=probe)
    except Exception as exc:  # no cluster to read: the doctor cannot run, say why
        raise _fail(f"cannot read the cluster: {' '.join(str(exc).split())[:500]}") from None


def _print(findings: list[Finding], as_json: bool, title: str) -> None:
    code = exit_code(findings)
    if as_json:
        print(json.dumps({"mode": title, "exitCode": code, "findings": [f.to_json() for f in findings]}, indent=2))
        return
    console.print(f"hetsched doctor — {title}", style="bold", markup=False)
    marks = {"ok": "✓", "info": "i", "warning": "!", "error": "✗"}
    for finding in findings:
        style = SEVERITY_STYLE[finding.severity]
        console.print(f"{marks[finding.severity]} {finding.severity:<7} {finding.check:<27} {finding.object}",
                      style=style, markup=False, highlight=False)
        if finding.severity != "ok" or finding.evidence:
            console.print(f"    {finding.evidence}", markup=False, highlight=False, soft_wrap=True)
        if finding.fix:
            console.print(f"    fix: {finding.fix}", markup=False, highlight=False, soft_wrap=True)
    counts = {s: sum(1 for f in findings if f.severity == s) for s in ("error", "warning", "info", "ok")}
    console.print(", ".join(f"{n} {s}" for s, n in counts.items()))


def doctor(
    workloads: Workloads = None,
    cluster: Cluster = None,
    node: Annotated[bool, typer.Option("--node", help="check this machine (vendor tools, kubelet) instead")] = False,
    kubeconfig: Kubeconfig = None, context: Context = None, server: Server = None, token_file: TokenFile = None,
    ca_file: CaFile = None, insecure: Insecure = False,
    scheduler_conf: SchedulerConfOpt = None, until: Until = None, faults: Faults = None,
    check: Annotated[list[str] | None, typer.Option(help="run only this check (repeatable)")] = None,
    stuck_after: Annotated[float, typer.Option(help="seconds Pending/Inqueue before a gang counts as stuck")]
    = 300.0,
    lease_namespace: Annotated[str | None, typer.Option(
        help="namespace of the components' Leases (default: found by name in any namespace)")] = None,
    scheduler_name: Annotated[list[str] | None, typer.Option(
        help="schedulerName values hetsched serves (repeatable; default hetsched, volcano)")] = None,
    vendor: Annotated[list[str] | None, typer.Option(help="--node: vendor(s) to check (default: those whose "
                                                          "tool is found)")] = None,
    config: Annotated[Path | None, typer.Option(help="--node with --vendor fake: the chips file")] = None,
    plugin_dir: Annotated[Path, typer.Option(help="--node: kubelet's device-plugin directory")]
    = Path("/var/lib/kubelet/device-plugins"),
    kubelet_config: Annotated[Path, typer.Option(help="--node: kubelet's configuration file")]
    = Path("/var/lib/kubelet/config.yaml"),
    dev_root: Annotated[Path, typer.Option(help="--node: root under which /dev is looked up")] = Path("/"),
    node_name: Annotated[str | None, typer.Option(envvar="NODE_NAME", help="--node: this node's name, to compare "
                                                                            "with its allocatable")] = None,
    as_json: JsonOut = False,
) -> None:
    """Run the troubleshooting checklist on a cluster (embedded or real) or on a node; exit 0/1/2 for
    ok/warning/error."""
    conf = _conf(scheduler_conf)
    if node:
        findings, title = _node_findings(vendor, config, plugin_dir, kubelet_config, dev_root, node_name, check,
                                         kubeconfig, server, token_file, ca_file, scheduler_conf is not None, conf,
                                         insecure)
    else:
        extra: list[Finding] = []
        if cluster:
            facts, extra = embedded_facts(cluster, workloads or [], conf, until, faults)
            title = f"embedded cluster {', '.join(path.name for path in cluster)}"
        else:
            if workloads:
                raise _fail("WORKLOADS are for the embedded cluster: add --cluster SPEC")
            facts = _kube_facts(kubeconfig, server, token_file, ca_file, lease_namespace, insecure=insecure,
                                context=context)
            facts.conf = conf
            title = "Kubernetes cluster"
        if scheduler_name:
            facts.scheduler_names = tuple(scheduler_name)
        facts.stuck_after = stuck_after
        try:
            findings = extra + run_checks(facts, check)
        except ValueError as exc:
            raise _fail(str(exc)) from None
    _print(findings, as_json, title)
    raise typer.Exit(exit_code(findings))


def _node_findings(vendors: list[str] | None, config: Path | None, plugin_dir: Path, kubelet_config: Path,
                   dev_root: Path, node_name: str | None, only: list[str] | None, kubeconfig: str | None,
                   server: str | None, token_file: Path | None, ca_file: Path | None, conf_given: bool,
                   conf: SchedulerConf, insecure: bool = False) -> tuple[list[Finding], str]:
    from hetsched.agents.backends import Backend, make_backend
    from hetsched.agents.doctor import NodeFacts, run_node_checks

    if not vendors:
        vendors = [v for v, tool in (("ascend", "npu-smi"), ("cambricon", "cnmon")) if shutil.which(tool)]
        try:
            import pynvml

            pynvml.nvmlInit()
            pynvml.nvmlShutdown()
            vendors.append("nvidia")
        except Exception:  # no NVIDIA driver: not an NVIDIA node
            pass
    backends: list[Backend] = []
    for vendor in vendors:
        try:
            backends.append(make_backend(vendor, config=config))
        except ValueError as exc:
            raise _fail(str(exc)) from None
    node_object = None
    if node_name:
        try:
            from hetsched.cluster.kubernetes import KubeClient, from_api

            client = KubeClient.connect(kubeconfig, server, str(token_file) if token_file else None,
                                        str(ca_file) if ca_file else None, insecure)
            fetched = from_api("Node", client.request("GET", f"/api/v1/nodes/{node_name}"))
            node_object = fetched if isinstance(fetched, Node) else None
        except Exception as exc:  # no API access on this node: the comparison is skipped, and says so
            say(errors, "warning", f"cannot read Node {node_name}: {exc}")
    numaaware = None
    if conf_given:
        numaaware = any(o.name == "numaaware" for tier in conf.tiers for o in tier.plugins)
    facts = NodeFacts(backends=backends, plugin_dir=plugin_dir, kubelet_config=kubelet_config, dev_root=dev_root,
                      node=node_object, numaaware=numaaware)
    try:
        findings = run_node_checks(facts, only)
    except ValueError as exc:
        raise _fail(str(exc)) from None
    return findings, f"node {node_name or '(this machine)'}"


def _job_key(snapshot_jobs: dict[str, Any], job: str) -> str:
    """``NAME`` or ``NAMESPACE/NAME`` of a Job, PodGroup or plain pod → the PodGroup's key (a Job's or a
    plain pod's PodGroup names it as its owner)."""
    if job in snapshot_jobs:
        return job
    name = job.split("/")[-1]
    namespace = job.split("/")[0] if "/" in job else "default"
    for key, info in snapshot_jobs.items():
        owners = [r.name for r in info.podgroup.metadata.ownerReferences]
        if info.podgroup.metadata.namespace == namespace and (name in owners or info.podgroup.metadata.name == name):
            return str(key)
    known = ", ".join(sorted(snapshot_jobs)[:10]) or "none"
    raise _fail(f"job {job!r}: no such Job or PodGroup waiting or running (known: {known})")


def explain(
    job: Annotated[str, typer.Argument(help="Job or PodGroup: NAME (in -n's namespace) or NAMESPACE/NAME")],
    workloads: Workloads = None,
    cluster: Cluster = None,
    namespace: Namespace = None,
    kubeconfig: Kubeconfig = None, context: Context = None, server: Server = None, token_file: TokenFile = None,
    ca_file: CaFile = None, insecure: Insecure = False,
    scheduler_conf: SchedulerConfOpt = None, until: Until = None, faults: Faults = None,
    node: Annotated[list[str] | None, typer.Option("--node", help="also show this node's chip map (repeatable)")]
    = None,
    as_json: JsonOut = False,
) -> None:
    """Why JOB is pending: per-node reasons aggregated, its queue's status, what would unblock it, and chip
    maps of nodes."""
    from hetsched.scheduler.contract.chips import ChipAccounts, chip_map
    from hetsched.scheduler.contract.reasons import ReasonCode
    from hetsched.scheduler.engine.why import explain_job, settings_of

    conf = _conf(scheduler_conf)
    if cluster:
        facts, _ = embedded_facts(cluster, workloads or [], conf, until, faults)
    else:
        facts = _kube_facts(kubeconfig, server, token_file, ca_file, None, probe=False, insecure=insecure,
                            context=context)
        namespace = Connection(kubeconfig, context, server, token_file, ca_file, insecure).namespace(namespace)
    if "/" not in job and namespace:
        job = f"{namespace}/{job}"
    snapshot = facts.snapshot()
    wanted = job if "/" in job else f"default/{job}"
    if wanted not in snapshot.jobs and wanted in snapshot.missing_groups:
        count = snapshot.missing_groups[wanted]
        said = (f"PodGroup {wanted} does not exist: {count} pending pod(s) name it and wait for it (never placed "
                "alone); the operator that made them creates it, or create it yourself")
        if as_json:
            print(json.dumps({"job": wanted, "phase": "PodGroupMissing", "pending": count, "schedulerSays": [said]},
                             indent=2))
        else:
            console.print(f"{wanted}: {said}", highlight=False, markup=False, soft_wrap=True)
        return
    key = _job_key(snapshot.jobs, job)
    try:
        explanation = explain_job(snapshot, conf, key, facts.now)
    except Exception as exc:  # the scheduler sets such a job aside and goes on; explain says what it hit
        raise _fail(f"{key}: explaining it raised {type(exc).__name__}: {str(exc)[:300]} (the scheduler sets such a "
                    f"job aside, retries it with back-off and schedules every other job; its PodGroup's "
                    f"Unschedulable condition and SchedulingError Events carry the same error)") from None
    accounts = ChipAccounts(settings_of(conf))
    maps = {name: chip_map(snapshot, name, accounts) for name in node or []}
    missing = [name for name in node or [] if name not in snapshot.nodes.index]
    if missing:
        raise _fail(f"--node: no node named {', '.join(missing)}")
    if as_json:
        print(json.dumps({
            "job": explanation.job, "phase": explanation.phase, "queue": explanation.queue,
            "minMember": explanation.min_member, "ready": explanation.ready, "pending": explanation.pending,
            "schedulerSays": explanation.scheduler_says,
            "tasks": [{"task": g.task, "pending": g.pending, "request": g.request,
                       "nodes": [{"count": n, "reason": str(r), "code": r.code.value} for n, r in g.nodes]}
                      for g in explanation.groups],
            "queueStatus": explanation.queue_status, "unblock": explanation.unblock,
            "network": [{"tier": t.tier, "freeServers": t.free, "wholeFreeHyperNodes": t.whole, "split": t.split(),
                         "serversNeeded": t.needed, "strandedServers": t.fragmented} for t in explanation.network],
            "chipMaps": {name: [{"resource": r, "chips": c, "summary": s} for r, c, s in rows]
                         for name, rows in maps.items()},
        }, indent=2))
        return
    console.print(f"{explanation.job}: {explanation.phase}, {explanation.ready}/{explanation.min_member} "
                  f"pods of the gang placed, {explanation.pending} pending, queue {explanation.queue}",
                  highlight=False, markup=False, soft_wrap=True)
    for said in explanation.scheduler_says:
        console.print(f"  scheduler: {said}", highlight=False, markup=False, soft_wrap=True)
    for group in explanation.groups:
        request = ", ".join(f"{k}: {v}" for k, v in group.request.items())
        console.print(f"  task {group.task} ({group.pending} pending, each {request}):", highlight=False, markup=False)
        for count, reason in group.nodes:
            shown = "can take a pod now" if reason.code is ReasonCode.FITS else str(reason)
            console.print(f"    {count:>6} node(s): {shown}", highlight=False, markup=False, soft_wrap=True)
    for tier in explanation.network:
        console.print(f"  network tier {tier.tier}: {tier.free} free server(s) in {tier.domains_with_free} "
                      f"HyperNode(s) ({tier.split() or 'none'}), {tier.whole} wholly free; the gang needs "
                      f"{tier.needed} in one", highlight=False, markup=False, soft_wrap=True)
    status = explanation.queue_status

    def amounts(key: str, empty: str) -> str:
        found = status.get(key)
        if not isinstance(found, dict):
            return empty
        return ", ".join(f"{resource} {amount}" for resource, amount in found.items()) or empty

    console.print(f"  queue {status['name']}: {status['state']}, weight {status['weight']:g}"
                  f"{', OVERUSED' if status['overused'] else ''}; allocated {amounts('allocated', 'nothing')}; "
                  f"deserved {amounts('deserved', '–')}; capability {amounts('capability', 'unlimited')}; "
                  f"{status['pendingJobs']} job(s) waiting, {status['runningJobs']} running",
                  highlight=False, markup=False, soft_wrap=True)
    for hint in explanation.unblock:
        console.print(f"  → {hint}", highlight=False, markup=False, soft_wrap=True)
    for name, rows in maps.items():
        for resource, chips, summary in rows:
            console.print(f"  {name} {resource}: [{chips}]  {summary}", highlight=False, markup=False, soft_wrap=True)
        if not rows:
            console.print(f"  {name}: no accelerator chips", highlight=False, markup=False)
    if maps:
        console.print("  legend: # held, % shared, + carved into partitions, . free, X unhealthy, N network-unhealthy, "
                      "| link domain",
                      highlight=False, markup=False, soft_wrap=True)
