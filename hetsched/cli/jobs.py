"""``hetsched job list|view|suspend|resume|delete``: Volcano Jobs on a real cluster, with ``vcctl job``'s verbs.

Who calls it: users (also as ``kubectl hetsched job …``); ``cli.main`` registers :data:`job_app`.

- ``suspend`` and ``resume`` create a Command (``bus.volcano.sh/v1alpha1``, AbortJob / ResumeJob) in the
  Job's namespace, as vcctl does; the job controller applies it and deletes it. RBAC decides who may: the
  command needs ``create`` on ``commands`` there, nothing more.
- ``view`` shows the Job's phase and counts, its PodGroup's verdict, and its latest Events.
- Every answer is read from the API server as it is; a Job the server holds that hetsched's models refuse
  is listed with its raw phase, never a traceback. Errors are one line, exit 2.
"""

from __future__ import annotations

import json
import time
from typing import Annotated, Any

import typer
from rich.table import Table

from hetsched.cli.connection import (
    AllNamespaces,
    CaFile,
    Connection,
    Context,
    Insecure,
    JsonOut,
    Kubeconfig,
    Namespace,
    Server,
    TokenFile,
    fail,
)
from hetsched.cli.output import stdout_console

job_app = typer.Typer(no_args_is_help=True, help="Volcano Jobs: list, view, suspend, resume, delete (vcctl job).")
console = stdout_console()
JOBS = "/apis/batch.volcano.sh/v1alpha1"
Name = Annotated[str, typer.Argument(help="the Job's name")]


