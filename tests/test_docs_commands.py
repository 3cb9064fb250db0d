"""Every command in README.md and docs/*.md (the fenced ``bash`` and ``console`` blocks) runs as written.

Each command is found by reading the documents, so a command added to them is tested without anyone
listing it; one that matches none of the rules below fails this test until it is given one:

- **run**: run verbatim with bash, from a scratch checkout (the repository's folders linked in, so the
  files a command names are the repository's and what it writes stays out of it; ``../shared`` beside it,
  as beside the real checkout), with the exit code the document shows (0 unless listed in ``EXIT``);
- **trace**: run verbatim when the openb trace is where the documents say (skipped, saying so, otherwise);
- **cluster**: needs your cluster in a kubeconfig (kubectl, helm, doctor, the day-2 verbs, dumps): run
  verbatim by the real kubectl and helm (scripts/provision-tools.sh) against a real kube-apiserver with
  ``KUBECONFIG`` set, in one test and in an order where each finds what its document assumes (the install
  first; a Job ``bert-pretrain``, a namespace ``team-a``, a Queue ``research`` where a command names them),
  with hetsched's controller, scheduler and webhook running as local processes (the installed Deployments
  have no kubelet here; the webhook registrations are pointed at the local webhook, as the Service would);
  each is also parsed by hetsched's own command line in the fast per-command test;
- **parse**: needs what no test machine has — a Dask scheduler — so its arguments are parsed by
  hetsched's own command line, exactly as typed (every option and value checked, every file it reads
  present);
- **measure**: a measurement taking minutes (the benchmarks; figures in docs/performance.md): its options
  are checked (hetsched's parser, or the script's ``--help``); with ``HETSCHED_RUN_MEASUREMENTS=1`` it is
  run verbatim too, as the by-hand check before figures are quoted (``HETSCHED_RUN_MEASUREMENTS=1 pytest
  tests/test_docs_commands.py``: about an hour on 2 cores);
- **itself**: ``./scripts/test`` is this test suite.

And every repository path a command names (``examples/…``, ``deploy/…``, ``bench/….py``) exists.
"""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import typer

from hetsched.cli.main import app
from hetsched.cli.options import DEFAULT_TRACE_DIR

ROOT = Path(__file__).resolve().parents[1]
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LINKED = (".git", "examples", "deploy", "docs", "scripts", "hetsched", ".venv", "pyproject.toml",
          "requirements.lock", "requirements-dev.lock")
COPIED = ("bench",)
"""Copied, not linked: commands write into them (``--json bench/out/…``), and that stays out of the repository."""


@dataclass(frozen=True)
class DocCommand:
    where: str
    text: str


def _commands() -> list[DocCommand]:
    found: list[DocCommand] = []
    for path in DOCUMENTS:
        text = path.read_text(encoding="utf-8")
        for match in re.finditer(r"^```(bash|console|sh|shell)\n(.*?)^```", text, re.S | re.M):
            line = text[:match.start()].count("\n") + 2
            body = match.group(2)
            # a line ending in a backslash continues on the next: one command
            rows = body.replace("\\\n", "\x00").split("\n")
            numbered, at = [], 0
            for row in rows:
                numbered.append((at, row.replace("\x00", " ")))
                at += row.count("\x00") + 1
            if match.group(1) == "console":  # "$ command" lines; the rest is what it printed
                lines = [(i, ln[2:]) for i, ln in numbered if ln.startswith("$ ")]
            else:
                lines = numbered
            for offset, command in lines:
                command = re.sub(r"\s+", " ", command).strip()
                if command and not command.startswith("#"):
                    found.append(DocCommand(f"{path.relative_to(ROOT)}:{line + offset}", command))
    return found


COMMANDS = _commands()
RULES: list[tuple[str, str]] = [  # (pattern on the command, how it is tested); the first that matches
    (r"^\./scripts/test\b", "itself"),
    (r"^echo \$\?$", "itself"),  # a console block showing the exit code: checked through EXIT
    (r"^(kubectl|helm) |\| kubectl ", "cluster"),
    (r"^hetsched simulate --cluster nodes\.yaml", "cluster"),  # your cluster's dumps
    (r"--dask tcp://", "parse"),
    (r"^hetsched (doctor|pending|job|queue)\b(?!.*--cluster)", "cluster"),
    (r"bench (engine|latency|memory|fgd)\b|bench/\w+\.py|--pods all|--policy all", "measure"),
    (r"^hetsched (replay-openb|sweep|families)\b", "trace"),
    (r"^(\./scripts/demo|hetsched) ", "run"),
]
EXIT = {"hetsched validate examples/mistakes/bert.yaml": 2,
        "hetsched doctor --cluster examples/scenarios/ascend-4.yaml examples/scenarios/fragmented.yaml --until 600": 1}
