"""Rule tables per device family: which chips each topology policy takes and how it ranks nodes.

Covers the Ascend 910 design-doc scenarios (ascend-volcano-compat, exactly), hetsched's ascend-hccs,
Ascend 910B x8/x16, 310P Duo cards, Cambricon MLU-Link modes and NVIDIA link matrices.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hetsched.devices.ascend310p import Ascend310PDuo
from hetsched.devices.ascend910 import LEFT, RIGHT, Ascend910Compat, Ascend910Hccs
from hetsched.devices.ascend910b import Ascend910B8, Ascend910B16
from hetsched.devices.cambricon import MLULink
from hetsched.devices.generic import Generic
from hetsched.devices.nvidia import NvidiaLinks
from hetsched.devices.policy import bits, popcount

RING_MASKS = {0: 0b0000, 1: 0b0001, 2: 0b0011, 3: 0b0111, 4: 0b1111}


def node_mask(left: int, right: int) -> int:
    return RING_MASKS[left] | RING_MASKS[right] << 4


# Ascend design doc (affinity910-design.md) scenario groups: (request, chosen ring's free count, other ring's)
DESIGN_DOC = [
    *[(1, 1, other) for other in (0, 1, 2, 3, 4)],
    *[(1, 3, other) for other in (0, 2, 3, 4)],
    *[(1, 2, other) for other in (0, 2, 4)],
    *[(1, 4, other) for other in (0, 4)],
    *[(2, 2, other) for other in (0, 1, 2, 3, 4)],
    *[(2, 4, other) for other in (0, 1, 3, 4)],
    *[(2, 3, other) for other in (0, 1)],
    *[(4, 4, other) for other in (0, 1, 2, 3, 4)],
]


@pytest.mark.parametrize(("n", "chosen", "other"), DESIGN_DOC)
def test_ascend_volcano_compat_follows_the_design_doc(n: int, chosen: int, other: int) -> None:
    policy = Ascend910Compat()
    for free, ring in ((node_mask(chosen, other), LEFT), (node_mask(other, chosen), RIGHT)):
        taken = policy.choose(free, n)
        assert popcount(taken) == n and taken & ~free == 0
        if chosen != other:
            assert taken & ring == taken, f"request {n}: must take the ring with {chosen} free, not {other}"
            assert taken == sum(1 << c for c in bits(free & ring)[:n]), "lowest ids of that ring"


def test_ascend_volcano_compat_legal_sizes_and_whole_node() -> None:
    policy = Ascend910Compat()
    assert [n for n in range(1, 9) if policy.legal(n, False)] == [1, 2, 4, 8]
    assert [n for n in range(1, 9) if policy.legal(n, True)] == [8]
    assert policy.choose(0xFF, 8) == 0xFF and policy.choose(0xFE, 8) == 0
    assert policy.choose(node_mask(3, 3), 4) == 0  # 4 chips never span both rings


def test_ascend_volcano_compat_node_score() -> None:
    policy = Ascend910Compat()
    # affScoreList row 1 chip: ring with 1 free → 0 (best); node score 8*(4*healthy - best) + (8 - free)
    assert policy.score(node_mask(1, 4), 1) == -8 * 0 + (8 - 5)
    assert policy.score(node_mask(4, 4), 1) == -8 * 3 + 0
    assert policy.score(node_mask(2, 4), 2) == -8 * 0 + (8 - 6)


def test_ascend_hccs_keeps_whole_rings_and_nodes() -> None:
    policy = Ascend910Hccs()
    assert policy.legal(1, True) and not policy.legal(3, False)
    # 2 chips on (3 free | 4 free): compat breaks the full ring, ascend-hccs uses the broken one
    assert Ascend910Compat().choose(node_mask(3, 4), 2) == 0x30
    assert policy.choose(node_mask(3, 4), 2) & RIGHT == 0
    # a partly used node is worth less than a whole one: 1 chip goes where it destroys least
    assert policy.score(node_mask(3, 4), 1) > policy.score(node_mask(4, 4), 1)


def test_ascend_910b_x8_is_a_full_mesh() -> None:
    policy = Ascend910B8()
    assert all(policy.legal(n, True) for n in range(1, 9))
    assert policy.choose(0b1011_0110, 3) == 0b0001_0110
    assert policy.score(0b0000_0111, 1) > policy.score(0xFF, 1)  # fuller node first


def test_ascend_910b_x16_halves_and_cross_pairs() -> None:
    policy = Ascend910B16()
    assert [n for n in range(1, 17) if policy.legal(n, False)] == [1, 2, 3, 4, 5, 6, 7, 8, 10, 12, 14, 16]
    half0_three = 0b111 | 0xFF00
    assert policy.choose(half0_three, 3) == 0b111  # tightest half first
    assert policy.choose(half0_three, 4) == 0x0F00
    ten = policy.choose(0xFFFF, 10)
    assert ten == 0b11111 | 0b11111 << 8  # 5 cross pairs (i, i+8)
    assert policy.choose(0xFFFF & ~(1 << 9), 16) == 0
    assert policy.choose(0x00FF | 0x0F00, 10) == 0  # only 4 cross pairs are free


def test_ascend_310p_duo_cards() -> None:
    policy = Ascend310PDuo(8)
    free = 0b11_01_11_11  # card 2 has only chip 4 free
    assert policy.choose(free, 1) == 1 << 4  # a card with one free chip first
    assert policy.choose(free, 2) == 0b11  # a whole card
    assert not policy.legal(3, False) and policy.legal(4, False)


def test_mlu_link_modes() -> None:
    assert MLULink("best-effort").choose(0xFF, 2) == 0b11
    assert MLULink("best-effort").choose(0b1010_1010, 2) != 0  # falls back to any chips
    assert MLULink("guaranteed").choose(0b1010_1010, 2) == 0b1010  # both inside quad 0–3
    assert MLULink("restricted").choose(0b1010_1010, 2) == 0  # no whole pair free
    assert MLULink("restricted").choose(0b1111_0110, 4) == 0xF0
    assert not MLULink("guaranteed").legal(3, False) and MLULink("best-effort").legal(3, False)
    with pytest.raises(ValueError):
        MLULink("strict")


def test_nvidia_best_connected_sets() -> None:
    cube = NvidiaLinks("cube-mesh-8")
    assert cube.choose(0xFF, 4) == 0x0F  # a fully NVLinked quad
    assert cube.choose(0b1001_0001, 2) == 0b0001_0001  # 0 and 4 share an NVLink
    pairs = NvidiaLinks("nvlink-pairs-8")
    assert pairs.choose(0b1110_0001, 2) == 0b1100_0000  # the bridged pair (6, 7)
    assert pairs.choose(0b0000_0111, 1) == 0b100  # the GPU whose partner is gone: keeps pair (0, 1)
    assert pairs.score(0b1100_0000, 2) > pairs.score(0b1010_0000, 2)


def test_victims_free_a_legal_set_with_the_fewest_pods() -> None:
    compat = Ascend910Compat()
    # chips 0, 4 free; pod a holds 1-3 (left ring), pod b holds 5, pod c holds 6-7
    held = {"a": 0b0000_1110, "b": 0b0010_0000, "c": 0b1100_0000}
    assert compat.victims(0b0001_0001, held, 4) == ["a"]  # frees the whole left ring
    assert set(compat.victims(0b0001_0001, held, 8) or []) == {"a", "b", "c"}
    assert compat.victims(0b0001_0001, held, 1) is None  # already placeable: nobody is evicted
    assert compat.victims(0b0001_0001, held, 2) == ["b"]  # chips 4, 5 in the right ring
    cube = NvidiaLinks("cube-mesh-8")
    assert cube.victims(0, {"x": 0x0F, "y": 0xF0}, 4) == ["x"]
    assert MLULink("restricted").victims(0b0000_0001, {"p": 0b0000_0010}, 2) == ["p"]


@settings(max_examples=200, deadline=None)
@given(data=st.data(), index=st.integers(0, 4))
def test_victims_always_free_a_legal_set_and_choices_are_legal(data: st.DataObject, index: int) -> None:
    policy = [Ascend910Compat(), Ascend910Hccs(), MLULink("guaranteed"), NvidiaLinks("pcie-8"), Ascend910B8()][index]
    owners = data.draw(st.lists(st.integers(-1, 3), min_size=8, max_size=8))  # -1 free, k: held by pod k
    free = sum(1 << c for c, o in enumerate(owners) if o == -1)
    held: dict[str, int] = {}
    for chip, owner in enumerate(owners):
        if owner >= 0:
            held[f"p{owner}"] = held.get(f"p{owner}", 0) | 1 << chip
    n = data.draw(st.sampled_from([1, 2, 4, 8]))
    taken = policy.choose(free, n)
    assert taken == 0 or (taken & ~free == 0 and popcount(taken) == n and policy.legal(n, False))
    victims = policy.victims(free, held, n)
    if victims is not None:
        released = 0
        for pod in victims:
            released |= held[pod]
        assert policy.choose(free | released, n) != 0


@pytest.mark.parametrize("make", [lambda: Generic(12), Ascend910B16, lambda: Ascend310PDuo(8)],
                         ids=["generic-12", "910b-16", "310p-duo-8"])
def test_answers_computed_on_demand_equal_the_full_tables(make: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Nodes with more than TABLE_CHIPS chips are answered per free mask on demand (issue 29); the answers are
    exactly the full tables' for every mask and request, as arrays and one mask at a time."""
    from hetsched.devices import policy as module

    chosen = make()
    masks = np.arange(1 << chosen.CHIPS, dtype=np.int64)
    for n in range(1, chosen.CHIPS + 1):
        full = chosen._build_tables(n)
        monkeypatch.setattr(module, "TABLE_CHIPS", 0)
        lazy = chosen._build_tables(n)
        monkeypatch.undo()
        assert isinstance(lazy.choice, module.Computed)
        assert np.array_equal(lazy.choice[masks], full.choice[masks])
        assert np.array_equal(lazy.score[masks], full.score[masks])
        assert np.array_equal(lazy.capacity(masks[::7]), full.capacity(masks[::7]))
        assert int(lazy.choice[int(masks[-1])]) == int(full.choice[-1])
