"""``hetsched sweep``: policies × pod lists × seeds on a tiny openb-format trace — the table (CSV, JSON with a
paired summary: wins, losses, sign and signed-rank tests) and the plot, the same byte for byte on local
processes and on a Dask LocalCluster, and bad options refused with the option named."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.builders import tiny_openb_trace


def sweep(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "hetsched.cli.main", "sweep", *args], capture_output=True, text=True,
                          check=False, timeout=300)


def test_a_sweep_writes_one_table_and_a_plot_the_same_on_processes_and_on_dask(tmp_path: Path) -> None:
    trace = tiny_openb_trace(tmp_path / "trace")
    (trace / "csv" / "openb_pod_list_other.csv").write_text(
        (trace / "csv" / "openb_pod_list_tiny.csv").read_text().replace(",300,", ",500,"))
    outputs = {}
    for name, extra in (("local", ["--jobs", "2", "--plot", str(tmp_path / "bars.png")]),
                        ("dask", ["--jobs", "2", "--dask", "local"])):
        run = sweep("--trace-dir", str(trace), "--pods", "all", "--policy", "fgd,gpupacking,best", "--seeds", "1-3",
                    "--csv", str(tmp_path / f"{name}.csv"), "--json", str(tmp_path / f"{name}.json"), *extra)
        assert run.returncode == 0, run.stderr[-3000:]
        outputs[name] = ((tmp_path / f"{name}.csv").read_bytes(), (tmp_path / f"{name}.json").read_bytes())
    assert outputs["local"] == outputs["dask"]
    rows = list(csv.DictReader(outputs["local"][0].decode().splitlines()))
    assert len(rows) == 2 * 3 * 3 and {r["pods"] for r in rows} == {"other", "tiny"}
    assert all(0 <= float(r["unallocated_gpu_pct_at_100"]) <= 100 for r in rows)
    summary = json.loads(outputs["local"][1])["summary"]
    best = next(s for s in summary if s["pods"] == "tiny" and s["policy"] == "fgd-adaptive")  # best
    assert best["seeds"] == 3 and best["wins_vs_fgd"] + best["losses_vs_fgd"] <= 3
    assert 0 < best["sign_p_vs_fgd"] <= 1
    pooled = next(s for s in summary if s["pods"] == "all" and s["policy"] == "fgd-adaptive")  # both lists, paired
    assert pooled["seeds"] == 6 and 0 < pooled["signed_rank_p_vs_fgd"] <= 1
    assert (tmp_path / "bars.png").stat().st_size > 5_000


@pytest.mark.parametrize(("args", "named"), [
    (["--pods", "nope"], "--pods: no such pod list 'nope'"),
    (["--pods", "../../etc/passwd"], "--pods: no such pod list"),
    (["--seeds", "1-99999999"], "--seeds"),
    (["--jobs", "0"], "--jobs"),
    (["--policy", "<script>"], "--policy: unknown policy"),
])
def test_bad_options_are_refused_naming_the_option(tmp_path: Path, args: list[str], named: str) -> None:
    trace = tiny_openb_trace(tmp_path)
    run = sweep("--trace-dir", str(trace), "--pods", "tiny", *args)
    assert run.returncode == 2 and named in run.stderr and "Traceback" not in run.stderr
