"""``hetsched queue create|list|get|open|close|delete``: Volcano Queues on a real cluster, with ``vcctl queue``'s verbs.

Who calls it: users (also as ``kubectl hetsched queue …``); ``cli.main`` registers :data:`queue_app`.

- ``create`` builds the Queue from flags and checks it with hetsched's own model first: a bad quantity or
  weight is one line naming the flag, nothing is sent.
- ``open`` / ``close`` create a Command (``OpenQueue`` / ``CloseQueue``) in ``--command-namespace``
  (``default``, where vcctl puts them and where the queue controller obeys them), then wait (``--wait``
  seconds) for the controller to apply it: a close becomes ``Closing`` while PodGroups that are not finished
  remain, then ``Closed``. No controller answering within the wait: a warning and exit 1.
- ``delete`` refuses ``default`` and ``root`` (every Job without a queue, and every queue tree, need them)
  and a queue that is not Closed (close it first: jobs still in it would wait forever), as Volcano's
  webhook does.
"""

from __future__ import annotations

import json
import time
from typing import Annotated, Any

import typer
from pydantic import ValidationError
from rich.table import Table

from hetsched.cli.connection import CaFile, Connection, Context, Insecure, JsonOut, Kubeconfig, Server, TokenFile, fail
from hetsched.cli.jobs import age, events_of
from hetsched.cli.output import say, stderr_console, stdout_console

queue_app = typer.Typer(no_args_is_help=True,
                        help="Volcano Queues: create, list, get, open, close, delete (vcctl queue).")
console = stdout_console()
QUEUES = "/apis/scheduling.volcano.sh/v1beta1/queues"
Name = Annotated[str, typer.Argument(help="the Queue's name")]
Amounts = Annotated[list[str] | None, typer.Option(help="RESOURCE=QUANTITY, repeatable (cpu=64, "
                                                        "huawei.com/Ascend910=32)")]
ESSENTIAL = ("default", "root")


def _amounts(flag: str, given: list[str] | None) -> dict[str, str]:
    found: dict[str, str] = {}
    for item in given or []:
        resource, sep, quantity = item.partition("=")
        if not sep or not resource.strip() or not quantity.strip():
            raise fail(f"--{flag}: expected RESOURCE=QUANTITY (cpu=64), got {item[:80]!r}")
        found[resource.strip()] = quantity.strip()
    return found


def _client(kubeconfig: str | None, context: str | None, server: str | None, token_file: Any, ca_file: Any,
            insecure: bool) -> Any:
    return Connection(kubeconfig, context, server, token_file, ca_file, insecure).client()


def _get(client: Any, name: str) -> dict[str, Any]:
    from hetsched.ports import NotFound

    try:
        found: dict[str, Any] = client.request("GET", f"{QUEUES}/{name}")
    except NotFound:
        raise fail(f"Queue {name} not found") from None
    except Exception as exc:
        raise fail(f"Queue {name}: {' '.join(str(exc).split())[:300]}") from None
    return found


@queue_app.command("create")
def create(name: Name,
           weight: Annotated[int, typer.Option(min=1, max=65535, help="share weight (proportion)")] = 1,
           capability: Amounts = None, deserved: Amounts = None, guarantee: Amounts = None,
           parent: Annotated[str | None, typer.Option(help="parent queue (hierarchy)")] = None,
           priority: Annotated[int, typer.Option(help="queue priority: served first when higher")] = 0,
           reclaimable: Annotated[bool, typer.Option(help="may others reclaim what it borrowed")] = True,
           kubeconfig: Kubeconfig = None, context: Context = None, server: Server = None,
           token_file: TokenFile = None, ca_file: CaFile = None, insecure: Insecure = False) -> None:
    """Create a Queue (Open)."""
    from hetsched.api.objects import Queue

    spec: dict[str, Any] = {"weight": weight, "reclaimable": reclaimable}
    if capability:
        spec["capability"] = _amounts("capability", capability)
    if deserved:
        spec["deserved"] = _amounts("deserved", deserved)
    if guarantee:
        spec["guarantee"] = {"resource": _amounts("guarantee", guarantee)}
    if parent:
        spec["parent"] = parent
    if priority:
        spec["priority"] = priority
    body = {"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "Queue", "metadata": {"name": name},
            "spec": spec}
    try:
        Queue.model_validate(body)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise fail(f"Queue {name}: {where}: {first['msg']}") from None
    client = _client(kubeconfig, context, server, token_file, ca_file, insecure)
    try:
        client.request("POST", QUEUES, body=body)
    except Exception as exc:
        raise fail(f"Queue {name}: not created: {' '.join(str(exc).split())[:300]}") from None
    console.print(f"Queue {name} created", highlight=False)


