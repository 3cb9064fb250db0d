"""``hetsched pending``: the jobs that wait, queue by queue, in the order the scheduler serves them, and why.

Who calls it: users (also as ``kubectl hetsched pending``); ``cli.main`` registers :func:`pending`. What
Kueue users know as the pending-workloads view with positions. The order and the reasons come from
``scheduler.engine.waiting`` on the cluster's snapshot — a real cluster (kubeconfig, ``--context``) or the
embedded one (``--cluster SPEC WORKLOAD…``, after simulating the workloads) — with the scheduler
configuration given (``--scheduler-conf``, default hetsched's).
"""

from __future__ import annotations

import json
from typing import Annotated

import typer
from rich.table import Table

from hetsched.cli.connection import (
    AllNamespaces,
    CaFile,
    Context,
    Insecure,
    JsonOut,
    Kubeconfig,
    Namespace,
    Server,
    TokenFile,
)
from hetsched.cli.doctor import Cluster, Faults, SchedulerConfOpt, Until, Workloads, _conf, _kube_facts, embedded_facts
from hetsched.cli.output import stdout_console

console = stdout_console()


def pending(
    workloads: Workloads = None,
    cluster: Cluster = None,
    namespace: Namespace = None, all_namespaces: AllNamespaces = False,
    queue: Annotated[str | None, typer.Option(help="only this queue")] = None,
    kubeconfig: Kubeconfig = None, context: Context = None, server: Server = None, token_file: TokenFile = None,
    ca_file: CaFile = None, insecure: Insecure = False,
    scheduler_conf: SchedulerConfOpt = None, until: Until = None, faults: Faults = None,
    as_json: JsonOut = False,
) -> None:
    """The waiting jobs, queue by queue in the order the scheduler serves them, with their position in their
    queue and why each waits."""
    from hetsched.cli.connection import Connection
    from hetsched.scheduler.engine.waiting import waiting_line

    conf = _conf(scheduler_conf)
    if cluster:
        facts, _ = embedded_facts(cluster, workloads or [], conf, until, faults)
        wanted_namespace = None if all_namespaces or not namespace else namespace
    else:
        link = Connection(kubeconfig, context, server, token_file, ca_file, insecure)
        facts = _kube_facts(kubeconfig, server, token_file, ca_file, None, probe=False, insecure=insecure,
                            context=context)
        wanted_namespace = None if all_namespaces else link.namespace(namespace)
    line, notes = waiting_line(facts.snapshot(), conf, facts.now)
    shown = [w for w in line if (wanted_namespace is None or w.job.split("/", 1)[0] == wanted_namespace)
             and (queue is None or w.queue == queue)]
    if as_json:
        print(json.dumps({"notes": notes, "waiting": [
            {"job": w.job, "queue": w.queue, "queueRank": w.queue_rank, "positionInQueue": w.position,
             "phase": w.phase, "priority": w.priority, "pendingPods": w.pending, "minMember": w.min_member,
             "ready": w.ready, "why": w.why} for w in shown]}, indent=2))
        return
    for note in notes:
        console.print(f"note: {note}", highlight=False, soft_wrap=True)
    if not shown:
        console.print("No job is waiting.", highlight=False)
        return
    table = Table(box=None, pad_edge=False)
    for column in ("QUEUE", "#", "JOB", "PHASE", "PRIORITY", "READY", "PENDING", "WHY"):
        table.add_column(column, no_wrap=column != "WHY", overflow="fold")
    for w in shown:
        table.add_row(f"{w.queue_rank}. {w.queue}", str(w.position), w.job, w.phase, str(w.priority),
                      f"{w.ready}/{w.min_member}", str(w.pending), w.why)
    console.print(table)
