"""``hetsched``: validate manifests, simulate workloads, run the demo, benchmark the engine.

Who calls it: users, the README's commands, CI. Invalid input (manifests, cluster specs, scheduler
configuration) prints one line per problem, naming file, document, object and field, and exits with
code 2 — never a traceback.
"""

from __future__ import annotations

import gc
import json
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

from hetsched.api.manifest import ManifestError, Problem, check_cluster, load_files
from hetsched.api.objects import AnyObject, ConfigMap, Node
from hetsched.cli import agents, doctor, install, pending, serve, sweep, usage
from hetsched.cli.devices import devices_app
from hetsched.cli.jobs import job_app
from hetsched.cli.options import DEFAULT_TRACE_DIR, check_jobs, parse_seeds
from hetsched.cli.output import say, stderr_console, stdout_console, write_file, writing
from hetsched.cli.queues import queue_app
from hetsched.ports import CYCLE_BUDGET_MS
from hetsched.scheduler.defaults import ConfError, SchedulerConf, load_conf, parse_conf
from hetsched.sim.results import Results

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="hetsched: a Volcano-compatible batch scheduler for Ascend, Cambricon, NVIDIA and CPU "
                       "clusters, with a simulator that runs the same scheduler code.")
bench_app = typer.Typer(no_args_is_help=True, help="Benchmarks (see bench/README.md).")
app.add_typer(bench_app, name="bench")
app.add_typer(devices_app, name="devices")
app.command("device-plugin")(agents.device_plugin)
app.command("node-agent")(agents.node_agent)
app.command("scheduler")(serve.scheduler)
app.command("controller")(serve.controller)
app.command("webhook")(serve.webhook)
app.command("doctor")(doctor.doctor)
app.command("explain")(doctor.explain)
app.command("pending")(pending.pending)
app.add_typer(job_app, name="job")
app.add_typer(queue_app, name="queue")
app.command("install")(install.install)
app.command("sweep")(sweep.sweep)
app.command("families")(sweep.families)
app.command("usage")(usage.usage)
console = stdout_console()
errors = stderr_console()


@contextmanager
def user_errors() -> Iterator[None]:
    """Turn input errors into one line each on stderr and exit code 2."""
    try:
        yield
    except ManifestError as exc:
        for problem in exc.problems:
            say(errors, "error", f"{problem}")
        raise typer.Exit(2) from None
    except (ConfError, ValueError) as exc:
        say(errors, "error", f"{exc}")
        raise typer.Exit(2) from None


@app.callback()
def _process_settings() -> None:
    """Settings for every command: fewer cyclic-GC passes. hetsched allocates millions of small, long-lived,
    acyclic objects (pods, their specs); CPython's default thresholds rescan them many times over."""
    gc.set_threshold(50_000, 20, 20)


@app.command()
def validate(files: Annotated[list[Path], typer.Argument(help="YAML manifests (multi-document)")]) -> None:
    """Validate Jobs, PodGroups, Queues, Pods, Nodes, PriorityClasses, scheduler ConfigMaps (Volcano's
    ``volcano-scheduler.conf``, parsed as the scheduler would) and cluster specs; exit 0 if valid, 2 if not."""
    from hetsched.cluster.spec import is_cluster_spec, load_cluster_spec

    specs = [f for f in files if is_cluster_spec(f)]
    with user_errors():
        problems = []
        for spec in specs:
            try:
                load_cluster_spec(spec)
            except ManifestError as exc:
                problems.extend(exc.problems)
        try:
            notes: list[str] = []
            objects = load_files([f for f in files if f not in specs], check=partial(_checked, notes))
        except ManifestError as exc:
            problems.extend(exc.problems)
        if problems:
            raise ManifestError(problems)
        for note in notes:
            say(errors, "warning", note)
    kinds: dict[str, int] = {"ClusterSpec": len(specs)} if specs else {}
    for obj in objects:
        kinds[obj.kind] = kinds.get(obj.kind, 0) + 1
    summary = ", ".join(f"{n} {k}" for k, n in sorted(kinds.items())) or "no objects"
    console.print(f"valid: {summary} in {len(files)} file(s)")


