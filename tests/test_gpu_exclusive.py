"""Volcano's GPU exclusivity rules (``deviceshare.GPUExclusiveRules``): pods matching a rule never share a GPU
with another pod matching the same rule; others share as usual.

Cases translated from Volcano's ``pkg/scheduler/plugins/deviceshare/gpuexclusive_test.go`` (named per test),
run end to end through hetsched's scheduler on HAMi-core vGPU nodes.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from hetsched.api.objects import AnyObject, Pod
from hetsched.devices.inventory import PARTITIONS_ANNOTATION
from hetsched.scheduler.contract.gpu_exclusive import matching, parse_rules
from hetsched.scheduler.defaults import ConfError, parse_conf
from tests.builders import gang, harness, priority_class
from tests.test_partitions import GPU, part_node

pytestmark = pytest.mark.timeout(120)

TRAINING = {"app": "training", "team": "ml"}
INFERENCE = {"workload": "inference"}
VGPU = {"volcano.sh/vgpu-number": 1, "volcano.sh/vgpu-memory": 1000, "volcano.sh/vgpu-cores": 10}


def conf(rules: str = "[{app: training, team: ml}, {workload: inference}]", actions: str = "enqueue, allocate") -> str:
    return f"""actions: "{actions}"
tiers:
- plugins: [{{name: priority}}, {{name: gang}}, {{name: conformance}}]
- plugins:
  - {{name: predicates}}
  - {{name: proportion}}
  - {{name: devicetopology}}
  - name: deviceshare
    arguments:
      deviceshare.VGPUEnable: true
      deviceshare.GPUExclusiveRules: {rules}
"""


def chips(h: Any) -> dict[str, int]:
    """pod → the GPU its one vGPU is on."""
    out = {}
    for pod in h.cluster.list("Pod"):
        if isinstance(pod, Pod) and pod.spec.nodeName:
            out[pod.metadata.name] = json.loads(pod.metadata.annotations[PARTITIONS_ANNOTATION])[0][1]
    return out


def submit(h: Any, name: str, size: int, labels: dict[str, str], **args: Any) -> None:
    for obj in gang(name, size, limits=VGPU, cpu="1", labels=labels, **args):
        h.cluster.create(obj)


# ------------------------------------------------------------------------------------------ the rules

def test_rules_load_as_volcano_reads_them_and_what_it_would_drop_is_refused() -> None:
    """TestLoadGPUExclusiveConfig: rules are label maps; hetsched refuses, naming the rule, what Volcano
    silently drops (a value that is not a string, an empty map) — a rule doing nothing is never accepted."""
    assert parse_rules([{"workloadType": "training"}, {"workloadType": "batch", "priority": "high"}], "deviceshare") \
        == ((("workloadType", "training"),), (("priority", "high"), ("workloadType", "batch")))
    assert parse_rules(None, "deviceshare") == ()
    for rules, problem in (("[{workloadType: training}, {priority: 1}]",
                            "deviceshare.GPUExclusiveRules[1]: the value of 'priority' must be a string"),
                           ("[{}]", "deviceshare.GPUExclusiveRules[0] is empty"),
                           ("training", "deviceshare.GPUExclusiveRules must be a list of label maps"),
                           ("[training]", "deviceshare.GPUExclusiveRules[0] must be a map of label to value")):
        with pytest.raises(ConfError) as error:
            parse_conf(conf(rules), "conf")
        assert problem in str(error.value) and "plugin deviceshare" in str(error.value)
    # the guide's configuration names deviceshare alone: devicetopology, which carves, comes with it
    loaded = parse_conf(conf().replace("  - {name: devicetopology}\n", ""), "conf")
    assert [o.name for o in loaded.tiers[1].plugins] == ["predicates", "proportion", "deviceshare", "devicetopology"]


@pytest.mark.parametrize(("labels", "expected"), [
    (TRAINING, (0,)),                                        # pod matches rule 0
    ({**TRAINING, "extra": "x"}, (0,)),                      # … with extra labels
    ({"app": "training"}, ()),                               # missing one label of rule 0
    ({"app": "training", "team": "data"}, ()),               # wrong value for rule 0
    (INFERENCE, (1,)),                                       # matches rule 1
    ({**TRAINING, **INFERENCE}, (0, 1)),                     # matches both (TestMatchingRules)
    ({}, ()),                                                # no labels match nothing
])
def test_a_pod_matches_a_rule_only_with_every_label(labels: dict[str, str], expected: tuple[int, ...]) -> None:
    """TestPodMatchesRule and TestMatchingRules."""
    rules = parse_rules([TRAINING, INFERENCE], "deviceshare")
    assert matching(labels, rules) == expected


# ------------------------------------------------------------------------------------------ scheduling

def test_same_rule_pods_take_distinct_gpus_and_the_rest_share() -> None:
    """TestEndToEndExclusive and TestPodMatchingMultipleRulesSeesUnionOfReservedGPUs: four training pods on
    a 4-GPU node take four GPUs (without the rule, binpack puts them all on one); a fifth waits, saying why;
    pods of another rule or of none still share those GPUs; a pod matching both rules avoids the GPUs of
    both; when a training pod ends, its GPU takes the waiting one."""
    node = part_node("g", GPU, "Tesla-V100", "vgpu", chips=4, chip_memory=16384)
    unruled = harness([node, *gang("train", 4, limits=VGPU, cpu="1", labels=TRAINING)], conf=conf("[]"))
    unruled.cycle()
    assert set(chips(unruled).values()) == {0}  # the test can fail: without the rule they gather

    h = harness([part_node("g", GPU, "Tesla-V100", "vgpu", chips=4, chip_memory=16384),
                 *gang("train", 4, limits=VGPU, cpu="1", labels=TRAINING)], conf=conf())
    h.cycle()
    assert sorted(chips(h)[f"train-{i}"] for i in range(4)) == [0, 1, 2, 3]

    submit(h, "more", 1, TRAINING)
    h.cycle()
    assert "more-0" not in chips(h)
    assert "no nvidia.com/gpu chip with room that no pod of the same exclusivity rule (app=training,team=ml) " \
           "shares" in h.condition("more")

    submit(h, "serve", 1, INFERENCE)
    submit(h, "other", 1, {"app": "serving"})
    h.cycle()
    placed = chips(h)
    assert "serve-0" in placed and "other-0" in placed  # other rules and no rule share the training GPUs

    # a pod matching both rules sees the union of both rules' GPUs: every GPU holds a training pod
    submit(h, "both", 1, {**TRAINING, **INFERENCE})
    h.cycle()
    assert "both-0" not in chips(h)

    freed = chips(h)["train-2"]
    h.cluster.delete("Pod", "default/train-2")
    for _ in range(3):
        h.cycle()
    placed = chips(h)
    assert placed.get("more-0") == freed or placed.get("both-0") == freed
    assert not ("more-0" in placed and "both-0" in placed)  # one free GPU for the two rule-0 pods


def test_a_restarted_scheduler_keeps_rule_pods_apart() -> None:
    """TestOnSessionOpenWrapsDevices: the GPUs reserved by running pods are read back from their hand-offs
    when a scheduler starts, so a new training pod avoids them."""
    h = harness([part_node("g", GPU, "Tesla-V100", "vgpu", chips=2, chip_memory=16384),
                 *gang("train", 1, limits=VGPU, cpu="1", labels=TRAINING)], conf=conf())
    h.cycle()
    first = chips(h)["train-0"]
    bound = [p for p in h.cluster.list("Pod") if isinstance(p, Pod)]
    fresh = harness([part_node("g", GPU, "Tesla-V100", "vgpu", chips=2, chip_memory=16384), *bound,
                     *gang("next", 1, limits=VGPU, cpu="1", labels=TRAINING),
                     *gang("plain", 1, limits=VGPU, cpu="1")], conf=conf())
    fresh.cycle()
    placed = chips(fresh)
    assert placed["next-0"] == 1 - first
    assert placed["plain-0"] == first or placed["plain-0"] == 1 - first  # unruled: anywhere with room


def test_an_evicted_rule_pod_frees_its_gpu_for_the_same_rule() -> None:
    """A high-priority training pod on a node whose one GPU holds a low-priority training pod: preemption
    evicts it, and the eviction plan releases the GPU's reservation along with its vGPU."""
    objects: list[AnyObject] = [part_node("g", GPU, "Tesla-V100", "vgpu", chips=1, chip_memory=16384),
                                priority_class("low", 1), priority_class("high", 1000)]
    objects += gang("low", 1, limits=VGPU, cpu="1", labels=TRAINING, priority_class="low")
    h = harness(objects, conf=conf(actions="enqueue, allocate, preempt"))
    h.cycle()
    assert "low-0" in chips(h)
    submit(h, "high", 1, TRAINING, priority_class="high")
    for _ in range(6):
        h.cycle()
    placed = chips(h)
    assert "high-0" in placed and "low-0" not in placed


