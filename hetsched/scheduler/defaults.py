"""The scheduler as shipped: the engine wired to the in-tree plugin registry (and the installed entry points).

Who calls it: the CLI, the simulator, the benchmarks, ``doctor`` and the tests — whoever parses a
configuration. The engine (``scheduler.engine``) imports no plugin; this module is the one place that
hands it the registry (kube-scheduler's ``NewFramework(registry)``): it imports the engine and the plugins,
and neither of them imports the other.
"""

from __future__ import annotations

from pathlib import Path

from hetsched.scheduler.engine.conf import (
    DEFAULT_CONF_YAML,
    VOLCANO_DEFAULT_CONF_YAML,
    ConfError,
    SchedulerConf,
    read_conf,
)
from hetsched.scheduler.engine.conf import parse_conf as _parse_conf
from hetsched.scheduler.plugins.registry import REGISTRY

__all__ = ["DEFAULT_CONF_YAML", "VOLCANO_DEFAULT_CONF_YAML", "ConfError", "SchedulerConf", "default_conf", "load_conf",
           "parse_conf"]


def parse_conf(text: str, source: str = "<scheduler.conf>") -> SchedulerConf:
    """A configuration whose plugins resolve to the in-tree ones and the installed entry points."""
    return _parse_conf(text, source, registry=REGISTRY)


def default_conf() -> SchedulerConf:
    return parse_conf(DEFAULT_CONF_YAML, "<default>")


def load_conf(path: str | Path) -> SchedulerConf:
    return parse_conf(read_conf(path), str(path))
