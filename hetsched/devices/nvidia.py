"""NVIDIA GPUs: a per-server link matrix; multi-GPU pods get the best-connected set.

Who calls it: the ``devicetopology`` scheduler plugin, through ``devices.catalog``.

Pair scores follow NVIDIA's go-gpuallocator (peers.md §5.2): cross-CPU 10, same CPU 20, single PCIe switch
50, and 100 per NVLink. Server shapes (``topology`` in the inventory):

- ``nvswitch-8``: every pair through NVSwitch (12 links, DGX A100/H100 class);
- ``cube-mesh-8``: DGX-1 hybrid cube-mesh: NVLink inside {0–3} and {4–7} and between i and i+4,
  PCIe otherwise;
- ``nvlink-pairs-8``: NVLink bridges on (0,1), (2,3), (4,5), (6,7); PCIe switch per pair of pairs, two CPUs;
- ``pcie-8``: PCIe only, 4 GPUs per CPU socket, 2 per switch.

Choice (HAMi's topology-aware policy): one GPU → the free GPU worst connected to the other free GPUs (keeps
good pairs together); several → the free set with the highest total pair score (lowest ids on ties).
Node score: the chosen set's connectivity relative to the best set of that size on an empty server, then
the fuller node.
"""

from __future__ import annotations

from functools import cache
from itertools import combinations

from hetsched.devices.policy import TopologyPolicy, bits, popcount

CROSS_CPU, SAME_CPU, SWITCH, NVLINK = 10, 20, 50, 100
SHAPES = ("nvswitch-8", "cube-mesh-8", "nvlink-pairs-8", "pcie-8")


@cache
def link_matrix(shape: str) -> tuple[tuple[int, ...], ...]:
    if shape not in SHAPES:
        raise ValueError(f"unknown NVIDIA topology {shape!r}; known: {', '.join(SHAPES)}")

    def pair(i: int, j: int) -> int:
        same_cpu = i // 4 == j // 4
        pcie = SWITCH if i // 2 == j // 2 else (SAME_CPU if same_cpu else CROSS_CPU)
        if shape == "nvswitch-8":
            return 12 * NVLINK
        if shape == "cube-mesh-8":
            return NVLINK if same_cpu or abs(i - j) == 4 else CROSS_CPU
        if shape == "nvlink-pairs-8":
            return 4 * NVLINK if i // 2 == j // 2 else pcie
        return pcie

    return tuple(tuple(0 if i == j else pair(i, j) for j in range(8)) for i in range(8))


class NvidiaLinks(TopologyPolicy):
    NAME = "nvidia-links"
    CHIPS = 8

    def __init__(self, shape: str = "pcie-8") -> None:
        self.shape = shape
        self.links = link_matrix(shape)
        self.LINK_GROUPS, self.LINK_NAME = {
            "cube-mesh-8": ((0x0F, 0xF0), "NVLink quad"),
            "nvlink-pairs-8": ((0x03, 0x0C, 0x30, 0xC0), "NVLink pair"),
            "pcie-8": ((0x0F, 0xF0), "CPU socket"),
        }.get(shape, ((), "NVSwitch domain"))

    def _key(self) -> tuple[object, ...]:
        return (self.shape,)

    def legal(self, n: int, multi_pod: bool) -> bool:
        return 1 <= n <= 8

    def _set_score(self, chosen: int) -> int:
        chips = bits(chosen)
        return sum(self.links[a][b] for a, b in combinations(chips, 2))

    def choose(self, free: int, n: int) -> int:
        chips = bits(free)
        if len(chips) < n or n < 1:
            return 0
        if n == 1:
            worst = min(chips, key=lambda c: (sum(self.links[c][o] for o in chips if o != c), c))
            return 1 << worst
        best = max(combinations(chips, n), key=lambda combo: (self._set_score(sum(1 << c for c in combo)),
                                                             [-c for c in combo]))
        return sum(1 << c for c in best)

    def score(self, free: int, n: int) -> float:
        chosen = self.choose(free, n)
        ideal = self._set_score(self.choose(0xFF, n)) if n > 1 else 0
        quality = 100.0 * self._set_score(chosen) / ideal if ideal else 100.0
        return quality + (8 - popcount(free))
