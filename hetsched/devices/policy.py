"""The topology-policy contract and the lookup tables that make it vectorisable.

Who calls it: every family module subclasses :class:`TopologyPolicy`; the ``devicetopology`` scheduler
plugin uses :meth:`TopologyPolicy.tables` to evaluate all nodes at once.

A node's free chips of one resource are a bitmask (bit i = chip i). A policy answers, for a request of
``n`` chips on a free mask: is ``n`` legal, which chips to take (a mask, 0 = infeasible, with the policy's
preference order) and how well the node fits (a score, higher is better). For the usual servers (at most
``TABLE_CHIPS`` = 16 chips of one kind) these answers are precomputed for *every* possible free mask
(2^chips entries, at most 65,536) on first use; evaluating 10,000 nodes is then one array lookup. Larger
nodes (up to ``MAX_CHIPS``) are answered per distinct free mask on demand and remembered
(:class:`Computed`): never a table of 2^32 entries for a 32-chip node.

Masks are int64 arrays while every node of a resource has at most ``INT_CHIPS`` = 63 chips (the sign bit
stays clear); a resource with a wider node keeps its masks as arrays of Python integers (NumPy ``object``
dtype: the same ``& | ~ ==`` operators, no overflow), so 64- and 128-chip nodes work with the same code at
the cost of speed for that one resource only (:func:`mask_dtype`, :func:`popcounts`).

Invariants (checked by property tests): ``choose`` returns 0 or a subset of ``free`` with exactly ``n`` bits,
and only for legal ``n``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from itertools import combinations
from typing import Any

import numpy as np
import numpy.typing as npt

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]
TABLE_CHIPS = 16
"""Policies of at most this many chips get full lookup tables; larger ones compute answers on demand."""
INT_CHIPS = 63
"""The most chips an int64 mask holds with its sign bit clear; wider resources use Python-integer masks."""
MAX_CHIPS = 128
"""Chips of one resource on one node (ids ``0 … MAX_CHIPS - 1``)."""
MAX_REMEMBERED = 1 << 18
"""Answers a :class:`Computed` keeps before it starts afresh (bounded memory whatever the masks)."""


def popcount(mask: int) -> int:
    return mask.bit_count()


_BIT_COUNT = np.frompyfunc(lambda mask: int(mask).bit_count(), 1, 1)


def popcounts(masks: Any) -> IntArray:
    """Set bits per element of a mask array (int64, or Python integers for nodes over ``INT_CHIPS`` chips)."""
    array = np.asarray(masks)
    if array.dtype == object:
        return np.asarray(_BIT_COUNT(array), dtype=np.int64).reshape(array.shape)
    counts: IntArray = np.bitwise_count(array.astype(np.int64)).astype(np.int64)
    return counts


def mask_dtype(chips: int) -> Any:
    """The array dtype that holds masks of ``chips`` chips: int64 up to ``INT_CHIPS``, else ``object``."""
    return np.int64 if chips <= INT_CHIPS else object


def bit_weights(slots: int) -> Any:
    """``1 << i`` for chip ``i`` in ``0 … slots - 1`` (for building masks from per-chip columns)."""
    if slots <= INT_CHIPS:
        return np.left_shift(np.int64(1), np.arange(slots, dtype=np.int64))
    return np.asarray([1 << i for i in range(slots)], dtype=object)


def bits(mask: int) -> list[int]:
    """Chip ids set in ``mask``, ascending."""
    return [i for i in range(mask.bit_length()) if mask >> i & 1]


def lowest(mask: int, n: int) -> int:
    """The ``n`` lowest-numbered chips of ``mask`` (0 if fewer than ``n``)."""
    chosen = 0
    for chip in bits(mask)[:n]:
        chosen |= 1 << chip
    return chosen if popcount(chosen) == n else 0


class Computed:
    """A lookup "table" indexed like an array (an int or an array of free masks) whose entries are computed
    on first use and remembered: for nodes with more chips than a full table can hold."""

    def __init__(self, answer: Callable[[int], float], dtype: Any) -> None:
        self._answer = answer
        self._dtype = dtype
        self._known: dict[int, float] = {}

    def _one(self, mask: int) -> float:
        found = self._known.get(mask)
        if found is None:
            if len(self._known) >= MAX_REMEMBERED:
                self._known.clear()
            found = self._known[mask] = self._answer(mask)
        return found

    def __getitem__(self, masks: Any) -> Any:
        if isinstance(masks, int | np.integer):
            found = self._one(int(masks))
            return found if self._dtype is object else self._dtype(found)
        array = np.asarray(masks)
        array = array if array.dtype == object else array.astype(np.int64)
        unique, inverse = np.unique(array, return_inverse=True)
        values = np.fromiter((self._one(int(m)) for m in unique), dtype=self._dtype, count=len(unique))
        return values[inverse].reshape(array.shape)


class Table:
    """A full lookup table (one entry per free mask) that also takes masks held as Python integers: a
    narrow node's masks fit in int64 even when its resource's arrays are wide (``object``)."""

    def __init__(self, values: npt.NDArray[Any]) -> None:
        self.values = values

    def __getitem__(self, masks: Any) -> Any:
        if isinstance(masks, np.ndarray) and masks.dtype == object:
            found = self.values[masks.astype(np.int64)]
            return found.astype(object) if self.values.dtype == np.int64 else found
        return self.values[masks]


@dataclass(frozen=True)
class Tables:
    """Per free mask (index): the chips chosen for one pod (0 = infeasible) and the fit score — arrays of
    2^chips entries, or :class:`Computed` lookups for larger nodes."""

    choice: Any
    score: Any

    def capacity(self, free: IntArray) -> IntArray:
        """How many pods of this size fit on each node, taking chips in the policy's order."""
        count = np.zeros(len(free), dtype=np.int64)
        masks = free.copy()
        while True:
            chosen = self.choice[masks]
            fits = chosen != 0
            if not fits.any():
                return count
            count += fits
            masks &= ~chosen

    def after(self, free: IntArray, placed: IntArray) -> IntArray:
        """The free mask after ``placed[i]`` more pods took chips on node ``i``."""
        masks = free.copy()
        step = 0
        while step < int(placed.max(initial=0)):
            taking = placed > step
            masks = np.where(taking, masks & ~self.choice[masks], masks)
            step += 1
        return masks