SCHEDULER_CONF_KEYS = ("volcano-scheduler.conf", "scheduler.conf")
"""ConfigMap keys holding a scheduler configuration: Volcano's (its install mounts ``volcano-scheduler.conf``)
and hetsched's (``hetsched-scheduler-conf``'s ``scheduler.conf``)."""


def _checked(notes: list[str], source: str, index: int, obj: AnyObject) -> list[Problem]:
    """What ``validate`` checks beyond the schema: scheduler ConfigMaps, and pod templates' chip-partition
    requests (``devices.partition_requests``)."""
    from hetsched.devices.partition_requests import problems as partition_problems

    found = [Problem(source, index, obj.kind, obj.metadata.name, where, message)
             for where, message in partition_problems(obj)]
    return found + _scheduler_configmap(notes, source, index, obj)


def _scheduler_configmap(notes: list[str], source: str, index: int, obj: AnyObject) -> list[Problem]:
    """A scheduler ConfigMap's configuration parsed as the scheduler parses it at start: the problem, naming
    the key and the field, or nothing (what it turns off that does nothing here is added to ``notes``)."""
    if not isinstance(obj, ConfigMap):
        return []
    found = []
    for key in SCHEDULER_CONF_KEYS:
        if key in obj.data:
            where = f'data["{key}"]'
            try:
                conf = parse_conf(obj.data[key], where)
            except ConfError as exc:
                found.append(Problem(source, index, "ConfigMap", obj.metadata.name, "", str(exc)))
                continue
            notes.extend(f"{source}: document {index} (ConfigMap/{obj.metadata.name}): {note}" for note in conf.notes)
    return found


def _conf(path: Path | None) -> SchedulerConf | None:
    if path is None:
        return None
    conf = load_conf(path)
    for note in conf.notes:  # switches that do nothing here: said, never silently ignored
        say(errors, "warning", note)
    return conf


def _run(nodes: list[Node], objects: list[AnyObject], conf: SchedulerConf | None, period: float,
         until: float | None, output: Path | None, quiet: bool, title: str,
         scheduler_names: tuple[str, ...] = ("hetsched", "volcano"), faults: Path | None = None,
         report: Path | None = None, metrics: Path | None = None,
         inputs: list[tuple[str, str]] | None = None, usage_half_life: float = 7 * 86400.0) -> Results:
    from hetsched.metrics.controller import ControllerMetrics
    from hetsched.metrics.scheduler import SchedulerMetrics
    from hetsched.scheduler.engine.why import settings_of
    from hetsched.sim.faults import load_faults
    from hetsched.sim.simulator import Progress as SimProgress
    from hetsched.sim.simulator import Simulation

    observers = None
    if metrics is not None:
        from prometheus_client import CollectorRegistry

        registry = CollectorRegistry()
        observers = (SchedulerMetrics(registry, settings_of(conf) if conf else None), ControllerMetrics(registry))
    simulation = Simulation(nodes, objects, conf, period=period, until=until, scheduler_names=scheduler_names,
                            faults=load_faults(faults) if faults is not None else (), metrics=observers,
                            timeline=report is not None, usage_half_life=usage_half_life)
    with Progress(TextColumn("{task.description}", style="bold", markup=False), BarColumn(), MofNCompleteColumn(),
                  TextColumn("jobs done · sim t={task.fields[now]:.0f}s", markup=False), TimeElapsedColumn(),
                  console=errors, disable=quiet, transient=False) as bar:
        task = bar.add_task(title, total=simulation.total_workloads, now=0.0)

        def update(progress: SimProgress) -> None:
            bar.update(task, completed=progress.finished, total=progress.total, now=progress.now)

        results = simulation.run(update)
    if output is not None:
        write_file(output, json.dumps(results.to_json(), indent=2) + "\n", "results")
    if report is not None:
        from hetsched.sim.report import render

        write_file(report, render(results, title.removeprefix("simulating "), inputs), "report")
    if observers is not None and metrics is not None:
        from hetsched.metrics.serve import write

        with writing(metrics, "metrics"):
            write(observers[0].registry, metrics)
    if not quiet:
        print_summary(results)
        for path, what in ((output, "results"), (report, "report"), (metrics, "metrics")):
            if path is not None:
                console.print(f"{what} written to {path}")
    return results


