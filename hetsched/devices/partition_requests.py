"""What a pod asks of chip partitions, read from the resource names and annotations users already write.

Who calls it: the scheduler's ``devicetopology`` plugin and cache (``cache.devicestate``), once per pod group;
``api.validation`` for ``hetsched validate`` and the admission webhook (:func:`partition_request` raises
:class:`PartitionRequestError` naming the resource, label or annotation that is wrong).

Recognised (amounts as the pod states them; the scheduler's requests are in milli-units, divided here):

=====================================================  ==========================================================
``nvidia.com/mig-<profile>: N``                         N MIG instances of that profile (device plugin "mixed")
``volcano.sh/vgpu-number`` / ``-memory`` / ``-cores``    N vGPUs on N GPUs, MiB and percent each (Volcano vGPU);
                                                        with ``volcano.sh/vgpu-mode: mig``: the smallest MIG
                                                        profile holding the memory
``nvidia.com/gpu`` with ``nvidia.com/gpumem`` /         the same in HAMi's names (``nvidia.com/vgpu-mode``);
``gpumem-percentage`` / ``gpucores``                    ``nvidia.com/gpu`` alone stays whole GPUs
``volcano.sh/gpu-memory: M``                            M MiB of one GPU (Volcano GPU sharing)
``volcano.sh/gpu-number: N``                            N whole GPUs (Volcano GPU number)
``huawei.com/npu-core: 1|2|4`` (+ label                 an Ascend 310P vNPU, template from the core count and
``ring-controller.atlas: ascend-310P``)                 the labels ``vnpu-level`` (low|high) and ``vnpu-dvpp``
                                                        (yes|no|null), as Volcano's MindCluster vNPU; 8·k: k chips
``huawei.com/Ascend<chip>: 1`` with                     the smallest vNPU template of that chip holding the
``huawei.com/Ascend<chip>-memory: M``                   memory (HAMi); without memory, or more than 1: whole chips
``cambricon.com/mlu.smlu.vcore`` / ``.vmemory``         a Cambricon sMLU: percent of compute, MiB of memory
(+ ``cambricon.com/vmlu: 1``)                           (also ``cambricon.com/<model>.smlu.…``)
=====================================================  ==========================================================
"""

from __future__ import annotations

from dataclasses import dataclass, field

from hetsched.api.objects import CronJob, Job, JobTemplate, Pod, PodSpec
from hetsched.devices.partitions import (
    GEOMETRIES,
    WHOLE_MEMORY,
    Geometry,
    Mode,
    Profile,
    geometry_for,
    memory_percent,
    most_partitions,
    pack_table,
    percent_memory,
)

MIG_PREFIX = "nvidia.com/mig-"
VGPU_NUMBER, VGPU_MEMORY, VGPU_CORES = "volcano.sh/vgpu-number", "volcano.sh/vgpu-memory", "volcano.sh/vgpu-cores"
VGPU_MODE = "volcano.sh/vgpu-mode"
HAMI_GPU, HAMI_MEMORY, HAMI_MEMORY_PERCENT, HAMI_CORES = (
    "nvidia.com/gpu", "nvidia.com/gpumem", "nvidia.com/gpumem-percentage", "nvidia.com/gpucores")
HAMI_MODE = "nvidia.com/vgpu-mode"
GPU_SHARE_MEMORY, GPU_NUMBER = "volcano.sh/gpu-memory", "volcano.sh/gpu-number"
NPU_CORE = "huawei.com/npu-core"
RING_LABEL, VNPU_LEVEL, VNPU_DVPP = "ring-controller.atlas", "vnpu-level", "vnpu-dvpp"
VNPU_MODE = "huawei.com/vnpu-mode"
HAMI_ASCEND = {"910A": "Ascend910A", "910B2": "Ascend910B2", "910B3": "Ascend910B3", "910B4": "Ascend910B4",
               "910B4-1": "Ascend910B4", "310P": "Ascend310P"}
"""HAMi's per-chip Ascend resource names (``huawei.com/Ascend<chip>``) → the vNPU geometry they carve."""
SMLU_VMLU = "cambricon.com/vmlu"
GPU_RESOURCE, ASCEND_310P, ASCEND_910, MLU_RESOURCE = (
    "nvidia.com/gpu", "huawei.com/Ascend310P", "huawei.com/Ascend910", "cambricon.com/mlu")
