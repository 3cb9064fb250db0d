"""Per-node chip inventories and the annotation contracts that carry them.

Who calls it: the cluster-spec expander writes :data:`NODE_ANNOTATION` on each node; the scheduler cache
reads it, and reads each bound pod's chips back from :data:`POD_ANNOTATION` (or Ascend's own annotation).

Node contract, ``hetsched.io/devices`` (JSON, versioned)::

    {"version": "hetsched.io/v1",
     "devices": [{"resource": "huawei.com/Ascend910", "model": "Ascend910", "topology": "ascend910-8",
                  "chips": [{"id": 0, "health": "Healthy", "numa": 0, "memoryMiB": 32768, "cores": 32,
                             "groups": ["hccs-0"]}, …],
                  "partitioning": "vnpu"}]}

``partitioning`` (optional): the chips are carved into partitions of that mode on demand
(``devices.partitions``: ``mig``, ``vnpu``, ``smlu``, ``vgpu``).

``health`` is ``Healthy``, ``Unhealthy`` (never chosen) or ``NetworkUnhealthy`` (chosen only for single-pod
jobs). Ascend's device-info ConfigMap (``kube-system/mindx-dl-deviceinfo-<node>``, key ``DeviceInfoCfg``) is
accepted too: :func:`from_ascend_device_info` turns it into the same inventory.

Pod hand-off (written by the scheduler at bind, read by device plugins in Allocate):
- every vendor: ``hetsched.io/allocation: {"<resource>": [chip ids]}`` (a fractional pod lists its one
  shared chip; its share is its ``hetsched.io/<kind>-milli`` request);
- Ascend, for the Ascend device plugin: ``huawei.com/Ascend910: "Ascend910-0,Ascend910-1"`` (the resource
  name as key, ``<Type>-<phyID>`` values) and ``predicate-time: <unix nanoseconds>``;
- Cambricon sMLU, for Cambricon's device plugin in ``dynamic-smlu`` mode (which makes the instance with cndev):
  ``CAMBRICON_DSMLU_PROFILE: "<chip>_<vcore percent>_<vmemory in 256 MiB units>"`` and the "not yet assigned"
  flag it reads, ``CAMBRICON_DSMLU_ASSIGHED: "false"`` (its spelling) and ``CAMBRICON_DSMLU_ASSIGNED``
  (HAMi's);
- provenance: ``hetsched.io/allocation-for: <pod uid>/<node>`` — written by the scheduler in the same bind,
  so a hand-off is tied to the one pod it was decided for. Anyone who creates a pod can write annotations:
  a hand-off is *trusted* (:func:`trusted_allocation`) only when this stamp names the pod's own uid and the
  node it runs on, and it names exactly as many distinct chips as the pod asks for. A forged, copied or
  stale hand-off (another pod's uid, another node, a "squatter" claiming 8 chips for a 1-chip request) is
  read as no hand-off at all: the scheduler's cache charges the pod what it asked for, and the device
  plugin mounts only what kubelet allocated (``agents.deviceplugin``). The webhook's ``/pods`` path refuses
  these annotations from anyone but the scheduler (``cluster.webhook``).
"""

from __future__ import annotations

import hashlib
import json
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from hetsched.api.validation import first_problem
from hetsched.devices.policy import MAX_CHIPS

NODE_ANNOTATION = "hetsched.io/devices"
ASCEND_NAMESPACE = "kube-system"
ASCEND_INFO_PREFIX = "mindx-dl-deviceinfo-"
"""Ascend's device-info ConfigMaps are ``kube-system/mindx-dl-deviceinfo-<node>`` (Huawei's device plugin
writes them, Volcano's Ascend plugin reads them); hetsched's node agent may write only its own node's
(``cluster.restriction``)."""


def ascend_info_name(node: str) -> str:
    """The name of ``node``'s Ascend device-info ConfigMap (in :data:`ASCEND_NAMESPACE`)."""
    return f"{ASCEND_INFO_PREFIX}{node}"