def _titled(title: str) -> Table:
    """A table whose title stays on one line (rich would wrap it to the width of narrow columns)."""
    return Table(title=Text(title, no_wrap=True, overflow="ignore"), title_justify="left")


def _fmt(value: float | None) -> str:
    return "–" if value is None else f"{value:,.1f}"


def print_summary(results: Results) -> None:
    summary = results.summary
    table = _titled("Jobs by final phase")
    table.add_column("phase")
    table.add_column("jobs", justify="right")
    for phase, count in summary["phases"].items():
        table.add_row(phase, str(count))
    console.print(table)
    timing = _titled("Times (simulated seconds)")
    for column in ("", "mean", "p50", "p95", "jobs"):
        timing.add_column(column, justify="right" if column else "left")
    for label, key in (("queue wait", "queueWaitSeconds"), ("completion time", "completionSeconds")):
        stats = summary[key]
        timing.add_row(label, _fmt(stats["mean"]), _fmt(stats["p50"]), _fmt(stats["p95"]), str(stats["count"]))
    console.print(timing)
    allocation = _titled("Accelerator allocation (chip-seconds held / available)")
    allocation.add_column("accelerator")
    allocation.add_column("chips", justify="right")
    allocation.add_column("allocated", justify="right")
    for kind, ratio in summary["allocationRatio"].items():
        allocation.add_row(kind, str(results.cluster["acceleratorChips"].get(kind, 0)), f"{ratio:.1%}")
    console.print(allocation)
    if summary["unschedulableReasons"]:
        reasons = _titled("Unschedulable reasons (jobs that met each at least once)")
        reasons.add_column("reason")
        reasons.add_column("jobs", justify="right")
        for reason, count in list(summary["unschedulableReasons"].items())[:12]:
            reasons.add_row(reason, str(count))
        console.print(reasons)
    if results.queues:
        shares = _titled("Queues (dominant share of the cluster, time-weighted mean)")
        for column in ("queue", "allocated", "deserved"):
            shares.add_column(column, justify="left" if column == "queue" else "right")
        for name, data in results.queues.items():
            shares.add_row(name, f"{data['meanAllocated']:.1%}", f"{data['meanDeserved']:.1%}")
        console.print(shares)
        if summary["fairnessIndex"] is not None:
            console.print(f"fairness (Jain's index of allocated/deserved over queues, time-weighted mean): "
                          f"{summary['fairnessIndex']:.3f}")
    if results.faults:
        faults = _titled("Faults")
        for column in ("time", "target", "kind", "jobs hit", "recovered after", "fault retries", "chip-seconds lost"):
            faults.add_column(column, justify="left" if column in ("target", "kind") else "right")
        for fault in results.faults:
            recover = fault["time_to_recover_s"]
            faults.add_row(f"{fault['time']:,.0f}s", fault["target"], fault["kind"], str(len(fault["jobs"])),
                           "—" if recover is None else f"{recover:,.0f}s", str(fault["retries_used"]),
                           f"{fault['lost_chip_seconds']:,.0f}")
        console.print(faults)
    if summary["evictions"]["total"]:
        evictions = _titled("Evictions")
        for column in ("action", "pods", "jobs", "chip-seconds lost"):
            evictions.add_column(column, justify="left" if column == "action" else "right")
        for action, count in summary["evictions"]["byAction"].items():
            evictions.add_row(action, str(count), str(summary["evictions"]["jobsByAction"].get(action, 0)),
                              f"{summary['evictions']['lostChipSecondsByAction'].get(action, 0.0):,.0f}")
        console.print(evictions)
    console.print(f"simulated {summary['simulatedSeconds']:,.0f}s in {summary['schedulerCycles']} scheduler "
                  f"cycles, {summary['binds']} binds")
    if summary["waiting"]:
        stuck = summary["endedBy"] == "no more events"
        when = " (nothing left that could change that)" if stuck else f" by t={summary['simulatedSeconds']:,.0f}s"
        waiting = _titled("Jobs that never got their gang" + when)
        for column in ("job", "queue", "phase", "ran before", "why"):
            waiting.add_column(column)
        for job in summary["waiting"]:
            waiting.add_row(f"{job['namespace']}/{job['name']}", job["queue"], job["phase"],
                            "yes" if job["ran"] else "no", job["reason"] or "—")
        console.print(waiting)


