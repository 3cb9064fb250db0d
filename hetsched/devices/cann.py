"""Which Ascend driver (the Ascend HDK: driver and firmware) each CANN toolkit release works with.

Who calls it: ``diagnose.checks`` (doctor's ``cann-driver-match``) and the ``devicetopology`` scheduler plugin
(a pod that declares its CANN never goes to a node whose driver does not support it), with the versions the
node agent
publishes (``agents.node_agent``: the driver from ``npu-smi``'s header, the host's CANN from its toolkit's
install record) and the CANN a pod declares for its image (``hetsched.io/cann-version``).

Why: the seed's first war story (000 §2.1) — upgrading CANN without the driver leaves ``npu-smi`` healthy
while ``aclrtSetDevice`` fails in every container, so the scheduler's view (healthy chips) and what jobs
meet differ. Huawei publishes the pairs release by release; this table holds the ones we could source, each
with where it comes from (docs/devices.md lists the sources). A CANN release not in it is *unknown* (doctor
says to check Huawei's compatibility list), never assumed to fit.

Versions compare by release, case-insensitively, without the build suffix ``npu-smi`` prints
(``24.1.rc1.b030`` is 24.1.RC1); ``25.2.X`` in the table means every 25.2 patch release.
"""

from __future__ import annotations

import re

DRIVER_ANNOTATION = "hetsched.io/ascend-driver-version"
"""On a Node: the Ascend driver release its node agent read (``npu-smi``'s header)."""
DRIVER_LABEL = "hetsched.io/ascend-driver"
"""On a Node: the same driver release as a label (``24.1.rc1.b030``): what the scheduler matches a pod's
declared CANN against, and what a nodeSelector can name."""
CANN_ANNOTATION = "hetsched.io/cann-version"
"""On a Node: the CANN toolkit installed on the host; on a pod (or a Job's pod template): the CANN its image
was built with, declared by its owner so doctor can check it against the driver of the node it runs on."""

COMPATIBLE: dict[str, tuple[tuple[str, ...], str]] = {
    # CANN release → (Ascend HDK driver releases it is documented to work with, source)
    "8.0.RC1": (("24.1.RC1",), "MindCluster 6.0.RC1 release notes, related product versions"),
    "8.1.RC1": (("25.0.RC1",), "MindSpore Transformers 1.5.0 README, version table"),
    "8.2.RC1": (("25.2.0", "25.0.RC1", "24.1.0", "24.1.RC3", "24.1.RC2"),
                "MindIE 2.1.RC1 release notes, software version compatibility"),
    "8.5.0.ALPHA001": (("25.2.X",), "CANN 8.5.0.alpha001 community edition release notes"),
    "8.5.0": (("25.5.X", "25.3.X", "25.2.X", "25.0.X"), "CANN 8.5.0 release notes, CANN and driver versions"),
    "9.1.0": (("26.1.0",), "MindCluster 26.1.0 patch notes, related product versions (other than Atlas 350/850/950)"),
}
BUILD = re.compile(r"\.B\d+$")
VERSION = re.compile(r"^[0-9][0-9A-Z.]{0,39}$")


def release(version: str) -> str:
    """``24.1.rc1.b030`` → ``24.1.RC1``; "" for text that is no version (tool garbage is never a release)."""
    text = BUILD.sub("", version.strip().upper())
    return text if VERSION.fullmatch(text) else ""


def _matches(driver: str, pattern: str) -> bool:
    return driver.startswith(pattern[:-1]) if pattern.endswith(".X") else driver == pattern


def verdict(cann: str, driver: str) -> tuple[bool | None, str]:
    """Whether CANN ``cann`` works with driver ``driver``: True, False, or None (the table does not know);
    and the sentence saying why, with its source."""
    wanted, have = release(cann), release(driver)
    if not wanted or not have:
        return None, f"unreadable version (CANN {cann[:40]!r}, driver {driver[:40]!r})"
    entry = COMPATIBLE.get(wanted)
    if entry is None:
        return None, f"CANN {wanted} is not in hetsched's table: check Huawei's CANN/HDK compatibility list"
    drivers, source = entry
    if any(_matches(have, pattern) for pattern in drivers):
        return True, f"CANN {wanted} works with driver {have} ({source})"
    return False, (f"CANN {wanted} needs Ascend HDK driver {' or '.join(drivers)}; this node's driver is {have} "
                   f"({source})")
