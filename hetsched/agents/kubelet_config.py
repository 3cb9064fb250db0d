"""Reading the kubelet's configuration file for the policies that decide whether NUMA placement is real.

Who calls it: the node agent (publishes ``hetsched.io/topology-manager-policy``) and ``hetsched doctor
--node``. Kubelet defaults apply to absent keys (``topologyManagerPolicy: none``, ``cpuManagerPolicy:
none``). A missing file is None (not known); an unreadable one is a ValueError naming the file.
"""

from __future__ import annotations

from pathlib import Path

import yaml

from hetsched.api.yamlsafe import YamlLimitError, read_text, safe_load

DEFAULT_PATH = Path("/var/lib/kubelet/config.yaml")

MAX_KUBELET_CONFIG = 1 << 20
"""Bytes of a KubeletConfiguration file the node agent reads."""


def read_policies(path: Path) -> tuple[str, str] | None:
    """(topologyManagerPolicy, cpuManagerPolicy) from a KubeletConfiguration file, None when absent."""
    try:
        text = read_text(path, MAX_KUBELET_CONFIG)
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"{path}: cannot read the kubelet configuration: "
                         f"{getattr(exc, 'strerror', None) or exc}") from None
    try:
        data = safe_load(text) or {}
    except YamlLimitError as exc:
        raise ValueError(f"{path}: kubelet configuration refused: {exc}") from None
    except yaml.YAMLError as exc:
        raise ValueError(f"{path}: malformed kubelet configuration: {str(exc).splitlines()[0]}") from None
    if not isinstance(data, dict):
        raise ValueError(f"{path}: expected a KubeletConfiguration mapping, got {type(data).__name__}")
    return str(data.get("topologyManagerPolicy") or "none"), str(data.get("cpuManagerPolicy") or "none")