ANNOTATIONS = (VGPU_MODE, HAMI_MODE, VNPU_MODE)
"""The pod annotations this module reads (the scheduler cache keeps them on each task group)."""
LABELS = (RING_LABEL, VNPU_LEVEL, VNPU_DVPP)
"""The pod labels this module reads (kept on each task group too)."""


class PartitionRequestError(ValueError):
    """A partition request that can never be served; the message names the resource, label or annotation."""


@dataclass(frozen=True)
class PartitionAsk:
    """``count`` partitions of the chips of ``resource`` carved in ``mode``: a named ``template``, the smallest
    template holding ``fit_memory`` MiB, a whole chip (``whole``), or a dynamic ``cores`` + ``memory`` share."""

    resource: str
    mode: Mode
    count: int
    source: str
    """The resource name the pod wrote (for messages and metrics)."""
    distinct: bool = False
    """Each partition on its own chip (vGPUs of one pod; HAMi's rule)."""
    template: str = ""
    fit_memory: int = 0
    whole: bool = False
    cores: int = 0
    memory: int = 0
    geometries: tuple[str, ...] = ()
    """Geometry names it is restricted to (HAMi's per-chip Ascend names); empty: any of ``mode``."""

    def profile(self, geometry: Geometry) -> Profile | str:
        """The concrete template on chips of ``geometry``, or why there is none."""
        if self.geometries and geometry.name not in self.geometries:
            return f"{self.source} asks for {', '.join(self.geometries)} chips, these are {geometry.name}"
        if self.whole:
            full = ((1 << geometry.slices) - 1,) if geometry.slices else ()
            return Profile("whole", geometry.cores, WHOLE_MEMORY, geometry.aicpu, full)
        if self.template:
            found = geometry.profile(self.template)
            if found is None:
                known = ", ".join(p.name for p in geometry.profiles)
                return f"{geometry.name} has no {geometry.mode} template {self.template} (it has {known})"
            return found
        if self.fit_memory:
            holding = [p for p in geometry.profiles if p.memory >= self.fit_memory]
            if not holding:
                return f"no {geometry.name} template holds {self.fit_memory} MiB"
            return min(holding, key=lambda p: (p.memory, p.cores, p.aicpu))
        if not geometry.dynamic:
            return f"{geometry.name} chips are carved by template, not by cores and memory"
        unit = geometry.memory_unit
        percent = memory_percent(self.memory)
        memory = self.memory if percent is not None else -(-self.memory // unit) * unit
        shown = "all" if percent == 100 else f"{percent}%mem" if percent is not None else f"{memory}MiB"
        return Profile(f"{self.cores}%-{shown}", self.cores, memory)


@dataclass(frozen=True)
class PartitionRequest:
    asks: tuple[PartitionAsk, ...] = ()
    counted: frozenset[str] = frozenset()
    """Device resources whose own count the asks use (HAMi's ``nvidia.com/gpu`` with ``gpumem``): not whole
    chips of that resource."""
    whole: dict[str, int] = field(default_factory=dict)
    """Whole chips asked under another name (``volcano.sh/gpu-number`` → ``nvidia.com/gpu``)."""


NONE = PartitionRequest()
MAX_PARTITIONS = 128
"""Partitions one pod may ask for (a server of 16 chips × 7 partitions is 112): more is refused, so no request
— say ``nvidia.com/mig-1g.5gb: 1000000000`` on a pod bound past the scheduler — makes anyone loop over it."""
_KNOWN_MIG = frozenset(p.name for g in GEOMETRIES if g.mode == "mig" for p in g.profiles)


def _amount(requests: dict[str, int], name: str) -> int:
    return -(-requests.get(name, 0) // 1000)


def _mode(annotations: dict[str, str], key: str) -> str:
    value = annotations.get(key, "hami-core")
    if value not in ("hami-core", "mig"):
        raise PartitionRequestError(f"annotation {key}: must be hami-core or mig, got {value[:40]!r}")
    return value


def _vgpu(requests: dict[str, int], annotations: dict[str, str], count_name: str, memory_name: str,
          cores_name: str, mode_key: str, percent_name: str = "") -> PartitionAsk | None:
    count = _amount(requests, count_name)
    memory, cores = _amount(requests, memory_name), _amount(requests, cores_name)
    percent = _amount(requests, percent_name) if percent_name else 0
    if count <= 0:
        for name, value in ((memory_name, memory), (cores_name, cores), (percent_name, percent)):
            if value:
                raise PartitionRequestError(f"resource {name}: asked without {count_name} (how many vGPUs)")
        return None
    if cores > 100:
        raise PartitionRequestError(f"resource {cores_name}: {cores} is over 100 (percent of one GPU)")
    if percent and memory:
        raise PartitionRequestError(f"resources {memory_name} and {percent_name}: ask the vGPU's memory one way")
    if percent > 100:
        raise PartitionRequestError(f"resource {percent_name}: {percent} is over 100 (percent of one GPU's memory)")
    if _mode(annotations, mode_key) == "mig":
        if percent:
            raise PartitionRequestError(f"resource {percent_name}: a MIG instance is chosen by MiB; ask "
                                        f"{memory_name}")
        return PartitionAsk(GPU_RESOURCE, "mig", count, count_name, fit_memory=memory or 1)
    asked = memory or (percent_memory(percent) if 0 < percent < 100 else WHOLE_MEMORY)
    return PartitionAsk(GPU_RESOURCE, "vgpu", count, count_name, distinct=True, cores=cores, memory=asked)


def _npu_core(requests: dict[str, int], labels: dict[str, str]) -> tuple[PartitionAsk | None, int]:
    cores = _amount(requests, NPU_CORE)
    if cores <= 0:
        return None, 0
    if labels.get(RING_LABEL) != "ascend-310P":
        raise PartitionRequestError(f"resource {NPU_CORE}: a vNPU needs the pod label {RING_LABEL}: ascend-310P "
                                    f"(Ascend's dynamic vNPU serves 310P chips)")
    if cores % 8 == 0:
        return None, cores // 8
    level = labels.get(VNPU_LEVEL, "low")
    if level not in ("low", "high"):
        level = "low"  # Volcano's MindCluster vNPU falls back to low for an unknown level
    dvpp = labels.get(VNPU_DVPP, "null")
    if dvpp not in ("yes", "no", "null"):
        raise PartitionRequestError(f"label {VNPU_DVPP}: must be yes, no or null, got {dvpp[:40]!r}")
    if cores == 1:
        template = "vir01"
    elif cores == 2:
        template = "vir02_1c" if level == "low" else "vir02"
    elif cores == 4:
        template = ("vir04_4c_dvpp" if dvpp == "yes" else "vir04_3c_ndvpp" if dvpp == "no"
                    else "vir04_3c" if level == "low" else "vir04")
    else:
        raise PartitionRequestError(f"resource {NPU_CORE}: {cores} AI cores is no vNPU template (1, 2 or 4 cores "
                                    f"of one 310P, or a multiple of 8 for whole chips)")
    return PartitionAsk(ASCEND_310P, "vnpu", 1, NPU_CORE, template=template), 0


def hami_ascend_name(geometry: str) -> str:
    """HAMi's resource name for chips of vNPU geometry ``geometry`` (``huawei.com/Ascend910B3``), "" for none."""
    chip = next((c for c, g in HAMI_ASCEND.items() if g == geometry), "")
    return f"huawei.com/Ascend{chip}" if chip else ""


def _hami_ascend(requests: dict[str, int], annotations: dict[str, str]) -> list[PartitionAsk]:
    asks = []
    for chip, geometry in HAMI_ASCEND.items():
        name, memory_name = f"huawei.com/Ascend{chip}", f"huawei.com/Ascend{chip}-memory"
        count, memory = _amount(requests, name), _amount(requests, memory_name)
        if memory and count <= 0:
            raise PartitionRequestError(f"resource {memory_name}: asked without {name} (how many vNPUs)")
        if chip == "310P" and not memory:
            continue  # huawei.com/Ascend310P alone: whole 310P chips, the resource's own name
        if count <= 0:
            continue
        if annotations.get(VNPU_MODE, "") == "hami-core":
            raise PartitionRequestError(f"annotation {VNPU_MODE}: hami-core (soft vNPU slicing) is not supported; "
                                        f"leave it out for template vNPUs")
        resource = ASCEND_310P if chip == "310P" else ASCEND_910
        if count == 1 and memory:
            asks.append(PartitionAsk(resource, "vnpu", 1, name, fit_memory=memory, geometries=(geometry,)))
        else:  # HAMi: several vNPUs, or none with memory, are whole chips
            asks.append(PartitionAsk(resource, "vnpu", count, name, distinct=True, whole=True, geometries=(geometry,)))
    return asks


def _smlu(requests: dict[str, int]) -> list[PartitionAsk]:
    by_prefix: dict[str, dict[str, int]] = {}
    for name in requests:
        if name.startswith("cambricon.com/") and (name.endswith(".smlu.vcore") or name.endswith(".smlu.vmemory")):
            prefix, _, what = name.rpartition(".smlu.")
            by_prefix.setdefault(prefix, {})[what] = _amount(requests, name)
    vmlu = _amount(requests, SMLU_VMLU)
    if vmlu > 1 and by_prefix:
        raise PartitionRequestError(f"resource {SMLU_VMLU}: an sMLU share is one MLU; {vmlu} asked with "
                                    f"{next(iter(by_prefix))}.smlu.*")
    asks = []
    for prefix, amounts in sorted(by_prefix.items()):
        cores, memory = amounts.get("vcore", 0), amounts.get("vmemory", 0)
        if cores > 100:
            raise PartitionRequestError(f"resource {prefix}.smlu.vcore: {cores} is over 100 (percent of one MLU)")
        if cores <= 0 and memory <= 0:
            continue
        asks.append(PartitionAsk(MLU_RESOURCE, "smlu", 1, f"{prefix}.smlu.vcore", cores=cores,
                                 memory=memory or WHOLE_MEMORY))
    return asks


def partition_request(requests: dict[str, int], annotations: dict[str, str],
                      labels: dict[str, str]) -> PartitionRequest:
    """What a pod asks of chip partitions (``requests`` in milli-units, as the scheduler keeps them)."""
    if not any(_partition_name(name) for name in requests):
        return NONE
    asks: list[PartitionAsk] = []
    counted: set[str] = set()
    whole: dict[str, int] = {}
    for name in sorted(requests):
        if name.startswith(MIG_PREFIX):
            profile = name[len(MIG_PREFIX):]
            if profile not in _KNOWN_MIG:
                raise PartitionRequestError(f"resource {name[:80]}: no GPU has MIG profile {profile[:40]!r} (known: "
                                            f"{', '.join(sorted(_KNOWN_MIG))})")
            count = _amount(requests, name)
            if count > 0:
                asks.append(PartitionAsk(GPU_RESOURCE, "mig", count, name, template=profile))
    volcano = _vgpu(requests, annotations, VGPU_NUMBER, VGPU_MEMORY, VGPU_CORES, VGPU_MODE)
    if volcano is not None:
        asks.append(volcano)
    if any(_amount(requests, n) for n in (HAMI_MEMORY, HAMI_MEMORY_PERCENT, HAMI_CORES)):
        hami = _vgpu(requests, annotations, HAMI_GPU, HAMI_MEMORY, HAMI_CORES, HAMI_MODE, HAMI_MEMORY_PERCENT)
        if hami is not None:
            asks.append(hami)
            counted.add(GPU_RESOURCE)
    share = _amount(requests, GPU_SHARE_MEMORY)
    if share > 0:
        asks.append(PartitionAsk(GPU_RESOURCE, "vgpu", 1, GPU_SHARE_MEMORY, memory=share))
    number = _amount(requests, GPU_NUMBER)
    if number > 0:
        whole[GPU_RESOURCE] = whole.get(GPU_RESOURCE, 0) + number
    npu, npu_whole = _npu_core(requests, labels)
    if npu is not None:
        asks.append(npu)
    if npu_whole:
        whole[ASCEND_310P] = whole.get(ASCEND_310P, 0) + npu_whole
    hami_ascend = _hami_ascend(requests, annotations)
    asks.extend(hami_ascend)
    counted.update(ask.resource for ask in hami_ascend if ask.resource == ASCEND_310P)
    asks.extend(_smlu(requests))
    if _amount(requests, SMLU_VMLU) and not any(ask.mode == "smlu" for ask in asks):
        asks.append(PartitionAsk(MLU_RESOURCE, "smlu", _amount(requests, SMLU_VMLU), SMLU_VMLU, distinct=True,
                                 whole=True))
    for i, ask in enumerate(asks):
        other = next((o for o in asks[:i] if o.resource == ask.resource), None)
        if other is not None:  # one kind per chip resource: the scheduler sizes and carves asks one at a time
            raise PartitionRequestError(f"resources {other.source} and {ask.source}: one kind of partition of "
                                        f"{ask.resource} per pod is supported; ask one of them")
    total = sum(ask.count for ask in asks)
    if total > MAX_PARTITIONS:
        raise PartitionRequestError(f"resource {asks[0].source}: {total} partitions for one pod (at most "
                                    f"{MAX_PARTITIONS})")
    return PartitionRequest(tuple(asks), frozenset(counted), whole)


def _partition_name(name: str) -> bool:
    return (name.startswith(MIG_PREFIX) or name.startswith("volcano.sh/") or name in (
        HAMI_MEMORY, HAMI_MEMORY_PERCENT, HAMI_CORES, NPU_CORE, SMLU_VMLU) or ".smlu." in name
            or (name.startswith("huawei.com/Ascend") and (name.endswith("-memory") or name[17:] in HAMI_ASCEND)))


def is_partition_resource(name: str) -> bool:
    """Is ``name`` a resource this module reads (a partition, or whole chips under another name)?"""
    return _partition_name(name) and name != ASCEND_310P


def whole_milli(requests: dict[str, int], resource: str, request: PartitionRequest) -> int:
    """Whole chips of ``resource`` the pod asks for, in milli-units: its own count (unless the partition asks
    use that count, as HAMi's ``nvidia.com/gpu`` with ``gpumem``) plus any asked under another name."""
    own = 0 if resource in request.counted else requests.get(resource, 0)
    return own + 1000 * request.whole.get(resource, 0)


def read_request(requests: dict[str, int], annotations: dict[str, str], labels: dict[str, str]) -> PartitionRequest:
    """:func:`partition_request`, with a request that can never be served read as none (admission refuses
    those; a pod that got past it — created before an upgrade — holds no partition and fails to schedule
    with the reason the scheduler gives)."""
    try:
        return partition_request(requests, annotations, labels)
    except PartitionRequestError:
        return NONE


def advertised(mode: str, model: str, memory: int) -> dict[str, int]:
    """What one healthy chip of ``model`` carved in ``mode`` adds to its node's allocatable, per resource name
    pods use (whole units): the most partitions of each template it can hold, and its compute and memory for
    the dynamic modes. The scheduler decides per chip; these totals only let the resource fit see the names
    (as the vendors' device plugins advertise them)."""
    geometry = geometry_for(mode, model)
    if geometry is None:
        return {}
    memory = geometry.memory or memory
    if mode == "mig":
        result = {MIG_PREFIX + p.name: int(pack_table(geometry.slices, p.placements)[0]) for p in geometry.profiles}
        return {**result, VGPU_NUMBER: geometry.instances, VGPU_MEMORY: memory}
    if mode == "vgpu":
        return {VGPU_NUMBER: geometry.instances, VGPU_MEMORY: memory, VGPU_CORES: 100, HAMI_MEMORY: memory,
                HAMI_CORES: 100, HAMI_MEMORY_PERCENT: 100, GPU_SHARE_MEMORY: memory, GPU_NUMBER: 1,
                HAMI_GPU: geometry.instances}  # HAMi counts nvidia.com/gpu in vGPUs: 10 per GPU
    if mode == "smlu":
        return {SMLU_VMLU: 100, "cambricon.com/mlu.smlu.vcore": 100, "cambricon.com/mlu.smlu.vmemory": memory}
    name = hami_ascend_name(geometry.name)
    result = {f"{name}-memory": memory} if name else {}
    if name and name != ASCEND_310P:  # HAMi counts a 910 in vNPUs: as many as one template fills it with
        result[name] = most_partitions(geometry)
    if geometry.name == "Ascend310P":
        result[NPU_CORE] = geometry.cores
    return result


def problems(obj: object) -> list[tuple[str, str]]:
    """(field, message) for each pod template of a Pod, Job, JobTemplate or CronJob whose partition request
    can never be served (``hetsched validate`` and the admission webhook refuse it)."""
    templates: list[tuple[str, PodSpec, dict[str, str], dict[str, str]]] = []
    if isinstance(obj, Pod):
        templates = [("spec.containers", obj.spec, obj.metadata.labels, obj.metadata.annotations)]
    elif isinstance(obj, (Job, JobTemplate)):
        templates = [(f"spec.tasks[{i}].template.spec.containers", task.template.spec, task.template.metadata.labels,
                      task.template.metadata.annotations) for i, task in enumerate(obj.spec.tasks)]
    elif isinstance(obj, CronJob):
        templates = [(f"spec.jobTemplate.spec.tasks[{i}].template.spec.containers", task.template.spec,
                      task.template.metadata.labels, task.template.metadata.annotations)
                     for i, task in enumerate(obj.spec.jobTemplate.spec.tasks)]
    found = []
    for where, spec, labels, notes in templates:
        try:
            partition_request(spec.requests, notes, labels)
        except PartitionRequestError as exc:
            found.append((where, str(exc)))
    return found