def _row(queue: dict[str, Any]) -> dict[str, Any]:
    meta, spec, status = queue.get("metadata") or {}, queue.get("spec") or {}, queue.get("status") or {}
    return {"name": meta.get("name", ""), "state": status.get("state") or "Open", "weight": spec.get("weight", 1),
            "parent": spec.get("parent") or "", "pending": status.get("pending", 0),
            "inqueue": status.get("inqueue", 0), "running": status.get("running", 0),
            "completed": status.get("completed", 0), "capability": spec.get("capability") or {},
            "created": meta.get("creationTimestamp")}


@queue_app.command("list")
def list_queues(kubeconfig: Kubeconfig = None, context: Context = None, server: Server = None,
                token_file: TokenFile = None, ca_file: CaFile = None, insecure: Insecure = False,
                as_json: JsonOut = False) -> None:
    """Every Queue: state, weight, parent and its PodGroups by phase."""
    client = _client(kubeconfig, context, server, token_file, ca_file, insecure)
    try:
        items = client.request("GET", QUEUES).get("items") or []
    except Exception as exc:
        raise fail(f"Queues: {' '.join(str(exc).split())[:300]}") from None
    rows = [_row(q) for q in items if isinstance(q, dict)]
    if as_json:
        print(json.dumps(rows, indent=2))
        return
    table = Table(box=None, pad_edge=False)
    for column in ("NAME", "STATE", "WEIGHT", "PARENT", "PENDING", "INQUEUE", "RUNNING", "COMPLETED", "CAPABILITY",
                   "AGE"):
        table.add_column(column, no_wrap=True)
    for r in rows:
        cap = ",".join(f"{k}={v}" for k, v in sorted(r["capability"].items())) or "-"
        table.add_row(r["name"], r["state"], str(r["weight"]), r["parent"] or "-", str(r["pending"]),
                      str(r["inqueue"]), str(r["running"]), str(r["completed"]), cap, age(r["created"]))
    console.print(table)


@queue_app.command("get")
def get(name: Name, kubeconfig: Kubeconfig = None, context: Context = None, server: Server = None,
        token_file: TokenFile = None, ca_file: CaFile = None, insecure: Insecure = False,
        as_json: JsonOut = False) -> None:
    """One Queue: its spec, state, counts and latest Events."""
    client = _client(kubeconfig, context, server, token_file, ca_file, insecure)
    queue = _get(client, name)
    events = events_of(client, "default", {name})
    if as_json:
        print(json.dumps({"queue": queue, "events": events}, indent=2))
        return
    r = _row(queue)
    spec = queue.get("spec") or {}
    lines = [f"Queue {name}", f"  state      {r['state']}", f"  weight     {r['weight']}" +
             (f", priority {spec.get('priority')}" if spec.get("priority") else ""),
             f"  parent     {r['parent'] or '-'}",
             f"  podgroups  pending {r['pending']}, inqueue {r['inqueue']}, running {r['running']}, "
             f"completed {r['completed']}"]
    for field, amounts in (("capability", spec.get("capability")), ("deserved", spec.get("deserved")),
                           ("guarantee", (spec.get("guarantee") or {}).get("resource"))):
        if amounts:
            lines.append(f"  {field:<10} " + ", ".join(f"{k}={v}" for k, v in sorted(amounts.items())))
    for event in events:
        lines.append(f"  event      {event.get('type', '')} {event.get('reason', '')}: {event.get('message', '')}")
    for line in lines:
        console.print(line, highlight=False, soft_wrap=True)


