"""The openb trace: loader errors with line numbers, the replay method on a tiny hand-made trace, and a
smoke run on the real trace (skipped when ../shared/traces is absent)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from hetsched.replay.engine import TypicalPods, inflate, replay
from hetsched.replay.openb import TraceError, TraceNode, TracePod, load_nodes, load_pods

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


def test_inflation_reaches_the_ratio_and_keeps_the_pods() -> None:
    import random

    pods = [TracePod(f"p{i}", 1000, 10, 1, 500) for i in range(10)]
    stream = inflate(pods, capacity=10_000, ratio=1.3, rng=random.Random(1))
    assert sum(p.gpu_request for p in stream) >= 13_000
    assert {p.name for p in pods} <= {p.name for p in stream}


def test_sharing_pods_fill_gpus_without_exceeding_1000() -> None:
    nodes = [TraceNode("n0", 64_000, 100_000, 2, "T4"), TraceNode("n1", 64_000, 100_000, 0, "")]
    pods = [TracePod(f"s{i}", 1000, 10, 1, 300) for i in range(6)] + [TracePod("whole", 1000, 10, 1, 1000)]
    for policy in ("fgd", "bestfit", "random", "gpupacking", "dotprod", "gpuclustering", "fgd-bestfit"):
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
