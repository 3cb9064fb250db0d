"""``hetsched families``: held-out workload families made from the shared pod lists (mixtures, perturbed shares,
node subsets, CPU-heavier lists) — the same files for the same seed, each family what it says, replayed by
``hetsched sweep`` with a pooled row per family; bad options and missing sources refused, naming them."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

import pytest

from hetsched.replay.families import SOURCES
from hetsched.replay.openb import load_nodes, load_pods
from hetsched.replay.sweep import NODE_LIST, node_list
from tests.builders import tiny_openb_trace

pytestmark = pytest.mark.timeout(300)


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "hetsched.cli.main", *args], capture_output=True, text=True,
                          check=False, timeout=240)


def sources(folder: Path) -> Path:
    """The 8 shared pod lists' names, each a variant of the tiny list (its CPU scaled by the list's number)."""
    trace = tiny_openb_trace(folder)
    tiny = (trace / "csv" / "openb_pod_list_tiny.csv").read_text().splitlines()
    for number, name in enumerate(SOURCES, start=1):
        rows = [tiny[0]]
        for line in tiny[1:]:
            cells = line.split(",")
            cells[1] = str(int(cells[1]) // 1000 * (1000 + 100 * number))
            rows.append(",".join(cells))
        (trace / "csv" / f"openb_pod_list_{name}.csv").write_text("\n".join(rows) + "\n")
    return trace


def test_the_families_are_made_from_the_sources_the_same_way_every_time(tmp_path: Path) -> None:
    trace = sources(tmp_path / "trace")
    for out in ("a", "b"):
        run = cli("families", "--trace-dir", str(trace), "--out", str(tmp_path / out), "--members", "3")
        assert run.returncode == 0, run.stderr[-3000:]
    first, second = (sorted((p.name, p.read_bytes()) for p in (tmp_path / o / "csv").iterdir()) for o in "ab")
    assert first == second  # the same seed writes the same files
    made = tmp_path / "a" / "csv"
    assert len(list(made.glob("openb_pod_list_*.csv"))) == 5 * 3
    default = load_pods(trace / "csv" / "openb_pod_list_default.csv")
    nodes = load_nodes(trace / "csv" / "openb_node_list_gpu_node.csv")
    shapes = {(p.cpu_milli, p.num_gpu, p.gpu_milli) for name in SOURCES
              for p in load_pods(trace / "csv" / f"openb_pod_list_{name}.csv")}
    # mixtures: as many pods as default, every one a source pod, drawn from several lists
    mixed = load_pods(made / "openb_pod_list_mix-uniform-1.csv")
    assert len(mixed) == len(default) and {(p.cpu_milli, p.num_gpu, p.gpu_milli) for p in mixed} <= shapes
    assert len({p.cpu_milli % 1000 for p in mixed if p.cpu_milli >= 1000}) > 3
    # shares: only sharing pods change, within 10–990 milli; some do change
    shared = load_pods(made / "openb_pod_list_share-1.csv")
    assert [(p.cpu_milli, p.num_gpu) for p in shared] == [(p.cpu_milli, p.num_gpu) for p in default]
    assert all(10 <= p.gpu_milli <= 990 for p in shared if p.num_gpu == 1 and p.gpu_milli < 1000)
    assert all(a.gpu_milli == b.gpu_milli for a, b in zip(shared, default, strict=True) if b.gpu_milli == 1000)
    assert any(a.gpu_milli != b.gpu_milli for a, b in zip(shared, default, strict=True))
    # node subsets: 25 / 50 / 75 % of the nodes, a node list of their own
    subsets = [load_nodes(made / f"openb_node_list_nodes-{k}.csv") for k in (1, 2, 3)]
    assert [len(s) for s in subsets] == [round(f * len(nodes)) for f in (0.25, 0.5, 0.75)]
    assert all({n.name for n in s} <= {n.name for n in nodes} for s in subsets)
    # CPU-heavier: every pod asks for more CPU (× 1.2 first), capped at the largest node
    heavier = load_pods(made / "openb_pod_list_cpu-1.csv")
    largest = max(n.cpu_milli for n in nodes)
    assert all(a.cpu_milli == min(largest, round(b.cpu_milli * 1.2 / 100) * 100)
               for a, b in zip(heavier, default, strict=True))


def test_a_sweep_over_the_families_pools_each_family(tmp_path: Path) -> None:
    trace = sources(tmp_path / "trace")
    out = tmp_path / "families"
    assert cli("families", "--trace-dir", str(trace), "--out", str(out), "--members", "2",
               "--family", "nodes,cpu").returncode == 0
    run = cli("sweep", "--trace-dir", str(out), "--pods", "all", "--policy", "fgd,best", "--seeds", "1-2",
              "--jobs", "2", "--json", str(tmp_path / "sweep.json"), "--csv", str(tmp_path / "sweep.csv"))
    assert run.returncode == 0, run.stderr[-3000:]
    summary = json.loads((tmp_path / "sweep.json").read_text())["summary"]
    pooled = {(s["pods"], s["policy"]): s for s in summary}
    assert pooled[("nodes-*", "fgd-adaptive")]["seeds"] == 4 and pooled[("cpu-*", "fgd-adaptive")]["seeds"] == 4
    assert pooled[("all", "fgd-adaptive")]["seeds"] == 8
    assert 0 < pooled[("cpu-*", "fgd-adaptive")]["signed_rank_p_vs_fgd"] <= 1
    rows = list(csv.DictReader((tmp_path / "sweep.csv").read_text().splitlines()))
    assert {r["pods"] for r in rows} == {"nodes-1", "nodes-2", "cpu-1", "cpu-2"}
    # a node subset is replayed on its own nodes, the others on the trace's
    assert node_list(out / "csv", "nodes-1").name == "openb_node_list_nodes-1.csv"
    assert node_list(out / "csv", "cpu-1").name == NODE_LIST


@pytest.mark.parametrize(("args", "named"), [
    (["--members", "0"], "--members"),
    (["--members", "100000"], "--members"),
    (["--family", "nope,<b>"], "--family: unknown 'nope'"),
])
def test_bad_options_are_refused_naming_the_option(tmp_path: Path, args: list[str], named: str) -> None:
    trace = sources(tmp_path / "trace")
    run = cli("families", "--trace-dir", str(trace), "--out", str(tmp_path / "out"), *args)
    assert run.returncode == 2 and named in run.stderr and "Traceback" not in run.stderr


def test_missing_sources_and_writing_over_the_trace_are_refused(tmp_path: Path) -> None:
    trace = tiny_openb_trace(tmp_path / "trace")  # the tiny list only: the shared lists are missing
    run = cli("families", "--trace-dir", str(trace), "--out", str(tmp_path / "out"))
    assert run.returncode == 2 and "openb_pod_list_cpu050.csv: not found" in run.stderr
    full = sources(tmp_path / "full")
    run = cli("families", "--trace-dir", str(full), "--out", str(full))
    assert run.returncode == 2 and "that is the trace itself" in run.stderr
    assert not (full / "csv" / "openb_pod_list_cpu-1.csv").exists()


def test_bench_fgd_runs_the_plugin_in_the_simulator_with_each_rule(tmp_path: Path) -> None:
    """The scheduler's fgd plugin on an openb-format list, in the simulator: the same nodes and stream for each
    configuration, every figure a share of the GPUs; bad sizes refused, naming the option."""
    trace = tiny_openb_trace(tmp_path / "trace")
    out = tmp_path / "fgd.json"
    run = cli("bench", "fgd", "--trace-dir", str(trace), "--pods", "tiny", "--nodes", "6", "--seeds", "1-2",
              "--batch", "10", "--json", str(out))
    assert run.returncode == 0, run.stderr[-3000:]
    figures = json.loads(out.read_text())["unallocated_gpu_pct_at_100"]
    assert set(figures) == {"no fgd", "fgd (default: full distribution)", "fgd.common 1 (published cut)",
                            "fgd.common 0.5 (fgd-adaptive)"}
    for values in figures.values():
        assert len(values["per_seed"]) == 2 and all(0 <= v <= 100 for v in values["per_seed"].values())
    assert figures["fgd (default: full distribution)"]["mean_diff_vs_default"] == 0
    for args, named in ((["--nodes", "1"], "--nodes"), (["--nodes", "50"], "node list has 9 GPU nodes"),
                        (["--batch", "0"], "--batch"), (["--pods", "<x>"], "--pods: no such pod list")):
        bad = cli("bench", "fgd", "--trace-dir", str(trace), "--pods", "tiny", *args)
        assert bad.returncode == 2 and named in bad.stderr and "Traceback" not in bad.stderr, bad.stderr