def _operate(name: str, action: str, wanted: tuple[str, ...], command_namespace: str, wait: float,
             client: Any) -> None:
    queue = _get(client, name)
    uid = (queue.get("metadata") or {}).get("uid") or ""
    body = {"apiVersion": "bus.volcano.sh/v1alpha1", "kind": "Command",
            "metadata": {"generateName": f"{name[:40]}-{action.lower()}-", "namespace": command_namespace},
            "action": action, "target": {"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "Queue",
                                         "name": name, **({"uid": uid} if uid else {})}}
    try:
        client.request("POST", f"/apis/bus.volcano.sh/v1alpha1/namespaces/{command_namespace}/commands", body=body)
    except Exception as exc:
        raise fail(f"Queue {name}: {action} not requested: {' '.join(str(exc).split())[:300]}") from None
    deadline = time.monotonic() + wait
    state = _row(queue)["state"]
    while state not in wanted and time.monotonic() < deadline:
        time.sleep(0.5)
        state = _row(_get(client, name))["state"]
    if state not in wanted:
        say(stderr_console(), "warning", f"Queue {name}: {action} requested, but the queue is still {state} after "
                                         f"{wait:g}s: is hetsched controller running?")
        raise typer.Exit(1)
    console.print(f"Queue {name} is {state}", highlight=False)


CommandNamespace = Annotated[str, typer.Option(help="where the Command is made (the controller obeys only there)")]
Wait = Annotated[float, typer.Option(min=0, max=600, help="seconds to wait for the controller to apply it")]


@queue_app.command("open")
def open_queue(name: Name, command_namespace: CommandNamespace = "default", wait: Wait = 30.0,
               kubeconfig: Kubeconfig = None, context: Context = None, server: Server = None,
               token_file: TokenFile = None, ca_file: CaFile = None, insecure: Insecure = False) -> None:
    """Open a Queue: its jobs are admitted again."""
    _operate(name, "OpenQueue", ("Open",), command_namespace, wait,
             _client(kubeconfig, context, server, token_file, ca_file, insecure))


@queue_app.command("close")
def close_queue(name: Name, command_namespace: CommandNamespace = "default", wait: Wait = 30.0,
                kubeconfig: Kubeconfig = None, context: Context = None, server: Server = None,
                token_file: TokenFile = None, ca_file: CaFile = None, insecure: Insecure = False) -> None:
    """Close a Queue: no job of it is admitted; running ones finish (Closing, then Closed)."""
    _operate(name, "CloseQueue", ("Closed", "Closing"), command_namespace, wait,
             _client(kubeconfig, context, server, token_file, ca_file, insecure))


@queue_app.command("delete")
def delete(name: Name, kubeconfig: Kubeconfig = None, context: Context = None, server: Server = None,
           token_file: TokenFile = None, ca_file: CaFile = None, insecure: Insecure = False) -> None:
    """Delete a Closed Queue (never default or root)."""
    if name in ESSENTIAL:
        raise fail(f"Queue {name} cannot be deleted: every Job without a queue (default) and every queue tree "
                   "(root) need it")
    client = _client(kubeconfig, context, server, token_file, ca_file, insecure)
    state = _row(_get(client, name))["state"]
    if state != "Closed":
        raise fail(f"Queue {name} is {state}: close it first (hetsched queue close {name}); jobs still in it would "
                   "wait forever")
    try:
        client.request("DELETE", f"{QUEUES}/{name}")
    except Exception as exc:
        raise fail(f"Queue {name}: not deleted: {' '.join(str(exc).split())[:300]}") from None
    console.print(f"Queue {name} deleted", highlight=False)