TOPOLOGY_ANNOTATION = "hetsched.io/topology-manager-policy"
"""Node annotation the node agent publishes from the kubelet's configuration: ``<topologyManagerPolicy>/
<cpuManagerPolicy>`` (``single-numa-node/static``); read by ``hetsched doctor``'s numaaware check."""
SHARE_RESOURCES = {
    "hetsched.io/gpu-milli": "nvidia.com/gpu",
    "hetsched.io/npu-milli": "huawei.com/Ascend910",
    "hetsched.io/mlu-milli": "cambricon.com/mlu",
}
"""Fractional requests: thousandths of ONE chip of the device resource (a pod asking
``hetsched.io/gpu-milli: 300`` gets 30 % of one ``nvidia.com/gpu``; several pods share it, never past 1000)."""
SHARE_OF = {device: share for share, device in SHARE_RESOURCES.items()}
SHARE_MEMORY_RESOURCES = {
    "hetsched.io/gpu-memory": "nvidia.com/gpu",
    "hetsched.io/npu-memory": "huawei.com/Ascend910",
    "hetsched.io/mlu-memory": "cambricon.com/mlu",
}
"""Memory shares: MiB of device memory on the ONE chip a fractional pod shares, asked together with the
``…-milli`` share (``hetsched.io/gpu-memory: 4096``). The pods sharing a chip never hold more than its
``memoryMiB``; a chip whose inventory gives no memory takes no memory shares."""
MEMORY_OF = {device: memory for memory, device in SHARE_MEMORY_RESOURCES.items()}
POD_ANNOTATION = "hetsched.io/allocation"
PREDICATE_TIME = "predicate-time"
CONTRACT_VERSION: Literal["hetsched.io/v1"] = "hetsched.io/v1"
Health = Literal["Healthy", "Unhealthy", "NetworkUnhealthy"]


class Chip(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)
    id: int = Field(ge=0, le=MAX_CHIPS - 1)
    """A node's chips of one resource are one bitmask in the scheduler: ids 0–127 (``policy.MAX_CHIPS``)."""
    health: Health = "Healthy"
    numa: int = Field(default=0, ge=0)
    memoryMiB: int = Field(default=0, ge=0)
    cores: int = Field(default=0, ge=0)
    groups: list[str] = Field(default_factory=list)


class DeviceSet(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)
    resource: str = Field(min_length=1)
    model: str = ""
    topology: str = "generic"
    chips: list[Chip] = Field(min_length=1)
    partitioning: Literal["", "mig", "vnpu", "smlu", "vgpu"] = ""
    """The chips may be carved into partitions of this mode (``devices.partitions``), created on demand by the
    node agent; "" = whole chips and ``…-milli`` shares only."""

    def mask(self, *health: str) -> int:
        """Bitmask of chips in any of the given health states (all chips when none given)."""
        return sum(1 << c.id for c in self.chips if not health or c.health in health)


class NodeDevices(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)
    version: Literal["hetsched.io/v1"] = CONTRACT_VERSION
    devices: list[DeviceSet] = Field(default_factory=list)

    def to_annotation(self) -> str:
        devices = [d.model_dump(mode="json", exclude_defaults=True) for d in self.devices]
        return json.dumps({"version": self.version, "devices": devices}, separators=(",", ":"))


class InventoryError(ValueError):
    """An inventory annotation or ConfigMap that cannot be read; the message names what is wrong."""


def parse_node_devices(text: str, node: str) -> NodeDevices:
    try:
        return NodeDevices.model_validate_json(text)
    except ValidationError as exc:
        raise InventoryError(f"node {node}: annotation {NODE_ANNOTATION}: {first_problem(exc)}") from None


def chip_name(resource: str, chip: int) -> str:
    """``huawei.com/Ascend910``, 3 → ``Ascend910-3`` (Ascend's device naming)."""
    return f"{resource.split('/', 1)[-1]}-{chip}"


def pod_allocation(annotations: dict[str, str]) -> dict[str, list[int]]:
    """Chips a bound pod holds, per resource: our contract first, Ascend's annotation as a fallback."""
    raw = annotations.get(POD_ANNOTATION)
    result: dict[str, list[int]] = {}
    if raw:
        try:
            data = json.loads(raw)
            if isinstance(data, dict):
                result = {str(k): [int(c) for c in v] for k, v in data.items() if isinstance(v, list)}
        except (ValueError, TypeError):
            result = {}
    for key, value in annotations.items():
        if key.startswith("huawei.com/") and key not in result and value:
            try:
                result[key] = [int(name.rsplit("-", 1)[1]) for name in value.split(",") if name.strip()]
            except (IndexError, ValueError):
                continue
    return result


HANDOFF_FOR = "hetsched.io/allocation-for"
PARTITIONS_ANNOTATION = "hetsched.io/partitions"
"""The partitions chosen for a pod (``devices.partitions``): a JSON list of ``[resource, chip, template,
slice mask]``, one entry per partition, written with :data:`HANDOFF_FOR` at bind; the node agent creates
them and the device plugin mounts them."""
DSMLU_PROFILE = "CAMBRICON_DSMLU_PROFILE"
DSMLU_ASSIGNED = ("CAMBRICON_DSMLU_ASSIGHED", "CAMBRICON_DSMLU_ASSIGNED")
"""The flag Cambricon's plugin reads (its spelling) and HAMi's spelling: "false" until the plugin made the
instance (it then writes "true" itself, so these are not hand-off keys only the scheduler may write)."""
DSMLU_UNIT = 256
"""MiB per sMLU memory unit (the plugin's ``--min-dsmlu-unit``, HAMi's default)."""
HANDOFF_KEYS = frozenset({POD_ANNOTATION, HANDOFF_FOR, PREDICATE_TIME, PARTITIONS_ANNOTATION, DSMLU_PROFILE})
"""The hand-off annotations only the scheduler writes (and Ascend's ``huawei.com/<resource>`` ones:
:func:`is_handoff_key`)."""


