"""The paired tests ``hetsched sweep`` reports (``replay.paired``), against values worked out by hand from
their definitions, and the pooled summary row they feed."""

from __future__ import annotations

import math

import pytest

from hetsched.replay.paired import sign_test, signed_rank_test
from hetsched.replay.sweep import Row, summary

# Wilcoxon's textbook case: 15 paired differences, two of them negative (ranks 10 and 14), so W- = 24,
# W+ = 96; n(n+1)/4 = 60, variance n(n+1)(2n+1)/24 = 310, z = (36 - 0.5)/sqrt(310) = 2.016 -> p = 0.0438.
TEXTBOOK = [6, 8, 14, 16, 23, 24, 28, 29, 41, -48, 49, 56, 60, -67, 75]


def test_the_sign_test_is_the_exact_binomial_tail() -> None:
    assert sign_test(9, 1) == pytest.approx(2 * (1 + 10) / 1024)
    assert sign_test(10, 0) == pytest.approx(2 / 1024)
    assert sign_test(1, 9) == sign_test(9, 1)
    assert sign_test(5, 5) == 1.0 and sign_test(0, 0) == 1.0
    with pytest.raises(ValueError):
        sign_test(-1, 3)


def test_the_signed_rank_test_matches_the_hand_computed_normal_approximation() -> None:
    expected = math.erfc((36 - 0.5) / math.sqrt(310) / math.sqrt(2))
    assert signed_rank_test(TEXTBOOK) == pytest.approx(expected) == pytest.approx(0.0438, abs=1e-4)
    assert signed_rank_test([-d for d in TEXTBOOK]) == pytest.approx(expected)  # two-sided
    assert signed_rank_test([*TEXTBOOK, 0.0, 0.0, math.nan]) == pytest.approx(expected)  # zeros dropped


def test_the_signed_rank_test_uses_sizes_and_shares_ranks_among_ties() -> None:
    # same signs (12 wins, 8 losses) but the losses small: the signed-rank test sees it, the sign test not
    lopsided = [-1.0] * 12 + [0.1] * 8
    assert signed_rank_test(lopsided) < 0.05 < sign_test(12, 8)
    assert signed_rank_test([0.5] * 6 + [-0.5] * 6) == 1.0  # all tied, balanced
    assert signed_rank_test([]) == 1.0


def test_the_sweep_summary_pools_every_pod_list_into_one_row_per_policy() -> None:
    rows = []
    for pods in ("a", "b"):
        for seed in range(10):
            base = 5.0 + seed / 10
            rows += [Row(pods, "fgd", seed, base, 0), Row(pods, "new", seed, base - (0.2 if seed < 8 else -0.1), 0)]
    table = {(r["pods"], r["policy"]): r for r in summary(rows)}
    per_list = table[("a", "new")]
    assert (per_list["wins_vs_fgd"], per_list["losses_vs_fgd"]) == (8, 2)
    assert per_list["mean_diff_vs_fgd"] == pytest.approx(-0.14)
    assert per_list["sign_p_vs_fgd"] == pytest.approx(sign_test(8, 2))
    pooled = table[("all", "new")]
    assert (pooled["wins_vs_fgd"], pooled["losses_vs_fgd"], pooled["seeds"]) == (16, 4, 20)
    assert pooled["sign_p_vs_fgd"] == pytest.approx(sign_test(16, 4)) and pooled["signed_rank_p_vs_fgd"] < 0.01
    assert ("all", "fgd") in table and "signed_rank_p_vs_fgd" not in per_list