@app.command()
def simulate(
    workloads: Annotated[list[Path], typer.Argument(help="workload YAML files (Jobs, Pods, Queues, …)")],
    cluster: Annotated[list[Path], typer.Option(
        "--cluster", "-c", help="the cluster: a ClusterSpec (node pools), or Nodes as kubectl get nodes -o yaml "
        "prints; repeat it to add a dump of what runs there now (Pods, PodGroups, Queues …)")],
    output: Annotated[Path | None, typer.Option("--output", "-o", help="write results.json here")] = None,
    scheduler_conf: Annotated[Path | None, typer.Option(help="volcano-scheduler.conf-style YAML")] = None,
    period: Annotated[float, typer.Option(help="scheduling period, simulated seconds")] = 1.0,
    until: Annotated[float | None, typer.Option(help="stop at this simulated time")] = None,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="no progress bar or summary")] = False,
    scheduler_name: Annotated[list[str] | None, typer.Option(
        help="schedulerName values hetsched claims (repeatable; default: hetsched and volcano)")] = None,
    faults: Annotated[Path | None, typer.Option(help="fault file: chip faults, NotReady, drains at given times")]
    = None,
    report: Annotated[Path | None, typer.Option(help="write a self-contained HTML report with plots here")] = None,
    metrics: Annotated[Path | None, typer.Option(
        help="write the scheduler's and controllers' Prometheus metrics (text format) here at the end")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print results.json to stdout instead of the tables")]
    = False,
    usage_half_life: Annotated[float, typer.Option(
        min=60, max=366 * 86400, help="seconds in which a queue's past usage counts half (fair share by usage; "
        "as hetsched controller --usage-half-life)")] = 7 * 86400.0,
) -> None:
    """Replay workloads on an embedded cluster with the real scheduler and controllers.

    Exit 0 when the run ends; 3 when it ran out of events with jobs still waiting for their gang (named,
    with why, and listed in results.json under summary.waiting); 2 on bad input."""
    from hetsched.cluster.dump import load_cluster

    if report is not None:
        from hetsched.cli.extras import need

        need("report", "simulate --report")
    with user_errors():
        start = load_cluster(cluster)
        objects = [*start.state, *load_files(workloads)]
        check_cluster([*start.nodes, *objects])
        conf = _conf(scheduler_conf)
        names = tuple(scheduler_name) if scheduler_name else ("hetsched", "volcano")
        title = f"simulating {', '.join(path.name for path in cluster)}"
        inputs = [("cluster", ", ".join(map(str, cluster))), ("workloads", ", ".join(map(str, workloads))),
                  ("faults", str(faults) if faults else "none"),
                  ("scheduler configuration", str(scheduler_conf) if scheduler_conf else "hetsched's default"),
                  ("ran until", f"{until:g} s (simulated)" if until is not None else "the last event"),
                  ("cycle period", f"{period:g} s"), ("schedulerName", ", ".join(names))]
        results = _run(start.nodes, objects, conf, period, until, output, quiet or as_json, title, names, faults,
                       report, metrics, inputs, usage_half_life)
    if as_json:
        sys.stdout.write(json.dumps(results.to_json(), indent=2) + "\n")
    _exit_if_stuck(results)