def test_mig_nodes_are_not_concerned() -> None:
    """Volcano skips dynamic-MIG nodes: a MIG instance is isolated by the hardware already."""
    h = harness([part_node("g", GPU, "A100-SXM4-40GB", "mig", chips=1),
                 *gang("train", 2, limits={"nvidia.com/mig-1g.5gb": 1}, cpu="1", labels=TRAINING)], conf=conf())
    h.cycle()
    assert sorted(chips(h)) == ["train-0", "train-1"]


ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize(("conf_file", "running"), [("vgpu-2.conf", 4), (None, 5)])
def test_the_guides_training_pods_in_the_simulator(tmp_path: Path, conf_file: str | None, running: int) -> None:
    """The vGPU guide's configuration (``deviceshare.GPUExclusiveRules`` on ``workloadType: training``) and
    its training pod (4 vGPUs of 16 GiB), five times, on the example cluster's 16 V100s: four run, each on
    GPUs of its own, and the fifth waits; without the rules the five share GPUs and all run."""
    pods = [{"apiVersion": "v1", "kind": "Pod",
             "metadata": {"name": f"training-job-{i}", "labels": {"workloadType": "training"}},
             "spec": {"schedulerName": "volcano", "containers": [{
                 "name": "trainer", "image": "nvidia/cuda:12.0-base",
                 "resources": {"limits": {"volcano.sh/vgpu-number": "4", "volcano.sh/vgpu-memory": "16384"}}}]}}
            for i in range(5)]
    workload = tmp_path / "pods.yaml"
    workload.write_text(yaml.safe_dump_all(pods))
    out = tmp_path / "results.json"
    extra = ["--scheduler-conf", str(ROOT / "tests/fixtures/volcano-guide" / conf_file)] if conf_file else []
    run = subprocess.run([sys.executable, "-m", "hetsched.cli.main", "simulate", "-c",
                          str(ROOT / "hetsched/examples/clusters/partitioned.yaml"), str(workload), "-o", str(out),
                          "--until", "30", "-q", *extra], capture_output=True, text=True, timeout=200, check=False)
    if running == 5:
        assert run.returncode == 0, run.stderr
    else:  # the simulator exits 3 when a job never ran, saying why
        assert run.returncode == 3 and "default/training-job-4" in run.stderr
        assert "no nvidia.com/gpu chip with room that no pod of the same exclusivity rule (workloadType=training)" \
            in run.stderr
    summary = json.loads(out.read_text())["summary"]
    assert summary["phases"].get("Running") == running and summary["binds"] == running
