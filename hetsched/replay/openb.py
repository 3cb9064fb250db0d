"""Loading Alibaba's openb GPU trace (cluster-trace-gpu-v2023) with errors that name the file and line.

Who calls it: ``hetsched replay-openb`` and tests. Node list: ``sn,cpu_milli,memory_mib,gpu,model``; pod
list: ``name,cpu_milli,memory_mib,num_gpu,gpu_milli[,gpu_spec,qos,pod_phase,creation_time,…]`` (the
``multigpu*`` lists have only the first five columns). A malformed row is an error naming the file and
line number; nothing is guessed.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path

NODE_COLUMNS = ("sn", "cpu_milli", "memory_mib", "gpu", "model")
POD_COLUMNS = ("name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli")


class TraceError(ValueError):
    """A trace file that cannot be read; the message names the file and line."""


@dataclass(frozen=True)
class TraceNode:
    name: str
    cpu_milli: int
    memory_mib: int
    gpus: int
    model: str


@dataclass(frozen=True)
class TracePod:
    name: str
    cpu_milli: int
    memory_mib: int
    num_gpu: int
    gpu_milli: int
    """Per GPU, in thousandths; below 1000 only for single-GPU sharing pods."""
    gpu_spec: tuple[str, ...] = ()
    """Accepted GPU models; empty = any."""

    @property
    def gpu_request(self) -> int:
        """Total GPU demand in milli-GPUs."""
        return self.num_gpu * self.gpu_milli


def _rows(path: Path, columns: tuple[str, ...]) -> list[tuple[int, dict[str, str]]]:
    try:
        handle = path.open(newline="", encoding="utf-8")
    except OSError as exc:
        raise TraceError(f"{path}: cannot read: {exc.strerror or exc}") from None
    with handle:
        reader = csv.reader(handle)
        header = next(reader, None)
        if header is None:
            raise TraceError(f"{path}: empty file")
        missing = [c for c in columns if c not in header]
        if missing:
            raise TraceError(f"{path}: line 1: missing column(s) {', '.join(missing)} (header: {','.join(header)})")
        rows = []
        for line, values in enumerate(reader, start=2):
            if not values:
                continue
            if len(values) != len(header):
                raise TraceError(f"{path}: line {line}: {len(values)} fields, the header has {len(header)}")
            rows.append((line, dict(zip(header, values, strict=True))))
        return rows


def _int(path: Path, line: int, row: dict[str, str], column: str, *, low: int = 0, high: int | None = None) -> int:
    raw = row[column]
    try:
        value = int(raw)
    except ValueError:
        raise TraceError(f"{path}: line {line}: {column} must be an integer, got {raw!r}") from None
    if value < low or (high is not None and value > high):
        bound = f"{low}–{high}" if high is not None else f"≥ {low}"
        raise TraceError(f"{path}: line {line}: {column} must be {bound}, got {value}")
    return value


def load_nodes(path: Path) -> list[TraceNode]:
    nodes = []
    for line, row in _rows(path, NODE_COLUMNS):
        gpus = _int(path, line, row, "gpu", high=8)
        model = row["model"].strip()
        if gpus and not model:
            raise TraceError(f"{path}: line {line}: a node with {gpus} GPU(s) needs a model")
        nodes.append(TraceNode(row["sn"], _int(path, line, row, "cpu_milli", low=1),
                               _int(path, line, row, "memory_mib", low=1), gpus, model))
    if not nodes:
        raise TraceError(f"{path}: no nodes")
    return nodes


def load_pods(path: Path) -> list[TracePod]:
    pods = []
    for line, row in _rows(path, POD_COLUMNS):
        num = _int(path, line, row, "num_gpu", high=8)
        milli = _int(path, line, row, "gpu_milli", high=1000)
        if num == 0 and milli:
            raise TraceError(f"{path}: line {line}: gpu_milli {milli} with num_gpu 0")
        if num > 1 and milli != 1000:
            raise TraceError(f"{path}: line {line}: a {num}-GPU pod must take whole GPUs (gpu_milli 1000), "
                             f"got {milli}")
        if num and not milli:
            raise TraceError(f"{path}: line {line}: num_gpu {num} with gpu_milli 0")
        spec = tuple(m for m in row.get("gpu_spec", "").split("|") if m)
        pods.append(TracePod(row["name"], _int(path, line, row, "cpu_milli"), _int(path, line, row, "memory_mib"),
                             num, milli, spec))
    if not pods:
        raise TraceError(f"{path}: no pods")
    return pods