def is_handoff_key(key: str) -> bool:
    """Is ``key`` a hand-off annotation (ours, or Ascend's per-resource one)?"""
    return key in HANDOFF_KEYS or (key.startswith("huawei.com/") and key.count("/") == 1)


def handoff_for(uid: str, node: str) -> str:
    return f"{uid}/{node}"


def chips_asked(requests: dict[str, int], resource: str) -> int:
    """How many chips of ``resource`` a pod's hand-off names: its whole chips (requests in milli-units),
    or 1 for a fractional share of one chip (``SHARE_OF``)."""
    if requests.get(SHARE_OF.get(resource, ""), 0) > 0:
        return 1
    return -(-requests.get(resource, 0) // 1000)


def _names_what_is_asked(chips: list[int], wanted: int) -> bool:
    return len(chips) == wanted == len(set(chips)) and all(0 <= chip < MAX_CHIPS for chip in chips)


def trusted_allocation(annotations: dict[str, str], uid: str, node: str,
                       wanted: dict[str, int]) -> dict[str, list[int]]:
    """The chips a pod's hand-off names, per resource, only where it can be trusted: the provenance stamp
    names this pod (``uid``) on this ``node``, and the resource's chips are distinct and exactly as many as
    the pod asks for (``wanted``: resource → whole chips, or 1 for a fractional share). Other resources,
    and everything when the stamp is missing or names another pod or node, are left out."""
    if not uid or annotations.get(HANDOFF_FOR) != handoff_for(uid, node):
        return {}
    return {resource: chips for resource, chips in pod_allocation(annotations).items()
            if resource in wanted and _names_what_is_asked(chips, wanted[resource])}


def handoff_problem(annotations: dict[str, str], uid: str, node: str, wanted: dict[str, int]) -> str:
    """Why a pod's hand-off is not trusted (``trusted_allocation``), for a refusal or an Event; "" when it
    has none or it is the scheduler's for this pod, node and request."""
    named = pod_allocation(annotations)
    if not named:
        return ""
    stamp = annotations.get(HANDOFF_FOR, "")
    mine = handoff_for(uid, node)
    if not stamp:
        return (f"annotation {POD_ANNOTATION} carries no provenance stamp ({HANDOFF_FOR}): the scheduler did not "
                "write it")
    if not uid or stamp != mine:
        return f"annotation {HANDOFF_FOR} names {stamp[:120]!r}, not this pod on this node ({mine}): copied or stale"
    for resource, chips in sorted(named.items()):
        if resource in wanted and not _names_what_is_asked(chips, wanted[resource]):
            return (f"annotation {POD_ANNOTATION} names {len(chips)} chip id(s) of {resource} ({len(set(chips))} "
                    f"distinct) where the pod asks for {wanted[resource]}")
    return ""


def handoff_annotations(allocation: dict[str, list[int]], now_seconds: float) -> dict[str, str]:
    """The annotations written on a pod at bind time for the chips chosen (see the module docstring)."""
    annotations = {POD_ANNOTATION: json.dumps(allocation, sort_keys=True, separators=(",", ":"))}
    for resource, chips in allocation.items():
        if resource.startswith("huawei.com/"):
            annotations[resource] = ",".join(chip_name(resource, c) for c in chips)
            annotations[PREDICATE_TIME] = str(int(now_seconds * 1e9))
    return annotations


PartitionEntry = tuple[str, int, str, int]
"""(device resource, chip id, template name, slice mask) of one partition a pod holds."""


def dsmlu_handoff(chip: int, vcore: int, memory_mib: int) -> dict[str, str]:
    """Cambricon's dynamic-sMLU hand-off for one sMLU of ``vcore`` percent and ``memory_mib`` MiB on ``chip``."""
    return {DSMLU_PROFILE: f"{chip}_{vcore}_{memory_mib // DSMLU_UNIT}", **dict.fromkeys(DSMLU_ASSIGNED, "false")}


def partitions_handoff(entries: list[PartitionEntry]) -> str:
    return json.dumps([list(entry) for entry in entries], separators=(",", ":"))


def trusted_partitions(annotations: dict[str, str], uid: str, node: str, wanted: int) -> list[PartitionEntry]:
    """The partitions a pod's hand-off names, only when the provenance stamp names this pod on this node and
    it names exactly ``wanted`` well-formed partitions (else none: a forged or copied hand-off carves nothing)."""
    raw = annotations.get(PARTITIONS_ANNOTATION)
    if not raw or not uid or annotations.get(HANDOFF_FOR) != handoff_for(uid, node) or len(raw) > 65536:
        return []
    try:
        data = json.loads(raw)
    except ValueError:
        return []
    if not isinstance(data, list) or len(data) != wanted:
        return []
    entries: list[PartitionEntry] = []
    for item in data:
        if not (isinstance(item, list) and len(item) == 4 and isinstance(item[0], str) and isinstance(item[2], str)
                and all(isinstance(v, int) and not isinstance(v, bool) for v in (item[1], item[3]))
                and 0 <= item[1] < MAX_CHIPS and 0 <= item[3] < 1 << 16):
            return []
        entries.append((item[0], item[1], item[2], item[3]))
    return entries


def to_ascend_device_info(device_set: DeviceSet, update_time: int) -> dict[str, str]:
    """Ascend's ``mindx-dl-deviceinfo-<node>`` ConfigMap data for one device set (what Ascend's device plugin
    publishes and the Ascend scheduler plugin reads): healthy, ``-Unhealthy`` and ``-NetworkUnhealthy``
    chip lists and the ``CheckCode`` (SHA-256 of the ``DeviceInfo`` JSON). :func:`from_ascend_device_info`
    reads it back."""
    resource = device_set.resource

    def names(health: str) -> str:
        return ",".join(chip_name(resource, c.id) for c in device_set.chips if c.health == health)

    info = {"DeviceList": {resource: names("Healthy"), f"{resource}-Unhealthy": names("Unhealthy"),
                           f"{resource}-NetworkUnhealthy": names("NetworkUnhealthy")},
            "UpdateTime": update_time}
    digest = hashlib.sha256(json.dumps(info, separators=(",", ":")).encode()).hexdigest()
    return {"DeviceInfoCfg": json.dumps({"DeviceInfo": info, "CheckCode": digest}, separators=(",", ":"))}


def from_ascend_device_info(data: dict[str, str], node: str, *, topology: str, model: str = "",
                            chips: int | None = None, verify: bool = True) -> list[DeviceSet]:
    """Read Ascend's ``mindx-dl-deviceinfo-<node>`` ConfigMap data (key ``DeviceInfoCfg``).

    Healthy chips are those listed under the resource; ``…-Unhealthy`` chips are Unhealthy, ``…-NetworkUnhealthy``
    chips NetworkUnhealthy. With ``verify``, the ``CheckCode`` (SHA-256 of the ``DeviceInfo`` JSON) must match,
    as the Ascend scheduler plugin requires.
    """
    raw = data.get("DeviceInfoCfg")
    if raw is None:
        raise InventoryError(f"ConfigMap mindx-dl-deviceinfo-{node}: key DeviceInfoCfg is missing")
    try:
        document: Any = json.loads(raw)
        info = document["DeviceInfo"]
        device_list: dict[str, str] = info["DeviceList"]
    except (ValueError, KeyError, TypeError) as exc:
        raise InventoryError(f"ConfigMap mindx-dl-deviceinfo-{node}: DeviceInfoCfg is not Ascend's format ({exc})") \
            from None
    if verify and "CheckCode" in document:
        digest = hashlib.sha256(json.dumps(info, separators=(",", ":")).encode()).hexdigest()
        if digest != document["CheckCode"]:
            raise InventoryError(f"ConfigMap mindx-dl-deviceinfo-{node}: CheckCode does not match DeviceInfo")
    sets = []
    for resource, healthy_text in device_list.items():
        if resource.endswith(("-Unhealthy", "-NetworkUnhealthy", "-Fault", "-Recovering")):
            continue

        def ids(text: str) -> set[int]:
            return {int(n.rsplit("-", 1)[1]) for n in text.split(",") if n.strip()}

        try:
            healthy = ids(healthy_text)
            unhealthy = ids(device_list.get(f"{resource}-Unhealthy", ""))
            network = ids(device_list.get(f"{resource}-NetworkUnhealthy", ""))
        except (IndexError, ValueError):
            raise InventoryError(f"ConfigMap mindx-dl-deviceinfo-{node}: {resource}: chip names must look like "
                                 f"Ascend910-3") from None
        count = chips or (max(healthy | unhealthy | network, default=-1) + 1)
        chip_list = []
        for chip in range(count):
            health: Health = "Healthy"
            if chip in unhealthy or (chip not in healthy and chip not in network):
                health = "Unhealthy"
            elif chip in network:
                health = "NetworkUnhealthy"
            chip_list.append(Chip(id=chip, health=health))
        sets.append(DeviceSet(resource=resource, model=model, topology=topology, chips=chip_list))
    return sets
