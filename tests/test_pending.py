"""``hetsched pending``: the jobs that wait, in the order the scheduler serves them, with why — on the
embedded cluster here; the same command against a real API server in ``tests/test_kubernetes.py``."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from hetsched.cli.main import app
from hetsched.scheduler.defaults import default_conf
from hetsched.scheduler.engine.waiting import waiting_line
from tests.builders import gang, harness, node, priority_class, queue

pytestmark = pytest.mark.timeout(120)


def test_the_line_follows_the_job_order_and_says_why() -> None:
    h = harness([node("n0", cpu="4"), queue("research"), priority_class("low", 1), priority_class("high", 100),
                 *gang("first-low", 2, cpu="4", queue="research", priority_class="low"),
                 *gang("later-high", 2, cpu="4", queue="research", priority_class="high"),
                 *gang("fits", 1, cpu="2", queue="default")])
    h.cycle()
    line, notes = waiting_line(h.scheduler.cache.snapshot(), default_conf(), h.clock.now())
    assert not notes
    research = [(w.job, w.position) for w in line if w.queue == "research"]
    # the priority plugin serves the higher class first, though it came later
    assert research == [("default/later-high", 1), ("default/first-low", 2)]
    assert "default/fits" not in {w.job for w in line}  # placed: not waiting
    why = {w.job: w.why for w in line}
    assert why["default/later-high"] == "2/2 tasks in gang unschedulable: 0/1 nodes are available: 1 Insufficient cpu"


def test_pending_on_the_embedded_cluster_prints_positions_and_reasons() -> None:
    result = CliRunner().invoke(app, ["pending", "--cluster", "examples/scenarios/ascend-4.yaml",
                                      "examples/scenarios/two-queues.yaml", "--until", "30", "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    waiting = data["waiting"]
    assert waiting and {w["queue"] for w in waiting} <= {"a", "b"}
    ranks = [(w["queueRank"], w["positionInQueue"]) for w in waiting]
    assert ranks == sorted(ranks)  # queue by queue, first served first
    for rank in {r for r, _ in ranks}:  # positions in a queue count 1, 2, 3 …
        assert [p for r, p in ranks if r == rank] == list(range(1, 1 + sum(1 for r2, _ in ranks if r2 == rank)))
    assert all(w["why"] for w in waiting)
    only_b = CliRunner().invoke(app, ["pending", "--cluster", "examples/scenarios/ascend-4.yaml",
                                      "examples/scenarios/two-queues.yaml", "--until", "30", "--queue", "b"])
    assert only_b.exit_code == 0 and "b-" in only_b.output and "default/a-" not in only_b.output
