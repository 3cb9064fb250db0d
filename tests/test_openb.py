"""The openb trace: loader errors with line numbers, the replay method on a tiny hand-made trace, and a
smoke run on the real trace (skipped when ../shared/traces is absent)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from hetsched.replay.engine import Cluster, ReplayResult, TypicalPods, affinity, gpuclustering, replay, tune
from hetsched.replay.openb import TraceError, TraceNode, TracePod, load_nodes, load_pods
from tests.builders import tiny_openb_trace

TRACE = Path(__file__).resolve().parents[2] / "shared" / "traces" / "alibaba-gpu-v2023"
POD_HEADER = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,"\
             "scheduled_time\n"


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


@pytest.mark.parametrize(("row", "message"), [
    ("p1,4000,100,1,abc,,LS,Running,0,1,0", "line 3: gpu_milli must be an integer, got 'abc'"),
    ("p1,4000,100,9,1000,,LS,Running,0,1,0", "line 3: num_gpu must be 0–8, got 9"),
    ("p1,4000,100,2,500,,LS,Running,0,1,0", "line 3: a 2-GPU pod must take whole GPUs"),
    ("p1,4000,100,0,300,,LS,Running,0,1,0", "line 3: gpu_milli 300 with num_gpu 0"),
    ("p1,4000,100", "line 3: 3 fields, the header has 11"),
    ("p1,-5,100,1,1000,,LS,Running,0,1,0", "line 3: cpu_milli must be ≥ 0, got -5"),
])
def test_malformed_pod_rows_name_the_line(tmp_path: Path, row: str, message: str) -> None:
    path = write(tmp_path, "pods.csv", POD_HEADER + "p0,1000,100,1,500,,LS,Running,0,1,0\n" + row + "\n")
    with pytest.raises(TraceError) as info:
        load_pods(path)
    assert str(info.value) == f"{path}: {message}" or str(info.value).startswith(f"{path}: {message}")


def test_node_file_errors(tmp_path: Path) -> None:
    path = write(tmp_path, "nodes.csv", "sn,cpu_milli,memory_mib,gpu\nn0,1000,10,0\n")
    with pytest.raises(TraceError, match="line 1: missing column"):
        load_nodes(path)
    path = write(tmp_path, "nodes2.csv", "sn,cpu_milli,memory_mib,gpu,model\nn0,1000,10,2,\n")
    with pytest.raises(TraceError, match="line 2: a node with 2 GPU"):
        load_nodes(path)


def test_spec_column_is_optional_and_parsed(tmp_path: Path) -> None:
    short = write(tmp_path, "multigpu.csv", "name,cpu_milli,memory_mib,num_gpu,gpu_milli\np0,1,1,2,1000\n")
    assert load_pods(short)[0].gpu_request == 2000
    full = write(tmp_path, "spec.csv", POD_HEADER + "p0,1,1,1,1000,V100M16|V100M32,LS,Running,0,1,0\n")
    assert load_pods(full)[0].gpu_spec == ("V100M16", "V100M32")


def test_tuning_shuffles_the_list_then_appends_samples_up_to_the_ratio() -> None:
    import random

    pods = [TracePod(f"p{i}", 1000, 10, 1, 100 * (i + 1)) for i in range(10)]  # 5,500 milli-GPU in all
    stream = tune(pods, capacity=10_000, ratio=1.3, rng=random.Random(1))
    assert sorted(p.name for p in stream[:10]) == sorted(p.name for p in pods)  # the list itself comes first
    assert [p.name for p in stream[:10]] != [p.name for p in pods]  # shuffled
    total = sum(p.gpu_request for p in stream)
    assert 13_000 - 1000 < total <= 13_000


def test_measurement_averages_the_arrivals_that_round_to_the_point() -> None:
    cluster = Cluster.from_nodes([TraceNode("n", 1000, 10, 1, "T4")])
    result = ReplayResult([98.0, 99.6, 100.2, 100.7], [90.0, 92.0, 96.0, 99.0], 0, cluster)
    assert result.unallocated_at(100.0) == pytest.approx(100 - 94.0)  # 99.6 and 100.2, not 100.7
    assert result.unallocated_at(130.0) == pytest.approx(100 - 99.0)  # nothing near: the last arrival


def test_equal_scores_go_to_the_same_node_not_a_random_one() -> None:
    """The published scheduler breaks ties by node name, names carrying a seeded random prefix: CPU-only
    pods (score 0 everywhere under GpuClustering) all land on the first node in the run's order."""
    import random

    nodes = [TraceNode(f"n{i}", 64_000, 100_000, 2, "T4") for i in range(4)]
    cluster = Cluster.from_nodes(nodes)
    cluster.rank = np.array([2, 0, 3, 1])
    rng = random.Random(0)
    for i in range(5):
        pod = TracePod(f"c{i}", 4000, 10, 0, 0)
        row, gpus = gpuclustering(cluster, pod, cluster.feasible(pod), rng)
        cluster.place(row, pod, gpus)
    assert cluster.cpu_free.tolist() == [64_000, 44_000, 64_000, 64_000]


