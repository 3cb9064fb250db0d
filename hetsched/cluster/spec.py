"""Cluster specs: node pools (count, name prefix, labels, taints, CPU, memory, pods, accelerators) that
expand into Node objects for the embedded cluster.

Who calls it: ``hetsched simulate --cluster``, ``hetsched demo``, the benchmark and tests. Example in
``examples/clusters/mixed.yaml``::

    apiVersion: hetsched.io/v1alpha1
    kind: ClusterSpec
    metadata: {name: mixed}
    pools:
    - name: ascend910
      count: 4
      labels: {accelerator: huawei-ascend}
      cpu: "192"
      memory: 1536Gi
      accelerators: [{kind: ascend, model: Ascend910, count: 8}]
      topology:                      # optional: where the servers sit in the network
      - {tier: 1, size: 2}           # every 2 servers share a tier-1 HyperNode (a ToR, a supernode)
      - {tier: 2, size: 2}           # every 2 of those a tier-2 one (a spine)

A pool's ``topology`` labels its nodes ``topology.hetsched.io/tier-<N>=<prefix>-<index>`` (``prefix``
defaults to ``<pool>-t<N>``; pools giving the same prefix share domains) and the HyperNodes are discovered
from those labels (``api.hypernodes.discover``), as Volcano's label discovery does on a real cluster.

Errors name the file, the pool and the field, like manifest errors.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from hetsched.api import validation
from hetsched.api.accelerators import AcceleratorKind, resource_for
from hetsched.api.hypernodes import TIER_LABEL, discover
from hetsched.api.manifest import ManifestError, Problem
from hetsched.api.objects import MAX_TIER, HyperNode, Node, ResourceList, StringMap, Taint, quantity_strings
from hetsched.api.quantity import parse_quantity
from hetsched.api.validation import format_location
from hetsched.api.yamlsafe import YamlLimitError, read_text, safe_load_all
from hetsched.devices.catalog import MODEL_LABEL, TOPOLOGIES, chips_of, default_topology
from hetsched.devices.inventory import MEMORY_OF, NODE_ANNOTATION, SHARE_OF, Chip, DeviceSet, NodeDevices
from hetsched.devices.partition_requests import advertised
from hetsched.devices.partitions import GEOMETRIES, geometry_for
from hetsched.devices.policy import MAX_CHIPS


class AcceleratorSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)
    kind: AcceleratorKind
    model: str = Field(min_length=1)
    count: int = Field(ge=1, le=MAX_CHIPS)
    resource: str | None = None
    """Extended resource name; derived from kind and model when omitted."""
    topology: str | None = None
    """Server shape (``devices.catalog.TOPOLOGIES``); derived from kind, model and count when omitted."""
    numaNodes: int = Field(default=2, ge=1, le=8)
    memoryMiB: int = Field(default=0, ge=0)
    unhealthy: list[int] = Field(default_factory=list)
    """Chip ids the driver reports unhealthy on every node of the pool (for fault scenarios)."""
    networkUnhealthy: list[int] = Field(default_factory=list)
    advertiseUnhealthy: bool = False
    """Keep unhealthy chips in allocatable, as a device plugin with the seed's bug would ("fake resources")."""
    shareable: bool = False
    """Also advertise fractional capacity (``hetsched.io/gpu-milli`` …: 1000 per healthy chip), and with
    ``memoryMiB`` the memory shares (``hetsched.io/gpu-memory`` …: ``memoryMiB`` per healthy chip)."""
    partitioning: Literal["", "mig", "vnpu", "smlu", "vgpu"] = ""
    """Carve the chips into partitions of this mode on demand (``devices.partitions``): MIG profiles, Ascend
    vNPU templates, Cambricon sMLU or HAMi-core vGPU; the nodes advertise the names pods ask them by."""

    @property
    def resource_name(self) -> str:
        return self.resource or resource_for(self.kind, self.model)

    @property
    def topology_name(self) -> str:
        return self.topology or default_topology(self.kind, self.model, self.count)

    @model_validator(mode="after")
    def _consistent(self) -> AcceleratorSpec:
        if self.topology is not None and self.topology not in TOPOLOGIES:
            raise ValueError(f"topology {self.topology!r} is unknown; known: {', '.join(TOPOLOGIES)}")
        implied = chips_of(self.topology_name)
        if implied is not None and implied != self.count:
            raise ValueError(f"topology {self.topology_name} has {implied} chips, count is {self.count}")
        for chip in (*self.unhealthy, *self.networkUnhealthy):
            if not 0 <= chip < self.count:
                raise ValueError(f"chip id {chip} is outside 0–{self.count - 1}")
        if self.partitioning:
            geometry = geometry_for(self.partitioning, self.model)
            if geometry is None:
                known = sorted({g.name for g in GEOMETRIES if g.mode == self.partitioning})
                raise ValueError(f"partitioning {self.partitioning}: no {self.partitioning} geometry for model "
                                 f"{self.model} (known: {', '.join(known)})")
            if not geometry.memory and not self.memoryMiB:
                raise ValueError(f"partitioning {self.partitioning}: needs memoryMiB (the memory of one chip)")
            if self.shareable:
                raise ValueError("partitioning and shareable exclude each other: a chip is carved into partitions "
                                 "or shared by milli")
        return self

    def device_set(self) -> DeviceSet:
        per_numa = max(1, self.count // self.numaNodes)
        chips = []
        for chip in range(self.count):
            health = ("Unhealthy" if chip in self.unhealthy
                      else "NetworkUnhealthy" if chip in self.networkUnhealthy else "Healthy")
            chips.append(Chip(id=chip, health=health, numa=min(chip // per_numa, self.numaNodes - 1),
                              memoryMiB=self.memoryMiB))
        return DeviceSet(resource=self.resource_name, model=self.model, topology=self.topology_name, chips=chips,
                         partitioning=self.partitioning)


class TopologyLevel(BaseModel):
    """One tier of a pool's position in the network: ``size`` units of the level below (servers, for the
    first level) form one HyperNode of ``tier``."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)
    tier: int = Field(ge=1, le=MAX_TIER)
    size: int = Field(ge=1, le=100_000)
    prefix: str | None = Field(default=None, pattern=r"^[a-z0-9]([-a-z0-9]{0,60}[a-z0-9])?$")


class PoolSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)
    name: str = Field(min_length=1, pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
    count: int = Field(ge=0, le=100_000)
    namePrefix: str | None = None
    labels: StringMap = Field(default_factory=dict)
    taints: list[Taint] = Field(default_factory=list)
    cpu: str | int = "64"
    memory: str = "256Gi"
    ephemeralStorage: str = "500Gi"
    """Node-local scratch (``ephemeral-storage``), as every kubelet reports it."""
    arch: Literal["amd64", "arm64"] = "amd64"
    """``kubernetes.io/arch`` (Ascend servers are often arm64, Kunpeng)."""
    pods: int = Field(default=110, ge=1)
    accelerators: list[AcceleratorSpec] = Field(default_factory=list)
    extraResources: ResourceList = Field(default_factory=dict)
    topology: list[TopologyLevel] = Field(default_factory=list, max_length=MAX_TIER)

    @model_validator(mode="after")
    def _quantities(self) -> PoolSpec:
        parse_quantity(self.cpu)
        parse_quantity(self.memory)
        parse_quantity(self.ephemeralStorage)
        tiers = [level.tier for level in self.topology]
        if tiers != sorted(set(tiers)):
            raise ValueError(f"topology: tiers must rise from level to level, got {tiers}")
        return self

    def topology_labels(self, index: int) -> dict[str, str]:
        """The network labels of the pool's server ``index``: its HyperNode per tier."""
        labels = {}
        unit = index
        for level in self.topology:
            unit //= level.size
            prefix = level.prefix or f"{self.name}-t{level.tier}"
            labels[TIER_LABEL.format(tier=level.tier)] = f"{prefix}-{unit}"
        return labels


class ClusterSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)
    apiVersion: Literal["hetsched.io/v1alpha1"] = "hetsched.io/v1alpha1"
    kind: Literal["ClusterSpec"] = "ClusterSpec"
    metadata: dict[str, str] = Field(default_factory=dict)
    pools: list[PoolSpec] = Field(min_length=1)

    @model_validator(mode="after")
    def _unique_pools(self) -> ClusterSpec:
        names = [p.name for p in self.pools]
        if len(set(names)) != len(names):
            raise ValueError("pool names must be unique")
        return self

    def hypernodes(self, nodes: list[Node]) -> list[HyperNode]:
        """The HyperNodes the pools' ``topology`` implies, discovered from ``nodes``' labels."""
        tiers = sorted({level.tier for pool in self.pools for level in pool.topology})
        return discover(nodes, {tier: TIER_LABEL.format(tier=tier) for tier in tiers})

    def nodes(self) -> list[Node]:
        """Expand every pool into ``count`` nodes named ``<prefix><index>``, allocatable = capacity."""
        nodes: list[Node] = []
        for pool in self.pools:
            capacity: dict[str, int] = {
                "cpu": parse_quantity(pool.cpu),
                "memory": parse_quantity(pool.memory),
                "ephemeral-storage": parse_quantity(pool.ephemeralStorage),
                "pods": pool.pods * 1000,
            }
            device_sets = [a.device_set() for a in pool.accelerators]
            allocatable = dict(capacity)
            for accelerator in pool.accelerators:
                name = accelerator.resource_name
                capacity[name] = capacity.get(name, 0) + accelerator.count * 1000
                advertised_chips = accelerator.count - (
                    0 if accelerator.advertiseUnhealthy else len(accelerator.unhealthy))
                allocatable[name] = allocatable.get(name, 0) + advertised_chips * 1000
                share = SHARE_OF.get(name)
                if accelerator.shareable and share is not None:
                    capacity[share] = capacity.get(share, 0) + accelerator.count * 1000 * 1000
                    allocatable[share] = allocatable.get(share, 0) + advertised_chips * 1000 * 1000
                    memory = MEMORY_OF.get(name)
                    if memory is not None and accelerator.memoryMiB:
                        capacity[memory] = capacity.get(memory, 0) + accelerator.count * accelerator.memoryMiB * 1000
                        allocatable[memory] = (allocatable.get(memory, 0)
                                               + advertised_chips * accelerator.memoryMiB * 1000)
                for partition, per_chip in advertised(accelerator.partitioning, accelerator.model,
                                                      accelerator.memoryMiB).items():
                    if partition == name:  # the chips' own name counted in partitions (HAMi's vGPUs): instead
                        capacity[name] -= accelerator.count * 1000
                        allocatable[name] -= advertised_chips * 1000
                    capacity[partition] = capacity.get(partition, 0) + accelerator.count * per_chip * 1000
                    allocatable[partition] = allocatable.get(partition, 0) + advertised_chips * per_chip * 1000
            capacity.update(pool.extraResources)
            allocatable.update(pool.extraResources)
            annotations = {NODE_ANNOTATION: NodeDevices(devices=device_sets).to_annotation()} if device_sets else {}
            model_labels = {MODEL_LABEL: pool.accelerators[0].model} if pool.accelerators else {}
            prefix = pool.namePrefix if pool.namePrefix is not None else f"{pool.name}-"
            width = max(2, len(str(pool.count - 1)))
            for index in range(pool.count):
                name = f"{prefix}{index:0{width}d}"
                # the labels every kubelet sets on its node, so selectors and spread constraints written
                # for a real cluster work here unchanged
                labels = {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "kubernetes.io/arch": pool.arch,
                          "beta.kubernetes.io/os": "linux", "beta.kubernetes.io/arch": pool.arch,
                          "hetsched.io/pool": pool.name, **model_labels, **pool.topology_labels(index), **pool.labels}
                nodes.append(Node.model_validate({
                    "metadata": {"name": name, "labels": labels, "annotations": annotations},
                    "spec": {"taints": [t.model_dump() for t in pool.taints]},
                    "status": {"capacity": quantity_strings(capacity), "allocatable": quantity_strings(allocatable)},
                }))
        return nodes


def is_cluster_spec(path: str | Path) -> bool:
    """Does this file look like a cluster spec (``kind: ClusterSpec`` at the top level)?"""
    try:
        text = read_text(path)
    except (OSError, UnicodeDecodeError):
        return False
    return any(line.strip() == "kind: ClusterSpec" for line in text.splitlines())


def load_cluster_spec(path: str | Path) -> ClusterSpec:
    """Read and validate a cluster spec file; raise :class:`ManifestError` naming file, pool and field."""
    source = str(path)
    try:
        documents = safe_load_all(read_text(path))
    except YamlLimitError as exc:
        raise ManifestError([Problem(source, 0, "", "", "", str(exc))]) from None
    except (OSError, UnicodeDecodeError) as exc:
        reason = getattr(exc, "strerror", None) or exc
        raise ManifestError([Problem(source, 0, "", "", "", f"cannot read file: {reason}")]) from None
    except yaml.YAMLError as exc:
        raise ManifestError([Problem(source, 0, "", "", "", f"malformed YAML: {exc}".splitlines()[0])]) from None
    if len(documents) != 1:
        raise ManifestError([Problem(source, 0, "", "", "", f"a cluster spec is one YAML document of kind "
                                     f"ClusterSpec; this file has {len(documents)}")])
    return parse_cluster_spec(documents[0], source)


def parse_cluster_spec(data: object, source: str = "<cluster>") -> ClusterSpec:
    metadata = data.get("metadata") if isinstance(data, dict) else None
    name = str(metadata.get("name", ""))[:253] if isinstance(metadata, dict) else ""
    try:
        return ClusterSpec.model_validate(data)
    except ValidationError as exc:
        problems = []
        for error in exc.errors(include_url=False):
            loc = list(error["loc"])
            path = format_location(loc)
            if len(loc) >= 2 and loc[0] == "pools" and isinstance(loc[1], int) and isinstance(data, dict):
                pools = data.get("pools") or []
                if loc[1] < len(pools) and isinstance(pools[loc[1]], dict) and "name" in pools[loc[1]]:
                    path = f"pools[{loc[1]}] ({pools[loc[1]]['name']}){format_location(['x', *loc[2:]])[1:]}"
            problems.append(Problem(source, 1, "ClusterSpec", name, path, validation.message(error)))
        raise ManifestError(problems) from None
