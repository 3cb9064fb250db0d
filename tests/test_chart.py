"""The Helm chart under the real ``helm`` (v3.17) and the manifests under the real ``kubectl`` (v1.29), both
provisioned by ``scripts/provision-tools.sh`` (``.ci/run`` runs it; without it these tests skip, and with CI
set they fail instead):

- ``helm lint`` passes for the defaults and every example value set, and ``values.schema.json`` makes Helm
  refuse a misspelt key or a wrong type, naming it, before anything is rendered;
- ``helm template`` renders, for each value set and each Kubernetes version, exactly the objects
  ``hetsched install --print --kube-version`` prints — the choices that depend on the cluster (the
  PodDisruptionBudget's apiVersion, the webhooks' matchConditions) made alike from the version;
- ``kubectl apply --dry-run=server`` of what ``hetsched install`` prints for the real API server's version
  is accepted by that API server, every object validated by it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from hetsched.benchmark.apiserver import ApiServer, missing, real_apiserver
from hetsched.cli.install import read_values, render
from tests.test_install import CHART, EXAMPLES

pytestmark = pytest.mark.timeout(300)
TOOLS = Path(os.environ.get("HETSCHED_TOOLS_CACHE", "/var/cache/hetsched-tools")) / "bin"
VERSIONS = ("1.20", "1.25", "1.30")


def tool(name: str) -> str:
    found = TOOLS / name if (TOOLS / name).exists() else shutil.which(name)
    if found is None:
        message = f"{name} is not provisioned (scripts/provision-tools.sh, as .ci/run does)"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    return str(found)


def helm(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([tool("helm"), *args], capture_output=True, text=True, timeout=120, check=False,
                          env={**os.environ, "HELM_CACHE_HOME": "/tmp/hetsched-helm-cache",
                               "HELM_CONFIG_HOME": "/tmp/hetsched-helm-config"})


def values_file(tmp_path: Path, overrides: dict[str, Any], name: str = "values.yaml") -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(overrides))
    return path


def key(doc: dict[str, Any]) -> tuple[str, str, str]:
    return doc["kind"], doc["metadata"].get("namespace", ""), doc["metadata"]["name"]


def test_helm_lint_passes_for_the_defaults_and_every_example(tmp_path: Path) -> None:
    for index, overrides in enumerate(EXAMPLES):
        chart_values = {k: v for k, v in overrides.items() if k != "namespace"}  # the chart uses -n
        old = "policy/v1beta1" in json.dumps(overrides)  # a value set for a cluster before 1.21
        linted = helm("lint", str(CHART), "--strict", *(["--kube-version", "1.20"] if old else []),
                      "-f", str(values_file(tmp_path, chart_values, f"{index}.yaml")))
        assert linted.returncode == 0, (overrides, linted.stdout, linted.stderr)


@pytest.mark.parametrize(("setting", "message"), [
    ("scheduler.replicaz=3", "scheduler: Additional property replicaz is not allowed"),
    ("scheduler.replicas=three", "scheduler.replicas"),
    ("webhook.failurePolicy=Sometimes", "webhook.failurePolicy"),
    ("namespace=elsewhere", "Additional property namespace is not allowed"),
    ("metrics.serviceMonitor.interval=soon", "metrics.serviceMonitor.interval"),
], ids=["typo", "type", "choice", "plain-only", "pattern"])
def test_the_schema_makes_helm_refuse_bad_values_naming_the_key(setting: str, message: str) -> None:
    rendered = helm("template", "hetsched", str(CHART), "--set", setting)
    assert rendered.returncode != 0 and message in rendered.stderr, rendered.stderr


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("overrides", EXAMPLES, ids=[f"values{i}" for i in range(len(EXAMPLES))])
def test_helm_template_renders_exactly_what_install_prints(tmp_path: Path, overrides: dict[str, Any],
                                                            version: str) -> None:
    namespace = overrides.get("namespace", "hetsched")
    chart_values = {k: v for k, v in overrides.items() if k != "namespace"}
    rendered = helm("template", "hetsched", str(CHART), "-n", namespace, "--kube-version", version,
                    "-f", str(values_file(tmp_path, chart_values)))
    assert rendered.returncode == 0, rendered.stderr
    charted = [doc for doc in yaml.safe_load_all(rendered.stdout) if doc]
    values = read_values([values_file(tmp_path, overrides, "plain.yaml")], [], kube_version=version)
    printed = [doc for doc in yaml.safe_load_all(render(values)) if doc
               and doc["kind"] not in ("CustomResourceDefinition", "Namespace")]  # the chart's crds/, helm's -n
    assert sorted(map(key, charted)) == sorted(map(key, printed))
    by_key = {key(doc): doc for doc in printed}
    for doc in charted:
        assert doc == by_key[key(doc)], key(doc)
    budgets = {doc["apiVersion"] for doc in charted if doc["kind"] == "PodDisruptionBudget"}
    assert budgets <= ({"policy/v1beta1"} if version == "1.20" or "policy/v1beta1" in json.dumps(overrides)
                       else {"policy/v1"})


@pytest.fixture(scope="module")
def api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ApiServer]:
    why = missing()
    if why:
        if os.environ.get("CI"):
            pytest.fail(why)
        pytest.skip(why)
    # nodes: as a cluster with kubelets is started (privileged pods allowed: the vendor agents are)
    with real_apiserver(tmp_path_factory.mktemp("apiserver"), nodes=True) as server:
        yield server


def kubeconfig(api: ApiServer, tmp_path: Path) -> Path:
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "test",
        "clusters": [{"name": "test", "cluster": {"server": api.url, "certificate-authority": api.ca}}],
        "users": [{"name": "admin", "user": {"token": api.token}}],
        "contexts": [{"name": "test", "context": {"cluster": "test", "user": "admin"}}]}))
    return path


def test_kubectl_apply_of_the_manifests_is_accepted_by_the_real_api_server(api: ApiServer, tmp_path: Path) -> None:
    config = kubeconfig(api, tmp_path)
    kubectl = [tool("kubectl"), "--kubeconfig", str(config)]
    server = json.loads(subprocess.run([*kubectl, "version", "-o", "json"], capture_output=True, text=True,
                                       timeout=60, check=True).stdout)["serverVersion"]
    version = f"{server['major']}.{server['minor'].rstrip('+')}"
    # namespaced objects need their namespace to exist: a server-side dry run creates nothing
    subprocess.run([*kubectl, "create", "namespace", "hetsched"], capture_output=True, text=True, timeout=60,
                   check=True)
    for sets in ([], ["vendors.cambricon.enabled=true", "vendors.nvidia.enabled=true", "vendors.fake.enabled=true",
                      "metrics.address=127.0.0.1", "probes.enabled=false"]):
        manifests = render(read_values([], sets, kube_version=version))
        applied = subprocess.run([*kubectl, "apply", "--dry-run=server", "-f", "-"], input=manifests,
                                 capture_output=True, text=True, timeout=120, check=False)
        assert applied.returncode == 0, applied.stderr
        lines = applied.stdout.splitlines()
        assert any(line.startswith("deployment.apps/hetsched-scheduler") for line in lines), applied.stdout
        assert any("poddisruptionbudget.policy/hetsched-webhook" in line for line in lines), applied.stdout
        assert all("(server dry run)" in line for line in lines), applied.stdout
