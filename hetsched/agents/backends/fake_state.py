"""The state a fake vendor tool keeps beside its fake chips file (a JSON object: chip → its partitions).

Who calls it: ``FakeNpuSmi`` (``vnpus.json``) and ``fake_nvml.FakeNvml`` (``migs.json``). A missing or
unreadable file is no partitions; a write goes through a temporary file, so a reader never sees half of one.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def load(path: Path) -> dict[str, list[list[Any]]]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def save(path: Path, data: dict[str, list[list[Any]]]) -> None:
    partial = path.with_name(path.name + ".new")
    partial.write_text(json.dumps(data))
    partial.replace(path)