def _exit_if_stuck(results: Results) -> None:
    """Exit 3 when the run ran out of events (nothing more can happen) with jobs still waiting."""
    summary = results.summary
    if summary["endedBy"] != "no more events" or not summary["waiting"]:
        return
    never = sum(1 for job in summary["waiting"] if not job["ran"])
    detail = "; ".join(f"{j['namespace']}/{j['name']}: {j['reason'] or 'no reason'}" for j in summary["waiting"][:10])
    more = "; …" if len(summary["waiting"]) > 10 else ""
    say(errors, "stuck", f"the run ended with {len(summary['waiting'])} job(s) still waiting ({never} never ran): "
                         f"{detail}{more}")
    raise typer.Exit(3)


@app.command()
def demo(
    output: Annotated[Path | None, typer.Option("--output", "-o", help="write results.json here")] = None,
    seed: Annotated[int, typer.Option(help="seed of the background workload")] = 7,
    export: Annotated[Path | None, typer.Option(help="write the scenario's YAML files to this folder and exit")] = None,
    scheduler_conf: Annotated[Path | None, typer.Option(help="volcano-scheduler.conf-style YAML")] = None,
    quiet: Annotated[bool, typer.Option("--quiet", "-q")] = False,
    report: Annotated[Path | None, typer.Option(help="write a self-contained HTML report with plots here")] = None,
) -> None:
    """Run the built-in scenario: the seed articles' jobs and a background mix on the mixed cluster."""
    import yaml

    from hetsched.sim import demo as scenario

    with user_errors():
        if export is not None:
            with writing(export, "scenario"):
                export.mkdir(parents=True, exist_ok=True)
            write_file(export / "cluster.yaml", scenario._example("clusters/mixed.yaml"), "scenario")
            write_file(export / "seeds.yaml", scenario._example("workloads/seeds.yaml"), "scenario")
            write_file(export / "background.yaml",
                       yaml.safe_dump_all(scenario.background_documents(seed), sort_keys=False), "scenario")
            console.print(f"wrote {export}/cluster.yaml, seeds.yaml, background.yaml; run: hetsched simulate "
                          f"--cluster {export}/cluster.yaml {export}/background.yaml {export}/seeds.yaml")
            return
        inputs = [("cluster", "the built-in mixed cluster (hetsched demo --export DIR writes it as cluster.yaml)"),
                  ("workloads", f"the seed articles' jobs and a background mix (seed {seed})"),
                  ("scheduler configuration", str(scheduler_conf) if scheduler_conf else "hetsched's default")]
        results = _run(scenario.demo_nodes(), scenario.demo_workloads(seed), _conf(scheduler_conf), 1.0, None,
                       output, quiet, "demo: mixed Ascend/MLU/GPU/CPU cluster", report=report, inputs=inputs)
    bert = next((j for j in results.jobs if j["name"] == "ascend-bert-pretrain"), None)
    if bert is not None and not quiet:
        nodes = sorted({p["node"] for p in bert["pods"] if p["node"]})
        console.print(f"seed BERT job: {bert['phase']}, 8 workers on {', '.join(nodes) or 'no node'}")
    _exit_if_stuck(results)


def _print_figures(figures: dict[str, Any], json_out: Path | None) -> None:
    """A benchmark's figures: printed as JSON, and written to ``--json`` when given."""
    text = json.dumps(figures, indent=2)
    if json_out is not None:
        write_file(json_out, text + "\n", "figures")
    console.print_json(text)


