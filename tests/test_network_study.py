"""The network-topology study (issue 20, part 6) on a small tree: the simulator reports where gangs ran
over the HyperNodes (``summary.network``), the report draws the per-domain occupancy, and the three
policies differ the way the docs' table says — bounded gangs never cross their bound, blind ones do."""

from __future__ import annotations

import pytest

from hetsched.sim.network_study import StudySetup, combine, run, table
from hetsched.sim.report import NETWORK_TITLE, render

SMALL = StudySetup(servers=64, tiers=(8, 4, 2), hours=4.0, load=0.8, seed=7)


@pytest.fixture(scope="module")
def studied() -> dict[str, tuple[dict, object]]:  # type: ignore[type-arg]
    return {policy: run(SMALL, policy, timeline=policy == "binpack") for policy in ("binpack", "blind")}


def test_bounded_gangs_stay_inside_their_bound_and_blind_ones_cross_it(studied: dict) -> None:  # type: ignore[type-arg]
    bounded, _ = studied["binpack"]
    blind, _ = studied["blind"]
    assert bounded["classes"]["hard1"]["gangs"] > 5
    assert bounded["classes"]["hard1"]["crossedTier1"] == 0 and bounded["classes"]["hard2"]["crossedTier2"] == 0
    assert blind["classes"]["hard1"]["crossedTier1"] > 0  # the same jobs, placed without their bounds


def test_results_json_says_where_gangs_ran_and_the_report_draws_the_domains(studied: dict) -> None:  # type: ignore[type-arg]
    _, results = studied["binpack"]
    network = results.summary["network"]
    assert network["tiers"] == [1, 2, 3]
    hard = network["byBound"]["hard ≤ tier 1"]
    assert hard["jobs"] >= hard["started"] > 0 and hard["meanWaitSeconds"] is not None
    assert network["jobsCrossing"]["tier3"] == 0  # one tier-3 HyperNode holds the whole cluster
    assert set(network["wholeFreeHyperNodes"]) == {"tier1", "tier2", "tier3"}
    page = render(results, "study")
    assert f"<h2>{NETWORK_TITLE}</h2>" in page and "jobs bound hard ≤ tier 1" in page


def test_the_table_combines_seeds(studied: dict) -> None:  # type: ignore[type-arg]
    figures, _ = studied["binpack"]
    both = combine([figures, figures])
    assert both["classes"]["hard1"]["jobs"] == 2 * figures["classes"]["hard1"]["jobs"]
    assert both["classes"]["hard1"]["meanWaitMinutes"] == pytest.approx(figures["classes"]["hard1"]["meanWaitMinutes"],
                                                                        abs=0.01)
    text = table([both])
    assert text.startswith("| policy |") and "| binpack | hard1 (" in text