def test_clustering_affinity_is_share_or_gpu_count() -> None:
    assert affinity(TracePod("a", 1, 1, 1, 300)) == affinity(TracePod("b", 1, 1, 1, 700))
    assert affinity(TracePod("c", 1, 1, 1, 1000)) != affinity(TracePod("d", 1, 1, 2, 1000))


def test_sharing_pods_fill_gpus_without_exceeding_1000() -> None:
    nodes = [TraceNode("n0", 64_000, 100_000, 2, "T4"), TraceNode("n1", 64_000, 100_000, 0, "")]
    pods = [TracePod(f"s{i}", 1000, 10, 1, 300) for i in range(6)] + [TracePod("whole", 1000, 10, 1, 1000)]
    for policy in ("fgd", "bestfit", "random", "gpupacking", "dotprod", "gpuclustering", "fgd-cpufit", "fgd-full",
                   "fgd-blend", "fgd-adaptive"):
        result = replay(nodes, pods, policy, seed=3, ratio=1.0)
        assert result.allocated_pct[-1] <= 100.0
        free = result.cluster.gpu_free[0, :2]
        assert ((free >= 0) & (free <= 1000)).all()
        assert result.cluster.allocated() == round(result.allocated_pct[-1] * 2000 / 100)
    typical = TypicalPods.from_pods(pods)
    assert typical.fragmentation(64_000, "T4", (1000, 1000)) == pytest.approx(0.0)  # every shape fits
    assert typical.fragmentation(64_000, "T4", (200, 1000)) > 0  # 200 milli on one GPU is unusable


@pytest.mark.skipif(not TRACE.exists(), reason=f"openb trace not present at {TRACE}")
def test_replay_command_on_the_real_trace(tmp_path: Path) -> None:
    out = tmp_path / "replay.json"
    plot = tmp_path / "curve.png"
    run = subprocess.run([sys.executable, "-m", "hetsched.cli.main", "replay-openb", "--trace-dir", str(TRACE),
                          "--pods", "default", "--policy", "bestfit,random", "--seeds", "42", "--json", str(out),
                          "--plot", str(plot)], capture_output=True, text=True, check=False)
    assert run.returncode == 0, run.stderr
    report = json.loads(out.read_text())
    bestfit = report["policies"]["bestfit"]["unallocated_gpu_pct_at_100"]["mean"]
    random_ = report["policies"]["random"]["unallocated_gpu_pct_at_100"]["mean"]
    assert 0 < bestfit < random_ < 30
    assert plot.stat().st_size > 10_000
    bad = subprocess.run([sys.executable, "-m", "hetsched.cli.main", "replay-openb", "--trace-dir", str(TRACE),
                          "--pods", "nope"], capture_output=True, text=True, check=False)
    assert bad.returncode == 2 and "openb_pod_list_nope.csv: not found" in bad.stderr
    bad = subprocess.run([sys.executable, "-m", "hetsched.cli.main", "replay-openb", "--trace-dir", str(TRACE),
                          "--jobs", "0"], capture_output=True, text=True, check=False)
    assert bad.returncode == 2 and "--jobs" in bad.stderr and "Traceback" not in bad.stderr


