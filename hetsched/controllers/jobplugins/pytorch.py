"""The ``pytorch`` job plugin (Volcano's): ``torch.distributed`` finds its rendezvous.

Who calls it: ``controllers.jobplugins.shape`` for every pod of a Job listing ``pytorch`` (which turns on
``svc``). A Job with the plugin must have its master task (refused at admission otherwise: Volcano's
plugin silently does nothing then).

What every container of every pod gets, as Volcano: ``MASTER_ADDR`` (the master task's first pod's DNS
name), ``MASTER_PORT`` (``--port``, 23456, also opened as ``pytorchjob-port``), ``WORLD_SIZE`` (the master
and worker tasks' replicas) and, in those two tasks, ``RANK``: the master's pods 0, 1, …, the workers'
the master's replicas plus their index (Volcano: index + 1, the same with the usual single master).
``--wait-master-enabled`` gives each worker pod an init container (``--wait-master-image``) that waits up
to ``--wait-master-timeout`` seconds for the master's port.
"""

from __future__ import annotations

from hetsched.api.job_plugins import Value
from hetsched.controllers.jobplugins.draft import Draft, domain_name, task_named

WAIT = "wait-for-master"


def _wait_script(address: str, port: int, timeout: int) -> str:
    return (f'echo "waiting for the master {address}:{port}"; elapsed=0; '
            f"until {{ nc -z {address} {port} || echo > /dev/tcp/{address}/{port}; }} 2>/dev/null; do "
            f'if [ "$elapsed" -ge {timeout} ]; then echo "the master did not answer within {timeout} s"; '
            "exit 1; fi; sleep 2; elapsed=$((elapsed + 2)); done")


def on_pod(draft: Draft, values: dict[str, Value]) -> None:
    master = task_named(draft.job, str(values["master"]))
    if master is None:  # refused at admission; a Job admitted before is left as Volcano leaves it
        return
    worker = task_named(draft.job, str(values["worker"]))
    port = int(values["port"])
    address = domain_name(draft.job, master, 0)
    world = master.replicas + (worker.replicas if worker is not None else 0)
    rank: int | None = None
    if draft.task.name == master.name:
        rank = draft.index
    elif worker is not None and draft.task.name == worker.name:
        rank = master.replicas + draft.index
        if values["wait-master-enabled"] and not any(c.get("name") == WAIT for c in draft.containers()):
            draft.spec.setdefault("initContainers", []).append({
                "name": WAIT, "image": values["wait-master-image"],
                "command": ["sh", "-c", _wait_script(address, port, int(values["wait-master-timeout"]))]})
    for container in draft.containers(init=False):
        draft.open_port(container, "pytorchjob-port", port)
    draft.env("MASTER_ADDR", address, init=False)
    draft.env("MASTER_PORT", str(port), init=False)
    draft.env("WORLD_SIZE", str(world), init=False)
    if rank is not None:
        draft.env("RANK", str(rank), init=False)