@bench_app.command("engine")
def bench_engine(
    nodes: Annotated[int, typer.Option(help="nodes in the synthetic cluster")] = 10_000,
    pods: Annotated[int, typer.Option(help="pending pods (in jobs of 1–128 pods)")] = 100_000,
    json_out: Annotated[Path | None, typer.Option("--json", help="write the figures here")] = None,
    naive_seconds: Annotated[float, typer.Option(help="time budget for the per-pod baseline sample")] = 20.0,
    seed: Annotated[int, typer.Option()] = 1,
    topology: Annotated[bool, typer.Option(
        help="chip inventories with server topology on every accelerator node (HCCS, MLU-Link, NVLink)")] = False,
    network: Annotated[bool, typer.Option(
        help="a 3-tier HyperNode tree (16/4/8) and networkTopology bounds on 3 in 5 multi-pod accelerator jobs")]
    = False,
) -> None:
    """Drain a synthetic pending backlog with the scheduler engine and with a per-pod, per-node loop."""
    from hetsched.benchmark.engine import run_engine_benchmark

    with user_errors():
        figures = run_engine_benchmark(nodes, pods, naive_seconds=naive_seconds, seed=seed, topology=topology,
                                       network=network)
    _print_figures(figures, json_out)


@bench_app.command("latency")
def bench_latency(
    nodes: Annotated[int | None, typer.Option(help="nodes [default: 10,000; 1,000 with --apiserver]")] = None,
    running: Annotated[int | None, typer.Option(help="pods kept running, the steady state [default: 10 per node]")]
    = None,
    arrival_rate: Annotated[float | None, typer.Option(
        help="pods per second arriving and finishing, in gangs of 1–32 [default: 1,000; 100 with --apiserver]")]
    = None,
    seconds: Annotated[float, typer.Option(help="how long jobs arrive")] = 10.0,
    seed: Annotated[int, typer.Option()] = 1,
    apiserver: Annotated[bool, typer.Option(
        help="through a real kube-apiserver and the hetsched scheduler process (scripts/provision-kube.sh)")]
    = False,
    collector: Annotated[str, typer.Option(
        help="scheduled (as the scheduler process: between cycles, old objects frozen), automatic (CPython's "
             "own collections only) or off; embedded runs only")] = "scheduled",
    cycle_budget: Annotated[float, typer.Option(
        help="milliseconds after which a cycle starts no new job, as the scheduler process's --cycle-budget "
             "(0: no limit); embedded runs only")] = CYCLE_BUDGET_MS,
    json_out: Annotated[Path | None, typer.Option("--json", help="write the figures here")] = None,
) -> None:
    """Time from a job's arrival to its gang's bind in a busy steady state: the scheduler's own work on the
    embedded cluster, or end to end through a real API server."""
    from hetsched.benchmark.latency import run_latency_benchmark

    size = nodes if nodes is not None else (1_000 if apiserver else 10_000)
    kept = running if running is not None else 10 * size
    rate = arrival_rate if arrival_rate is not None else (100.0 if apiserver else 1_000.0)
    with user_errors():
        if apiserver:
            from hetsched.benchmark.latency import check_sizes
            from hetsched.benchmark.latency_live import run_live_latency_benchmark

            check_sizes(size, kept, rate, seconds)
            if collector != "scheduled" or cycle_budget != CYCLE_BUDGET_MS:
                raise ValueError("bench latency: --collector and --cycle-budget apply to embedded runs only (the "
                                 "scheduler process runs with its own)")
            try:
                figures = run_live_latency_benchmark(size, kept, rate, seconds=seconds, seed=seed)
            except RuntimeError as exc:  # no binaries here, or the scheduler process never bound anything
                say(errors, "error", f"{exc}")
                raise typer.Exit(1) from None
        else:
            figures = run_latency_benchmark(size, kept, rate, seconds=seconds, seed=seed, collector=collector,
                                            cycle_budget_ms=cycle_budget)
    _print_figures(figures, json_out)