def test_the_report_is_the_same_for_any_number_of_processes(tmp_path: Path) -> None:
    """Replays run on a process pool; one process or three, the JSON is byte for byte the same."""
    tiny_openb_trace(tmp_path)
    outputs = []
    for jobs in ("1", "3"):
        out = tmp_path / f"report-{jobs}.json"
        run = subprocess.run([sys.executable, "-m", "hetsched.cli.main", "replay-openb", "--trace-dir", str(tmp_path),
                              "--pods", "tiny", "--policy", "fgd,gpupacking,gpuclustering", "--seeds", "1-3",
                              "--jobs", jobs, "--json", str(out)], capture_output=True, text=True, check=False)
        assert run.returncode == 0, run.stderr
        outputs.append(out.read_bytes())
    assert outputs[0] == outputs[1]
    assert json.loads(outputs[0])["policies"]["fgd"]["unallocated_gpu_pct_at_100"]["per_seed"].keys() == {"1", "2", "3"}


def _choose(policy: str, pods: list[TracePod], cluster: Cluster, pod: TracePod) -> str:
    """The node ``policy`` (built for the workload ``pods``) picks for ``pod`` on ``cluster``, whose node
    order is its list's."""
    import random

    from hetsched.replay.engine import POLICIES

    row, _ = POLICIES[policy](pods)(cluster, pod, cluster.feasible(pod), random.Random(0))
    return cluster.names[row]


def test_fgd_full_weighs_rare_shapes_that_the_95_percent_cut_drops() -> None:
    """The workload: 97 one-GPU pods and 3 eight-GPU pods. The published cut (shapes covering 95 % of pods)
    keeps only the one-GPU shape, so to FGD every node is as good for a one-GPU pod and the tie goes to the
    first node, breaking the only 8-GPU node; fgd-full, measuring against every shape, keeps it whole."""
    one = TracePod("one", 4000, 10, 1, 1000)
    pods = [one] * 97 + [TracePod("eight", 4000, 10, 8, 1000)] * 3
    nodes = [TraceNode("big", 96_000, 400_000, 8, "G2"), TraceNode("small", 96_000, 400_000, 2, "G2")]
    assert _choose("fgd", pods, Cluster.from_nodes(nodes), one) == "big"
    assert _choose("fgd-full", pods, Cluster.from_nodes(nodes), one) == "small"


def test_fgd_full_puts_cpu_only_pods_where_the_least_gpu_is_free() -> None:
    """A CPU-only pod takes no GPU, so FGD scores every roomy node alike and takes the first; fgd-full's
    look-ahead takes the node whose GPUs are already gone, keeping CPU next to the free GPUs."""
    gpu_pod = TracePod("gpu", 8000, 10, 1, 1000)
    cpu_pod = TracePod("cpu", 8000, 10, 0, 0)
    pods = [gpu_pod] * 8 + [cpu_pod] * 2
    nodes = [TraceNode(name, 96_000, 400_000, 2, "T4") for name in ("free", "full")]
    picks = {}
    for policy in ("fgd", "fgd-full"):
        cluster = Cluster.from_nodes(nodes)
        cluster.place(1, gpu_pod, [0])
        cluster.place(1, gpu_pod, [1])  # "full": both GPUs taken, CPU left
        picks[policy] = _choose(policy, pods, cluster, cpu_pod)
    assert picks == {"fgd": "free", "fgd-full": "full"}


