"""``pdb``: Volcano's PodDisruptionBudget plugin — in hetsched, the rule it adds is always on.

Who calls it: the configuration loader (a configuration may list it, as Volcano's do); the session asks it
nothing.

Volcano's ``pdb`` keeps preemption and reclaim from evicting a pod whose PodDisruptionBudget allows no
more disruptions. hetsched's eviction planner (``scheduler.engine.eviction``) does that in every
configuration, for ``preempt``, ``reclaim`` and node drains alike, counting the disruptions a cycle has
already spent (``api.disruption``), so listing ``pdb`` changes nothing: the configuration means the same here.
Arguments: none.
"""

from __future__ import annotations

from hetsched.scheduler.contract.framework import Arguments, Plugin

NAME = "pdb"


class PDB(Plugin):
    NAME = NAME

    def __init__(self, arguments: Arguments) -> None:
        super().__init__(arguments)
        arguments.check_known(set())