@bench_app.command("fgd")
def bench_fgd(
    pods: Annotated[str, typer.Option(help="pod list: csv/openb_pod_list_<NAME>.csv")] = "default",
    trace_dir: Annotated[Path, typer.Option(help="the alibaba-gpu-v2023 folder")] = DEFAULT_TRACE_DIR,
    nodes: Annotated[int, typer.Option(help="GPU nodes drawn from the trace's node list per seed")] = 100,
    seeds: Annotated[str, typer.Option(help="seeds, e.g. 1-6")] = "1-6",
    batch: Annotated[int, typer.Option(help="pods arriving per scheduling cycle")] = 50,
    json_out: Annotated[Path | None, typer.Option("--json", help="write the figures here")] = None,
) -> None:
    """The fgd plugin in the simulator on an openb pod list: unallocated GPU % at 100 % arrived without fgd,
    and with its typical pods at the published cut, the full distribution, and its default rule."""
    from hetsched.replay.fgd_plugin import run_fgd_benchmark
    from hetsched.replay.openb import load_nodes, load_pods
    from hetsched.replay.sweep import NODE_LIST, pod_lists

    folder = trace_dir / "csv"
    with user_errors():  # a TraceError is a ValueError
        (name,) = pod_lists(trace_dir, pods.split(",")[0])  # a pod list that exists, by its name only
        report = run_fgd_benchmark(load_nodes(folder / NODE_LIST), load_pods(folder / f"openb_pod_list_{name}.csv"),
                                   nodes, parse_seeds(seeds), batch)
    _print_figures(report, json_out)


@bench_app.command("memory")
def bench_memory(
    nodes: Annotated[int, typer.Option(help="nodes in the synthetic cluster")] = 10_000,
    pods: Annotated[int, typer.Option(help="running pods (the latency benchmark's jobs, all bound)")] = 100_000,
    seed: Annotated[int, typer.Option()] = 1,
    json_out: Annotated[Path | None, typer.Option("--json", help="write the figures here")] = None,
) -> None:
    """Bytes per running pod: the embedded store, the scheduler's cache, and the informer of the scheduler
    process (the same pods as the API server returns them)."""
    from hetsched.benchmark.memory import run_memory_benchmark

    with user_errors():
        figures = run_memory_benchmark(nodes, pods, seed)
    _print_figures(figures, json_out)


@bench_app.command("metrics")
def bench_metrics(
    nodes: Annotated[int, typer.Option(help="nodes in the synthetic cluster")] = 10_000,
    pods: Annotated[int, typer.Option(help="pending pods (in jobs of 1–128 pods)")] = 100_000,
    json_out: Annotated[Path | None, typer.Option("--json", help="write the figures here")] = None,
    seed: Annotated[int, typer.Option()] = 1,
) -> None:
    """What Prometheus metrics cost: the same backlog drained with and without them, and one scrape."""
    from hetsched.benchmark.metrics import run_metrics_benchmark

    with user_errors():
        figures = run_metrics_benchmark(nodes, pods, seed=seed)
    _print_figures(figures, json_out)


@bench_app.command("live")
def bench_live(
    nodes: Annotated[int, typer.Option(help="fake nodes on the API server")] = 1000,
    pods: Annotated[int, typer.Option(help="pending pods per binder")] = 10_000,
    json_out: Annotated[Path | None, typer.Option("--json", help="write the figures here")] = None,
    qps: Annotated[float, typer.Option(help="client QPS for every binder")] = 1000.0,
    burst: Annotated[int, typer.Option(help="client burst for every binder")] = 1000,
    workers: Annotated[int, typer.Option(help="bind threads (hetsched and the raw binder)")] = 16,
) -> None:
    """On a real kube-apiserver (provisioned from the cached build): hetsched vs kube-scheduler v1.20.2 vs a
    raw binder, pods bound per second."""
    from hetsched.benchmark.live import check_live_sizes, run_live_benchmark

    with user_errors():
        check_live_sizes(nodes, pods, qps, burst, workers)
    try:
        figures = run_live_benchmark(nodes, pods, qps=qps, burst=burst, workers=workers)
    except RuntimeError as exc:
        say(errors, "error", f"{exc}")
        raise typer.Exit(2) from None
    _print_figures(figures, json_out)