@pytest.mark.parametrize("policy", ["fgd", "fgd-cpufit", "fgd-full"])
def test_fgd_scores_each_node_state_once_and_chooses_as_node_by_node_scoring_does(policy: str) -> None:
    """FGD scores each distinct node state (free CPU, model, free GPU milli) once and picks among nodes with
    numpy; the choice must be the one scoring node by node gives (best score, then the node first in the
    run's order) — on a random cluster filling up with random pods of every shape."""
    import random

    from hetsched.replay.engine import POLICIES

    rng = random.Random(11)
    nodes = [TraceNode(f"n{i}", rng.choice((32_000, 64_000, 96_000)), 400_000, rng.choice((0, 2, 4, 8)),
                     rng.choice(("T4", "V100"))) for i in range(40)]
    shapes = [(0, 0), (1, 250), (1, 500), (1, 1000), (2, 1000), (4, 1000), (8, 1000)]
    pods = [TracePod(f"p{i}", rng.choice((1000, 4000, 8000)), 1000, *rng.choice(shapes),
                     gpu_spec=rng.choice(((), ("V100",)))) for i in range(300)]
    fgd = POLICIES[policy](pods)
    cluster = Cluster.from_nodes(nodes)
    cluster.rank = np.array(rng.sample(range(len(nodes)), len(nodes)), dtype=np.int64)
    placed = 0
    for pod in pods:
        rows = cluster.feasible(pod)
        if not len(rows):
            continue
        scored = []
        for row in rows.tolist():  # the reference: every node scored on its own
            gpus = tuple(int(g) for g in cluster.gpu_free[row, : int(cluster.gpu_count[row])])
            score, choice = fgd._node_score(pod, int(cluster.cpu_free[row]), cluster.models[row], gpus)  # type: ignore[attr-defined]
            scored.append((score, -int(cluster.rank[row]), row, choice))
        best = max(scored, key=lambda item: (item[0], item[1]))
        assert fgd(cluster, pod, rows, rng) == (best[2], best[3])
        cluster.place(best[2], pod, best[3])
        placed += 1
        for row in range(len(nodes)):  # the state ids follow every placement
            gpus = tuple(int(g) for g in cluster.gpu_free[row, : int(cluster.gpu_count[row])])
            assert cluster.states[int(cluster.state_id[row])] == (int(cluster.cpu_free[row]), cluster.models[row], gpus)
    assert placed > 100


def test_fgd_adaptive_blends_while_gpus_run_out_first_and_takes_every_shape_once_cpu_does() -> None:
    """40 one-GPU pods and a rare eight-GPU one on an 8-GPU, 64-CPU node: asking 4 CPUs each, GPUs run out
    first (CPU asked 0.43) and the rule is the blend; asking 16, CPU runs out first (1.71) and it is the full
    distribution — the two differ, since the rare shape is outside the 95 % cut."""
    import random

    from hetsched.replay.engine import AdaptiveFGD, cpu_asked
    from hetsched.scheduler.contract.typical import COMMON

    nodes = [TraceNode("n", 64_000, 400_000, 8, "T4")]
    for cpu, asked, blended in ((4000, 0.427, True), (16_000, 1.708, False)):
        pods = [TracePod(f"p{i}", cpu, 10, 1, 1000) for i in range(40)] + [TracePod("big", cpu, 10, 8, 1000)]
        cluster = Cluster.from_nodes(nodes)
        assert cpu_asked(pods, cluster) == pytest.approx(asked, abs=0.001)
        policy = AdaptiveFGD(pods)
        policy(cluster, pods[0], cluster.feasible(pods[0]), random.Random(0))
        assert policy.chosen is not None
        blend, full = TypicalPods.from_pods(pods, common=COMMON), TypicalPods.from_pods(pods, popularity=100.0)
        assert blend != full
        assert policy.chosen.typical == (blend if blended else full)