"""Commands whose documents show a non-zero exit (a refused manifest; a doctor report with a warning)."""


def how(command: DocCommand) -> str:
    return next((kind for pattern, kind in RULES if re.search(pattern, command.text)), "")


def test_every_documented_command_has_a_way_to_be_tested() -> None:
    unknown = [f"{c.where}: {c.text}" for c in COMMANDS if not how(c)]
    assert not unknown, "documented commands no rule covers (add one to RULES):\n" + "\n".join(unknown)
    assert len(COMMANDS) > 40  # the reader found the blocks


def test_every_repository_path_a_command_names_exists() -> None:
    missing = []
    for command in COMMANDS:
        for word in shlex.split(command.text, comments=True):
            path = word.split("=", 1)[-1]
            if re.match(r"^(examples|deploy|bench|scripts)/", path) and not path.startswith("bench/out/") \
                    and not (ROOT / path).exists():
                missing.append(f"{command.where}: {path}")
    assert not missing, missing


@pytest.fixture(scope="module")
def checkout(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A scratch checkout: the repository's folders linked in, ``../shared`` beside it."""
    base = tmp_path_factory.mktemp("docs")
    work = base / "checkout"
    work.mkdir()
    for name in LINKED:
        if (ROOT / name).exists():
            (work / name).symlink_to(ROOT / name)
    for name in COPIED:
        shutil.copytree(ROOT / name, work / name, ignore=shutil.ignore_patterns("out", "__pycache__"))
    if (ROOT.parent / "shared").exists():
        (base / "shared").symlink_to(ROOT.parent / "shared")
    return work


RUN_MEASUREMENTS = os.environ.get("HETSCHED_RUN_MEASUREMENTS") == "1"
"""Run the measurements verbatim as well (by hand: they take minutes each)."""


def _run(command: DocCommand, checkout: Path, timeout: float = 600) -> None:
    env = {**os.environ, "PATH": f"{ROOT / '.venv' / 'bin'}:{os.environ.get('PATH', '')}", "COLUMNS": "200"}
    done = subprocess.run(["bash", "-c", command.text], cwd=checkout, env=env, capture_output=True, text=True,
                          timeout=timeout, check=False, stdin=subprocess.DEVNULL)
    wanted = EXIT.get(command.text.split(" #")[0].strip(), 0)
    assert done.returncode == wanted, f"{command.where}: {command.text}\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}"
    assert "Traceback" not in done.stderr, done.stderr


def _parse(command: DocCommand) -> None:
    """Parse a hetsched command line as hetsched would, without running it."""
    words = shlex.split(command.text, comments=True)
    if words[0] in ("kubectl", "helm"):
        for word in words:  # what they read from the repository is there; tests/test_chart.py runs them
            if word.startswith("deploy/"):
                assert (ROOT / word).exists(), f"{command.where}: {word}"
        return
    if "|" in words:  # hetsched … | kubectl apply -f -: the hetsched part
        words = words[:words.index("|")]
    assert words[0] == "hetsched", command
    group: Any = typer.main.get_command(app)  # typer's own click: a group is what resolves subcommands
    context = group.make_context("hetsched", words[1:])
    while hasattr(group, "resolve_command"):
        rest = [*context._protected_args, *context.args]
        name, chosen, rest = group.resolve_command(context, rest)
        assert chosen is not None and name is not None, f"{command.where}: {command.text}"
        context = chosen.make_context(name, rest, parent=context)
        group = chosen
    assert not context.args, f"{command.where}: unexpected arguments {context.args}"


def _measure(command: DocCommand, checkout: Path) -> None:
    words = shlex.split(command.text, comments=True)
    if Path(words[0]).name == "hetsched":
        _parse(DocCommand(command.where, " ".join(["hetsched", *map(shlex.quote, words[1:])])))
        return
    script = next(w for w in words if w.endswith(".py"))
    assert (ROOT / script).is_file(), f"{command.where}: {script}"
    if not any(word.startswith("--") for word in words):
        return  # nothing to check but the script
    shown = subprocess.run([str(ROOT / ".venv" / "bin" / "python"), script, "--help"], cwd=checkout,
                           capture_output=True, text=True, timeout=120, check=False)
    assert shown.returncode == 0, shown.stderr
    for word in words:
        if word.startswith("--"):
            assert word.split("=")[0] in shown.stdout, f"{command.where}: {script} has no {word}"


@pytest.mark.timeout(7200 if RUN_MEASUREMENTS else 900)
@pytest.mark.parametrize("command", COMMANDS, ids=[c.where for c in COMMANDS])
def test_the_documented_command_works_as_written(command: DocCommand, checkout: Path) -> None:
    kind = how(command)
    if kind == "itself":
        return
    if kind in ("parse", "cluster"):  # cluster: run against a real API server in the test below
        _parse(command)
    elif kind == "measure":
        _measure(command, checkout)
        if RUN_MEASUREMENTS:
            needs_trace = re.search(r"--pods all|--policy all|^hetsched (replay-openb|sweep)\b", command.text)
            if needs_trace and not DEFAULT_TRACE_DIR.exists():
                pytest.skip(f"the openb trace is not at {DEFAULT_TRACE_DIR} (docs/replay.md: getting the trace)")
            _run(command, checkout, timeout=6000)
    elif kind == "trace":
        if not DEFAULT_TRACE_DIR.exists():
            pytest.skip(f"the openb trace is not at {DEFAULT_TRACE_DIR} (docs/replay.md: getting the trace)")
        _run(command, checkout)
    else:
        _run(command, checkout)


# --- cluster: the commands that need a cluster, verbatim against a real kube-apiserver ----------------------

CLUSTER_DOCUMENTS = ("docs/deploy.md", "README.md", "docs/observability.md", "docs/simulator.md")
"""The order the cluster commands run in: the install first, then the documents that use an installed cluster."""
CLUSTER_OUTPUT = {"hetsched job list -n team-a": "llama-finetune", "hetsched job view bert-pretrain": "bert-pretrain",
                  "hetsched queue get research": "research", "hetsched queue list": "research",
                  "hetsched pending -A": "llama-finetune"}
"""What a command's output must name (the objects the documents assume), besides its exit code."""
TOMORROW = """\
apiVersion: batch.volcano.sh/v1alpha1
kind: Job
metadata: {name: tomorrow-train}
spec:
  minAvailable: 2
  tasks:
  - name: worker
    replicas: 2
    template:
      metadata: {annotations: {hetsched.io/duration: "600"}}
      spec:
        containers: [{name: c, image: busybox, resources: {requests: {cpu: "2"}}}]
"""
"""``tomorrow.yaml`` of docs/simulator.md: tomorrow's workload is the reader's own file."""


def _volcano_job(name: str, namespace: str, cpu: str = "2") -> dict[str, Any]:
    container = {"name": "c", "image": "busybox", "resources": {"requests": {"cpu": cpu}}}
    return {"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"minAvailable": 2, "tasks": [{"name": "worker", "replicas": 2,
                                                   "template": {"spec": {"containers": [container]}}}]}}