def age(created: str | None, now: float | None = None) -> str:
    """kubectl's AGE: ``45s``, ``12m``, ``3h``, ``5d`` from an RFC 3339 creation time."""
    from hetsched.api.times import to_epoch

    stamp = to_epoch(created) if created else None
    if not isinstance(stamp, int | float):
        return "-"
    seconds = max(0.0, (time.time() if now is None else now) - stamp)
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{int(seconds // size)}{unit}"
    return f"{int(seconds)}s"


def _get(client: Any, path: str, what: str) -> dict[str, Any]:
    from hetsched.ports import NotFound

    try:
        found: dict[str, Any] = client.request("GET", path)
    except NotFound:
        raise fail(f"{what} not found") from None
    except Exception as exc:  # forbidden, unreachable: one line
        raise fail(f"{what}: {' '.join(str(exc).split())[:300]}") from None
    return found


def _row(job: dict[str, Any]) -> dict[str, Any]:
    meta, spec, status = job.get("metadata") or {}, job.get("spec") or {}, job.get("status") or {}
    tasks = spec.get("tasks") or []
    return {"namespace": meta.get("namespace", ""), "name": meta.get("name", ""),
            "phase": ((status.get("state") or {}).get("phase")) or "Pending", "queue": spec.get("queue") or "default",
            "minAvailable": spec.get("minAvailable", 0),
            "replicas": sum(int(t.get("replicas") or 0) for t in tasks if isinstance(t, dict)),
            "pending": status.get("pending", 0), "running": status.get("running", 0),
            "succeeded": status.get("succeeded", 0), "failed": status.get("failed", 0),
            "retries": status.get("retryCount", 0), "created": meta.get("creationTimestamp")}


@job_app.command("list")
def list_jobs(namespace: Namespace = None, all_namespaces: AllNamespaces = False,
              queue: Annotated[str | None, typer.Option(help="only this queue's Jobs")] = None,
              kubeconfig: Kubeconfig = None, context: Context = None, server: Server = None,
              token_file: TokenFile = None, ca_file: CaFile = None, insecure: Insecure = False,
              as_json: JsonOut = False) -> None:
    """The Jobs of a namespace (or every one): phase, queue, gang size and pod counts."""
    link = Connection(kubeconfig, context, server, token_file, ca_file, insecure)
    client = link.client()
    path = f"{JOBS}/jobs" if all_namespaces else f"{JOBS}/namespaces/{link.namespace(namespace)}/jobs"
    rows = [_row(j) for j in _get(client, path, "Jobs").get("items") or [] if isinstance(j, dict)]
    rows = [r for r in rows if queue is None or r["queue"] == queue]
    if as_json:
        print(json.dumps(rows, indent=2))
        return
    if not rows:
        console.print("No Jobs found.")
        return
    table = Table(box=None, pad_edge=False)
    columns = (["NAMESPACE"] if all_namespaces else []) + ["NAME", "PHASE", "QUEUE", "MIN", "REPLICAS", "PENDING",
                                                           "RUNNING", "SUCCEEDED", "FAILED", "RETRIES", "AGE"]
    for column in columns:
        table.add_column(column, no_wrap=True)
    for r in rows:
        cells = [r["name"], r["phase"], r["queue"], r["minAvailable"], r["replicas"], r["pending"], r["running"],
                 r["succeeded"], r["failed"], r["retries"], age(r["created"])]
        table.add_row(*([r["namespace"]] if all_namespaces else []), *map(str, cells))
    console.print(table)


def events_of(client: Any, namespace: str, names: set[str], limit: int = 10) -> list[dict[str, Any]]:
    """The latest Events about the objects named ``names`` in ``namespace`` (newest last)."""
    try:
        items = client.request("GET", f"/api/v1/namespaces/{namespace}/events").get("items") or []
    except Exception:  # Events are a help, never a reason to fail
        return []
    mine = [e for e in items if isinstance(e, dict) and (e.get("involvedObject") or {}).get("name") in names]
    mine.sort(key=lambda e: str(e.get("lastTimestamp") or e.get("eventTime") or ""))
    return mine[-limit:]


@job_app.command("view")
def view(name: Name, namespace: Namespace = None, kubeconfig: Kubeconfig = None, context: Context = None,
         server: Server = None, token_file: TokenFile = None, ca_file: CaFile = None, insecure: Insecure = False,
         as_json: JsonOut = False) -> None:
    """One Job: phase (with reason), tasks, pod counts, its PodGroup's verdict and its latest Events."""
    link = Connection(kubeconfig, context, server, token_file, ca_file, insecure)
    client = link.client()
    ns = link.namespace(namespace)
    job = _get(client, f"{JOBS}/namespaces/{ns}/jobs/{name}", f"Job {ns}/{name}")
    group_name = name
    try:
        group: dict[str, Any] = client.request(
            "GET", f"/apis/scheduling.volcano.sh/v1beta1/namespaces/{ns}/podgroups/{group_name}")
    except Exception:  # not made yet
        group = {}
    events = events_of(client, ns, {name, group_name})
    if as_json:
        print(json.dumps({"job": job, "podgroup": group or None, "events": events}, indent=2))
        return
    row = _row(job)
    state = (job.get("status") or {}).get("state") or {}
    lines = [f"Job {ns}/{name}", f"  phase      {row['phase']}" + (f" ({state.get('reason')}: {state.get('message')})"
                                                                     if state.get("reason") else ""),
             f"  queue      {row['queue']}", f"  gang       minAvailable {row['minAvailable']} of {row['replicas']}",
             f"  pods       pending {row['pending']}, running {row['running']}, succeeded {row['succeeded']}, "
             f"failed {row['failed']}; retries {row['retries']}", "  tasks"]
    for task in (job.get("spec") or {}).get("tasks") or []:
        if isinstance(task, dict):
            lines.append(f"    {task.get('name', '')}: {task.get('replicas', 0)} replica(s)")
    if group:
        gstatus = group.get("status") or {}
        lines.append(f"  podgroup   {group_name}: {gstatus.get('phase', 'Pending')}")
        for condition in gstatus.get("conditions") or []:
            if isinstance(condition, dict) and condition.get("status") == "True":
                lines.append(f"    {condition.get('type')}: {condition.get('reason', '')} "
                             f"{condition.get('message', '')}")
    if events:
        lines.append("  events")
        for event in events:
            count = f" (x{event.get('count')})" if (event.get("count") or 1) > 1 else ""
            lines.append(f"    {event.get('type', '')} {event.get('reason', '')} "
                         f"{(event.get('involvedObject') or {}).get('kind', '')}: {event.get('message', '')}{count}")
    for line in lines:
        console.print(line, highlight=False, soft_wrap=True)


def _command(action: str, name: str, namespace: str | None, link: Connection) -> None:
    client = link.client()
    ns = link.namespace(namespace)
    job = _get(client, f"{JOBS}/namespaces/{ns}/jobs/{name}", f"Job {ns}/{name}")
    uid = (job.get("metadata") or {}).get("uid") or ""
    body = {"apiVersion": "bus.volcano.sh/v1alpha1", "kind": "Command",
            "metadata": {"generateName": f"{name[:40]}-{action.lower()}-", "namespace": ns},
            "action": action, "target": {"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job", "name": name,
                                         **({"uid": uid} if uid else {})}}
    try:
        made = client.request("POST", f"/apis/bus.volcano.sh/v1alpha1/namespaces/{ns}/commands", body=body)
    except Exception as exc:
        raise fail(f"Job {ns}/{name}: {action} not requested: {' '.join(str(exc).split())[:300]}") from None
    console.print(f"Job {ns}/{name}: {action} requested (Command {ns}/{(made.get('metadata') or {}).get('name')}); "
                  "the job controller applies it", highlight=False)


@job_app.command("suspend")
def suspend(name: Name, namespace: Namespace = None, kubeconfig: Kubeconfig = None, context: Context = None,
            server: Server = None, token_file: TokenFile = None, ca_file: CaFile = None,
            insecure: Insecure = False) -> None:
    """Abort the Job: its pods are deleted, it stays Aborted until resumed (vcctl job suspend)."""
    _command("AbortJob", name, namespace, Connection(kubeconfig, context, server, token_file, ca_file, insecure))


@job_app.command("resume")
def resume(name: Name, namespace: Namespace = None, kubeconfig: Kubeconfig = None, context: Context = None,
           server: Server = None, token_file: TokenFile = None, ca_file: CaFile = None,
           insecure: Insecure = False) -> None:
    """Resume an aborted Job: its gang is admitted and placed anew (vcctl job resume)."""
    _command("ResumeJob", name, namespace, Connection(kubeconfig, context, server, token_file, ca_file, insecure))


@job_app.command("delete")
def delete(name: Name, namespace: Namespace = None, kubeconfig: Kubeconfig = None, context: Context = None,
           server: Server = None, token_file: TokenFile = None, ca_file: CaFile = None,
           insecure: Insecure = False) -> None:
    """Delete the Job (its pods and PodGroup go with it)."""
    link = Connection(kubeconfig, context, server, token_file, ca_file, insecure)
    client = link.client()
    ns = link.namespace(namespace)
    from hetsched.ports import NotFound

    try:
        client.request("DELETE", f"{JOBS}/namespaces/{ns}/jobs/{name}", query={"propagationPolicy": "Background"})
    except NotFound:
        raise fail(f"Job {ns}/{name} not found") from None
    except Exception as exc:
        raise fail(f"Job {ns}/{name}: not deleted: {' '.join(str(exc).split())[:300]}") from None
    console.print(f"Job {ns}/{name} deleted", highlight=False)
