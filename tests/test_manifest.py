"""Manifest validation: every bad-input case names file, document, kind/name and field in one line.

Covers: malformed YAML, unknown kind, missing required fields, negative replicas, minAvailable above the
replicas, invalid quantities, accelerators asked for only in requests, non-string nodeSelector values
(the seed article's `huawei.com/Ascend910: true`), unknown Volcano fields; the CLI's exit codes.
Not covered here: scheduler configuration errors (test_conf.py).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from hetsched.api.manifest import ManifestError, load_files, load_text
from hetsched.api.objects import Job, Pod

JOB = """\
apiVersion: batch.volcano.sh/v1alpha1
kind: Job
metadata:
  name: ascend-bert-pretrain
spec:
  minAvailable: {min_available}
  schedulerName: volcano
  tasks:
  - name: worker
    replicas: {replicas}
    template:
      spec:
        nodeSelector:
          huawei.com/Ascend910: {selector}
        containers:
        - name: bert-worker
          image: ascend-bert-mpi:latest
          resources:
            {section}:
              huawei.com/Ascend910: {chips}
"""


def job_yaml(min_available: object = 8, replicas: object = 8, selector: str = '"true"', section: str = "limits",
             chips: str = "1") -> str:
    return JOB.format(min_available=min_available, replicas=replicas, selector=selector, section=section,
                      chips=chips)


def problem_of(text: str) -> str:
    with pytest.raises(ManifestError) as info:
        load_text(text, "job.yaml")
    assert len(info.value.problems) == 1, info.value.problems
    line = str(info.value)
    assert "\n" not in line
    return line


def test_the_seed_job_with_a_quoted_selector_is_valid() -> None:
    (job,) = load_text(job_yaml(), "job.yaml")
    assert isinstance(job, Job)
    assert job.spec.min_available == 8
    assert job.metadata.namespace == "default"
    assert job.spec.tasks[0].template.spec.requests["huawei.com/Ascend910"] == 1000


def test_unquoted_boolean_selector_from_the_seed_article_says_to_quote_it() -> None:
    line = problem_of(job_yaml(selector="true"))
    assert line.startswith("job.yaml: document 1 (Job/ascend-bert-pretrain): spec.tasks[0].template.spec.nodeSelector")
    assert "huawei.com/Ascend910" in line
    assert "must be a string" in line and 'quote it: huawei.com/Ascend910: "true"' in line


def test_accelerator_only_in_requests_is_rejected_with_the_reason() -> None:
    line = problem_of(job_yaml(section="requests"))
    assert "spec.tasks[0].template.spec.containers[0].resources" in line
    assert "huawei.com/Ascend910 is set only in requests" in line and "limits" in line


def test_negative_replicas() -> None:
    line = problem_of(job_yaml(replicas=-1, min_available=0))
    assert "(Job/ascend-bert-pretrain): spec.tasks[0].replicas: must not be negative, got -1" in line


def test_min_available_above_total_replicas() -> None:
    line = problem_of(job_yaml(min_available=9))
    assert "(Job/ascend-bert-pretrain): spec: minAvailable (9) is greater than the total replicas (8)" in line


@pytest.mark.parametrize("bad", ["one", "1.2.3", "-2", "8 chips"])
def test_invalid_quantity(bad: str) -> None:
    line = problem_of(job_yaml(chips=f'"{bad}"'))
    assert "resources.limits: huawei.com/Ascend910:" in line and "quantity" in line
    assert "Job/ascend-bert-pretrain" in line


def test_malformed_yaml_names_the_line() -> None:
    line = problem_of("apiVersion: v1\nkind: Pod\nmetadata: {name: x\n")
    assert line.startswith("job.yaml: malformed YAML at line")


def test_unknown_kind() -> None:
    line = problem_of("apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web}\n")
    assert "document 1 (Deployment/web): kind: unknown kind apps/v1/Deployment" in line


def test_missing_required_fields() -> None:
    line = problem_of("apiVersion: batch.volcano.sh/v1alpha1\nkind: Job\nmetadata: {name: j}\nspec: {}\n")
    assert "(Job/j): spec.tasks: required field is missing" in line
    line = problem_of("apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec: {containers: []}\n")
    assert "(Pod/p): spec.containers:" in line
    line = problem_of("apiVersion: v1\nkind: Pod\nspec: {containers: [{name: c}]}\n")
    assert "metadata: required field is missing" in line


def test_misspelled_volcano_field_is_not_silently_ignored() -> None:
    line = problem_of(job_yaml().replace("minAvailable: 8", "minAvaliable: 8"))
    assert "spec.minAvaliable: unknown field" in line


def test_document_index_counts_documents_of_the_file() -> None:
    text = "apiVersion: v1\nkind: Pod\nmetadata: {name: ok}\nspec: {containers: [{name: c}]}\n---\n" + job_yaml(
        replicas=-3, min_available=0)
    assert "job.yaml: document 2 (Job/ascend-bert-pretrain)" in problem_of(text)


def test_effective_request_is_max_of_containers_and_init_plus_overhead() -> None:
    (pod,) = load_text("""
apiVersion: v1
kind: Pod
metadata: {name: p}
spec:
  overhead: {cpu: 100m}
  initContainers:
  - {name: init, resources: {requests: {cpu: "3", memory: 1Gi}}}
  containers:
  - {name: a, resources: {requests: {cpu: "1", memory: 2Gi}, limits: {nvidia.com/gpu: 2}}}
  - {name: b, resources: {requests: {cpu: 500m}, limits: {memory: 1Gi}}}
