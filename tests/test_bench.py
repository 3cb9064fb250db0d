"""The engine benchmark's interface (`hetsched bench engine … --json OUT`) on a tiny cluster: the keys other
checks rely on are present and the figures are consistent. Speed itself is never asserted in tests."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path


def test_bench_engine_writes_the_figures(tmp_path: Path) -> None:
    out = tmp_path / "engine.json"
    run = subprocess.run([sys.executable, "-m", "hetsched.cli.main", "bench", "engine", "--nodes", "40", "--pods",
                          "300", "--naive-seconds", "0.2", "--json", str(out)],
                         capture_output=True, text=True, check=False)
    assert run.returncode == 0, run.stderr
    figures = json.loads(out.read_text())
    assert {"pods_per_second", "peak_rss_mb", "naive_pods_per_second"} <= set(figures)
    assert figures["nodes"] == 40 and figures["pods"] == 300
    assert 0 < figures["pods_bound"] <= 300
    assert figures["pods_per_second"] > 0 and figures["naive_pods_per_second"] > 0 and figures["peak_rss_mb"] > 0


def test_bench_ascend_compares_both_policies(tmp_path: Path) -> None:
    out = tmp_path / "ascend.json"
    run = subprocess.run([sys.executable, "-m", "hetsched.cli.main", "bench", "ascend", "--nodes", "8", "--seeds",
                          "1-2", "--json", str(out)], capture_output=True, text=True, check=False)
    assert run.returncode == 0, run.stderr
    report = json.loads(out.read_text())
    assert set(report["policies"]) == {"ascend-volcano-compat", "ascend-hccs"}
    for values in report["policies"].values():
        assert values["jobs_admitted"]["mean"] > 0
        assert values["chips_allocated"]["mean"] <= 64
    bad = subprocess.run([sys.executable, "-m", "hetsched.cli.main", "bench", "ascend", "--seeds", "x-y"],
                         capture_output=True, text=True, check=False)
    assert bad.returncode == 2 and "--seeds" in bad.stderr