class TopologyPolicy:
    """One device family's rules. Subclasses set ``NAME``, ``CHIPS`` and implement the three questions."""

    NAME = ""
    CHIPS = 8
    LOCALITY_BONUS = 200.0
    """Added when the node can still take every remaining pod of the group: a gang lands on as few nodes as
    the cluster allows (the seed's 8 × 1-chip Job on one node's 8 chips when one is free)."""
    LINK_GROUPS: tuple[int, ...] = ()
    """Chip masks of the link domains a set must stay inside (HCCS rings, MLU-Link groups …); empty when
    the family has none. Used to explain fragmentation, never to decide."""
    LINK_NAME = "link domain"
    FAULTY_PENALTY = 1000.0
    """Subtracted from the score of a node with any unhealthy chip, so it ranks below every healthy node
    (Ascend's fault-compatible rule: a degraded server is a later choice, never a first one)."""

    def health_score(self, healthy: IntArray, chips: int) -> FloatArray:
        """Score term from the node's healthy-chip count (vectorised)."""
        return np.where(healthy < chips, -self.FAULTY_PENALTY, 0.0)

    def legal(self, n: int, multi_pod: bool) -> bool:
        """May one pod ask for ``n`` chips (``multi_pod``: the job has more than one pod)?"""
        raise NotImplementedError

    def choose(self, free: int, n: int) -> int:
        """Chips to take for one pod of ``n`` on free mask ``free``; 0 when infeasible."""
        raise NotImplementedError

    def score(self, free: int, n: int) -> float:
        """Fit of the node for one pod of ``n`` chips given its free mask (higher is better)."""
        raise NotImplementedError

    def victims(self, free: int, held: dict[str, int], n: int) -> list[str] | None:
        """Which running pods (``held``: pod → chips it holds on this node) to evict so that a legal set of
        ``n`` chips becomes free: the fewest pods, then the fewest chips, then the lowest chip ids. ``None``
        when no eviction helps (including when ``n`` is already placeable: nothing needs to go).

        Used by preemption and reclaim: victims are chosen so the freed chips form a set the policy accepts
        (one HCCS ring, a whole node, a ring group …), never just "enough chips somewhere".
        """
        if self.choose(free, n):
            return None
        pods = sorted(held, key=lambda p: (popcount(held[p]), held[p], p))
        best: tuple[int, int, int] | None = None
        chosen: list[str] | None = None
        for size in range(1, len(pods) + 1):
            for combo in combinations(pods, size):
                released = 0
                for pod in combo:
                    released |= held[pod]
                taken = self.choose(free | released, n)
                if not taken or taken & released == 0:
                    continue
                key = (size, popcount(released), released)
                if best is None or key < best:
                    best, chosen = key, list(combo)
            if chosen is not None:
                return chosen
        return None

    def illegal_reason(self, n: int, multi_pod: bool) -> str:
        return f"{n} chip(s) per pod is not a legal request for {self.NAME}"

    def largest(self, free: int) -> int:
        """The largest legal single-pod request that still fits on free mask ``free`` (0: none)."""
        for n in range(popcount(free), 0, -1):
            if self.legal(n, False) and self.tables(n).choice[free]:
                return n
        return 0

    def split(self, free: int) -> str:
        """How the free chips lie across link domains: ``"2 free chips split 1+1 across HCCS rings"``."""
        count = popcount(free)
        if not self.LINK_GROUPS:
            return f"{count} free chip(s) ({self.NAME} accepts none of the sets they form)"
        parts = "+".join(str(popcount(free & group)) for group in self.LINK_GROUPS)
        return f"{count} free chip(s) split {parts} across {self.LINK_NAME}s"

    def tables(self, n: int) -> Tables:
        """Lookup tables for requests of ``n`` chips, built once per policy class, parameters and size."""
        key = (type(self), self._key(), n)
        tables = _TABLES.get(key)
        if tables is None:
            tables = _TABLES[key] = self._build_tables(n)
        return tables

    def _build_tables(self, n: int) -> Tables:
        if self.CHIPS > TABLE_CHIPS:
            return Tables(Computed(lambda free: self._checked_choice(free, n), mask_dtype(self.CHIPS)),
                          Computed(lambda free: self.score(free, n) if self.choose(free, n) else 0.0, np.float64))
        size = 1 << self.CHIPS
        choice = np.zeros(size, dtype=np.int64)
        score = np.zeros(size, dtype=np.float64)
        for free in range(size):
            chosen = self.choose(free, n)
            if chosen:
                assert chosen & ~free == 0 and popcount(chosen) == n, (self.NAME, free, n, chosen)
                choice[free] = chosen
                score[free] = self.score(free, n)
        return Tables(Table(choice), Table(score))

    def _checked_choice(self, free: int, n: int) -> int:
        chosen = self.choose(free, n)
        assert chosen & ~free == 0 and (not chosen or popcount(chosen) == n), (self.NAME, free, n, chosen)
        return chosen

    def _key(self) -> tuple[object, ...]:
        """Parameters that change the policy's answers (part of the table cache key)."""
        return ()


_TABLES: dict[tuple[type[TopologyPolicy], tuple[object, ...], int], Tables] = {}
