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

Errors name the file, the pool and the field, like manifest errors.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from hetsched.api.accelerators import AcceleratorKind, resource_for
from hetsched.api.manifest import ManifestError, Problem, format_location
from hetsched.api.objects import Node, ResourceList, StringMap, Taint, quantity_strings
from hetsched.api.quantity import parse_quantity


class AcceleratorSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    kind: AcceleratorKind
    model: str = Field(min_length=1)
    count: int = Field(ge=1, le=64)
    resource: str | None = None
    """Extended resource name; derived from kind and model when omitted."""

    @property
    def resource_name(self) -> str:
        return self.resource or resource_for(self.kind, self.model)


class PoolSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    name: str = Field(min_length=1, pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
    count: int = Field(ge=0, le=100_000)
    namePrefix: str | None = None
    labels: StringMap = Field(default_factory=dict)
    taints: list[Taint] = Field(default_factory=list)
    cpu: str | int = "64"
    memory: str = "256Gi"
    pods: int = Field(default=110, ge=1)
    accelerators: list[AcceleratorSpec] = Field(default_factory=list)
    extraResources: ResourceList = Field(default_factory=dict)

    @model_validator(mode="after")
    def _quantities(self) -> PoolSpec:
        parse_quantity(self.cpu)
        parse_quantity(self.memory)
        return self


class ClusterSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
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

    def nodes(self) -> list[Node]:
        """Expand every pool into ``count`` nodes named ``<prefix><index>``, allocatable = capacity."""
        nodes: list[Node] = []
        for pool in self.pools:
            capacity: dict[str, int] = {
                "cpu": parse_quantity(pool.cpu),
                "memory": parse_quantity(pool.memory),
                "pods": pool.pods * 1000,
            }
            for accelerator in pool.accelerators:
                name = accelerator.resource_name
                capacity[name] = capacity.get(name, 0) + accelerator.count * 1000
            capacity.update(pool.extraResources)
            prefix = pool.namePrefix if pool.namePrefix is not None else f"{pool.name}-"
            width = max(2, len(str(pool.count - 1)))
            for index in range(pool.count):
                name = f"{prefix}{index:0{width}d}"
                labels = {"kubernetes.io/hostname": name, "hetsched.io/pool": pool.name, **pool.labels}
                quantities = quantity_strings(capacity)
                nodes.append(Node.model_validate({
                    "metadata": {"name": name, "labels": labels},
                    "spec": {"taints": [t.model_dump() for t in pool.taints]},
                    "status": {"capacity": quantities, "allocatable": quantities},
                }))
        return nodes


def is_cluster_spec(path: str | Path) -> bool:
    """Does this file look like a cluster spec (``kind: ClusterSpec`` at the top level)?"""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return False
    return any(line.strip() == "kind: ClusterSpec" for line in text.splitlines())


def load_cluster_spec(path: str | Path) -> ClusterSpec:
    """Read and validate a cluster spec file; raise :class:`ManifestError` naming file, pool and field."""
    source = str(path)
    try:
        documents = [d for d in yaml.safe_load_all(Path(path).read_text(encoding="utf-8")) if d is not None]
    except OSError as exc:
        raise ManifestError([Problem(source, 0, "", "", "", f"cannot read file: {exc.strerror or exc}")]) from None
    except yaml.YAMLError as exc:
        raise ManifestError([Problem(source, 0, "", "", "", f"malformed YAML: {exc}".splitlines()[0])]) from None
    if len(documents) != 1:
        raise ManifestError([Problem(source, 0, "", "", "", f"a cluster spec is one YAML document of kind "
                                     f"ClusterSpec; this file has {len(documents)}")])
    return parse_cluster_spec(documents[0], source)


def parse_cluster_spec(data: object, source: str = "<cluster>") -> ClusterSpec:
    name = str(data.get("metadata", {}).get("name", "")) if isinstance(data, dict) else ""
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
            message = error["msg"].removeprefix("Value error, ")
            if error["type"] == "missing":
                message = "required field is missing"
            elif error["type"] == "extra_forbidden":
                message = "unknown field"
            problems.append(Problem(source, 1, "ClusterSpec", name, path, message))
        raise ManifestError(problems) from None