def _cluster_commands() -> list[DocCommand]:
    chosen = [c for c in COMMANDS if how(c) == "cluster"]
    unplaced = [c.where for c in chosen if c.where.split(":")[0] not in CLUSTER_DOCUMENTS]
    assert not unplaced, f"cluster commands in documents CLUSTER_DOCUMENTS does not order: {unplaced}"
    order = {name: i for i, name in enumerate(CLUSTER_DOCUMENTS)}
    # helm's install first, on an empty cluster; kubectl apply then applies over what it made
    return sorted(chosen, key=lambda c: (order[c.where.split(":")[0]], not c.text.startswith("helm ")))


def _wait_for(check: Any, what: str, timeout: float = 60) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        with contextlib.suppress(Exception):
            found = check()
            if found:
                return found
        assert time.monotonic() < deadline, f"{what}: not within {timeout:g} s"
        time.sleep(0.2)


@pytest.mark.timeout(900)
def test_the_cluster_commands_run_as_written_against_a_real_api_server(checkout: Path, tmp_path: Path) -> None:
    import tempfile

    import yaml

    from hetsched.benchmark.apiserver import missing, policy_version, real_apiserver, server_version
    from hetsched.benchmark.apiserver import stop_process as terminate
    from hetsched.cluster.kubernetes import KubeClient
    from tests.localpods import EgressProxy, LocalPod, run_deployment
    from tests.test_chart import tool

    why = missing()
    if why:
        if os.environ.get("CI"):
            pytest.fail(why)
        pytest.skip(why)
    tools = {Path(tool("kubectl")).parent, Path(tool("helm")).parent}
    commands = _cluster_commands()
    (tmp_path / "apiserver").mkdir()
    sockets = Path(tempfile.mkdtemp(prefix="hetsched-egress-", dir="/tmp"))  # a socket path has 108 bytes at most
    proxy = EgressProxy(sockets / "egress.sock")
    proxy.start()
    pods: list[LocalPod] = []
    try:
        with real_apiserver(tmp_path / "apiserver", privileged=True, egress_socket=proxy.path) as api:
            config = tmp_path / "kubeconfig"
            config.write_text(yaml.safe_dump({
                "apiVersion": "v1", "kind": "Config", "current-context": "test",
                "clusters": [{"name": "test", "cluster": {"server": api.url, "certificate-authority": api.ca}}],
                "users": [{"name": "admin", "user": {"token": api.token}}],
                "contexts": [{"name": "test", "context": {"cluster": "test", "user": "admin"}}]}))
            home = tmp_path / "home"
            home.mkdir()
            env = {**os.environ, "KUBECONFIG": str(config), "HOME": str(home), "COLUMNS": "200",
                   "HELM_CACHE_HOME": str(home / "helm-cache"), "HELM_CONFIG_HOME": str(home / "helm-config"),
                   "PATH": ":".join([*map(str, sorted(tools)), str(ROOT / ".venv" / "bin"),
                                     os.environ.get("PATH", "")])}
            client = KubeClient.from_token(api.url, api.token, ca_file=api.ca)
            version = server_version(client.request("GET", "/version"))

            def components_up() -> None:
                """The installed Deployments' pods, as kubelets would start them after the install; the
                webhook's Service routed to its process."""
                for name in ("hetsched-webhook", "hetsched-controller", "hetsched-scheduler"):
                    pods.append(run_deployment(client, api.url, api.ca, "hetsched", name, tmp_path / "pods", {
                        k: v for k, v in os.environ.items() if not k.startswith(("HETSCHED_", "KUBECONFIG"))}))
                service = client.request("GET", "/api/v1/namespaces/hetsched/services/hetsched-webhook")
                (port,) = [p["port"] for p in service["spec"]["ports"]]
                assert pods[0].port is not None
                proxy.routes[(service["spec"]["clusterIP"], port)] = pods[0].port
                for plural, name in (("validatingwebhookconfigurations", "hetsched-validate"),
                                     ("mutatingwebhookconfigurations", "hetsched-mutate")):
                    path = f"/apis/admissionregistration.k8s.io/v1/{plural}/{name}"
                    _wait_for(lambda path=path: all(entry["clientConfig"].get("caBundle") for entry in
                                                    client.request("GET", path)["webhooks"]),
                              f"the webhook's CA in {name}")
                _wait_for(lambda: client.request("GET", "/apis/scheduling.volcano.sh/v1beta1/queues/default"),
                          "the controller's default Queue")
                for name in ("node-0", "node-1"):
                    client.request("POST", "/api/v1/nodes", body={"metadata": {"name": name}})
                    quantities = {"cpu": "8", "memory": "32Gi", "pods": "110"}
                    client.request("PATCH", f"/api/v1/nodes/{name}/status",
                                   content_type="application/merge-patch+json",
                                   body={"status": {"allocatable": quantities, "capacity": quantities, "conditions": [
                                       {"type": "Ready", "status": "True", "reason": "Test"}]}})
                    client.request("PATCH", f"/api/v1/nodes/{name}", content_type="application/merge-patch+json",
                                   body={"spec": {"taints": None}})

            def before(document: str) -> None:
                """What the document assumes exists (its examples name these objects)."""
                if document == "README.md":
                    client.request("POST", "/api/v1/namespaces", body={"metadata": {"name": "team-a"}})
                    # llama-finetune waits whatever happens (16 CPUs a pod, nodes of 8): `pending` always lists
                    # it, and the replay of the dump says it never can run
                    for name, namespace, cpu in (("llama-finetune", "team-a", "16"), ("bert-pretrain", "default", "2")):
                        client.request("POST", f"/apis/batch.volcano.sh/v1alpha1/namespaces/{namespace}/jobs",
                                       body=_volcano_job(name, namespace, cpu))
                    _wait_for(lambda: client.request(
                        "GET", "/apis/scheduling.volcano.sh/v1beta1/namespaces/team-a/podgroups/llama-finetune"),
                        "the controller's PodGroup for llama-finetune")
                    _wait_for(lambda: sum(bool(p["spec"].get("nodeName")) for p in client.request(
                        "GET", "/api/v1/namespaces/default/pods")["items"]) == 2, "the scheduler binding bert-pretrain")
                    client.request("POST", "/apis/scheduling.volcano.sh/v1beta1/queues", body={
                        "apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "Queue",
                        "metadata": {"name": "research"}, "spec": {"weight": 1}})
                elif document == "docs/observability.md":  # README closed it; this document creates it
                    client.request("DELETE", "/apis/scheduling.volcano.sh/v1beta1/queues/research")
                    _wait_for(lambda: not any(q["metadata"]["name"] == "research" for q in client.request(
                        "GET", "/apis/scheduling.volcano.sh/v1beta1/queues")["items"]), "Queue research deleted")
                elif document == "docs/simulator.md":  # today's cluster runs a job; tomorrow's is a file
                    client.request("POST", "/apis/batch.volcano.sh/v1alpha1/namespaces/team-a/jobs",
                                   body=_volcano_job("serving", "team-a"))
                    _wait_for(lambda: sum(bool(p["spec"].get("nodeName")) for p in client.request(
                        "GET", "/api/v1/namespaces/team-a/pods")["items"]) == 2, "the scheduler binding serving")
                    (checkout / "tomorrow.yaml").write_text(TOMORROW)

            seen: set[str] = set()
            for command in commands:
                document = command.where.split(":")[0]
                if document not in seen:
                    seen.add(document)
                    before(document)
                done = subprocess.run(["bash", "-c", command.text], cwd=checkout, env=env, capture_output=True,
                                      text=True, timeout=300, check=False, stdin=subprocess.DEVNULL)
                said = f"{command.where}: {command.text}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
                assert "Traceback" not in done.stderr, said
                if command.text.startswith("hetsched doctor"):  # "exit 0/1/2": 1 is a finding, 2 bad input
                    assert done.returncode in (0, 1), said
                elif command.text.startswith("hetsched simulate"):  # exit 3: a job can never run, named
                    assert done.returncode == 3 and "stuck" in done.stderr and "llama-finetune" in done.stderr, said
                elif "kubectl apply" in command.text and "--kube-version" not in command.text \
                        and policy_version(version) != "policy/v1":
                    # the defaults are for Kubernetes 1.21+, as the document says: an older server refuses
                    # their PodDisruptionBudgets by name (the line after it is the one for such a server)
                    assert done.returncode == 1 and "policy/v1" in done.stderr, said
                else:
                    assert done.returncode == 0, said
                shown = CLUSTER_OUTPUT.get(command.text.split(" #")[0].strip())
                assert shown is None or shown in done.stdout, said
                if command.text.startswith("helm install"):
                    components_up()
            # what the commands did, read back from the API server
            queues = client.request("GET", "/apis/scheduling.volcano.sh/v1beta1/queues")["items"]
            assert {"default", "root"} <= {q["metadata"]["name"] for q in queues}
            assert "research" not in {q["metadata"]["name"] for q in queues}
            jobs = client.request("GET", "/apis/batch.volcano.sh/v1alpha1/namespaces/default/jobs")["items"]
            assert "bert-pretrain" not in {j["metadata"]["name"] for j in jobs}
            dumped = yaml.safe_load((checkout / "nodes.yaml").read_text())
            assert {"node-0", "node-1"} <= {item["metadata"]["name"] for item in dumped["items"]}
            running = yaml.safe_load((checkout / "running.yaml").read_text())
            assert any(item["kind"] == "Pod" and item["spec"].get("nodeName") for item in running["items"]), \
                "the scheduler bound no pod of the documents' jobs"
            assert not proxy.refused, f"the API server dialled into the cluster where nothing serves: {proxy.refused}"
    finally:
        for pod in pods:
            terminate(pod.process)
        proxy.stop()
        shutil.rmtree(sockets, ignore_errors=True)
        for name in ("nodes.yaml", "running.yaml", "tomorrow.yaml"):
            (checkout / name).unlink(missing_ok=True)
