"""``hetsched install``: the plain manifests and the Helm chart come from one source and cannot drift.

- ``deploy/hetsched.yaml`` is what ``hetsched install --print`` writes with the defaults, and the chart under
  ``deploy/helm/hetsched`` is what ``hetsched install --chart`` writes (regenerate both when this fails);
- the chart's templates, rendered with a values file the way Helm renders them (the template forms the
  generator writes: value lookups, ``toYaml | nindent``, ``if``/``else``, ``dir``/``base``, ``and``/``not``,
  ``range`` over a map of lists with ``join``),
  give exactly the objects ``--print`` gives for the same values — so the chart is the tested manifests;
- bad values are one line naming the file or key, exit code 2.
The same manifests run on real kubelets in tests/test_realnodes.py.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from hetsched.cli.install import render
from hetsched.cli.main import app
from hetsched.install.chart import chart_files
from hetsched.install.values import Values, load_values

ROOT = Path(__file__).resolve().parents[1]
CHART = ROOT / "deploy" / "helm" / "hetsched"
EXAMPLES = [  # values a user might give: the defaults, a mixed cluster, the real-node tests' settings
    {},
    {"vendors": {"cambricon": {"enabled": True}, "nvidia": {"enabled": True, "nodeAgent": {"enabled": False}}},
     "scheduler": {"replicas": 3, "period": 0.5}, "metrics": {"address": ""}},
    {"hostNetwork": True, "apiServer": "https://127.0.0.1:6443",
     "vendors": {"ascend": {"enabled": False, "devicePlugin": {"ascendRuntime": True}},
                 "fake": {"enabled": True, "config": "/srv/fake/chips.yaml"}},
     "image": {"repository": "registry.example/hetsched", "tag": "1.2", "pullPolicy": "Never"},
     "disruptionBudget": {"apiVersion": "policy/v1beta1"},
     "webhook": {"replicas": 1, "url": "https://127.0.0.1:9443", "restrict": {"failurePolicy": "Fail"}}},
    {"metrics": {"address": "0.0.0.0"}, "webhook": {"restrict": {"enabled": False}},
     "disruptionBudget": {"enabled": False}, "vendors": {"nvidia": {"enabled": True, "securityContext": {
         "privileged": True}}},
     "priorityClasses": {"team-critical": ["team-a", "team-b"], "system-cluster-critical": ["kube-system", "ops"]}},
    {"webhook": {"matchConditions": True}, "namespace": "platform"},  # Kubernetes 1.28+: the checks fail closed
    {"webhook": {"matchConditions": True, "url": "https://127.0.0.1:9443"}},
]


def test_the_committed_manifests_and_chart_are_what_the_generator_writes() -> None:
    assert (ROOT / "deploy" / "hetsched.yaml").read_text() == render(Values()), \
        "deploy/hetsched.yaml is stale: hetsched install --print > deploy/hetsched.yaml"
    for relative, content in chart_files().items():
        assert (CHART / relative).read_text() == content, \
            f"deploy/helm/hetsched/{relative} is stale: hetsched install --chart deploy/helm/hetsched"
    generated = {f"templates/{p.name}" for p in (CHART / "templates").iterdir()}
    assert generated == {r for r in chart_files() if r.startswith("templates/")}
    assert sorted(p.name for p in (CHART / "crds").iterdir()) == sorted(
        p.name for p in (ROOT / "hetsched" / "install" / "crds").iterdir())


# The chart rendered by the real helm, equal to what ``hetsched install`` prints: tests/test_chart.py.


# ------------------------------------------------------------------------------------ what the values do

def objects(overrides: dict[str, Any] | None = None, sets: list[str] | None = None) -> dict[tuple[str, str], Any]:
    text = render(load_values([("test", overrides or {})], sets or []))
    return {(d["kind"], d["metadata"]["name"]): d for d in yaml.safe_load_all(text) if d}


def test_defaults_install_the_ascend_agents_and_no_private_key() -> None:
    found = objects()
    kinds = {kind for kind, _ in found}
    assert {"CustomResourceDefinition", "Namespace", "Deployment", "DaemonSet", "ValidatingWebhookConfiguration",
            "MutatingWebhookConfiguration", "ClusterRole", "Role", "ServiceAccount", "Service", "ConfigMap"} <= kinds
    daemonsets = sorted(name for kind, name in found if kind == "DaemonSet")
    assert daemonsets == ["hetsched-device-plugin-ascend", "hetsched-node-agent-ascend"]
    assert "Secret" not in kinds and "PRIVATE KEY" not in render(Values())  # the webhook makes its own TLS
    scheduler = found[("Deployment", "hetsched-scheduler")]["spec"]["template"]["spec"]
    assert scheduler["containers"][0]["securityContext"]["runAsNonRoot"] is True
    assert "--scheduler-conf=/etc/hetsched/scheduler.conf" in scheduler["containers"][0]["args"]
    conf = found[("ConfigMap", "hetsched-scheduler-conf")]["data"]["scheduler.conf"]
    assert "devicetopology" in conf  # hetsched's default configuration, there for operators to edit


def test_least_privilege_the_scheduler_cannot_create_or_delete_pods_or_nodes() -> None:
    rules = objects()[("ClusterRole", "hetsched-scheduler")]["rules"]
    for rule in rules:
        if {"pods", "nodes"} & set(rule["resources"]):
            assert set(rule["verbs"]) <= {"get", "list", "watch"}, rule
    for component in ("scheduler", "controller"):  # only its own Lease, only in the installation's namespace
        leases = objects()[("Role", f"hetsched-{component}-lease")]
        assert leases["metadata"]["namespace"] == "hetsched"
        assert leases["rules"][0] == {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"],
                                      "verbs": ["get", "update"], "resourceNames": [f"hetsched-{component}"]}
        assert leases["rules"][1]["verbs"] == ["create"] and len(leases["rules"]) == 2
    controller = objects()[("ClusterRole", "hetsched-controller")]["rules"]
    assert [r["verbs"] for r in controller if "secrets" in r["resources"]] == [["create", "delete"]]  # no reads


def test_set_mixes_vendors_and_turns_metrics_off() -> None:
    found = objects(sets=["vendors.cambricon.enabled=true", "metrics.address=",
                          "vendors.ascend.nodeAgent.enabled=false"])
    daemonsets = sorted(name for kind, name in found if kind == "DaemonSet")
    assert daemonsets == ["hetsched-device-plugin-ascend", "hetsched-device-plugin-cambricon",
                          "hetsched-node-agent-cambricon"]
    env = found[("DaemonSet", "hetsched-device-plugin-cambricon")]["spec"]["template"]["spec"]["containers"][0]["env"]
    assert {"name": "HETSCHED_METRICS_ADDRESS", "value": "off"} in env
    selector = found[("DaemonSet", "hetsched-node-agent-cambricon")]["spec"]["template"]["spec"]["nodeSelector"]
    assert selector == {"hetsched.io/vendor": "cambricon"}


def test_a_null_value_removes_a_default_key_as_helm_does() -> None:
    found = objects({"vendors": {"ascend": {"nodeSelector": {"hetsched.io/vendor": None, "pool": "a"}}}})
    spec = found[("DaemonSet", "hetsched-device-plugin-ascend")]["spec"]["template"]["spec"]
    assert spec["nodeSelector"] == {"pool": "a"}


@pytest.mark.parametrize(("args", "message"), [
    (["--set", "scheduler.replicas=zero"], "values: scheduler.replicas: Input should be a valid integer"),
    (["--set", "vendors.huawei.enabled=true"], "values: vendors.huawei: unknown field"),
    (["--set", "noequals"], "--set 'noequals': expected KEY.PATH=VALUE"),
    (["--set", "webhook.failurePolicy=Sometimes"], "values: webhook.failurePolicy: Input should be 'Fail' or"),
    (["--set", "namespace=Bad_Name"], "values: namespace: String should match pattern"),
    (["--set", f"scheduler.replicas={10**30}"], "values: scheduler.replicas: Input should be less than or equal "
                                                "to 2147483647"),
    (["--set", "scheduler.period=.inf"], "values: scheduler.period: Input should be a finite number"),
    (["--set", "scheduler.conf=&a [*a]"], "--set scheduler.conf: recursive alias *a"),
], ids=["type", "unknown", "syntax", "choice", "namespace", "int32", "infinite", "recursive"])
def test_bad_values_are_one_line_naming_the_key(args: list[str], message: str) -> None:
    result = CliRunner().invoke(app, ["install", "--print", *args])
    assert result.exit_code == 2 and message in result.output, result.output
    assert "Traceback" not in result.output


def test_hostile_values_files_are_clear_errors(tmp_path: Path) -> None:
    cases = {
        "deep.yaml": "a: " + "[" * 5000 + "]" * 5000,
        "bomb.yaml": "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
            f"{chr(98 + i)}: &{chr(98 + i)} [*{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}]\n"
            for i in range(10)),
        "list.yaml": "- not\n- a mapping\n",
        "broken.yaml": "scheduler: [unclosed\n",
        "binary.yaml": "\udcff",
        "recursive.yaml": "scheduler: &s {conf: *s}\n",
    }
    for name, text in cases.items():
        path = tmp_path / name
        path.write_bytes(text.encode("utf-8", "surrogateescape"))
        result = CliRunner().invoke(app, ["install", "--print", "--values", str(path)])
        assert result.exit_code == 2 and name in result.output and "Traceback" not in result.output, (
            name, result.output[-500:])
    missing = CliRunner().invoke(app, ["install", "--print", "--values", str(tmp_path / "nope.yaml")])
    assert missing.exit_code == 2 and "nope.yaml: cannot read" in missing.output
    nothing = CliRunner().invoke(app, ["install"])
    assert nothing.exit_code == 2 and "--print" in nothing.output


def test_a_chart_written_to_a_new_directory_is_complete(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["install", "--chart", str(tmp_path / "chart")])
    assert result.exit_code == 0, result.output
    written = {str(p.relative_to(tmp_path / "chart")) for p in (tmp_path / "chart").rglob("*") if p.is_file()}
    assert {"Chart.yaml", "values.yaml", "templates/scheduler.yaml", "crds/jobs.batch.volcano.sh.yaml"} <= written


def pod_specs(found: dict[tuple[str, str], Any]) -> dict[str, Any]:
    return {name: doc["spec"]["template"]["spec"] for (kind, name), doc in found.items()
            if kind in ("Deployment", "DaemonSet")}


def test_every_pod_is_confined_sized_and_keeps_its_metrics_to_itself() -> None:
    """Issue 17: seccomp RuntimeDefault on every pod; requests and limits on every container; capabilities
    dropped wherever a container is not privileged (privileged only for the vendors whose tools open the
    driver's devices); metrics on the pod's address and advertised for scraping (issue 32: a fresh install's
    dashboard has data), on loopback and not advertised when asked."""
    found = objects(sets=["vendors.cambricon.enabled=true", "vendors.nvidia.enabled=true",
                          "vendors.fake.enabled=true"])
    privileged = set()
    for name, spec in pod_specs(found).items():
        assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}, name
        for container in spec["containers"]:
            resources = container["resources"]
            assert set(resources["requests"]) == set(resources["limits"]) == {"cpu", "memory"}, name
            context = container["securityContext"]
            if context.get("privileged"):
                privileged.add(name)
            else:
                assert context["capabilities"]["drop"] == ["ALL"] and context["allowPrivilegeEscalation"] is False
                assert context["readOnlyRootFilesystem"] is True, name
            env = {e["name"]: e.get("value") for e in container["env"]}
            assert env["HETSCHED_METRICS_ADDRESS"].startswith("0.0.0.0:"), name
    assert privileged == {f"hetsched-{c}-{v}" for c in ("node-agent", "device-plugin") for v in ("ascend", "cambricon")}
    annotations = found[("Deployment", "hetsched-scheduler")]["spec"]["template"]["metadata"]["annotations"]
    assert annotations["prometheus.io/scrape"] == "true"
    private = objects(sets=["metrics.address=127.0.0.1"])[("Deployment", "hetsched-scheduler")]
    assert private["spec"]["template"]["metadata"]["annotations"]["prometheus.io/scrape"] == "false"


def test_the_webhook_cannot_be_one_pod_away_from_blocking_volcano_objects() -> None:
    found = objects()
    webhook = found[("Deployment", "hetsched-webhook")]["spec"]
    assert webhook["replicas"] == 2
    apart = webhook["template"]["spec"]["affinity"]["podAntiAffinity"]
    assert apart["preferredDuringSchedulingIgnoredDuringExecution"][0]["podAffinityTerm"]["topologyKey"] == (
        "kubernetes.io/hostname")
    for component in ("webhook", "scheduler", "controller"):
        budget = found[("PodDisruptionBudget", f"hetsched-{component}")]
        assert budget["apiVersion"] == "policy/v1" and budget["spec"]["maxUnavailable"] == 1
        assert budget["spec"]["selector"] == found[("Deployment", f"hetsched-{component}")]["spec"]["selector"]
    old = objects(sets=["disruptionBudget.apiVersion=policy/v1beta1"])
    assert old[("PodDisruptionBudget", "hetsched-webhook")]["apiVersion"] == "policy/v1beta1"
    assert not any(kind == "PodDisruptionBudget" for kind, _ in objects(sets=["disruptionBudget.enabled=false"]))


def test_what_rbac_cannot_narrow_is_registered_with_the_webhook() -> None:
    found = objects()
    restrict = found[("ValidatingWebhookConfiguration", "hetsched-restrict")]["webhooks"][0]
    assert restrict["failurePolicy"] == "Ignore" and restrict["clientConfig"]["service"]["path"] == "/restrict"
    covered = {(tuple(r["resources"]), tuple(r["operations"])) for r in restrict["rules"]}
    assert covered == {(("nodes", "nodes/status"), ("UPDATE",)), (("configmaps",), ("CREATE", "UPDATE", "DELETE")),
                       (("secrets", "services"), ("CREATE", "DELETE")), (("networkpolicies",), ("CREATE", "DELETE"))}
    args = found[("Deployment", "hetsched-webhook")]["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--registration=hetsched-validate,hetsched-mutate,hetsched-pods,hetsched-restrict" in args
    agent = found[("ClusterRole", "hetsched-node-agent")]["rules"]
    assert not any("list" in r["verbs"] or "watch" in r["verbs"] or "delete" in r["verbs"] for r in agent)
    configmaps = found[("Role", "hetsched-node-agent")]
    assert configmaps["metadata"]["namespace"] == "kube-system" and configmaps["rules"][0]["verbs"] == [
        "create", "update"]
    scheduler = found[("ClusterRole", "hetsched-scheduler")]["rules"]
    assert not any("configmaps" in r["resources"] for r in scheduler)  # only in kube-system (a Role)
    assert found[("Role", "hetsched-scheduler-ascend-info")]["metadata"]["namespace"] == "kube-system"
    off = objects(sets=["webhook.restrict.enabled=false"])
    assert ("ValidatingWebhookConfiguration", "hetsched-restrict") not in off
    off_args = off[("Deployment", "hetsched-webhook")]["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--registration=hetsched-validate,hetsched-mutate,hetsched-pods" in off_args


def test_pods_are_checked_for_what_only_the_scheduler_writes_and_fail_open() -> None:
    """/pods (issue 29): every pod create and update, failing open (a webhook outage must not stop the
    cluster's pods; the scheduler and device plugin check provenance themselves); the webhook knows the
    scheduler's identity, and both it and the scheduler let the system PriorityClasses be used only in
    kube-system and the installation's namespace (its node agents run as system-node-critical)."""
    found = objects()
    pods = found[("ValidatingWebhookConfiguration", "hetsched-pods")]["webhooks"][0]
    assert pods["failurePolicy"] == "Ignore" and pods["clientConfig"]["service"]["path"] == "/pods"
    assert pods["rules"] == [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE"],
                              "resources": ["pods"]}]
    webhook = found[("Deployment", "hetsched-webhook")]["spec"]["template"]["spec"]["containers"][0]["args"]
    scheduler = found[("Deployment", "hetsched-scheduler")]["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--scheduler-identity=system:serviceaccount:hetsched:hetsched-scheduler" in webhook
    for args in (webhook, scheduler):
        assert ("--priority-class=system-node-critical=kube-system,hetsched;"
                "system-cluster-critical=kube-system,hetsched;") in args


def test_the_priority_class_allow_list_is_a_value_both_the_scheduler_and_the_webhook_apply() -> None:
    """Issue 29: which namespaces may use which PriorityClass is the chart value ``priorityClasses`` (not only a
    command-line flag): the scheduler and the webhook get the same one argument, it parses back into the
    policy both enforce (the system classes kube-system's and the installation's unless listed), and a bad
    name is refused naming the key."""
    from hetsched.api.priority_policy import parse

    found = objects({"priorityClasses": {"team-critical": ["team-a"], "system-cluster-critical": ["ops"]}})
    arguments = []
    for name in ("hetsched-scheduler", "hetsched-webhook"):
        args = found[("Deployment", name)]["spec"]["template"]["spec"]["containers"][0]["args"]
        arguments.append([a.split("=", 1)[1] for a in args if a.startswith("--priority-class=")])
    assert arguments[0] == arguments[1] and len(arguments[0]) == 1
    policy = parse(arguments[0])
    assert policy.permits("team-critical", "team-a") and not policy.permits("team-critical", "team-b")
    assert policy.permits("system-cluster-critical", "ops")
    assert not policy.permits("system-cluster-critical", "hetsched")
    assert policy.permits("system-node-critical", "hetsched") and not policy.permits("system-node-critical", "team-a")
    assert policy.permits("anything-else", "team-b")
    for bad, where in (({"Bad_Name": ["a"]}, "priorityClasses"), ({"ok": []}, "priorityClasses.ok"),
                       ({"ok": ["a;b=c"]}, "priorityClasses.ok[0]")):
        with pytest.raises(ValueError, match=re.escape(where)):
            load_values([("values.yaml", {"priorityClasses": bad})], [])


def test_kube_version_chooses_what_the_api_server_offers_and_values_still_win() -> None:
    """``--kube-version``: matchConditions (and with them fail-closed checks) from 1.28, policy/v1beta1
    disruption budgets before 1.21; a values file or ``--set`` still decides; a malformed version is exit 2."""
    runner = CliRunner()

    def printed(*args: str) -> dict[tuple[str, str], Any]:
        result = runner.invoke(app, ["install", "--print", *args])
        assert result.exit_code == 0, result.output
        return {(d["kind"], d["metadata"]["name"]): d for d in yaml.safe_load_all(result.output) if d}

    new = printed("--kube-version", "v1.31.2")
    assert all("matchConditions" in e for e in new[("ValidatingWebhookConfiguration", "hetsched-restrict")]["webhooks"])
    assert new[("PodDisruptionBudget", "hetsched-webhook")]["apiVersion"] == "policy/v1"
    old = printed("--kube-version", "1.20")
    assert old[("PodDisruptionBudget", "hetsched-webhook")]["apiVersion"] == "policy/v1beta1"
    assert all("matchConditions" not in e for e in old[("ValidatingWebhookConfiguration", "hetsched-pods")]["webhooks"])
    chosen = printed("--kube-version", "1.30", "--set", "webhook.matchConditions=false")
    assert [e["failurePolicy"] for e in chosen[("ValidatingWebhookConfiguration", "hetsched-pods")]["webhooks"]] \
        == ["Ignore"]
    for bad in ("banana", "1", "1.2.3.4", "9" * 200):
        result = runner.invoke(app, ["install", "--print", "--kube-version", bad])
        assert result.exit_code == 2 and "--kube-version" in result.output and "Traceback" not in result.output