""")
    assert isinstance(pod, Pod)
    requests = pod.spec.requests
    assert requests["cpu"] == 3100  # max(1 + 0.5, 3) + 0.1 overhead
    assert requests["memory"] == 3 * 2**30 * 1000  # 2Gi + 1Gi (b's request defaults to its limit)
    assert requests["nvidia.com/gpu"] == 2000  # given only in limits → request = limit
    assert requests["pods"] == 1000


def test_all_problems_of_all_files_are_reported(tmp_path: Path) -> None:
    good = tmp_path / "good.yaml"
    good.write_text(job_yaml())
    bad = tmp_path / "bad.yaml"
    bad.write_text(job_yaml(selector="true") + "---\n" + job_yaml(replicas=-1, min_available=0))
    with pytest.raises(ManifestError) as info:
        load_files([good, bad, tmp_path / "missing.yaml"])
    lines = str(info.value).splitlines()
    assert len(lines) == 3
    assert lines[0].startswith(f"{bad}: document 1") and lines[1].startswith(f"{bad}: document 2")
    assert lines[2].startswith(f"{tmp_path / 'missing.yaml'}: cannot read file")


def test_validate_command_exit_codes_and_no_traceback(tmp_path: Path) -> None:
    good = tmp_path / "good.yaml"
    good.write_text(job_yaml())
    bad = tmp_path / "bad.yaml"
    bad.write_text(job_yaml(selector="true"))
    ok = subprocess.run([sys.executable, "-m", "hetsched.cli.main", "validate", str(good)],
                        capture_output=True, text=True, check=False)
    assert ok.returncode == 0, ok.stderr
    assert "valid: 1 Job" in ok.stdout
    failed = subprocess.run([sys.executable, "-m", "hetsched.cli.main", "validate", str(bad)],
                            capture_output=True, text=True, check=False)
    assert failed.returncode == 2
    assert "Traceback" not in failed.stderr
    assert failed.stderr.count("\n") == 1 and "quote it" in failed.stderr


def test_validate_reads_cluster_specs_too(tmp_path: Path) -> None:
    repo = Path(__file__).resolve().parent.parent
    ok = subprocess.run([sys.executable, "-m", "hetsched.cli.main", "validate",
                         str(repo / "examples/clusters/mixed.yaml"), str(repo / "examples/workloads/seeds.yaml")],
                        capture_output=True, text=True, check=False)
    assert ok.returncode == 0, ok.stderr
    assert "1 ClusterSpec" in ok.stdout and "2 Job" in ok.stdout and "2 Pod" in ok.stdout
    bad = tmp_path / "cluster.yaml"
    bad.write_text("apiVersion: hetsched.io/v1alpha1\nkind: ClusterSpec\npools:\n- {name: gpu, count: -1}\n")
    run = subprocess.run([sys.executable, "-m", "hetsched.cli.main", "validate", str(bad)],
                         capture_output=True, text=True, check=False)
    assert run.returncode == 2 and "pools[0] (gpu).count" in run.stderr and "Traceback" not in run.stderr


PODGROUP = """apiVersion: scheduling.volcano.sh/v1beta1
kind: PodGroup
metadata: {{name: pg}}
spec: {{{spec}}}
"""


@pytest.mark.parametrize(("spec", "message"), [
    ("minMember: 9223372036854775808", "spec.minMember: Input should be less than or equal to 2147483647"),
    ("minMember: 2147483648", "spec.minMember: Input should be less than or equal to 2147483647"),
    ("minTaskMember: {worker: -1}", "spec.minTaskMember.worker: must not be negative, got -1"),
    ("minMember: 1e400", "spec.minMember"),
    ("minMember: .nan", "spec.minMember"),
], ids=["int64", "int32", "negative", "overflow", "nan"])
def test_integers_stay_in_kubernetes_ranges_and_numbers_finite(spec: str, message: str) -> None:
    """Kubernetes' int32 fields are int32 here: 2^63 members, a negative task minimum or an infinite count is
    refused naming the field (not carried into arithmetic that overflows NumPy's int64 or loops)."""
    with pytest.raises(ManifestError) as info:
        load_text(PODGROUP.format(spec=spec))
    assert message in str(info.value) and "PodGroup/pg" in str(info.value), str(info.value)


def test_spread_bounds_and_timestamps_are_kubernetes_sized() -> None:
    pod = """apiVersion: v1
kind: Pod
metadata: {{name: p, creationTimestamp: {stamp}}}
spec:
  containers: [{{name: c, image: x}}]
  topologySpreadConstraints:
  - {{maxSkew: {skew}, topologyKey: zone, whenUnsatisfiable: DoNotSchedule}}
"""
    with pytest.raises(ManifestError, match="maxSkew: Input should be less than or equal to 2147483647"):
        load_text(pod.format(skew=2**63, stamp=0))
    with pytest.raises(ManifestError, match="creationTimestamp: Input should be a finite number"):
        load_text(pod.format(skew=1, stamp=".inf"))
    assert load_text(pod.format(skew=2**31 - 1, stamp=0))


def test_a_self_referencing_anchor_is_refused_naming_the_line() -> None:
    with pytest.raises(ManifestError, match=r"recursive alias \*loop at line 4"):
        load_text("apiVersion: v1\nkind: Pod\nmetadata: &loop\n  labels: *loop\n")


def test_rfc3339_writes_what_to_epoch_reads_back() -> None:
    """Seconds → RFC 3339 (the extender's payloads) and back, across leap days and centuries, checked against
    the standard library's own calendar."""
    import calendar
    import time

    from hetsched.api.times import rfc3339, to_epoch

    for seconds in (0, 951_782_400, 1_709_208_000, 1_767_225_599, 4_102_444_800, 253_402_300_799, 1_583_020_800):
        written = rfc3339(seconds + 0.7)
        assert written == time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(seconds))
        assert to_epoch(written) == seconds == calendar.timegm(time.gmtime(seconds))
