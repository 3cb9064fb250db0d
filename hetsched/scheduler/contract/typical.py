"""How much each pod shape counts in FGD's expected fragmentation: the rule the ``fgd`` plugin and the openb
replay share.

Who calls it: ``scheduler.plugins.fgd`` (the shapes queued in a session) and ``replay.engine.TypicalPods``
(the shapes of a pod list). FGD (Weng et al., ATC'23) measures a node's fragmentation against "typical"
pods; the published code takes the most frequent shapes until they cover 95 % of the pods and renormalises
them, which drops exactly the rare shapes fragmentation hurts most (GPU-model constraints, multi-GPU,
CPU-heavy pods). Taking every shape at its frequency instead (the full distribution) protects those, but
lets a long tail of rare shapes dilute the common ones.

``typical_shares`` blends the two expectations: ``common × cut + (1 − common) × full``. Fragmentation is
linear in the shares, so this is FGD against one distribution in which a shape inside the cut counts
``common / covered + (1 − common)`` times its frequency and one outside ``1 − common`` times. ``common = 0.5``
(``COMMON``) was chosen on the eight pod lists shared in ``../shared/traces`` only (docs/replay.md, "Held-out
families"); ``common = 1`` is the published cut, ``common = 0`` the full distribution.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping
from typing import TypeVar

K = TypeVar("K", bound=Hashable)

CUT = 95.0
"""The published cut: the most frequent shapes covering this % of the pods."""
COMMON = 0.5
"""Weight of the cut's expectation against the full distribution's (hetsched's blend)."""


def typical_shares(counts: Mapping[K, int], *, cut: float = CUT, common: float = COMMON,
                   rank: Callable[[K], object] | None = None,
                   keep: Callable[[K], bool] | None = None) -> dict[K, float]:
    """Shape → share (summing to 1; shapes with no count left out). Shapes are ranked by count, ties by
    ``rank`` (their own order when not given), and taken until they cover ``cut`` % of the pods; ``keep``
    names shapes taken however rare (the ``fgd-cpufit`` variant keeps every multi-GPU shape)."""
    if not 0.0 <= common <= 1.0:
        raise ValueError(f"common must be between 0 and 1, not {common}")
    ranked = sorted(((shape, n) for shape, n in counts.items() if n > 0),
                    key=lambda kv: (-kv[1], kv[0] if rank is None else rank(kv[0])))
    total = sum(n for _, n in ranked)
    if not total:
        return {}
    inside: set[K] = set()
    covered = 0
    for shape, n in ranked:
        if covered >= cut / 100.0 * total and not (keep is not None and keep(shape)):
            continue
        inside.add(shape)
        covered += n
    return {shape: (common * n / covered if shape in inside else 0.0) + (1.0 - common) * n / total
            for shape, n in ranked if shape in inside or common < 1.0}
