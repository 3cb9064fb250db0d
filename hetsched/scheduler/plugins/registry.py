"""Plugin name → class. The one place in-tree plugins are registered (Volcano's ``plugins/factory.go``)."""

from __future__ import annotations

from hetsched.scheduler.framework import Plugin
from hetsched.scheduler.plugins.binpack import Binpack
from hetsched.scheduler.plugins.conformance import Conformance
from hetsched.scheduler.plugins.devicetopology import DeviceTopology
from hetsched.scheduler.plugins.drf import DRF
from hetsched.scheduler.plugins.fgd import FGD
from hetsched.scheduler.plugins.gang import Gang
from hetsched.scheduler.plugins.nodegroup import NodeGroup
from hetsched.scheduler.plugins.nodeorder import NodeOrder
from hetsched.scheduler.plugins.numaaware import NumaAware
from hetsched.scheduler.plugins.overcommit import Overcommit
from hetsched.scheduler.plugins.predicates import Predicates
from hetsched.scheduler.plugins.priority import Priority
from hetsched.scheduler.plugins.proportion import Proportion

PLUGINS: dict[str, type[Plugin]] = {
    cls.NAME: cls
    for cls in (Priority, Gang, Conformance, Overcommit, DRF, Proportion, Predicates, NodeOrder, Binpack,
                DeviceTopology, FGD, NumaAware, NodeGroup)
}