@bench_app.command("ascend")
def bench_ascend(
    nodes: Annotated[int, typer.Option(help="Ascend 910 x8 nodes")] = 64,
    seeds: Annotated[str, typer.Option(help="seeds, e.g. 1-10")] = "1-10",
    json_out: Annotated[Path | None, typer.Option("--json", help="write the figures here")] = None,
) -> None:
    """Compare ascend-volcano-compat with ascend-hccs on mixed 1/2/4/8-chip jobs (admitted, stranded)."""
    from hetsched.benchmark.ascend import run_ascend_benchmark

    with user_errors():
        report = run_ascend_benchmark(nodes, parse_seeds(seeds))
    if json_out is not None:
        write_file(json_out, json.dumps(report, indent=2) + "\n", "report")
    table = _titled(f"Ascend 910 x8 policies, {nodes} nodes, seeds {seeds} (mean ± std)")
    table.add_column("policy")
    metrics = list(next(iter(report["policies"].values())))
    for metric in metrics:
        table.add_column(metric.replace("_", " "), justify="right")
    for policy, values in report["policies"].items():
        table.add_row(policy, *(f"{values[m]['mean']:.1f} ± {values[m]['std']:.1f}" for m in metrics))
    console.print(table)




@app.command("replay-openb")
def replay_openb(
    pods: Annotated[str, typer.Option(help="pod list: csv/openb_pod_list_<NAME>.csv")] = "default",
    trace_dir: Annotated[Path, typer.Option(help="the alibaba-gpu-v2023 folder")] = DEFAULT_TRACE_DIR,
    policy: Annotated[str, typer.Option(help="fgd, bestfit, dotprod, gpupacking, gpuclustering, random, "
                                             "fgd-full, fgd-cpufit, fgd-blend, fgd-adaptive, best (hetsched's "
                                             "recommended: fgd-adaptive), all, or a comma list")
                      ] = "all",
    seeds: Annotated[str, typer.Option(help="shuffle seeds, e.g. 42-51")] = "42-51",
    json_out: Annotated[Path | None, typer.Option("--json", help="write the figures here")] = None,
    plot_out: Annotated[Path | None, typer.Option("--plot", help="write the allocation curve (PNG) here")] = None,
    jobs: Annotated[int | None, typer.Option(
        "--jobs", "-j", help="replays run at once, one process each [default: the machine's cores]")] = None,
) -> None:
    """Replay Alibaba's openb GPU trace the published way (arrival only, 130 % inflation, shuffled per seed)
    and report unallocated GPUs at 100 % arrived demand per policy."""
    from hetsched.replay.report import plot, resolve_policies, run_replay

    if plot_out is not None:
        from hetsched.cli.extras import need

        need("report", "replay-openb --plot")
    with user_errors():  # a TraceError is a ValueError
        report = run_replay(trace_dir, pods, resolve_policies(policy), parse_seeds(seeds), workers=check_jobs(jobs))
    if json_out is not None:
        write_file(json_out, json.dumps(report, indent=2) + "\n", "report")
    if plot_out is not None:
        with writing(plot_out, "plot"):
            plot(report, plot_out)
    table = _titled(f"openb {pods}: unallocated GPU % at 100 % arrived (seeds {seeds})")
    for column in ("policy", "mean ± std", "published"):
        table.add_column(column, justify="left" if column == "policy" else "right")
    for name, values in sorted(report["policies"].items(), key=lambda kv: kv[1]["unallocated_gpu_pct_at_100"]["mean"]):
        stats = values["unallocated_gpu_pct_at_100"]
        published = values.get("published_default")
        shown = "–" if published is None else f"{published:.2f}"
        table.add_row(name, f"{stats['mean']:.2f} ± {stats['std']:.2f}", shown)
    console.print(table)


def main() -> None:  # pragma: no cover - console entry point
    app()


if __name__ == "__main__":  # pragma: no cover
    sys.exit(app())
