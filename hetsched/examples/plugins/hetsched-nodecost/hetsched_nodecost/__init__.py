"""``nodecost``: an example out-of-tree hetsched plugin — prefer cheaper nodes, refuse the dearest.

Who calls it: hetsched's scheduling session, once a configuration names it (``- name: nodecost``) and this
distribution is installed (its ``hetsched.plugins`` entry point registers the class). It shows the whole
plugin contract (docs/plugins.md):

- the class subclasses ``Plugin`` and the protocols of the extension points it takes part in
  (``NodeFilter``, ``NodeScore``); hetsched checks, when the configuration loads, that each declared point
  is implemented with the right parameters and that no other public method exists (a misspelt
  ``node_scroe`` is an error, not a method that never runs);
- arguments are read and checked in ``__init__`` (a bad value fails the configuration, naming the key);
- answers are vectorised over nodes (NumPy arrays, one entry per snapshot node row);
- a node rule says why as data: ``Reason.of(ReasonCode.PLUGIN_RULE, plugin=..., rule=...)``.

Nodes carry their price in the label ``hetsched.example/cost`` (any non-negative number: cost per hour,
say). Arguments::

    - name: nodecost
      arguments:
        nodecost.weight: 1      # score weight (0–100 scale, like every in-tree score plugin)
        nodecost.max: 3.5       # nodes dearer than this are refused (default: none)

A node without the label, or with a value that is not a number, costs ``nodecost.unlabelled`` (default 0).
"""

from __future__ import annotations

import math

import numpy as np

from hetsched.scheduler.contract import (
    Arguments,
    BoolArray,
    FloatArray,
    IntArray,
    NodeFilter,
    NodeScore,
    Plugin,
    Reason,
    ReasonCode,
    SessionView,
    TaskGroup,
)

LABEL = "hetsched.example/cost"


class NodeCost(Plugin, NodeFilter, NodeScore):
    NAME = "nodecost"

    def __init__(self, arguments: Arguments) -> None:
        super().__init__(arguments)
        arguments.check_known({"nodecost.weight", "nodecost.max", "nodecost.unlabelled"})
        self.weight = arguments.number("nodecost.weight", 1.0)
        self.max = arguments.number("nodecost.max", math.inf)
        self.unlabelled = arguments.number("nodecost.unlabelled", 0.0)

    def _costs(self, session: SessionView) -> FloatArray:
        """Per node row, its price (the label parsed once per distinct value)."""
        codes, vocab = session.nodes.label_codes(LABEL)
        prices = np.full(len(vocab) + 1, self.unlabelled, dtype=np.float64)  # the last slot: unlabelled
        for value, code in vocab.items():
            try:
                price = float(value)
            except ValueError:
                continue
            if math.isfinite(price) and price >= 0:
                prices[code] = price
        costs: FloatArray = prices[np.where(codes >= 0, codes, len(vocab))]
        return costs

    def node_filter(self, session: SessionView, group: TaskGroup) -> list[tuple[Reason, BoolArray]]:
        if not math.isfinite(self.max):
            return []
        reason = Reason.of(ReasonCode.PLUGIN_RULE, plugin=self.NAME, rule=f"cost more than {self.max:g}")
        return [(reason, self._costs(session) > self.max)]

    def node_score(self, session: SessionView, group: TaskGroup, nodes: IntArray, placed: IntArray) -> FloatArray:
        costs = self._costs(session)
        dearest = float(costs.max(initial=0.0))
        if dearest <= 0:
            return np.zeros(len(nodes), dtype=np.float64)
        score: FloatArray = (1.0 - costs[nodes] / dearest) * 100.0 * self.weight  # node-local: the node's own price
        return score
