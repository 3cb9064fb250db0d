"""The business-line budget study (``sim.budget_study``, docs/queues.md) on a short run: a hard budget holds
every line to its budget, an Idle budget gives the capacity it leaves to whoever asks, and the books are the
accountant's. Reads the openb pod list from ``../shared/traces``; skips when it is absent."""

from __future__ import annotations

from pathlib import Path

import pytest

from hetsched.sim.budget_study import OVER, StudySetup, combine, read_pods, run, table

pytestmark = pytest.mark.timeout(600)
TRACE = Path(__file__).resolve().parents[2] / "shared/traces/alibaba-gpu-v2023/csv/openb_pod_list_default.csv"
SETUP = StudySetup(servers=2, days=7.0, load=1.1, seed=3)


@pytest.fixture(scope="module")
def pods() -> list:
    if not TRACE.is_file():
        pytest.skip(f"the openb pod list is not at {TRACE} (../shared/traces is outside the repository)")
    return read_pods(TRACE, SETUP)


def test_a_stop_budget_holds_every_line_to_its_budget_and_idle_gives_the_rest_away(pods: list) -> None:
    stop = combine([run(SETUP, "stop", pods)])
    idle = combine([run(SETUP, "idle", pods)])
    for line, figures in stop["lines"].items():
        assert figures["worst_over"] <= OVER and figures["weeks_over"] == 0, (line, figures)
        assert figures["gpu_hours"] >= 0.75 * figures["budget"], (line, figures)  # every line asks for more
    assert stop["utilisation"] <= 0.8 + 1e-3  # the budgets add up to 80 % of the cluster
    assert idle["utilisation"] > stop["utilisation"] + 0.05  # Idle lends what the budgets leave
    assert any(figures["worst_over"] > OVER for figures in idle["lines"].values())  # soft by design
    text = table([stop, idle])
    assert "| stop |" in text and "| idle |" in text and "research" in text


@pytest.mark.parametrize("row, message", [
    ("x,lots,1,1,1,,LS,Running,0,100,0", "not an openb pod row"),
    ("openb-pod-0,1,1,99,1000,,LS,Running,0,100000,0", "out of range"),
])
def test_a_garbled_pod_list_is_refused_naming_the_file_and_line(tmp_path: Path, row: str, message: str) -> None:
    path = tmp_path / "pods.csv"
    path.write_text("name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,"
                    f"deletion_time,scheduled_time\nopenb-pod-1,1000,1024,1,1000,,LS,Running,0,100000,0\n{row}\n",
                    encoding="utf-8")
    with pytest.raises(ValueError, match=f"{path}:3: .*{message}"):
        read_pods(path, SETUP)
